package native

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/wire"
)

// fuzzEndpoints are the endpoints FuzzNativeRequest picks from.
var fuzzEndpoints = []string{engine.EndpointChat, engine.EndpointCompletions, engine.EndpointEmbeddings, engine.EndpointResponses}

// Caps on the work one fuzz input may ask of the engine, so that each run
// is a few forward passes: a body over them is parsed as sent and then run
// with its max_tokens and n lowered to these.
const (
	fuzzMaxTokens = 4
	fuzzMaxN      = 2
)

// FuzzNativeRequest: whatever the body, the native engine answers a 200 or a
// 400 with a JSON body; never a panic, an error or a 500 (a 500 is a
// recovered panic: a request the engine should have refused). Out-of-vocab
// token ids, logit_bias, stop ids and the KV cache's limit (1 MiB here,
// about 512 tokens, below the demo model's 2048-token context) included.
func FuzzNativeRequest(f *testing.F) {
	seeds := []struct {
		endpoint int
		body     string
	}{
		{0, `{"messages":[{"role":"user","content":"Say hello"}],"max_tokens":3}`},
		{0, `{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_completion_tokens":2,"n":2,"seed":7,"temperature":0.8,"top_p":0.9,"top_k":5}`},
		{0, `{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"logprobs":true,"top_logprobs":20,"logit_bias":{"5":100,"999999":-100}}`},
		{0, `{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"stop":["a","b"],"stop_token_ids":[1,-1,2147483647],"min_tokens":9}`},
		{0, `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}],"tools":[{"type":"function","function":{"name":"f"}}],"max_tokens":1}`},
		{0, `{"messages":[],"max_tokens":1}`},
		{0, `{"messages":[{"role":"user","content":"x"}],"max_tokens":2147483647,"ignore_eos":true}`},
		{0, `{"messages":[{"role":"user","content":"x"}],"max_tokens":1,"chat_template_kwargs":{"enable_thinking":false}}`},
		{1, `{"prompt":"Once upon a time","max_tokens":4,"echo":true,"logprobs":5}`},
		{1, `{"prompt":[1,2,3],"max_tokens":2}`},
		{1, `{"prompt":[[1,2],[3]],"max_tokens":2,"n":2}`},
		{1, `{"prompt":[100000,-1],"max_tokens":1}`},
		{1, `{"prompt":[2147483647],"max_tokens":1}`},
		{1, `{"prompt":["a",""],"max_tokens":1}`},
		{1, `{"prompt":[],"max_tokens":1}`},
		{1, `{"prompt":"x","max_tokens":1,"presence_penalty":2,"frequency_penalty":-2,"repetition_penalty":1.5,"min_p":0.1}`},
		{1, `{"prompt":"x","max_tokens":1.0,"n":1e2,"seed":-1}`},
		{1, `{"prompt":"x","max_tokens":"1"}`},
		{2, `{"input":"hello"}`},
		{2, `{"input":["a","b"],"dimensions":3,"encoding_format":"base64"}`},
		{2, `{"input":[[1,2,3],[4]]}`},
		{2, `{"input":[100000]}`},
		{2, `{"input":[-5]}`},
		{2, `{"input":"x","dimensions":0}`},
		{2, `{"input":""}`},
		{0, `{`}, {1, `null`}, {2, `[]`}, {0, ``},
		{3, `{"input":"Say hello","instructions":"be brief","max_output_tokens":3,"temperature":0.5}`},
		{3, `{"input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"max_output_tokens":2,"reasoning":{"effort":"high"},"top_logprobs":2}`},
		{3, `{"input":"x","max_output_tokens":2147483647,"n":9}`},
		{3, `{"input":"x","text":{"format":{"type":"json_object"}}}`}, {3, `{"input":[]}`},
	}
	for _, s := range seeds {
		f.Add(uint8(s.endpoint), []byte(s.body))
	}
	cfg := DefaultConfig()
	cfg.Models = []ModelConfig{{Path: demoPath(f)}}
	cfg.KVCacheBytes = 1 << 20
	cfg.Threads = 1
	e, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	if err := e.Open(context.Background()); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close(context.Background()) })
	vocab := e.runners[e.order[0]].model.cfg.VocabSize

	f.Fuzz(func(t *testing.T, ep uint8, body []byte) {
		endpoint := fuzzEndpoints[int(ep)%len(fuzzEndpoints)]
		req := &engine.Request{CustomID: "fuzz", Endpoint: endpoint, Body: body}
		if endpoint == engine.EndpointResponses {
			// The engine runs a Responses body as the chat request it
			// translates to (a refusal is its 400); cap that request's length.
			chat, inv := wire.ResponsesToChat(body)
			if inv == nil {
				if p, resp := parseRequest(&engine.Request{Endpoint: engine.EndpointChat, Body: chat}); resp == nil && (p.maxTokens > fuzzMaxTokens || p.n > fuzzMaxN) {
					req.Body = capped(t, body)
				}
			}
		} else if endpoint != engine.EndpointEmbeddings {
			p, resp := parseRequest(req)
			if resp != nil {
				checkFuzzResponse(t, endpoint, body, resp)
				return
			}
			if resp := p.checkVocab(vocab); resp != nil {
				checkFuzzResponse(t, endpoint, body, resp)
			}
			if p.maxTokens > fuzzMaxTokens || p.n > fuzzMaxN {
				req.Body = capped(t, body)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		resp, err := e.Do(ctx, req)
		if err != nil {
			t.Fatalf("%s %s: error %v", endpoint, body, err)
		}
		checkFuzzResponse(t, endpoint, req.Body, resp)
	})
}

// capped lowers body's max_tokens, max_completion_tokens and n to the fuzz
// caps. body parsed (parseRequest accepted it), so it is a JSON object.
func capped(t *testing.T, body []byte) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("parseRequest accepted %s, which is not a JSON object: %v", body, err)
	}
	for k, v := range map[string]string{"max_tokens": "4", "max_completion_tokens": "4", "max_output_tokens": "4", "n": "2"} {
		if _, ok := m[k]; ok {
			m[k] = json.RawMessage(v)
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkFuzzResponse fails unless resp is a 200 with the endpoint's object or
// a 400 with an OpenAI error body.
func checkFuzzResponse(t *testing.T, endpoint string, body []byte, resp *engine.Response) {
	t.Helper()
	var m struct {
		Object string `json:"object"`
		Error  *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Body, &m); err != nil {
		t.Fatalf("%s %s: %d with a body that is not JSON (%v): %s", endpoint, body, resp.StatusCode, err, resp.Body)
	}
	switch resp.StatusCode {
	case 200:
		want := map[string]string{engine.EndpointChat: "chat.completion", engine.EndpointCompletions: "text_completion",
			engine.EndpointEmbeddings: "list", engine.EndpointResponses: "response"}[endpoint]
		if m.Object != want {
			t.Fatalf("%s %s: 200 with object %q, want %q: %s", endpoint, body, m.Object, want, resp.Body)
		}
	case 400:
		if m.Error == nil || m.Error.Message == "" || m.Error.Type == "" {
			t.Fatalf("%s %s: 400 without an error message: %s", endpoint, body, resp.Body)
		}
	default:
		t.Fatalf("%s %s: status %d (a 500 is a recovered panic): %s", endpoint, body, resp.StatusCode, resp.Body)
	}
}
