package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/enginetest"
	"github.com/batchd/batchd/engine/openai/openaitest"
)

func TestContract(t *testing.T) {
	enginetest.Run(t, func(t *testing.T) engine.Engine {
		srv := startServer(t, openaitest.Options{})
		cfg := testConfig(srv.URL())
		cfg.Logger = slogDiscard
		e, err := New(cfg)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return e
	})
}

// faultOnce injects f on the first POST only.
func faultOnce(f openaitest.Fault) func(int64, *http.Request, []byte) openaitest.Fault {
	return func(n int64, _ *http.Request, _ []byte) openaitest.Fault {
		if n == 1 {
			return f
		}
		return openaitest.Fault{}
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name       string
		retryAfter string
		waitMax    time.Duration
		wantWait   time.Duration
	}{
		{"honoured", "1", 2 * time.Second, time.Second},
		{"clamped", "3600", 200 * time.Millisecond, 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, openaitest.Options{Fault: faultOnce(openaitest.Fault{
				Status: http.StatusTooManyRequests,
				Header: http.Header{"Retry-After": {tc.retryAfter}},
			})})
			cfg := testConfig(srv.URL())
			cfg.RetryWaitMax = tc.waitMax
			e, logs := newTestEngine(t, cfg)
			mustOK(t, e, chatRequest("ra", "hello"))
			if n := srv.Requests(); n != 2 {
				t.Errorf("server saw %d requests, want 2", n)
			}
			retries := logs.find("retrying request")
			if len(retries) != 1 {
				t.Fatalf("got %d retry logs, want 1: %v", len(retries), retries)
			}
			if got := retries[0].attrs["wait"]; got != tc.wantWait.String() {
				t.Errorf("retry waited %s, want %s", got, tc.wantWait)
			}
			if retries[0].level != slogDebug {
				t.Errorf("a 429 retry logged at %s, want DEBUG", retries[0].level)
			}
		})
	}
}

func TestRetryThenSuccess(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fault    openaitest.Fault
		timeout  time.Duration
		wantLast string
	}{
		{"500", openaitest.Fault{Status: 500}, 30 * time.Second, "status 500"},
		{"503", openaitest.Fault{Status: 503, Body: "overloaded"}, 30 * time.Second, "status 503: overloaded"},
		{"408", openaitest.Fault{Status: 408}, 30 * time.Second, "status 408"},
		{"connection closed", openaitest.Fault{Close: true}, 30 * time.Second, "EOF"},
		{"hang past attempt timeout", openaitest.Fault{Hang: true}, 300 * time.Millisecond, "attempt timed out after 300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, openaitest.Options{Fault: faultOnce(tc.fault)})
			cfg := testConfig(srv.URL())
			cfg.AttemptTimeout = tc.timeout
			e, logs := newTestEngine(t, cfg)
			resp := mustOK(t, e, chatRequest("retry", "hello world"))
			var body struct {
				Choices []struct {
					Message struct{ Content string } `json:"message"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(resp.Body, &body); err != nil || len(body.Choices) != 1 || body.Choices[0].Message.Content != "echo: hello world" {
				t.Errorf("body = %s (%v), want the echo", resp.Body, err)
			}
			if n := srv.Requests(); n != 2 {
				t.Errorf("server saw %d requests, want 2", n)
			}
			retries := logs.find("retrying request")
			if len(retries) != 1 {
				t.Fatalf("got %d retry logs, want 1", len(retries))
			}
			r := retries[0]
			if r.attrs[keyAttempt] != "1" || r.attrs[keyCustomID] != "retry" || r.attrs[keyURL] != srv.URL()+"/chat/completions" {
				t.Errorf("retry log = %v, want attempt 1, custom_id and url", r)
			}
			if !contains(r.attrs["last"], tc.wantLast) {
				t.Errorf("retry log last = %q, want it to contain %q", r.attrs["last"], tc.wantLast)
			}
		})
	}
}

func TestRefusalNotRetried(t *testing.T) {
	openAIBody := `{"error":{"message":"max_tokens is too large","type":"invalid_request_error","param":"max_tokens","code":null}}`
	for _, tc := range []struct {
		name     string
		status   int
		body     string
		wantBody string
	}{
		{"openai error object", 400, openAIBody, openAIBody},
		{"plain text", 404, "model not found\n",
			`{"error":{"message":"model not found","type":"invalid_request_error","param":null,"code":null}}`},
		{"old vllm error", 400, `{"object":"error","message":"context too long","type":"BadRequestError","param":null,"code":400}`,
			`{"error":{"message":"context too long","type":"BadRequestError","param":null,"code":null}}`},
		{"error string", 422, `{"error":"bad input"}`,
			`{"error":{"message":"bad input","type":"invalid_request_error","param":null,"code":null}}`},
		{"stand-in default", 403, "",
			`{"error":{"message":"injected fault: 403 Forbidden","type":"invalid_request_error","param":null,"code":null}}` + "\n"},
		{"not implemented", 501, "no embeddings here",
			`{"error":{"message":"no embeddings here","type":"invalid_request_error","param":null,"code":null}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, openaitest.Options{Fault: func(int64, *http.Request, []byte) openaitest.Fault {
				return openaitest.Fault{Status: tc.status, Body: tc.body}
			}})
			e, _ := newTestEngine(t, testConfig(srv.URL()))
			resp, err := do(t, e, chatRequest("refused", "hi"))
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if resp.StatusCode != tc.status {
				t.Errorf("status = %d, want %d", resp.StatusCode, tc.status)
			}
			if string(resp.Body) != tc.wantBody {
				t.Errorf("body =\n %s\nwant\n %s", resp.Body, tc.wantBody)
			}
			if n := srv.Requests(); n != 1 {
				t.Errorf("server saw %d requests, want 1 (no retry)", n)
			}
		})
	}
}

func TestRetriesExhausted(t *testing.T) {
	// One request always gets 500; between its attempts other requests
	// succeed, so the remote engine stays up and the request must fail with
	// engine.ErrUnavailable rather than wait.
	arrived := make(chan struct{})
	release := make(chan struct{})
	srv := startServer(t, openaitest.Options{Fault: func(_ int64, _ *http.Request, body []byte) openaitest.Fault {
		if bytes.Contains(body, []byte("always-500")) {
			arrived <- struct{}{}
			<-release
			return openaitest.Fault{Status: 500, Body: `{"error":{"message":"boom","type":"server_error"}}`}
		}
		return openaitest.Fault{}
	}})
	cfg := testConfig(srv.URL())
	cfg.MaxRetries = 3
	e, logs := newTestEngine(t, cfg)

	errc := make(chan error, 1)
	go func() {
		_, err := do(t, e, chatRequest("doomed", "always-500"))
		errc <- err
	}()
	for i := range cfg.MaxRetries + 1 {
		wait(t, arrived, fmt.Sprintf("attempt %d", i+1))
		mustOK(t, e, chatRequest(fmt.Sprintf("fine-%d", i), "fine"))
		release <- struct{}{}
	}
	err := <-errc
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("err = %v, want engine.ErrUnavailable", err)
	}
	for _, want := range []string{"status 500", "boom", "4 attempts", `"doomed"`, srv.URL()} {
		if !contains(err.Error(), want) {
			t.Errorf("err = %q, want it to mention %q", err, want)
		}
	}
	if n := srv.Requests(); n != 8 {
		t.Errorf("server saw %d requests, want 4 attempts + 4 others", n)
	}
	if e.Stats().Paused {
		t.Error("engine paused, want up")
	}
	if len(logs.find("request failed after retries")) != 1 {
		t.Error("no warning for the failed request")
	}
}

func TestOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("10 s outage")
	}
	srv := startServer(t, openaitest.Options{})
	cfg := testConfig(srv.URL())
	cfg.MaxRetries = 3
	cfg.DownAfter = 3
	cfg.RetryWaitMin = 10 * time.Millisecond
	cfg.RetryWaitMax = 100 * time.Millisecond
	cfg.ProbeInterval = 50 * time.Millisecond
	e, logs := newTestEngine(t, cfg)
	mustOK(t, e, chatRequest("before", "warm up"))

	paused := logs.waitFor("remote engine unreachable; batches paused, probing")
	resumed := logs.waitFor("remote engine back; resuming")
	srv.Stop()
	restarted := make(chan error, 1)
	time.AfterFunc(10*time.Second, func() { restarted <- srv.Restart() })

	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	send := func(i int) {
		wg.Go(func() {
			resp, err := do(t, e, chatRequest(fmt.Sprintf("outage-%d", i), fmt.Sprintf("request %d", i)))
			switch {
			case err != nil:
				errs[i] = err
			case resp.StatusCode != 200:
				errs[i] = fmt.Errorf("status %d: %s", resp.StatusCode, resp.Body)
			}
		})
	}
	for i := range n / 2 { // these fail their retries and are held
		send(i)
	}
	wait(t, paused, "the engine to pause")
	if !e.Stats().Paused {
		t.Error("Stats().Paused = false during the outage")
	}
	for i := n / 2; i < n; i++ { // these wait before sending
		send(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	if err := <-restarted; err != nil {
		t.Fatalf("restart: %v", err)
	}
	wait(t, resumed, "the engine to resume")
	if st := e.Stats(); st.Paused || st.InFlight != 0 {
		t.Errorf("Stats after the outage = %+v, want not paused, none in flight", st)
	}
	if got := srv.Requests(); got != n+1 {
		t.Errorf("server saw %d requests, want %d", got, n+1)
	}
	if w := logs.find("remote engine unreachable; batches paused, probing"); len(w) != 1 || w[0].level != slogWarn {
		t.Errorf("pause logged %v, want once at WARN", w)
	}
	if w := logs.find("remote engine back; resuming"); len(w) != 1 || w[0].level != slogInfo {
		t.Errorf("resume logged %v, want once at INFO", w)
	}
}

func TestProbeUpButRequestsFail(t *testing.T) {
	// The server answers the probe but fails every request, and no other
	// request is answered: that is an outage, not this request's fault, so
	// the request is retried far past MaxRetries and succeeds once the
	// server recovers.
	var failing atomic.Bool
	failing.Store(true)
	srv := startServer(t, openaitest.Options{Fault: func(int64, *http.Request, []byte) openaitest.Fault {
		if failing.Load() {
			return openaitest.Fault{Status: 500}
		}
		return openaitest.Fault{}
	}})
	cfg := testConfig(srv.URL())
	cfg.MaxRetries = 1
	cfg.DownAfter = 2
	cfg.ProbeInterval = 5 * time.Millisecond
	e, _ := newTestEngine(t, cfg)
	errc := make(chan error, 1)
	go func() {
		_, err := do(t, e, chatRequest("flap", "hi"))
		errc <- err
	}()
	far := int64(10 * (cfg.MaxRetries + 1))
	waitUntil(t, "the server to fail the request many times", func() bool { return srv.Requests() >= far })
	failing.Store(false)
	if err := <-errc; err != nil {
		t.Fatalf("Do: %v", err)
	}
}

func TestLoneRequestHeldInOutage(t *testing.T) {
	// A lone request that fails every attempt with no answer anywhere
	// takes the engine down and waits rather than failing.
	srv := startServer(t, openaitest.Options{})
	cfg := testConfig(srv.URL())
	cfg.MaxRetries = 1
	cfg.DownAfter = 4
	e, logs := newTestEngine(t, cfg)
	paused := logs.waitFor("remote engine unreachable; batches paused, probing")
	srv.Stop()
	errc := make(chan error, 1)
	go func() {
		_, err := do(t, e, chatRequest("lone", "hi"))
		errc <- err
	}()
	wait(t, paused, "the engine to pause")
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Do: %v", err)
	}
}

func TestCloseReleasesHeldCalls(t *testing.T) {
	srv := startServer(t, openaitest.Options{})
	cfg := testConfig(srv.URL())
	cfg.DownAfter = 1
	cfg.MaxRetries = 0
	e, logs := newTestEngine(t, cfg)
	paused := logs.waitFor("remote engine unreachable; batches paused, probing")
	srv.Stop()
	errc := make(chan error, 2)
	go func() {
		_, err := do(t, e, chatRequest("held", "hi"))
		errc <- err
	}()
	wait(t, paused, "the engine to pause")
	go func() { // held at the gate
		_, err := do(t, e, chatRequest("gate", "hi"))
		errc <- err
	}()
	ctx, cancel := context.WithTimeout(t.Context(), testDeadline)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range 2 {
		if err := <-errc; !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("held Do after Close: err = %v, want engine.ErrUnavailable", err)
		}
	}
	if _, err := e.Do(ctx, chatRequest("late", "hi")); !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("Do after Close: err = %v, want engine.ErrUnavailable", err)
	}
}

func TestCancelWhileHeld(t *testing.T) {
	srv := startServer(t, openaitest.Options{})
	cfg := testConfig(srv.URL())
	cfg.DownAfter = 1
	cfg.MaxRetries = 0
	e, logs := newTestEngine(t, cfg)
	paused := logs.waitFor("remote engine unreachable; batches paused, probing")
	srv.Stop()
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := e.Do(ctx, chatRequest("held", "hi"))
		errc <- err
	}()
	wait(t, paused, "the engine to pause")
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestDoBeforeOpen(t *testing.T) {
	e, err := New(testConfig("http://127.0.0.1:1/v1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Do(t.Context(), chatRequest("early", "hi")); !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("Do before Open: err = %v, want engine.ErrUnavailable", err)
	}
	if err := e.Close(t.Context()); err != nil {
		t.Errorf("Close unopened: %v", err)
	}
	if err := e.Open(t.Context()); err == nil {
		t.Error("Open after Close succeeded")
	}
}

func TestReplicas(t *testing.T) {
	a := startServer(t, openaitest.Options{})
	b := startServer(t, openaitest.Options{})
	e, _ := newTestEngine(t, testConfig(a.URL(), b.URL()))
	for i := range 10 {
		mustOK(t, e, chatRequest(fmt.Sprint(i), "hi"))
	}
	// One at a time every replica has none in flight: round robin.
	if a.Requests() != 5 || b.Requests() != 5 {
		t.Errorf("replicas saw %d and %d requests, want 5 and 5", a.Requests(), b.Requests())
	}

	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() { mustOK(t, e, chatRequest(fmt.Sprint("c", i), "hi")) })
	}
	wg.Wait()
	if a.Requests() == 5 || b.Requests() == 5 || a.Requests()+b.Requests() != 42 {
		t.Errorf("replicas saw %d and %d requests, want both used, 42 in all", a.Requests(), b.Requests())
	}
}

func TestDeadReplicaSkipped(t *testing.T) {
	live := startServer(t, openaitest.Options{})
	dead := startServer(t, openaitest.Options{})
	dead.Stop()
	cfg := testConfig(dead.URL(), live.URL())
	cfg.DownAfter = 2
	e, logs := newTestEngine(t, cfg)
	skipped := logs.waitFor("replica unreachable; sending to the others, probing")
	for i := range 10 {
		mustOK(t, e, chatRequest(fmt.Sprint(i), "hi"))
	}
	wait(t, skipped, "the dead replica to be marked down")
	if e.Stats().Paused {
		t.Error("engine paused with a live replica")
	}
	if live.Requests() != 10 {
		t.Errorf("live replica saw %d requests, want 10", live.Requests())
	}

	back := logs.waitFor("replica back")
	if err := dead.Restart(); err != nil {
		t.Fatal(err)
	}
	wait(t, back, "the probe to find the replica back")
}

func TestMaxInFlight(t *testing.T) {
	var (
		mu       sync.Mutex
		cur, top int
	)
	arrived := make(chan struct{}, 8)
	gate := make(chan struct{})
	srv := startServer(t, openaitest.Options{Fault: func(int64, *http.Request, []byte) openaitest.Fault {
		mu.Lock()
		cur++
		top = max(top, cur)
		mu.Unlock()
		arrived <- struct{}{}
		<-gate
		mu.Lock()
		cur--
		mu.Unlock()
		return openaitest.Fault{}
	}})
	cfg := testConfig(srv.URL())
	cfg.MaxInFlight = 2
	e, _ := newTestEngine(t, cfg)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() { mustOK(t, e, chatRequest(fmt.Sprint(i), "hi")) })
	}
	wait(t, arrived, "the first request")
	wait(t, arrived, "the second request")
	if got := e.Stats().InFlight; got != 2 {
		t.Errorf("Stats().InFlight = %d, want 2", got)
	}
	close(gate)
	wg.Wait()
	if top > 2 {
		t.Errorf("server saw %d requests at once, want at most 2", top)
	}
}

func TestModelOverride(t *testing.T) {
	var seen atomic.Value
	srv := startServer(t, openaitest.Options{Fault: func(_ int64, _ *http.Request, body []byte) openaitest.Fault {
		seen.Store(string(body))
		return openaitest.Fault{}
	}})
	cfg := testConfig(srv.URL())
	cfg.Model = "served/model"
	e, _ := newTestEngine(t, cfg)
	body := `{"messages": [{"role":"user","content":"hi","model":"inner"}], "model" : "asked", "max_tokens":5}`
	req := &engine.Request{CustomID: "m", Endpoint: engine.EndpointChat, Body: json.RawMessage(body)}
	resp := mustOK(t, e, req)
	want := `{"messages": [{"role":"user","content":"hi","model":"inner"}], "model" : "served/model", "max_tokens":5}`
	if got := seen.Load(); got != want {
		t.Errorf("server got\n %s\nwant\n %s", got, want)
	}
	if string(req.Body) != body {
		t.Errorf("request body changed to %s", req.Body)
	}
	var out struct{ Model string }
	if err := json.Unmarshal(resp.Body, &out); err != nil || out.Model != "served/model" {
		t.Errorf("response model = %q (%v), want served/model", out.Model, err)
	}
}

func TestBodyUnchangedWithoutModel(t *testing.T) {
	var seen atomic.Value
	srv := startServer(t, openaitest.Options{Fault: func(_ int64, _ *http.Request, body []byte) openaitest.Fault {
		seen.Store(string(body))
		return openaitest.Fault{}
	}})
	e, _ := newTestEngine(t, testConfig(srv.URL()))
	body := "{ \"model\":\"m\",\n \"messages\":[{\"role\":\"user\",\"content\":\"x\"}], \"temperature\": 0.50 }"
	mustOK(t, e, &engine.Request{CustomID: "b", Endpoint: engine.EndpointChat, Body: json.RawMessage(body)})
	if got := seen.Load(); got != body {
		t.Errorf("server got %q, want the bytes as given %q", got, body)
	}
}

func TestAuthorization(t *testing.T) {
	const key = "sk-very-secret-key"
	for _, tc := range []struct {
		name, key, want string
	}{
		{"with key", key, "Bearer " + key},
		{"without key", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var headers []string
			srv := startServer(t, openaitest.Options{Fault: func(n int64, r *http.Request, _ []byte) openaitest.Fault {
				mu.Lock()
				headers = append(headers, r.Header.Get("Authorization"))
				mu.Unlock()
				if n == 1 {
					return openaitest.Fault{Status: 500}
				}
				return openaitest.Fault{}
			}})
			cfg := testConfig(srv.URL())
			cfg.APIKey = tc.key
			e, logs := newTestEngine(t, cfg)
			mustOK(t, e, chatRequest("auth", "hi"))
			mu.Lock()
			defer mu.Unlock()
			if len(headers) != 2 || headers[0] != tc.want || headers[1] != tc.want {
				t.Errorf("Authorization headers = %q, want %q on both attempts", headers, tc.want)
			}
			for _, r := range logs.all() {
				if strings.Contains(r.String(), key) {
					t.Errorf("log leaks the API key: %v", r)
				}
			}
		})
	}
}

func TestRequestID(t *testing.T) {
	srv := startServer(t, openaitest.Options{Fault: func(_ int64, _ *http.Request, body []byte) openaitest.Fault {
		if bytes.Contains(body, []byte("with-id")) {
			return openaitest.Fault{Header: http.Header{"X-Request-Id": {"server-id-1"}}}
		}
		return openaitest.Fault{}
	}})
	e, _ := newTestEngine(t, testConfig(srv.URL()))
	if got := mustOK(t, e, chatRequest("a", "with-id")).RequestID; got != "server-id-1" {
		t.Errorf("RequestID = %q, want the server's", got)
	}
	first := mustOK(t, e, chatRequest("a", "no id")).RequestID
	if !regexp.MustCompile(`^req_[0-9a-f]{24}$`).MatchString(first) {
		t.Errorf("generated RequestID = %q, want req_ and 24 hex digits", first)
	}
	if again := mustOK(t, e, chatRequest("a", "no id")).RequestID; again != first {
		t.Errorf("RequestID not deterministic: %q then %q", first, again)
	}
	if other := mustOK(t, e, chatRequest("b", "no id")).RequestID; other == first {
		t.Errorf("custom_ids a and b share RequestID %q", other)
	}
}

func TestInvalidJSONSuccess(t *testing.T) {
	// A 2xx whose body is not JSON is the server failing, not an answer:
	// it is retried like a 5xx, with a warning naming the request.
	for _, tc := range []struct {
		name  string
		fault openaitest.Fault
	}{
		{"not json", openaitest.Fault{Status: 200, Body: "not json"}},
		{"cut short", openaitest.Fault{Truncate: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, openaitest.Options{Fault: faultOnce(tc.fault)})
			e, logs := newTestEngine(t, testConfig(srv.URL()))
			mustOK(t, e, chatRequest("bad", "hi"))
			if n := srv.Requests(); n != 2 {
				t.Errorf("server saw %d requests, want 2", n)
			}
			w := logs.find("success response is not JSON; retrying")
			if len(w) != 1 || w[0].level != slogWarn || w[0].attrs[keyCustomID] != "bad" {
				t.Errorf("warnings = %v, want one WARN with custom_id bad", w)
			}
		})
	}
}

func TestWholeBodyNotJSONIsAnswered(t *testing.T) {
	// A 2xx whose whole body is not JSON is the server's answer to this
	// request, not an outage: it is a strike each time, and after
	// MaxRetries it is returned as it is (the pipeline fails the request
	// with it), even with nothing else running and nothing to check the
	// server with. Before, a body nested deeper than encoding/json reads
	// was sent again for ever.
	deep := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	for _, tc := range []struct{ name, body string }{
		{"100k deep", deep},
		{"100k deep object", strings.Repeat(`{"a":`, 100_000) + "1" + strings.Repeat("}", 100_000)},
		{"not json", "not json"},
		{"data after the value", `{"object":"chat.completion"} and more`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, openaitest.Options{Fault: func(int64, *http.Request, []byte) openaitest.Fault {
				return openaitest.Fault{Status: 200, Body: tc.body}
			}})
			cfg := testConfig(srv.URL())
			cfg.MaxRetries = 2
			e, logs := newTestEngine(t, cfg)
			resp, err := do(t, e, chatRequest("deep", "hi"))
			if err != nil {
				t.Fatalf("Do: %v, want the answer", err)
			}
			if resp.StatusCode != 200 || string(resp.Body) != tc.body {
				t.Errorf("answer: status %d, body of %d bytes, want 200 and the server's %d bytes", resp.StatusCode, len(resp.Body), len(tc.body))
			}
			if n := srv.Requests(); n != int64(cfg.MaxRetries+1) {
				t.Errorf("server saw %d requests, want %d", n, cfg.MaxRetries+1)
			}
			if w := logs.find("success response is not JSON; retrying"); len(w) != cfg.MaxRetries {
				t.Errorf("%d retry warnings, want %d", len(w), cfg.MaxRetries)
			}
			if w := logs.find("success response is not JSON; answering with it"); len(w) != 1 || w[0].attrs[keyCustomID] != "deep" {
				t.Errorf("warnings = %v, want one WARN with custom_id deep", w)
			}
			if e.Stats().Paused {
				t.Error("the engine paused: a whole answer was taken for an outage")
			}
			if b := e.samples.get(engine.EndpointChat); b != nil {
				t.Errorf("the request was kept as a known-good sample: %s", b)
			}
		})
	}
}

func TestURLs(t *testing.T) {
	for _, tc := range []struct{ base, endpoint, want string }{
		{"http://h:8000/v1", "/v1/chat/completions", "http://h:8000/v1/chat/completions"},
		{"http://h:8000/v1/", "/v1/embeddings", "http://h:8000/v1/embeddings"},
		{"http://h:8000", "/v1/completions", "http://h:8000/v1/completions"},
		{"https://h/proxy/openai", "/v1/models", "https://h/proxy/openai/v1/models"},
		{"https://h/proxy/v1", "/v1/models", "https://h/proxy/v1/models"},
	} {
		u, err := parseBaseURL(tc.base)
		if err != nil {
			t.Fatalf("parseBaseURL(%q): %v", tc.base, err)
		}
		if got := endpointURL(u.String(), tc.endpoint); got != tc.want {
			t.Errorf("endpointURL(%q, %q) = %q, want %q", tc.base, tc.endpoint, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	valid := DefaultConfig()
	valid.URLs = []string{"http://localhost:8000/v1"}
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no urls", func(c *Config) { c.URLs = nil }, "openai.urls: at least one base URL is required"},
		{"bad scheme", func(c *Config) { c.URLs = []string{"http://a/v1", "ftp://b/v1"} }, `openai.urls[1]: base URL "ftp://b/v1": scheme "ftp" is not http or https`},
		{"no host", func(c *Config) { c.URLs = []string{"http:///v1"} }, "openai.urls[0]: base URL"},
		{"query", func(c *Config) { c.URLs = []string{"http://a/v1?x=1"} }, "query"},
		{"max in flight", func(c *Config) { c.MaxInFlight = 0 }, "openai.max_inflight"},
		{"max retries", func(c *Config) { c.MaxRetries = -1 }, "openai.max_retries"},
		{"wait min", func(c *Config) { c.RetryWaitMin = -1 }, "openai.retry_wait_min"},
		{"wait max", func(c *Config) { c.RetryWaitMax = 0 }, "openai.retry_wait_max"},
		{"wait order", func(c *Config) { c.RetryWaitMax = c.RetryWaitMin / 2 }, "openai.retry_wait_max"},
		{"attempt timeout", func(c *Config) { c.AttemptTimeout = 0 }, "openai.attempt_timeout"},
		{"probe interval", func(c *Config) { c.ProbeInterval = 0 }, "openai.probe_interval"},
		{"down after", func(c *Config) { c.DownAfter = 0 }, "openai.down_after"},
		{"hang after", func(c *Config) { c.HangAfter = 0 }, "openai.hang_after"},
		{"answer cap", func(c *Config) { c.MaxAnswerBytes = 0 }, "openai.max_answer_bytes: must be at least 1 KiB"},
		{"answer budget", func(c *Config) { c.MaxAnswerBytesInFlight = c.MaxAnswerBytes - 1 }, "openai.max_answer_bytes_inflight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid
			c.URLs = append([]string(nil), valid.URLs...)
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
			if _, nerr := New(c); nerr == nil {
				t.Error("New accepted an invalid config")
			}
		})
	}
}

func BenchmarkDo(b *testing.B) {
	srv := openaitest.NewServer(openaitest.Options{})
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	cfg := testConfig(srv.URL())
	cfg.Logger = slogDiscard
	e, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Open(b.Context()); err != nil {
		b.Fatal(err)
	}
	defer e.Close(context.Background())
	req := chatRequest("bench", "the quick brown fox jumps over the lazy dog")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := e.Do(context.Background(), req)
			if err != nil || resp.StatusCode != 200 {
				b.Errorf("Do: %v", err)
				return
			}
		}
	})
}
