package native

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/batchd/batchd/engine"
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
	} {
		resp, err := e.Do(context.Background(), &engine.Request{CustomID: "c", Endpoint: tc.endpoint, Body: json.RawMessage(tc.body)})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %+v", tc.body, err, resp)
		}
		var u struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(resp.Body, &u); err != nil {
			t.Fatal(err)
		}
		got, err := pc.Count(tc.endpoint, json.RawMessage(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if got != u.Usage.PromptTokens || got == 0 {
			t.Errorf("%s %s: counted %d prompt tokens, the engine used %d", tc.endpoint, tc.body, got, u.Usage.PromptTokens)
		}
	}
	if _, err := pc.Count(engine.EndpointCompletions, json.RawMessage(`{"prompt":{"x":1}}`)); err == nil {
		t.Error("a prompt that is an object was counted")
	}
}
