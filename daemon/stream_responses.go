package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/batchd/batchd/wire"
)

// responseEvents are the Responses API's streaming events: each an SSE
// event named by its type, its data a JSON object with type and
// sequence_number. The stream opens with response.created and
// response.in_progress (an in_progress Response, no output); the message
// the text streams into is announced at the first piece
// (response.output_item.added, response.content_part.added), each piece is
// a response.output_text.delta; the final Response closes every output
// item (response.output_text.done, response.content_part.done,
// response.output_item.done; an item that did not stream, such as a
// remote engine's whole answer, is announced and given in one delta
// first) and ends the stream as response.completed, or
// response.incomplete (or response.failed) by its status. The final
// Response takes the stream's ids (its own, its first message's) and
// created_at, so every event names the same objects.
//
// Streamed text is the first message's, at output_index 0: the native
// engine, the only one that streams, answers one message and nothing
// before it.
type responseEvents struct {
	request []byte // the Responses body, for the echoed fields
	id      string // resp_…
	msgID   string // msg_…
	created int64
	seq     int
	opened  bool   // the streamed message and its text part were announced
	text    []byte // the text streamed so far
}

func newResponseEvents(request []byte) *responseEvents {
	suffix := randomID("", 12)
	return &responseEvents{request: request, id: "resp_" + suffix, msgID: "msg_" + suffix, created: time.Now().Unix()}
}

// event writes one event: fields, with type and sequence_number added.
func (e *responseEvents) event(buf *bytes.Buffer, typ string, fields map[string]any) {
	fields["type"] = typ
	fields["sequence_number"] = e.seq
	e.seq++
	data, err := json.Marshal(fields)
	if err != nil {
		data = wire.NewError(wire.TypeServerError, "encode event "+typ+": "+err.Error(), "", "").JSON()
	}
	fmt.Fprintf(buf, "event: %s\ndata: %s\n\n", typ, data)
}

func (e *responseEvents) open(buf *bytes.Buffer) {
	resp, err := wire.InProgressResponse(e.request, e.id, e.created)
	if err != nil {
		// The body was validated as a Responses body: it is an object.
		resp = []byte(`null`)
	}
	e.event(buf, "response.created", map[string]any{"response": json.RawMessage(resp)})
	e.event(buf, "response.in_progress", map[string]any{"response": json.RawMessage(resp)})
}

func (e *responseEvents) piece(buf *bytes.Buffer, p piece) {
	if !e.opened {
		e.opened = true
		e.event(buf, "response.output_item.added", map[string]any{"output_index": 0,
			"item": map[string]any{"type": "message", "id": e.msgID, "status": "in_progress", "role": "assistant", "content": []any{}}})
		e.partEvent(buf, ".added", e.msgID, 0, 0, map[string]any{"type": "output_text", "text": "", "annotations": []any{}})
	}
	e.text = append(e.text, p.text...)
	e.textEvent(buf, "output_text", ".delta", e.msgID, 0, 0, p.text)
}

// textEvent writes a text part's delta or done event (suffix ".delta" or
// ".done"); parts other than output_text and reasoning_text have none.
func (e *responseEvents) textEvent(buf *bytes.Buffer, partType, suffix, itemID string, output, content int, text string) {
	if partType != "output_text" && partType != "reasoning_text" {
		return
	}
	f := map[string]any{"item_id": itemID, "output_index": output, "content_index": content}
	if suffix == ".delta" {
		f["delta"] = text
	} else {
		f["text"] = text
	}
	if partType == "output_text" {
		f["logprobs"] = []any{}
	}
	e.event(buf, "response."+partType+suffix, f)
}

// outputItem is what the events need of a final output item.
type outputItem struct {
	raw     map[string]json.RawMessage
	typ, id string
	parts   []outputPart
}

type outputPart struct {
	raw       map[string]json.RawMessage
	typ, text string
}

func (e *responseEvents) finish(buf *bytes.Buffer, body []byte) error {
	var resp map[string]json.RawMessage
	if err := json.Unmarshal(body, &resp); err != nil {
		return fmt.Errorf("decode Response: %w", err)
	}
	var rawItems []map[string]json.RawMessage
	if err := json.Unmarshal(resp["output"], &rawItems); err != nil {
		return fmt.Errorf("decode Response output: %w", err)
	}
	var status string
	json.Unmarshal(resp["status"], &status)
	items := make([]outputItem, len(rawItems))
	streamed := -1 // the index of the message the text streamed into
	for i, raw := range rawItems {
		it := outputItem{raw: raw}
		json.Unmarshal(raw["type"], &it.typ)
		json.Unmarshal(raw["id"], &it.id)
		if it.typ == "message" && streamed < 0 {
			streamed = i
			it.id = e.msgID
			raw["id"], _ = json.Marshal(e.msgID)
		}
		var parts []map[string]json.RawMessage
		json.Unmarshal(raw["content"], &parts)
		for _, p := range parts {
			op := outputPart{raw: p}
			json.Unmarshal(p["type"], &op.typ)
			json.Unmarshal(p["text"], &op.text)
			it.parts = append(it.parts, op)
		}
		items[i] = it
	}
	if !e.opened {
		streamed = -1
	}
	resp["id"], _ = json.Marshal(e.id)
	resp["created_at"], _ = json.Marshal(e.created)
	resp["output"], _ = json.Marshal(rawItems)
	for i, it := range items {
		if i == streamed {
			e.closeStreamed(buf, i, it)
		} else {
			e.wholeItem(buf, i, it)
		}
		e.event(buf, "response.output_item.done", map[string]any{"output_index": i, "item": it.raw})
	}
	end := "response.completed"
	switch status {
	case "incomplete":
		end = "response.incomplete"
	case "failed":
		end = "response.failed"
	}
	e.event(buf, end, map[string]any{"response": resp})
	return nil
}

// closeStreamed ends the message whose first text part streamed: the rest
// of its text, when the final text goes on from what streamed, then its
// parts, each whole but the first.
func (e *responseEvents) closeStreamed(buf *bytes.Buffer, index int, it outputItem) {
	for j, p := range it.parts {
		if j > 0 {
			e.wholePart(buf, index, it.id, j, p)
			continue
		}
		if rest, ok := bytes.CutPrefix([]byte(p.text), e.text); ok && len(rest) > 0 {
			e.textEvent(buf, p.typ, ".delta", it.id, index, j, string(rest))
		}
		e.textEvent(buf, p.typ, ".done", it.id, index, j, p.text)
		e.partEvent(buf, ".done", it.id, index, j, p.raw)
	}
}

// wholeItem announces an item that did not stream and gives each of its
// parts whole.
func (e *responseEvents) wholeItem(buf *bytes.Buffer, index int, it outputItem) {
	added := maps.Clone(it.raw)
	if _, ok := added["content"]; ok && len(it.parts) > 0 {
		added["content"] = json.RawMessage(`[]`)
	}
	if _, ok := added["status"]; ok {
		added["status"] = json.RawMessage(`"in_progress"`)
	}
	e.event(buf, "response.output_item.added", map[string]any{"output_index": index, "item": added})
	for j, p := range it.parts {
		e.wholePart(buf, index, it.id, j, p)
	}
}

// wholePart gives a part that did not stream: announced empty, its text
// in one delta, done.
func (e *responseEvents) wholePart(buf *bytes.Buffer, index int, itemID string, j int, p outputPart) {
	empty := maps.Clone(p.raw)
	if _, ok := empty["text"]; ok {
		empty["text"] = json.RawMessage(`""`)
	}
	e.partEvent(buf, ".added", itemID, index, j, empty)
	if p.text != "" {
		e.textEvent(buf, p.typ, ".delta", itemID, index, j, p.text)
	}
	e.textEvent(buf, p.typ, ".done", itemID, index, j, p.text)
	e.partEvent(buf, ".done", itemID, index, j, p.raw)
}

// partEvent writes response.content_part.added or .done (suffix).
func (e *responseEvents) partEvent(buf *bytes.Buffer, suffix, itemID string, output, content int, part any) {
	e.event(buf, "response.content_part"+suffix, map[string]any{"item_id": itemID, "output_index": output, "content_index": content, "part": part})
}

// fail ends the stream with an error event: the error object's code,
// message and param.
func (e *responseEvents) fail(buf *bytes.Buffer, errBody []byte) {
	var eb struct {
		Error struct {
			Message string  `json:"message"`
			Code    *string `json:"code"`
			Param   *string `json:"param"`
		} `json:"error"`
	}
	if json.Unmarshal(errBody, &eb) != nil || eb.Error.Message == "" {
		eb.Error.Message = string(errBody)
	}
	e.event(buf, "error", map[string]any{"code": eb.Error.Code, "message": eb.Error.Message, "param": eb.Error.Param})
}
