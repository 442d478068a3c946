package openai

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/wire"
)

// responsesServer is a loopback stand-in with a /v1/responses route: it
// refuses the empty probe body with a 400, answers any other body with a
// Response object, and keeps the bodies it was sent; it answers chat
// completions too.
type responsesServer struct {
	*httptest.Server
	mu     sync.Mutex
	probes int
	bodies []map[string]any
	chats  int
}

func startResponsesServer(t *testing.T) *responsesServer {
	t.Helper()
	s := &responsesServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"object":"list","data":[]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.chats++
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"chatcmpl-srv","object":"chat.completion","created":1,"model":"served",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"from chat"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`)
	})
	mux.HandleFunc("POST /v1/responses", func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		json.Unmarshal(raw, &body)
		w.Header().Set("Content-Type", "application/json")
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(body) == 0 {
			s.probes++
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"message":"input is required","type":"invalid_request_error","param":"input","code":null}}`)
			return
		}
		s.bodies = append(s.bodies, body)
		io.WriteString(w, `{"id":"resp_srv","object":"response","created_at":1,"status":"completed","model":"served",`+
			`"output":[{"type":"message","id":"msg_srv","status":"completed","role":"assistant","content":[{"type":"output_text","text":"from the route","annotations":[]}]}],`+
			`"usage":{"input_tokens":3,"output_tokens":3,"total_tokens":6}}`)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func responsesRequest(id string) *engine.Request {
	return &engine.Request{CustomID: id, Endpoint: engine.EndpointResponses,
		Body: json.RawMessage(`{"model":"test-model","input":"hello","instructions":"Be brief."}`)}
}

// decodeResponse fails t unless body is a completed Response object, and
// returns its first output text.
func decodeResponse(t *testing.T, body []byte) string {
	t.Helper()
	var r wire.Response
	if err := json.Unmarshal(body, &r); err != nil || r.Object != "response" || r.Status != "completed" ||
		len(r.Output) != 1 || len(r.Output[0].Content) != 1 {
		t.Fatalf("not a completed Response (%v): %s", err, body)
	}
	return r.Output[0].Content[0].Text
}

// A server with the /v1/responses route gets the Responses body as it is
// (store false added), probed once; one without it (404) gets the chat
// completion it translates to. Both answers are Response objects, and the
// log says which each server gets.
func TestResponsesForwardedWhereTheServerHasTheRoute(t *testing.T) {
	withRoute := startResponsesServer(t)
	var chatBodies []map[string]any
	var mu sync.Mutex
	noRoute := startServer(t, openaitest.Options{Fault: func(_ int64, r *http.Request, body []byte) openaitest.Fault {
		var m map[string]any
		json.Unmarshal(body, &m)
		mu.Lock()
		chatBodies = append(chatBodies, m)
		mu.Unlock()
		return openaitest.Fault{}
	}})

	fwd, fwdLogs := newTestEngine(t, testConfig(withRoute.URL))
	for _, id := range []string{"a", "b"} {
		if text := decodeResponse(t, mustOK(t, fwd, responsesRequest(id)).Body); text != "from the route" {
			t.Fatalf("forwarded answer %q", text)
		}
	}
	withRoute.mu.Lock()
	if withRoute.probes != 1 || withRoute.chats != 0 || len(withRoute.bodies) != 2 ||
		withRoute.bodies[0]["input"] != "hello" || withRoute.bodies[0]["instructions"] != "Be brief." ||
		withRoute.bodies[0]["store"] != false || withRoute.bodies[0]["messages"] != nil {
		t.Fatalf("server with the route: %d probes, %d chats, bodies %v", withRoute.probes, withRoute.chats, withRoute.bodies)
	}
	withRoute.mu.Unlock()
	if got := fwdLogs.find("remote server: /v1/responses forwarded"); len(got) != 1 {
		t.Fatalf("forwarded logs: %v", got)
	}

	tr, trLogs := newTestEngine(t, testConfig(noRoute.URL()))
	if text := decodeResponse(t, mustOK(t, tr, responsesRequest("c")).Body); text == "" {
		t.Fatal("translated answer has no text")
	}
	mu.Lock()
	if len(chatBodies) != 1 || chatBodies[0]["messages"] == nil || chatBodies[0]["input"] != nil {
		t.Fatalf("server without the route got %v", chatBodies)
	}
	mu.Unlock()
	if got := trLogs.find("remote server: /v1/responses translated to chat completions"); len(got) != 1 {
		t.Fatalf("translated logs: %v", got)
	}

	// Servers that differ are all sent chat completions: a request must
	// run alike whichever one it goes to.
	mixed, mixedLogs := newTestEngine(t, testConfig(withRoute.URL, noRoute.URL()))
	for _, id := range []string{"d", "e", "f", "g"} {
		decodeResponse(t, mustOK(t, mixed, responsesRequest(id)).Body)
	}
	withRoute.mu.Lock()
	if len(withRoute.bodies) != 2 || withRoute.chats == 0 {
		t.Fatalf("mixed servers: the one with the route got %d Responses bodies, %d chats", len(withRoute.bodies)-2, withRoute.chats)
	}
	withRoute.mu.Unlock()
	if got := mixedLogs.find("remote server: /v1/responses translated to chat completions"); len(got) != 2 {
		t.Fatalf("mixed logs: %v", got)
	}
}
