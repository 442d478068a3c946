package native

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/wire"
)

// The offline count of a request's prompt tokens is what the engine
// reports as usage.prompt_tokens (embeddings included).
func TestPromptCounterMatchesTheEngine(t *testing.T) {
	testPromptCounter(t, demoPath(t), "")
}

// stories260K's tokenizer adds a BOS token: an embeddings input runs with
// it, so batchd stats counts it (it counted one token short per input). The
// model has no chat template of its own.
func TestPromptCounterMatchesTheEngineStories260K(t *testing.T) {
	testPromptCounter(t, storiesPath(t), "llama2")
}

func testPromptCounter(t *testing.T, path, tmpl string) {
	e := openEngine(t, ModelConfig{Path: path, ChatTemplate: tmpl})
	pc, err := OpenPromptCounter(path, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	for _, tc := range []struct{ endpoint, body string }{
		{engine.EndpointChat, `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is batch inference?"}],"max_tokens":1}`},
		{engine.EndpointCompletions, `{"prompt":"Once upon a time","max_tokens":1}`},
		{engine.EndpointCompletions, `{"prompt":["one two","three"],"max_tokens":1}`},
		{engine.EndpointCompletions, `{"prompt":[5,6,7],"max_tokens":1}`},
		{engine.EndpointEmbeddings, `{"input":["a cat","a dog sat"]}`},
		{engine.EndpointEmbeddings, `{"input":"The quick brown fox"}`},
		{engine.EndpointEmbeddings, `{"input":[[5,6,7],[8]]}`},
		{engine.EndpointResponses, `{"instructions":"Be brief.","input":"What is batch inference?","max_output_tokens":1}`},
		{engine.EndpointResponses, `{"input":[{"role":"user","content":[{"type":"input_text","text":"What is"},{"type":"input_text","text":" batch inference?"}]}],"max_output_tokens":1}`},
		{wire.EndpointMessages, `{"system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":"What is batch inference?"}]}],"max_tokens":1}`},
	} {
		// A /v1/messages line reaches the engine as the chat request the
		// validator translates it to.
		endpoint, body := tc.endpoint, []byte(tc.body)
		if endpoint == wire.EndpointMessages {
			var inv *wire.Invalid
			if body, inv = wire.MessagesToChat(body); inv != nil {
				t.Fatal(inv)
			}
			endpoint = engine.EndpointChat
		}
		resp, err := e.Do(context.Background(), &engine.Request{CustomID: "c", Endpoint: endpoint, Body: body})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %+v", tc.body, err, resp)
		}
		var u struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
				InputTokens  int `json:"input_tokens"` // a Response's
			} `json:"usage"`
		}
		if err := json.Unmarshal(resp.Body, &u); err != nil {
			t.Fatal(err)
		}
		used := max(u.Usage.PromptTokens, u.Usage.InputTokens)
		got, err := pc.Count(tc.endpoint, json.RawMessage(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if got != used || got == 0 {
			t.Errorf("%s %s: counted %d prompt tokens, the engine used %d", tc.endpoint, tc.body, got, used)
		}
	}
	if _, err := pc.Count(wire.EndpointMessages, json.RawMessage(`{"messages":[{"role":"user","content":"x"}]}`)); err == nil || !strings.Contains(err.Error(), "max_tokens") {
		t.Errorf("a /v1/messages body without max_tokens: %v, want an error naming max_tokens", err)
	}
	if _, err := pc.Count(engine.EndpointCompletions, json.RawMessage(`{"prompt":{"x":1}}`)); err == nil {
		t.Error("a prompt that is an object was counted")
	}
}
