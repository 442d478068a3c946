package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/batchd/batchd/wire"
)

// messageEvents are Anthropic's Messages streaming events: message_start
// (the Message with no content yet), then for each text block
// content_block_start, its text as content_block_delta text_deltas (each
// piece as the engine produces it; a block that did not stream in one
// delta) and content_block_stop, then message_delta with the stop_reason
// and the usage, and message_stop. A failure is an error event.
type messageEvents struct {
	id, model string
	opened    bool   // the streamed text block was started
	text      []byte // the text streamed so far
}

func newMessageEvents(request []byte) *messageEvents {
	var req struct {
		Model string `json:"model"`
	}
	json.Unmarshal(request, &req)
	return &messageEvents{id: randomID("msg_", 12), model: req.Model}
}

// event writes one event named by its data's type.
func (m *messageEvents) event(buf *bytes.Buffer, typ string, fields map[string]any) {
	fields["type"] = typ
	data, err := json.Marshal(fields)
	if err != nil {
		data = []byte(`{"type":"error","error":{"type":"api_error","message":"encode event"}}`)
		typ = "error"
	}
	fmt.Fprintf(buf, "event: %s\ndata: %s\n\n", typ, data)
}

func (m *messageEvents) open(buf *bytes.Buffer) {
	m.event(buf, "message_start", map[string]any{"message": map[string]any{
		"id": m.id, "type": "message", "role": "assistant", "model": m.model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": 0, "output_tokens": 0}}})
}

func (m *messageEvents) piece(buf *bytes.Buffer, p piece) {
	if !m.opened {
		m.opened = true
		m.blockStart(buf, 0)
	}
	m.text = append(m.text, p.text...)
	m.delta(buf, 0, p.text)
}

func (m *messageEvents) blockStart(buf *bytes.Buffer, index int) {
	m.event(buf, "content_block_start", map[string]any{"index": index, "content_block": map[string]any{"type": "text", "text": ""}})
}

func (m *messageEvents) delta(buf *bytes.Buffer, index int, text string) {
	m.event(buf, "content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": "text_delta", "text": text}})
}

// finish closes the blocks of body, a Message: the streamed one with what
// its final text adds, the others whole.
func (m *messageEvents) finish(buf *bytes.Buffer, body []byte) error {
	var msg wire.Message
	if err := json.Unmarshal(body, &msg); err != nil {
		return fmt.Errorf("decode Message: %w", err)
	}
	for i, b := range msg.Content {
		switch {
		case i == 0 && m.opened:
			if rest, ok := strings.CutPrefix(b.Text, string(m.text)); ok && rest != "" {
				m.delta(buf, i, rest)
			}
		default:
			m.blockStart(buf, i)
			if b.Text != "" {
				m.delta(buf, i, b.Text)
			}
		}
		m.event(buf, "content_block_stop", map[string]any{"index": i})
	}
	if m.opened && len(msg.Content) == 0 {
		m.event(buf, "content_block_stop", map[string]any{"index": 0})
	}
	m.event(buf, "message_delta", map[string]any{
		"delta": map[string]any{"stop_reason": msg.StopReason, "stop_sequence": msg.StopSequence},
		"usage": msg.Usage})
	m.event(buf, "message_stop", map[string]any{})
	return nil
}

// fail ends the stream with an error event: Anthropic's error shape, its
// type api_error for a server error, invalid_request_error otherwise.
func (m *messageEvents) fail(buf *bytes.Buffer, errBody []byte) {
	var eb struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal(errBody, &eb) != nil || eb.Error.Message == "" {
		eb.Error.Message = string(errBody)
	}
	typ := "api_error"
	if eb.Error.Type == wire.TypeInvalidRequest {
		typ = "invalid_request_error"
	}
	m.event(buf, "error", map[string]any{"error": map[string]any{"type": typ, "message": eb.Error.Message}})
}
