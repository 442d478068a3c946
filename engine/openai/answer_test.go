package openai

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
)

// okAnswer is a chat completion a test server sends for a normal request.
const okAnswer = `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"fine"},"finish_reason":"stop"}]}`

// answerServer answers requests whose body contains "bad" with bad,
// counting them (health checks aside), and every other request with
// okAnswer.
type answerServer struct {
	*httptest.Server
	bad atomic.Int64 // attempts of the bad request
}

func startAnswerServer(t *testing.T, bad http.HandlerFunc) *answerServer {
	t.Helper()
	s := &answerServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if bytes.Contains(body, []byte("bad")) {
			if r.Header.Get(HealthCheckHeader) == "" {
				s.bad.Add(1)
			}
			bad(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, okAnswer)
	}))
	t.Cleanup(s.Close)
	return s
}

// endless sends a 200 whose body never ends, as fast as it is read.
func endless(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	chunk := bytes.Repeat([]byte(" "), 32<<10)
	_, _ = w.Write([]byte(`{"pad":"`))
	for r.Context().Err() == nil {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// sized sends a 200 whose JSON body is n bytes, with a Content-Length or
// (flushed first, so it goes chunked) without one.
func sized(n int, contentLength bool) http.HandlerFunc {
	body := paddedAnswer(n)
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if contentLength {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		} else {
			w.(http.Flusher).Flush()
		}
		_, _ = w.Write(body)
	}
}

// paddedAnswer returns a JSON object of n bytes.
func paddedAnswer(n int) []byte {
	const head, tail = `{"pad":"`, `"}`
	return []byte(head + strings.Repeat("x", n-len(head)-len(tail)) + tail)
}

// checkAnswerFailure fails t unless err is the give-up of the bad request
// after want attempts, each of them seen by srv, naming every one of
// mention; and unless the engine stays up, holds no answer bytes, and
// still answers a normal request.
func checkAnswerFailure(t *testing.T, e *Engine, logs *logStore, srv *answerServer, err error, want int, mention ...string) {
	t.Helper()
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("bad request: err = %v, want engine.ErrUnavailable", err)
	}
	for _, s := range append([]string{fmt.Sprintf("gave up after %d attempts", want), `"bad"`}, mention...) {
		if !contains(err.Error(), s) {
			t.Errorf("err = %q, want it to mention %q", err, s)
		}
	}
	if n := srv.bad.Load(); n != int64(want) {
		t.Errorf("the bad request was sent %d times, want %d", n, want)
	}
	if e.Stats().Paused || len(logs.find("remote engine unreachable; batches paused, probing")) != 0 {
		t.Error("the engine was taken for down")
	}
	mustOK(t, e, chatRequest("after", "fine"))
	if n := e.answers.held.Load(); n != 0 {
		t.Errorf("%d bytes of answer budget still held with nothing in flight", n)
	}
}

func TestAnswerOverTheCapIsTheRequestsFailure(t *testing.T) {
	// An answer over max_answer_bytes, told by its Content-Length, cut off
	// at the cap without one, or without end, fails its request after
	// max_retries: the server answered, so it is no outage, and nothing
	// must have succeeded before for the engine to know.
	const limit = 1 << 20
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		mention string
	}{
		{"content-length", sized(3*limit, true), "Content-Length 3145728 is over openai.max_answer_bytes (1048576 bytes)"},
		{"chunked", sized(3*limit, false), "over openai.max_answer_bytes (1048576 bytes)"},
		{"endless", endless, "over openai.max_answer_bytes (1048576 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startAnswerServer(t, tc.handler)
			cfg := testConfig(srv.URL)
			cfg.MaxRetries = 2
			cfg.MaxAnswerBytes = limit
			cfg.MaxAnswerBytesInFlight = 4 * limit
			e, logs := newTestEngine(t, cfg)
			_, err := do(t, e, chatRequest("bad", "bad"))
			checkAnswerFailure(t, e, logs, srv, err, cfg.MaxRetries+1, tc.mention, "3 answers over openai.max_answer_bytes")
			if peak := e.answers.peak.Load(); peak > cfg.MaxAnswerBytesInFlight {
				t.Errorf("peak answer bytes held = %d, over the budget %d", peak, cfg.MaxAnswerBytesInFlight)
			}
		})
	}
}

func TestDrippingAnswerEndsAtAttemptTimeout(t *testing.T) {
	// A body dripped a byte at a time keeps the engine from looking hung,
	// but attempt_timeout still bounds the whole answer: each attempt
	// times out while the 2xx answer is still arriving, which is the
	// request's own failure, so it ends after max_retries, whether or not
	// anything succeeded before (a health check could be sent).
	for _, sample := range []bool{true, false} {
		t.Run(fmt.Sprintf("sample=%v", sample), func(t *testing.T) { testDrippingAnswer(t, sample) })
	}
}

func testDrippingAnswer(t *testing.T, sample bool) {
	srv := startAnswerServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{")
		w.(http.Flusher).Flush()
		tick := time.NewTicker(10 * time.Millisecond) // the drip's pace
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
			if _, err := io.WriteString(w, " "); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	})
	cfg := testConfig(srv.URL)
	cfg.MaxRetries = 2
	cfg.AttemptTimeout = 500 * time.Millisecond
	e, logs := newTestEngine(t, cfg)
	if sample {
		mustOK(t, e, chatRequest("before", "fine")) // a known-good body to check with
	}
	_, err := do(t, e, chatRequest("bad", "bad"))
	checkAnswerFailure(t, e, logs, srv, err, cfg.MaxRetries+1, "attempt timed out after 500ms", "read answer (status 200)", "3 answers still arriving at openai.attempt_timeout (500ms)")
}

func TestAnswerBudgetBoundsAnswersInFlight(t *testing.T) {
	// Eight 3 MiB answers at once, within an 8 MiB budget: never more than
	// the budget is held, and each answer is read into one buffer of its
	// size (with a Content-Length) or read in pieces and joined once
	// (without), not copied over and over.
	const (
		size    = 3 << 20
		n       = 8
		budget  = 8 << 20
		request = "big"
	)
	for _, tc := range []struct {
		name          string
		contentLength bool
		maxAlloc      float64 // bytes allocated per answer byte, at most
	}{
		{"content-length", true, 1.25},
		{"chunked", false, 2.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			handler := sized(size, tc.contentLength)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				handler(w, r)
			}))
			t.Cleanup(srv.Close)
			cfg := testConfig(srv.URL)
			cfg.MaxInFlight = n
			cfg.MaxAnswerBytes = 4 << 20
			cfg.MaxAnswerBytesInFlight = budget
			e, _ := newTestEngine(t, cfg)

			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			var wg sync.WaitGroup
			sizes := make([]int, n)
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					resp, err := do(t, e, chatRequest(fmt.Sprintf("%s-%d", request, i), request))
					if err == nil {
						sizes[i] = len(resp.Body)
					}
					errs[i] = err
				})
			}
			wg.Wait()
			runtime.ReadMemStats(&after)
			for i := range n {
				if errs[i] != nil || sizes[i] != size {
					t.Errorf("request %d: %d bytes, err %v; want %d bytes", i, sizes[i], errs[i], size)
				}
			}
			peak := e.answers.peak.Load()
			if peak > budget || peak < size {
				t.Errorf("peak answer bytes held = %d, want between %d and the budget %d", peak, size, budget)
			}
			if held := e.answers.held.Load(); held != 0 {
				t.Errorf("%d bytes of answer budget still held with nothing in flight", held)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; float64(alloc) > tc.maxAlloc*n*size {
				t.Errorf("allocated %d bytes for %d answers of %d: over %.2f times their size", alloc, n, size, tc.maxAlloc)
			}
		})
	}
}
