// Package enginetest is the contract test suite every engine.Engine must
// pass (the openai engine against its stand-in server, the native runner
// against a small model). It uses only the engine package's types, so it
// holds for any implementation; it must not import an implementation.
package enginetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
)

// deadline bounds every wait of the suite. It is a safety net that turns a
// hang into a failure, not a timing assertion.
const deadline = 60 * time.Second

// Concurrency is the number of concurrent Do calls the suite makes.
const Concurrency = 64

// Request bodies of the suite. They name a model, ask for a few tokens and
// use greedy sampling, so a real engine answers them quickly.
var (
	ChatBody        = json.RawMessage(`{"model":"test-model","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Say hello."}],"max_tokens":8,"temperature":0}`)
	CompletionsBody = json.RawMessage(`{"model":"test-model","prompt":"Once upon a time","max_tokens":8,"temperature":0}`)
	EmbeddingsBody  = json.RawMessage(`{"model":"test-model","input":["first text","second text"]}`)
)

// Run runs the contract suite. newEngine must return a new engine that is
// not yet opened; Run opens it, and closes it when the subtest ends.
func Run(t *testing.T, newEngine func(t *testing.T) engine.Engine) {
	t.Run("chat", func(t *testing.T) {
		e := open(t, newEngine)
		checkOK(t, e, engine.EndpointChat, ChatBody, "chat.completion")
	})
	t.Run("completions", func(t *testing.T) {
		e := open(t, newEngine)
		checkOK(t, e, engine.EndpointCompletions, CompletionsBody, "text_completion")
	})
	t.Run("embeddings", func(t *testing.T) {
		e := open(t, newEngine)
		checkOK(t, e, engine.EndpointEmbeddings, EmbeddingsBody, "list")
	})
	t.Run("request unchanged", func(t *testing.T) {
		e := open(t, newEngine)
		for _, tc := range []struct {
			endpoint string
			body     json.RawMessage
		}{
			{engine.EndpointChat, ChatBody},
			{engine.EndpointCompletions, CompletionsBody},
			{engine.EndpointEmbeddings, EmbeddingsBody},
		} {
			body := bytes.Clone(tc.body)
			req := &engine.Request{CustomID: "unchanged", Endpoint: tc.endpoint, Body: body}
			if _, err := do(t, e, req); err != nil {
				t.Fatalf("Do %s: %v", tc.endpoint, err)
			}
			if !bytes.Equal(req.Body, tc.body) || !bytes.Equal(body, tc.body) {
				t.Errorf("Do %s changed the body:\n got %s\nwant %s", tc.endpoint, req.Body, tc.body)
			}
			if req.CustomID != "unchanged" || req.Endpoint != tc.endpoint {
				t.Errorf("Do %s changed the request: %+v", tc.endpoint, req)
			}
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		e := open(t, newEngine)
		errs := make([]error, Concurrency)
		var wg sync.WaitGroup
		for i := range Concurrency {
			wg.Go(func() {
				req := &engine.Request{CustomID: fmt.Sprintf("c-%d", i), Endpoint: engine.EndpointChat, Body: ChatBody}
				resp, err := do(t, e, req)
				switch {
				case err != nil:
					errs[i] = err
				case resp.StatusCode != 200:
					errs[i] = fmt.Errorf("status %d: %s", resp.StatusCode, resp.Body)
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		}
	})
	t.Run("cancelled before", func(t *testing.T) {
		e := open(t, newEngine)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := doCtx(ctx, t, e, &engine.Request{CustomID: "cancelled", Endpoint: engine.EndpointChat, Body: ChatBody})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Do with a cancelled context: err = %v, want context.Canceled", err)
		}
	})
	t.Run("cancelled during", func(t *testing.T) {
		e := open(t, newEngine)
		ctx, cancel := context.WithCancel(t.Context())
		started := make(chan struct{})
		type result struct {
			resp *engine.Response
			err  error
		}
		res := make(chan result, 1)
		go func() {
			close(started)
			resp, err := e.Do(ctx, &engine.Request{CustomID: "cancelled", Endpoint: engine.EndpointChat, Body: ChatBody})
			res <- result{resp, err}
		}()
		<-started
		cancel()
		safety, stop := context.WithTimeout(t.Context(), deadline)
		defer stop()
		select {
		case r := <-res:
			// The request may have been answered before the cancel landed.
			if r.err != nil && !errors.Is(r.err, context.Canceled) {
				t.Fatalf("Do cancelled while running: err = %v, want nil or context.Canceled", r.err)
			}
			if r.err == nil && r.resp == nil {
				t.Fatal("Do returned neither a response nor an error")
			}
		case <-safety.Done():
			t.Fatalf("Do did not return within %s of its context being cancelled", deadline)
		}
	})
	t.Run("lifecycle", func(t *testing.T) {
		e := newEngine(t)
		ctx, cancel := context.WithTimeout(t.Context(), deadline)
		defer cancel()
		if err := e.Open(ctx); err != nil {
			t.Fatalf("Open: %v", err)
		}
		if _, err := do(t, e, &engine.Request{CustomID: "life", Endpoint: engine.EndpointChat, Body: ChatBody}); err != nil {
			t.Fatalf("Do after Open: %v", err)
		}
		if sr, ok := e.(engine.StatsReporter); ok {
			if st := sr.Stats(); st.InFlight != 0 || st.Paused {
				t.Errorf("Stats when idle = %+v, want zero", st)
			}
		}
		if err := e.Close(ctx); err != nil {
			t.Fatalf("Close: %v", err)
		}
	})
	t.Run("close unused", func(t *testing.T) {
		e := newEngine(t)
		ctx, cancel := context.WithTimeout(t.Context(), deadline)
		defer cancel()
		if err := e.Open(ctx); err != nil {
			t.Fatalf("Open: %v", err)
		}
		if err := e.Close(ctx); err != nil {
			t.Fatalf("Close: %v", err)
		}
	})
}

// open returns a new engine, opened, closed when t ends.
func open(t *testing.T, newEngine func(t *testing.T) engine.Engine) engine.Engine {
	t.Helper()
	e := newEngine(t)
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	if err := e.Open(ctx); err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

func do(t *testing.T, e engine.Engine, req *engine.Request) (*engine.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	return doCtx(ctx, t, e, req)
}

// doCtx calls Do and checks the contract's shape: exactly one of a
// response and an error.
func doCtx(ctx context.Context, t *testing.T, e engine.Engine, req *engine.Request) (*engine.Response, error) {
	t.Helper()
	resp, err := e.Do(ctx, req)
	if (resp == nil) == (err == nil) {
		t.Errorf("Do(%s) returned response %v and error %v; want exactly one", req.CustomID, resp, err)
	}
	return resp, err
}

// checkOK sends one request and checks it is answered 200 with a JSON
// object of the given "object" type and a request id.
func checkOK(t *testing.T, e engine.Engine, endpoint string, body json.RawMessage, object string) {
	t.Helper()
	resp, err := do(t, e, &engine.Request{CustomID: "ok-" + object, Endpoint: endpoint, Body: body})
	if err != nil {
		t.Fatalf("Do %s: %v", endpoint, err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("Do %s: status %d, body %s", endpoint, resp.StatusCode, resp.Body)
	}
	if resp.RequestID == "" {
		t.Errorf("Do %s: empty RequestID", endpoint)
	}
	var got struct {
		Object string `json:"object"`
	}
	if err := json.Unmarshal(resp.Body, &got); err != nil {
		t.Fatalf("Do %s: body is not a JSON object: %v: %s", endpoint, err, resp.Body)
	}
	if got.Object != object {
		t.Errorf("Do %s: object = %q, want %q", endpoint, got.Object, object)
	}
}
