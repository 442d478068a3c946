package daemon_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/openai/openaitest"
)

// sseEvent is one server-sent event: its name and its data.
type sseEvent struct {
	name string
	data map[string]any
}

// postStream posts body to path with stream: true and reads the answer's
// events; it fails unless the answer is a 200 event stream.
func (e *apiEnv) postStream(t *testing.T, path, body string) []sseEvent {
	t.Helper()
	req, _ := http.NewRequest("POST", e.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s: %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), raw)
	}
	var events []sseEvent
	var name string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			name = n
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		ev := sseEvent{name: name}
		if err := json.Unmarshal([]byte(data), &ev.data); err != nil {
			t.Fatalf("event %s: %q: %v", name, data, err)
		}
		events = append(events, ev)
		name = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return events
}

// checkResponseStream checks a Responses event stream: each event named
// by its type, sequence numbers 0, 1, 2, ..., the lifecycle in order, every
// event naming the created Response's message; it returns the deltas and
// the final Response.
func checkResponseStream(t *testing.T, events []sseEvent) (deltas []string, final map[string]any) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		var b strings.Builder
		for _, ev := range events {
			d, _ := json.Marshal(ev.data)
			fmt.Fprintf(&b, "%s %s\n", ev.name, d)
		}
		t.Fatalf(format+"\nevents:\n%s", append(args, b.String())...)
	}
	var types []string
	for i, ev := range events {
		if ev.data["type"] != ev.name || ev.data["sequence_number"] != float64(i) {
			fail("event %d: name %q, type %v, sequence_number %v", i, ev.name, ev.data["type"], ev.data["sequence_number"])
		}
		types = append(types, ev.name)
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	if len(types) < 9 || strings.Join(types[:4], " ") != strings.Join(want, " ") {
		fail("the stream opens %v", types)
	}
	created := events[0].data["response"].(map[string]any)
	if created["status"] != "in_progress" || len(created["output"].([]any)) != 0 || created["object"] != "response" {
		fail("response.created: %v", created)
	}
	msgID := events[2].data["item"].(map[string]any)["id"]
	rest := types[4:]
	for len(rest) > 0 && rest[0] == "response.output_text.delta" {
		ev := events[len(types)-len(rest)]
		if ev.data["item_id"] != msgID || ev.data["output_index"] != 0.0 || ev.data["content_index"] != 0.0 {
			fail("delta %v", ev.data)
		}
		deltas = append(deltas, ev.data["delta"].(string))
		rest = rest[1:]
	}
	tail := "response.output_text.done response.content_part.done response.output_item.done"
	if len(rest) != 4 || strings.Join(rest[:3], " ") != tail ||
		(rest[3] != "response.completed" && rest[3] != "response.incomplete") {
		fail("after the deltas: %v", rest)
	}
	final = events[len(events)-1].data["response"].(map[string]any)
	out := final["output"].([]any)
	msg := out[0].(map[string]any)
	text := msg["content"].([]any)[0].(map[string]any)["text"]
	done := events[len(events)-4].data
	if final["id"] != created["id"] || final["created_at"] != created["created_at"] || len(out) != 1 || msg["id"] != msgID ||
		done["text"] != text || strings.Join(deltas, "") != text || "response."+final["status"].(string) != rest[3] {
		fail("final %v", final)
	}
	return deltas, final
}

// stream: true on /v1/responses answers with the Responses API's events;
// a remote engine's answer comes whole, in one delta.
func TestAPIStreamsResponses(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	deltas, final := checkResponseStream(t, e.postStream(t, "/v1/responses",
		`{"model":"m","input":"hello","instructions":"Be brief.","stream":true,"store":false}`))
	if len(deltas) != 1 || deltas[0] == "" || final["instructions"] != "Be brief." || final["usage"] == nil {
		t.Fatalf("deltas %q, final %v", deltas, final)
	}
	// Refused before any event: a plain 400.
	var ae apiErr
	if st := e.postJSON("/v1/responses", map[string]any{"model": "m", "input": "x", "stream": true, "previous_response_id": "resp_1"}, &ae); st != 400 ||
		ae.Error.Param == nil || *ae.Error.Param != "previous_response_id" {
		t.Fatalf("refused stream: %d %+v", st, ae)
	}
}

// With the native engine the text streams token by token, and the deltas
// add up to the non-streamed answer.
func TestAPIStreamsNativeResponses(t *testing.T) {
	model := demoModel(t)
	e := newAPIEnv(t, openaitest.Options{}, func(c *daemon.Config) {
		c.Engine = "native"
		c.Native.Models = []native.ModelConfig{{Path: model}}
	})
	body := `{"input":"Once upon a time","max_output_tokens":12,"temperature":0,"ignore_eos":true,"store":false}`
	var whole struct {
		Status string `json:"status"`
		Output []struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
	}
	if st := e.call("POST", "/v1/responses", "application/json", strings.NewReader(body), &whole); st != 200 || len(whole.Output) != 1 {
		t.Fatalf("response: %d %+v", st, whole)
	}
	deltas, final := checkResponseStream(t, e.postStream(t, "/v1/responses", strings.Replace(body, "{", `{"stream":true,`, 1)))
	if strings.Join(deltas, "") != whole.Output[0].Content[0].Text || final["status"] != whole.Status {
		t.Fatalf("streamed %q (%v), whole %+v", deltas, final["status"], whole)
	}
	if len(deltas) < 2 {
		t.Fatalf("the text came in %d piece(s); it should stream token by token", len(deltas))
	}
}
