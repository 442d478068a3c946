package openai

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// backoff returns how long to wait before retry number attempt+1 (attempt
// is 0 for the wait after the first try).
//
// Without a usable Retry-After it is exponential from min, capped at max,
// with equal jitter: half the step is fixed and half is random, so a crowd
// of callers retrying together spreads out but none retries at once. A
// Retry-After header (delay-seconds or an HTTP date) is honoured as given
// but clamped to max: go-retryablehttp's own backoff would sleep an hour on
// "Retry-After: 3600". rnd(n) must return a value in [0, n).
func backoff(min, max time.Duration, attempt int, resp *http.Response, now time.Time, rnd func(n int64) int64) time.Duration {
	if resp != nil {
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), now); ok {
			return clamp(d, 0, max)
		}
	}
	step := min
	for i := 0; i < attempt && step < max; i++ {
		step *= 2
	}
	step = clamp(step, min, max)
	half := step / 2
	if half <= 0 {
		return step
	}
	return step - half + time.Duration(rnd(int64(half)+1))
}

// retryAfter parses a Retry-After value: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		// Beyond this the Duration would overflow; max clamps it anyway.
		if secs > int64(time.Duration(1<<62)/time.Second) {
			return time.Duration(1 << 62), true
		}
		return time.Duration(secs) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

func clamp(d, lo, hi time.Duration) time.Duration {
	return min(max(d, lo), hi)
}

// throttled reports whether the server answered 408 or 429: it is alive
// but will not run the request now.
func throttled(resp *http.Response) bool {
	return resp != nil && (resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests)
}

// serverFailed reports whether an attempt counts against the health of the
// remote engine: it did not answer (transport error, timeout), answered
// with a server error, or answered 2xx with a body that is not JSON (cut
// short, or not the server speaking; jsonBody tells). 408, 429 and 4xx
// show a live server.
func serverFailed(resp *http.Response, jsonBody bool, err error) bool {
	switch {
	case err != nil:
		return true
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return !jsonBody
	}
	return resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented
}

// unreached reports whether err is a connection that could not be made
// (refused, no route, a dial that timed out): the request never reached the
// server.
func unreached(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// errAttemptTimeout marks an attempt cut off by Config.AttemptTimeout.
var errAttemptTimeout = errors.New("attempt timed out")

// ctxKey carries an attempt's *call through the HTTP request context, so the
// transport can record which replica it used.
type ctxKey struct{}

// attemptTransport sends each attempt of a call to a replica chosen per
// attempt, bounds the attempt with its own timeout and reads the whole
// answer, within the answer budget, before returning, so a body cut short,
// too large or still arriving when the time is up is a transport error
// (answerError) and retried.
//
// It deliberately has no CloseIdleConnections method: go-retryablehttp
// calls that on the client after every failed request, which would drop the
// pool shared by all requests.
type attemptTransport struct {
	base    http.RoundTripper
	pool    *pool
	timeout time.Duration
	answers *answerBudget
}

func (t *attemptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c, _ := req.Context().Value(ctxKey{}).(*call)
	if c == nil {
		return nil, errors.New("openai: request without call state")
	}
	c.release() // the previous attempt's answer, if still held
	r := t.pool.pick()
	reacted := false
	defer func() { t.pool.release(r, reacted) }()
	c.replica = r
	c.url = endpointURL(r.logURL, c.endpoint)

	parent := req.Context()
	ctx, cancel := context.WithTimeout(parent, t.timeout)
	defer cancel()
	out := req.Clone(ctx)
	u, err := url.Parse(endpointURL(r.base, c.endpoint))
	if err != nil {
		return nil, fmt.Errorf("build url for %s: %w", r.logURL, err)
	}
	out.URL = u
	out.Host = ""
	if u.User != nil && out.Header.Get("Authorization") == "" {
		pw, _ := u.User.Password()
		out.SetBasicAuth(u.User.Username(), pw)
	}

	resp, err := t.base.RoundTrip(out)
	if err == nil {
		t.pool.heard() // the status line and headers
		// A heard byte tells the hang watchdog the engine is alive; it
		// does not extend the attempt: ctx bounds the whole answer.
		hr := &heardReader{r: resp.Body, pool: t.pool}
		body, held, rerr := t.answers.read(ctx, hr, resp.ContentLength)
		_ = resp.Body.Close()
		if rerr == nil {
			reacted = true
			c.respBody, c.held = body, held
			resp.Body = io.NopCloser(bytes.NewReader(body))
			resp.ContentLength = int64(len(body))
			return resp, nil
		}
		err = &answerError{status: resp.StatusCode, got: hr.got, err: rerr}
	}
	if parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("%w after %s: %w", errAttemptTimeout, t.timeout, err)
	}
	reacted = parent.Err() == nil // refused, reset, cut short: not hung
	return nil, err
}

// heardReader tells the pool each time response bytes arrive, so a slow
// body is not taken for a hung engine.
type heardReader struct {
	r    io.Reader
	pool *pool
	got  int64 // bytes read
}

func (h *heardReader) Read(b []byte) (int, error) {
	n, err := h.r.Read(b)
	if n > 0 {
		h.got += int64(n)
		h.pool.heard()
	}
	return n, err
}
