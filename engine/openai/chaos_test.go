package openai

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
)

// Tests of the promise that an outage pauses and fails nothing, against the
// stand-in server (a test double of the remote server, on loopback) with
// seeded faults.

// sendAll runs n requests at once and returns each one's error (nil for a
// 200 with the echo).
func sendAll(t *testing.T, e *Engine, n int, prefix string) []error {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			text := fmt.Sprintf("%s %d", prefix, i)
			resp, err := do(t, e, chatRequest(prefix+"-"+strconv.Itoa(i), text))
			switch {
			case err != nil:
				errs[i] = err
			case resp.StatusCode != 200:
				errs[i] = fmt.Errorf("status %d: %s", resp.StatusCode, resp.Body)
			case !bytes.Contains(resp.Body, []byte("echo: "+text)):
				errs[i] = fmt.Errorf("body %s, want the echo of %q", resp.Body, text)
			}
		})
	}
	wg.Wait()
	return errs
}

func TestStormsArePauses(t *testing.T) {
	// The server stays up (GET /models answers) but fails every POST for a
	// while: 20 requests retry far past MaxRetries and all succeed once the
	// storm ends. None becomes an error.
	for _, tc := range []struct {
		name  string
		storm openaitest.Fault
	}{
		{"500", openaitest.Fault{Status: 500}},
		{"503 with Retry-After", openaitest.Fault{Status: 503, Header: http.Header{"Retry-After": {"3600"}}}},
		{"connection reset", openaitest.Fault{Close: true}},
		{"cut short", openaitest.Fault{Truncate: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chaos := &openaitest.Chaos{}
			chaos.SetStorm(tc.storm)
			srv := startServer(t, openaitest.Options{Fault: chaos.Fault})
			cfg := testConfig(srv.URL())
			cfg.MaxRetries = 2
			e, logs := newTestEngine(t, cfg)
			paused := logs.waitFor("remote engine unreachable; batches paused, probing")

			const n = 20
			errc := make(chan []error, 1)
			go func() { errc <- sendAll(t, e, n, "storm") }()
			// Long enough that every request has failed well past its
			// MaxRetries: 20 requests, 10 × (MaxRetries+1) POSTs.
			waitUntil(t, "the storm to fail many attempts", func() bool {
				return srv.Requests() >= int64(10*n*(cfg.MaxRetries+1))
			})
			wait(t, paused, "the engine to pause")
			chaos.ClearStorm()
			for i, err := range <-errc {
				if err != nil {
					t.Errorf("request %d: %v", i, err)
				}
			}
			if got := logs.find("request failed after retries"); len(got) != 0 {
				t.Errorf("requests gave up: %v", got)
			}
		})
	}
}

func TestOutageWholeServer(t *testing.T) {
	// The server is gone (connections refused, probes too) while 20
	// requests run: the engine pauses, Stats says so, and all 20 succeed
	// after the restart.
	srv := startServer(t, openaitest.Options{})
	cfg := testConfig(srv.URL())
	cfg.MaxRetries = 1
	e, logs := newTestEngine(t, cfg)
	paused := logs.waitFor("remote engine unreachable; batches paused, probing")
	srv.Stop()
	errc := make(chan []error, 1)
	go func() { errc <- sendAll(t, e, 20, "outage") }()
	wait(t, paused, "the engine to pause")
	if !e.Stats().Paused {
		t.Error("Stats().Paused = false while the server is stopped")
	}
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	for i, err := range <-errc {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	if e.Stats().Paused {
		t.Error("Stats().Paused = true after every request succeeded")
	}
}

func TestSeededChaos(t *testing.T) {
	// Random 500s, resets, bodies cut short, hangs (ended by the attempt
	// timeout) and latency, seeded so a failure reproduces: every request
	// succeeds, and each body cut short is logged.
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			chaos := &openaitest.Chaos{Seed: seed, Error: 0.1, Reset: 0.1, Truncate: 0.1, Hang: 0.03, Latency: 20 * time.Millisecond}
			var truncated atomic.Int64
			srv := startServer(t, openaitest.Options{Fault: func(n int64, r *http.Request, body []byte) openaitest.Fault {
				f := chaos.Fault(n, r, body)
				// A health check's answer is discarded unlogged.
				if f.Truncate && r.Header.Get(HealthCheckHeader) == "" {
					truncated.Add(1)
				}
				return f
			}})
			cfg := testConfig(srv.URL())
			cfg.AttemptTimeout = 2 * time.Second
			cfg.MaxInFlight = 8
			e, logs := newTestEngine(t, cfg)
			for i, err := range sendAll(t, e, 60, "chaos") {
				if err != nil {
					t.Errorf("request %d: %v", i, err)
				}
			}
			if got, want := len(logs.find("success response is not JSON; retrying")), truncated.Load(); int64(got) != want {
				t.Errorf("%d warnings for bodies cut short, want %d", got, want)
			}
			if truncated.Load() == 0 {
				t.Error("the seed cut no body short; pick one that does")
			}
		})
	}
}

func TestPoisonRequest(t *testing.T) {
	// The server fails one body every time and answers the others: that
	// request is at fault and, after MaxRetries retries, ends as an error;
	// the others succeed. Its first attempt is held until the others are
	// answered, so it then fails alone, as the last request of a batch does.
	othersDone := make(chan struct{})
	var poisonPOSTs atomic.Int64
	srv := startServer(t, openaitest.Options{Fault: func(_ int64, r *http.Request, body []byte) openaitest.Fault {
		if !bytes.Contains(body, []byte("poison")) {
			return openaitest.Fault{}
		}
		if poisonPOSTs.Add(1) == 1 {
			select {
			case <-othersDone:
			case <-r.Context().Done():
			}
		}
		return openaitest.Fault{Status: 500, Body: `{"error":{"message":"cannot run this","type":"server_error"}}`}
	}})
	cfg := testConfig(srv.URL())
	e, logs := newTestEngine(t, cfg)

	errc := make(chan error, 1)
	go func() {
		_, err := do(t, e, chatRequest("poison", "poison"))
		errc <- err
	}()
	waitUntil(t, "the poison request to reach the server", func() bool { return poisonPOSTs.Load() == 1 })
	for i, err := range sendAll(t, e, 19, "fine") {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	close(othersDone)

	checkPoisonGaveUp(t, <-errc, logs, poisonPOSTs.Load(), cfg.MaxRetries+1, "answered other requests")
	if e.Stats().Paused {
		t.Error("engine paused by one failing request")
	}
}

func TestHungEngine(t *testing.T) {
	// The server takes requests and answers nothing: within HangAfter the
	// engine reports Hung and warns, without failing anything; once the
	// server answers, it is healthy again.
	release := make(chan struct{})
	var hanging atomic.Bool
	srv := startServer(t, openaitest.Options{Fault: func(_ int64, r *http.Request, _ []byte) openaitest.Fault {
		if hanging.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		return openaitest.Fault{}
	}})
	cfg := testConfig(srv.URL())
	cfg.HangAfter = 200 * time.Millisecond
	e, logs := newTestEngine(t, cfg)
	warned := logs.waitFor("remote engine not answering: requests sent, no response")
	recovered := logs.waitFor("remote engine no longer hung")

	mustOK(t, e, chatRequest("before", "hi"))
	if e.Stats().Hung {
		t.Fatal("Stats().Hung with nothing in flight")
	}
	hanging.Store(true)
	errc := make(chan []error, 1)
	go func() { errc <- sendAll(t, e, 5, "hung") }()
	waitUntil(t, "Stats().Hung", func() bool { return e.Stats().Hung })
	wait(t, warned, "the hang warning")
	if w := logs.find("remote engine not answering: requests sent, no response"); len(w) != 1 || w[0].level != slogWarn {
		t.Errorf("hang logged %v, want once at WARN", w)
	}
	if e.Stats().Paused {
		t.Error("a hung engine holds new callers (Paused); it should only report Hung")
	}

	hanging.Store(false)
	close(release)
	for i, err := range <-errc {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	waitUntil(t, "Stats().Hung to clear", func() bool { return !e.Stats().Hung })
	wait(t, recovered, "the recovery log")
}

func TestBrokenReplicaUnderLoad(t *testing.T) {
	// One replica answers 500 to every POST while the other serves: the
	// failures are that replica's, not the requests', so none of them
	// gives up, however small MaxRetries; the broken replica is skipped.
	live := startServer(t, openaitest.Options{})
	broken := startServer(t, openaitest.Options{Fault: func(int64, *http.Request, []byte) openaitest.Fault {
		return openaitest.Fault{Status: 500}
	}})
	cfg := testConfig(broken.URL(), live.URL())
	cfg.MaxRetries = 0
	cfg.DownAfter = 3
	e, logs := newTestEngine(t, cfg)
	for i, err := range sendAll(t, e, 40, "replicas") {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	if len(logs.find("replica unreachable; sending to the others, probing")) == 0 {
		t.Error("the broken replica was never marked down")
	}
	if live.Requests() != 40 {
		t.Errorf("live replica answered %d requests, want 40", live.Requests())
	}
}

func TestHungPastAttemptTimeout(t *testing.T) {
	// Attempts cut off by AttemptTimeout and sent again are no answer: the
	// engine stays hung through them, then recovers when the server answers.
	release := make(chan struct{})
	var hanging atomic.Bool
	hanging.Store(true)
	srv := startServer(t, openaitest.Options{Fault: func(_ int64, r *http.Request, _ []byte) openaitest.Fault {
		if hanging.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		return openaitest.Fault{}
	}})
	cfg := testConfig(srv.URL())
	cfg.AttemptTimeout = 50 * time.Millisecond
	cfg.HangAfter = 300 * time.Millisecond
	e, logs := newTestEngine(t, cfg)
	const n = 3
	errc := make(chan []error, 1)
	go func() { errc <- sendAll(t, e, n, "slow") }()
	waitUntil(t, "Stats().Hung", func() bool { return e.Stats().Hung })
	before := srv.Requests()
	waitUntil(t, "attempts to time out and be sent again", func() bool { return srv.Requests() >= before+2*n })
	if !e.Stats().Hung {
		t.Error("Stats().Hung cleared by attempts that timed out")
	}
	if w := logs.find("remote engine no longer hung"); len(w) != 0 {
		t.Errorf("recovery logged with no answer: %v", w)
	}
	hanging.Store(false)
	close(release)
	for i, err := range <-errc {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	waitUntil(t, "Stats().Hung to clear", func() bool { return !e.Stats().Hung })
}
