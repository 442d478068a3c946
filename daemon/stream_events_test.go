package daemon

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// parseEvents reads the events of buf: each "event: NAME" line's name
// must be its data's type.
func parseEvents(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, block := range strings.Split(strings.TrimSuffix(buf.String(), "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(block, "\n")
		if !ok || !strings.HasPrefix(name, "event: ") || !strings.HasPrefix(data, "data: ") {
			t.Fatalf("event %q", block)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &m); err != nil {
			t.Fatal(err)
		}
		if m["type"] != strings.TrimPrefix(name, "event: ") {
			t.Fatalf("event %q has type %v", name, m["type"])
		}
		out = append(out, m)
	}
	return out
}

// An answer that did not stream, with a reasoning item before its
// message, is given whole: each item announced, its text in one delta,
// closed; an incomplete Response ends as response.incomplete.
func TestResponseEventsWholeAnswer(t *testing.T) {
	e := newResponseEvents([]byte(`{"model":"m","input":"hi"}`))
	var buf bytes.Buffer
	e.open(&buf)
	final := `{"id":"resp_other","object":"response","created_at":1,"status":"incomplete","output":[` +
		`{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"hmm"}]},` +
		`{"type":"message","id":"msg_other","status":"incomplete","role":"assistant","content":[{"type":"output_text","text":"Hel","annotations":[]}]}]}`
	if err := e.finish(&buf, []byte(final)); err != nil {
		t.Fatal(err)
	}
	events := parseEvents(t, &buf)
	var types []string
	for i, ev := range events {
		if ev["sequence_number"] != float64(i) {
			t.Fatalf("event %d: sequence_number %v", i, ev["sequence_number"])
		}
		types = append(types, ev["type"].(string))
	}
	want := "response.created response.in_progress " +
		"response.output_item.added response.content_part.added response.reasoning_text.delta response.reasoning_text.done response.content_part.done response.output_item.done " +
		"response.output_item.added response.content_part.added response.output_text.delta response.output_text.done response.content_part.done response.output_item.done " +
		"response.incomplete"
	if strings.Join(types, " ") != want {
		t.Fatalf("events %v", types)
	}
	created := events[0]["response"].(map[string]any)
	end := events[len(events)-1]["response"].(map[string]any)
	msg := end["output"].([]any)[1].(map[string]any)
	if end["id"] != created["id"] || end["created_at"] != created["created_at"] || msg["id"] != e.msgID ||
		events[8]["item"].(map[string]any)["status"] != "in_progress" || len(events[8]["item"].(map[string]any)["content"].([]any)) != 0 ||
		events[10]["delta"] != "Hel" || events[10]["item_id"] != e.msgID || events[10]["output_index"] != 1.0 ||
		events[4]["delta"] != "hmm" || events[4]["item_id"] != "rs_1" {
		t.Fatalf("%s", buf.String())
	}
	if err := e.finish(&bytes.Buffer{}, []byte(`{"output":{}}`)); err == nil {
		t.Fatal("a Response whose output is not an array was taken")
	}
}

// Text that streamed is not given again; what the final text adds to it
// comes as one more delta. A failure is an error event with the error's
// code, message and param.
func TestResponseEventsStreamedAndFailed(t *testing.T) {
	e := newResponseEvents([]byte(`{"input":"hi"}`))
	var buf bytes.Buffer
	e.open(&buf)
	e.piece(&buf, piece{0, "Hel"})
	final := `{"status":"completed","output":[{"type":"message","id":"m","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[]}]}]}`
	if err := e.finish(&buf, []byte(final)); err != nil {
		t.Fatal(err)
	}
	e.fail(&buf, []byte(`{"error":{"message":"boom","type":"server_error","param":null,"code":"engine_error"}}`))
	events := parseEvents(t, &buf)
	var deltas []string
	for _, ev := range events {
		if ev["type"] == "response.output_text.delta" {
			deltas = append(deltas, ev["delta"].(string))
		}
	}
	last := events[len(events)-1]
	if strings.Join(deltas, "|") != "Hel|lo" || events[len(events)-2]["type"] != "response.completed" ||
		last["type"] != "error" || last["code"] != "engine_error" || last["message"] != "boom" || last["param"] != nil {
		t.Fatalf("%s", buf.String())
	}
}

// A Message's text that streamed is not given again, what its final text
// adds comes as one more delta; the stop reason and usage come in
// message_delta; a failure is Anthropic's error event.
func TestMessageEvents(t *testing.T) {
	m := newMessageEvents([]byte(`{"model":"m","messages":[]}`))
	var buf bytes.Buffer
	m.open(&buf)
	m.piece(&buf, piece{0, "Hel"})
	final := `{"id":"msg_x","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Hello"}],` +
		`"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":4,"output_tokens":2}}`
	if err := m.finish(&buf, []byte(final)); err != nil {
		t.Fatal(err)
	}
	m.fail(&buf, []byte(`{"error":{"message":"boom","type":"server_error","param":null,"code":"engine_error"}}`))
	events := parseEvents(t, &buf)
	var types, deltas []string
	for _, ev := range events {
		types = append(types, ev["type"].(string))
		if ev["type"] == "content_block_delta" {
			deltas = append(deltas, ev["delta"].(map[string]any)["text"].(string))
		}
	}
	want := "message_start content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop error"
	md := events[5]
	if strings.Join(types, " ") != want || strings.Join(deltas, "|") != "Hel|lo" || events[0]["message"].(map[string]any)["model"] != "m" ||
		md["delta"].(map[string]any)["stop_reason"] != "max_tokens" || md["usage"].(map[string]any)["output_tokens"] != 2.0 ||
		events[7]["error"].(map[string]any)["type"] != "api_error" || events[7]["error"].(map[string]any)["message"] != "boom" {
		t.Fatalf("%s", buf.String())
	}
}
