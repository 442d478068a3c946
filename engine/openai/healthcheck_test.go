package openai

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/openai/openaitest"
)

// Tests of health checks: a request failing with nothing else running is
// told from an outage by re-sending an earlier body that succeeded.

// healthChecks records the health checks a stand-in server received.
type healthChecks struct {
	mu     sync.Mutex
	bodies []string
}

// seen reports whether r is a health check, and records its body if so.
func (h *healthChecks) seen(r *http.Request, body []byte) bool {
	if r.Header.Get(HealthCheckHeader) == "" {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bodies = append(h.bodies, string(body))
	return true
}

func (h *healthChecks) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.bodies...)
}

func (h *healthChecks) count() int { return len(h.all()) }

const poisonAnswer = `{"error":{"message":"cannot run this","type":"server_error"}}`

func TestLastRequestThatAlwaysFailsGivesUp(t *testing.T) {
	// The last request of a batch gets 500 every time while the server
	// answers everything else. It fails only when nothing else runs, so no
	// other request shows the server up; a health check (an earlier body
	// that succeeded, sent again) does. The request ends after MaxRetries
	// retries instead of waiting forever; the others succeed, and the health
	// check shows in neither Stats nor any result.
	var checks healthChecks
	var poisonPOSTs atomic.Int64
	srv := startServer(t, openaitest.Options{Fault: func(_ int64, r *http.Request, body []byte) openaitest.Fault {
		if checks.seen(r, body) || !bytes.Contains(body, []byte("poison")) {
			return openaitest.Fault{}
		}
		poisonPOSTs.Add(1)
		return openaitest.Fault{Status: 500, Body: poisonAnswer}
	}})
	cfg := testConfig(srv.URL())
	cfg.MaxRetries = 3
	e, logs := newTestEngine(t, cfg)

	for i, err := range sendAll(t, e, 5, "fine") {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	_, err := do(t, e, chatRequest("poison", "poison"))
	checkPoisonGaveUp(t, err, logs, poisonPOSTs.Load(), cfg.MaxRetries+1, "health check")
	// One check shows the server up; the failures after it count as they
	// do for a request that already has a strike.
	got := checks.all()
	if len(got) != 1 {
		t.Fatalf("%d health checks, want 1: %q", len(got), got)
	}
	if !strings.Contains(got[0], "fine ") || strings.Contains(got[0], "poison") {
		t.Errorf("health check body %s, want an earlier body that succeeded", got[0])
	}
	if s := e.Stats(); s.Retries != int64(cfg.MaxRetries) || s.InFlight != 0 || s.Paused {
		t.Errorf("Stats() = %+v, want %d retries (the poison request's), nothing in flight, not paused", s, cfg.MaxRetries)
	}
	if w := logs.find("remote engine unreachable; batches paused, probing"); len(w) != 0 {
		t.Errorf("one failing request paused the engine: %v", w)
	}
	// The next request gets its own answer, not the health check's.
	if resp := mustOK(t, e, chatRequest("after", "after")); !bytes.Contains(resp.Body, []byte("echo: after")) {
		t.Errorf("answer after the health check: %s", resp.Body)
	}
}

func TestOutageWithOneRequestLeftIsAPause(t *testing.T) {
	// The server's engine dies behind a live front end (GET /models
	// answers, every POST gets 500) with one request left. The health check
	// fails too, so this is an outage: the request waits, far past
	// MaxRetries, and succeeds once the server serves again.
	var checks healthChecks
	chaos := &openaitest.Chaos{}
	srv := startServer(t, openaitest.Options{Fault: func(n int64, r *http.Request, body []byte) openaitest.Fault {
		checks.seen(r, body)
		return chaos.Fault(n, r, body)
	}})
	cfg := testConfig(srv.URL())
	cfg.MaxRetries = 1
	cfg.DownAfter = 3
	e, logs := newTestEngine(t, cfg)
	paused := logs.waitFor("remote engine unreachable; batches paused, probing")

	mustOK(t, e, chatRequest("before", "before"))
	chaos.SetStorm(openaitest.Fault{Status: 500})
	type result struct {
		resp *engine.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := do(t, e, chatRequest("last", "last"))
		done <- result{resp, err}
	}()
	wait(t, paused, "the engine to pause")
	waitUntil(t, "health checks to fail and the request to be retried past MaxRetries", func() bool {
		return checks.count() >= 3 && srv.Requests() >= int64(6*(cfg.MaxRetries+1))
	})
	select {
	case r := <-done:
		t.Fatalf("the request ended during the outage: %+v", r)
	default:
	}
	chaos.ClearStorm()
	r := <-done
	if r.err != nil {
		t.Fatalf("the request after the outage: %v", r.err)
	}
	if !bytes.Contains(r.resp.Body, []byte("echo: last")) {
		t.Errorf("answer %s, want the echo of its own body", r.resp.Body)
	}
	if w := logs.find("request failed after retries"); len(w) != 0 {
		t.Errorf("requests gave up: %v", w)
	}
}

func TestFirstRequestFailingWithNoKnownGoodBodyWaits(t *testing.T) {
	// The very first request fails with nothing else running and nothing
	// has succeeded yet, so there is no body to check the server with: it
	// waits as in an outage, says why once, and ends when its caller
	// cancels.
	var checks healthChecks
	var poisonPOSTs atomic.Int64
	srv := startServer(t, openaitest.Options{Fault: func(_ int64, r *http.Request, body []byte) openaitest.Fault {
		if checks.seen(r, body) {
			return openaitest.Fault{}
		}
		poisonPOSTs.Add(1)
		return openaitest.Fault{Status: 500, Body: poisonAnswer}
	}})
	cfg := testConfig(srv.URL())
	cfg.MaxRetries = 1
	cfg.DownAfter = 2
	e, logs := newTestEngine(t, cfg)
	const warning = "request fails with nothing else running and no earlier request succeeded to check the server with; waiting as in an outage until it succeeds or its batch is cancelled"

	ctx, cancel := context.WithTimeout(t.Context(), testDeadline)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := e.Do(ctx, chatRequest("first", "first"))
		errc <- err
	}()
	waitUntil(t, "several rounds of attempts past MaxRetries", func() bool {
		return poisonPOSTs.Load() >= int64(4*(cfg.MaxRetries+1))
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want context.Canceled", err)
	}
	if w := logs.find(warning); len(w) != 1 || w[0].level != slogWarn || w[0].attrs[keyCustomID] != "first" {
		t.Errorf("warnings %v, want one at WARN for custom_id first", w)
	}
	if n := checks.count(); n != 0 {
		t.Errorf("%d health checks with no known-good body", n)
	}
}

func TestSamplesKeepSmallRecentBodies(t *testing.T) {
	var s samples
	now := time.Unix(1700000000, 0)
	if got := s.get(engine.EndpointChat); got != nil {
		t.Fatalf("empty samples gave %q", got)
	}
	s.keep(engine.EndpointChat, bytes.Repeat([]byte("x"), maxSampleBytes+1), now)
	if got := s.get(engine.EndpointChat); got != nil {
		t.Fatalf("a body over %d bytes was kept", maxSampleBytes)
	}
	body := []byte(`{"a":1}`)
	s.keep(engine.EndpointChat, body, now)
	body[2] = 'b' // the caller's buffer may be reused
	if got := string(s.get(engine.EndpointChat)); got != `{"a":1}` {
		t.Fatalf("kept %q, want a copy of the body", got)
	}
	if got := s.get(engine.EndpointEmbeddings); got != nil {
		t.Fatalf("embeddings sample %q from a chat body", got)
	}
	s.keep(engine.EndpointChat, []byte(`{"a":2}`), now.Add(sampleRefresh/2))
	if got := string(s.get(engine.EndpointChat)); got != `{"a":1}` {
		t.Errorf("kept %q before sampleRefresh passed, want the older body", got)
	}
	s.keep(engine.EndpointChat, []byte(`{"a":3}`), now.Add(sampleRefresh))
	if got := string(s.get(engine.EndpointChat)); got != `{"a":3}` {
		t.Errorf("kept %q after sampleRefresh, want the newer body", got)
	}
}
