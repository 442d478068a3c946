package openai

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

func TestPoisonRequestsAtTheEndOfABatchGiveUp(t *testing.T) {
	// The last 3 requests of a batch of 20 get 500 every time while the
	// server answers everything else. Their first attempts are held until
	// the other 17 are answered; after that they fail together, with no
	// other request served, so only health checks can tell them from an
	// outage. Each ends after MaxRetries retries, the engine never pauses,
	// and the checks are shared rather than one per failure.
	const poison = 3
	var checks healthChecks
	var poisonPOSTs atomic.Int64
	othersDone := make(chan struct{})
	srv := startServer(t, openaitest.Options{Fault: func(_ int64, r *http.Request, body []byte) openaitest.Fault {
		if checks.seen(r, body) || !bytes.Contains(body, []byte("poison")) {
			return openaitest.Fault{}
		}
		if poisonPOSTs.Add(1) <= poison {
			select {
			case <-othersDone:
			case <-r.Context().Done():
			}
		}
		return openaitest.Fault{Status: 500, Body: poisonAnswer}
	}})
	cfg := testConfig(srv.URL())
	cfg.MaxRetries = 3
	cfg.DownAfter = 2
	e, logs := newTestEngine(t, cfg)

	errs := make(chan error, poison)
	for i := range poison {
		go func() {
			_, err := do(t, e, chatRequest(fmt.Sprint("poison-", i), "poison"))
			errs <- err
		}()
	}
	waitUntil(t, "the poison requests to reach the server", func() bool { return poisonPOSTs.Load() == poison })
	for i, err := range sendAll(t, e, 20-poison, "fine") {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	close(othersDone)

	for range poison {
		err := <-errs
		if !errors.Is(err, engine.ErrUnavailable) {
			t.Fatalf("poison request: err = %v, want engine.ErrUnavailable", err)
		}
		if want := fmt.Sprintf("gave up after %d attempts", cfg.MaxRetries+1); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "cannot run this") {
			t.Errorf("err = %q, want %q and the server's answer", err, want)
		}
	}
	if got, want := poisonPOSTs.Load(), int64(poison*(cfg.MaxRetries+1)); got != want {
		t.Errorf("the poison requests were sent %d times, want %d", got, want)
	}
	if w := logs.find("remote engine unreachable; batches paused, probing"); len(w) != 0 {
		t.Errorf("failing requests paused the engine: %v", w)
	}
	if w := logs.find("request failed after retries"); len(w) != poison {
		t.Errorf("give-up warnings = %v, want %d", w, poison)
	}
	// Each check starts at a failure whose request failed once before
	// since the previous check ended (else that check would serve it), so
	// at most (f+1)/2 checks for the f failures after the first attempts:
	// well under one per failure.
	failures := poison * cfg.MaxRetries
	got := checks.all()
	if len(got) == 0 || len(got) > (failures+1)/2 {
		t.Errorf("%d health checks for %d failures, want 1 to %d", len(got), failures, (failures+1)/2)
	}
	t.Logf("%d health checks for %d failures", len(got), failures)
	for _, b := range got {
		if !strings.Contains(b, "fine ") {
			t.Errorf("health check body %s, want an earlier body that succeeded", b)
		}
	}
	if s := e.Stats(); s.InFlight != 0 || s.Paused {
		t.Errorf("Stats() = %+v, want nothing in flight, not paused", s)
	}
}

func TestOutageWithRequestsLeftIsAPause(t *testing.T) {
	// The server's engine dies behind a live front end (GET /models
	// answers, every POST gets 500) with one request left, or several. The
	// health check fails too, so this is an outage: the requests wait, far
	// past MaxRetries, and succeed once the server serves again.
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprint(n, " left"), func(t *testing.T) {
			var checks healthChecks
			chaos := &openaitest.Chaos{}
			srv := startServer(t, openaitest.Options{Fault: func(k int64, r *http.Request, body []byte) openaitest.Fault {
				checks.seen(r, body)
				return chaos.Fault(k, r, body)
			}})
			cfg := testConfig(srv.URL())
			cfg.MaxRetries = 1
			cfg.DownAfter = 3
			e, logs := newTestEngine(t, cfg)
			paused := logs.waitFor("remote engine unreachable; batches paused, probing")

			mustOK(t, e, chatRequest("before", "before"))
			chaos.SetStorm(openaitest.Fault{Status: 500})
			errc := make(chan []error, 1)
			go func() { errc <- sendAll(t, e, n, "last") }()
			wait(t, paused, "the engine to pause")
			waitUntil(t, "health checks to fail and the requests to be retried past MaxRetries", func() bool {
				return checks.count() >= 3 && srv.Requests() >= int64(6*n*(cfg.MaxRetries+1))
			})
			select {
			case errs := <-errc:
				t.Fatalf("the requests ended during the outage: %v", errs)
			default:
			}
			chaos.ClearStorm()
			for i, err := range <-errc {
				if err != nil {
					t.Errorf("request %d: %v", i, err)
				}
			}
			if w := logs.find("request failed after retries"); len(w) != 0 {
				t.Errorf("requests gave up: %v", w)
			}
		})
	}
}

func TestSeveralRequestsFailingWithNoKnownGoodBodyWait(t *testing.T) {
	// Nothing has succeeded yet and 3 requests fail together: there is no
	// body to check the server with, so no check is sent and they wait as
	// in an outage until their callers cancel.
	const n = 3
	var checks healthChecks
	var posts atomic.Int64
	srv := startServer(t, openaitest.Options{Fault: func(_ int64, r *http.Request, body []byte) openaitest.Fault {
		if checks.seen(r, body) {
			return openaitest.Fault{}
		}
		posts.Add(1)
		return openaitest.Fault{Status: 500, Body: poisonAnswer}
	}})
	cfg := testConfig(srv.URL())
	cfg.MaxRetries = 1
	cfg.DownAfter = 2
	e, logs := newTestEngine(t, cfg)
	paused := logs.waitFor("remote engine unreachable; batches paused, probing")

	ctx, cancel := context.WithTimeout(t.Context(), testDeadline)
	defer cancel()
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := e.Do(ctx, chatRequest(fmt.Sprint("first-", i), "first"))
			errs <- err
		}()
	}
	wait(t, paused, "the engine to pause")
	waitUntil(t, "several rounds of attempts past MaxRetries", func() bool {
		return posts.Load() >= int64(4*n*(cfg.MaxRetries+1))
	})
	cancel()
	for range n {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Errorf("Do = %v, want context.Canceled", err)
		}
	}
	if c := checks.count(); c != 0 {
		t.Errorf("%d health checks with no known-good body", c)
	}
}
