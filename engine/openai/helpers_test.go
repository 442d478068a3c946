package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/openai/openaitest"
)

// testDeadline bounds waits in tests: a safety net against hangs, not a
// timing assertion.
const testDeadline = 60 * time.Second

// logRecord is one captured log line.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r logRecord) String() string {
	return fmt.Sprintf("%s %q %v", r.level, r.msg, r.attrs)
}

// logStore captures an engine's logs so tests can wait for a message (an
// event the engine documents) instead of sleeping.
type logStore struct {
	mu      sync.Mutex
	records []logRecord
	waiters []logWaiter
}

type logWaiter struct {
	msg string
	ch  chan struct{}
}

// waitFor returns a channel closed once a record with message msg is logged
// (already or later).
func (s *logStore) waitFor(msg string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	for _, r := range s.records {
		if r.msg == msg {
			close(ch)
			return ch
		}
	}
	s.waiters = append(s.waiters, logWaiter{msg, ch})
	return ch
}

// find returns the records with message msg.
func (s *logStore) find(msg string) []logRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []logRecord
	for _, r := range s.records {
		if r.msg == msg {
			out = append(out, r)
		}
	}
	return out
}

func (s *logStore) all() []logRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]logRecord(nil), s.records...)
}

func (s *logStore) add(r logRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = append(s.records, r)
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if w.msg == r.msg {
			close(w.ch)
			continue
		}
		kept = append(kept, w)
	}
	s.waiters = kept
}

// logHandler is a slog.Handler writing into a logStore.
type logHandler struct {
	store *logStore
	attrs []slog.Attr
}

func (h *logHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.store.add(rec)
	return nil
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logHandler{store: h.store, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}

func (h *logHandler) WithGroup(string) slog.Handler { return h }

// testConfig returns a config with short waits for loopback tests.
func testConfig(urls ...string) Config {
	cfg := DefaultConfig()
	cfg.URLs = urls
	cfg.RetryWaitMin = 5 * time.Millisecond
	cfg.RetryWaitMax = 50 * time.Millisecond
	cfg.AttemptTimeout = 30 * time.Second
	cfg.ProbeInterval = 20 * time.Millisecond
	return cfg
}

// newTestEngine builds and opens an engine whose logs go to the returned
// store; it is closed when t ends, and its logs are printed if t failed.
func newTestEngine(t *testing.T, cfg Config) (*Engine, *logStore) {
	t.Helper()
	logs := &logStore{}
	cfg.Logger = slog.New(&logHandler{store: logs})
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	openForTest(t, e, logs)
	return e, logs
}

// openForTest opens e and closes it when t ends, printing the logs in
// store if t failed.
func openForTest(t *testing.T, e engine.Engine, logs *logStore) {
	t.Helper()
	if err := e.Open(t.Context()); err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		if t.Failed() {
			for _, r := range logs.all() {
				t.Log(r)
			}
		}
	})
}

// startServer starts a stand-in server closed when t ends.
func startServer(t *testing.T, opts openaitest.Options) *openaitest.Server {
	t.Helper()
	srv := openaitest.NewServer(opts)
	if err := srv.Start(); err != nil {
		t.Fatalf("start stand-in: %v", err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// chatRequest returns a chat request whose user message is text.
func chatRequest(customID, text string) *engine.Request {
	body, _ := json.Marshal(map[string]any{
		"model":    "test-model",
		"messages": []map[string]string{{"role": "user", "content": text}},
	})
	return &engine.Request{CustomID: customID, Endpoint: engine.EndpointChat, Body: body}
}

// do calls e.Do with the test deadline.
func do(t *testing.T, e *Engine, req *engine.Request) (*engine.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testDeadline)
	defer cancel()
	return e.Do(ctx, req)
}

// mustOK calls Do and fails t unless it answers 200.
func mustOK(t *testing.T, e *Engine, req *engine.Request) *engine.Response {
	t.Helper()
	resp, err := do(t, e, req)
	if err != nil {
		t.Fatalf("Do %s: %v", req.CustomID, err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("Do %s: status %d: %s", req.CustomID, resp.StatusCode, resp.Body)
	}
	return resp
}

// wait receives from ch or fails t at the test deadline.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testDeadline)
	defer cancel()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatalf("timed out waiting for %s", what)
	}
}

// waitUntil polls cond until it holds or fails t at the test deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling, not synchronisation
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// checkPoisonGaveUp fails t unless err is the give-up of the request with
// custom_id "poison", answered "cannot run this", after want attempts, for
// the reason why; unless it was sent want times (posts); and unless the
// engine warned of it once.
func checkPoisonGaveUp(t *testing.T, err error, logs *logStore, posts int64, want int, why string) {
	t.Helper()
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("poison request: err = %v, want engine.ErrUnavailable", err)
	}
	for _, s := range []string{fmt.Sprintf("gave up after %d attempts", want), why, "cannot run this", `"poison"`} {
		if !contains(err.Error(), s) {
			t.Errorf("err = %q, want it to mention %q", err, s)
		}
	}
	if posts != int64(want) {
		t.Errorf("the poison request was sent %d times, want %d", posts, want)
	}
	if w := logs.find("request failed after retries"); len(w) != 1 || w[0].attrs[keyCustomID] != "poison" {
		t.Errorf("give-up warnings = %v, want one for custom_id poison", w)
	}
}
