package native

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/batchd/batchd/engine"
)

// A /v1/responses request runs as the chat completion it becomes, with the
// same greedy text, and is answered as a Response: incomplete at
// max_output_tokens, its usage in Responses names. A field the native
// engine does not honour is refused by name.
func TestResponsesRunAsChatStories260K(t *testing.T) {
	e := openEngine(t, ModelConfig{Path: storiesPath(t), ChatTemplate: "llama2"})
	chat := do(t, e, engine.EndpointChat, `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Once upon a time"}]}],"max_completion_tokens":4}`)
	resp := do(t, e, engine.EndpointResponses, `{"instructions":"Be brief.","input":[{"role":"user","content":[{"type":"input_text","text":"Once upon a time"}]}],"max_output_tokens":4,"store":false}`)
	want := chat["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
	if resp["object"] != "response" || resp["status"] != "incomplete" ||
		resp["incomplete_details"].(map[string]any)["reason"] != "max_output_tokens" {
		t.Fatalf("response %v", resp)
	}
	msg := resp["output"].([]any)[0].(map[string]any)
	text := msg["content"].([]any)[0].(map[string]any)
	if msg["type"] != "message" || text["type"] != "output_text" || text["text"] != want {
		t.Errorf("output %v, want the chat text %q", msg, want)
	}
	u := resp["usage"].(map[string]any)
	cu := chat["usage"].(map[string]any)
	if u["input_tokens"] != cu["prompt_tokens"] || u["output_tokens"] != 4.0 {
		t.Errorf("usage %v, chat usage %v", u, cu)
	}

	r, err := e.Do(context.Background(), &engine.Request{CustomID: "r", Endpoint: engine.EndpointResponses,
		Body: json.RawMessage(`{"input":"Hi","guided_json":{}}`)})
	if err != nil || r.StatusCode != 400 || !json.Valid(r.Body) || !bytes.Contains(r.Body, []byte(`"param":"guided_json"`)) {
		t.Errorf("guided_json: %v %v %s", err, r, r.Body)
	}
}
