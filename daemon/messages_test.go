package daemon_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// POST /v1/messages answers in Anthropic's message shape; what it asks
// for that is not honoured (tools) is refused by name.
func TestAPIOnlineMessages(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	var msg struct {
		ID, Type, Role, Model string
		StopReason            string `json:"stop_reason"`
		Content               []struct{ Type, Text string }
		Usage                 struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		}
	}
	body := map[string]any{"model": "m", "max_tokens": 8, "system": "Be brief.", "messages": []any{map[string]any{"role": "user", "content": "hello there"}}}
	if st := e.postJSON("/v1/messages", body, &msg); st != 200 || msg.Type != "message" || msg.Role != "assistant" || !strings.HasPrefix(msg.ID, "msg_") ||
		len(msg.Content) != 1 || msg.Content[0].Type != "text" || msg.StopReason == "" || msg.Usage.InputTokens == 0 {
		t.Fatalf("messages: %d %+v", st, msg)
	}
	// Errors come in Anthropic's shape, naming the field in the message,
	// with OpenAI's param and code beside it.
	type anthropicErr struct {
		Type  string
		Error struct{ Type, Message, Param, Code string }
	}
	bad := map[string]any{"max_tokens": 8, "messages": []any{map[string]any{"role": "user", "content": "x"}}, "tools": []any{map[string]any{"name": "t"}}}
	var ae anthropicErr
	if st := e.postJSON("/v1/messages", bad, &ae); st != 400 || ae.Type != "error" || ae.Error.Type != "invalid_request_error" ||
		ae.Error.Param != "tools" || !strings.HasPrefix(ae.Error.Message, "tools") {
		t.Errorf("tools: %d %+v", st, ae)
	}
	// Anthropic's clients send the key as x-api-key.
	raw, _ := json.Marshal(body)
	for key, want := range map[string]int{e.key: 200, "wrong": 401} {
		req, _ := http.NewRequest("POST", e.base+"/v1/messages", bytes.NewReader(raw))
		req.Header.Set("X-Api-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		ae = anthropicErr{}
		json.NewDecoder(resp.Body).Decode(&ae)
		resp.Body.Close()
		if resp.StatusCode != want || want == 401 && (ae.Type != "error" || ae.Error.Type != "authentication_error") {
			t.Errorf("x-api-key %q: %d %+v, want %d", key, resp.StatusCode, ae, want)
		}
	}
	// The other routes keep OpenAI's error shape.
	var oe apiErr
	if st := e.postJSON("/v1/chat/completions", map[string]any{"messages": []any{}, "tools": []any{map[string]any{"name": "t"}}}, &oe); st != 400 || oe.Error.Message == "" {
		t.Errorf("chat error: %d %+v", st, oe)
	}
}

// checkMessageStream checks an Anthropic event stream of one text block:
// message_start, content_block_start, deltas, content_block_stop,
// message_delta, message_stop, each event named by its type; it returns
// the deltas and the message_delta.
func checkMessageStream(t *testing.T, events []sseEvent) (deltas []string, end map[string]any) {
	t.Helper()
	var types []string
	for _, ev := range events {
		if ev.data["type"] != ev.name {
			t.Fatalf("event %s has type %v", ev.name, ev.data["type"])
		}
		if ev.name == "content_block_delta" {
			d := ev.data["delta"].(map[string]any)
			if d["type"] != "text_delta" || ev.data["index"] != 0.0 {
				t.Fatalf("delta %v", ev.data)
			}
			deltas = append(deltas, d["text"].(string))
			continue
		}
		types = append(types, ev.name)
	}
	if strings.Join(types, " ") != "message_start content_block_start content_block_stop message_delta message_stop" || len(deltas) == 0 {
		t.Fatalf("events %v, %d deltas", types, len(deltas))
	}
	start := events[0].data["message"].(map[string]any)
	if !strings.HasPrefix(start["id"].(string), "msg_") || start["role"] != "assistant" || len(start["content"].([]any)) != 0 {
		t.Fatalf("message_start %v", start)
	}
	return deltas, events[len(events)-2].data
}

// stream: true on /v1/messages answers with Anthropic's events; a remote
// engine's answer comes whole, in one delta; the native engine's text
// streams token by token and adds up to the answer not streamed.
func TestAPIStreamsMessages(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	deltas, end := checkMessageStream(t, e.postStream(t, "/v1/messages",
		`{"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hello"}]}`))
	usage := end["usage"].(map[string]any)
	if len(deltas) != 1 || end["delta"].(map[string]any)["stop_reason"] == nil || usage["input_tokens"] == 0.0 || usage["output_tokens"] == 0.0 {
		t.Fatalf("deltas %q, message_delta %v", deltas, end)
	}

	native := newAPIEnv(t, openaitest.Options{}, func(c *daemon.Config) {
		c.Engine = "native"
		c.Native.Models = []native.ModelConfig{{Path: demoModel(t)}}
	})
	body := `{"max_tokens":12,"temperature":0,"messages":[{"role":"user","content":"Once upon a time"}]}`
	var whole struct {
		Content    []struct{ Text string }
		StopReason string `json:"stop_reason"`
	}
	if st := native.call("POST", "/v1/messages", "application/json", strings.NewReader(body), &whole); st != 200 || len(whole.Content) != 1 {
		t.Fatalf("message: %d %+v", st, whole)
	}
	deltas, end = checkMessageStream(t, native.postStream(t, "/v1/messages", strings.Replace(body, "{", `{"stream":true,`, 1)))
	if strings.Join(deltas, "") != whole.Content[0].Text || len(deltas) < 2 || end["delta"].(map[string]any)["stop_reason"] != whole.StopReason {
		t.Fatalf("streamed %q (%v), whole %q", deltas, end, whole.Content[0].Text)
	}
}

// A batch of /v1/messages lines is created with endpoint /v1/messages
// through the batch API and runs.
func TestAPIMessagesBatch(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	line := `{"custom_id":"c%d","method":"POST","url":"/v1/messages","body":{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}}` + "\n"
	st, f := e.upload("batch", "msgs.jsonl", strings.ReplaceAll(line, "%d", "1")+strings.ReplaceAll(line, "%d", "2"))
	if st != 200 {
		t.Fatalf("upload: %d %v", st, f)
	}
	var created pipeline.BatchObject
	if st := e.postJSON("/v1/batches", map[string]any{"input_file_id": f["id"], "endpoint": "/v1/messages", "completion_window": "24h"}, &created); st != 200 {
		t.Fatalf("create: %d", st)
	}
	o := e.waitBatch(created.ID, func(o *pipeline.BatchObject) bool { return pipeline.Terminal(o.Status) })
	if o.Status != "completed" || o.RequestCounts.Completed != 2 || o.Endpoint != "/v1/messages" || o.Usage.InputTokens == 0 {
		t.Fatalf("ended as %+v", o)
	}
}
