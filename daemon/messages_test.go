package daemon_test

import (
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// POST /v1/messages answers in Anthropic's message shape; what it asks
// for that is not honoured (stream, tools) is refused by name.
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
	for _, param := range []string{"stream", "tools"} {
		bad := map[string]any{"max_tokens": 8, "messages": []any{map[string]any{"role": "user", "content": "x"}}}
		bad[param] = map[string]any{"stream": true, "tools": []any{map[string]any{"name": "t"}}}[param]
		var ae apiErr
		if st := e.postJSON("/v1/messages", bad, &ae); st != 400 || ae.Error.Param == nil || *ae.Error.Param != param {
			t.Errorf("%s: %d %+v", param, st, ae)
		}
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
