package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// A request the server fails with nothing else running gives no evidence
// from other requests (see call.checkRetry), so on its own it cannot be told
// from an outage. The engine then re-sends a known-good request: the body of
// a recent request of the same endpoint that the server answered with a 2xx.
// If the server answers that, the failure is the request's own.
//
// The known-good body is one this daemon already sent, and the answer to the
// health check is read and discarded: no caller ever sees it.

// HealthCheckHeader marks a health check ("true"), so a server's logs and
// metrics can leave it out: it is not a request of any batch.
const HealthCheckHeader = "X-Batchd-Health-Check"

const (
	// maxSampleBytes bounds a body kept for health checks.
	maxSampleBytes = 64 << 10
	// sampleRefresh is how long a kept body serves before a newer one
	// replaces it, so the copy is not made for every success.
	sampleRefresh = time.Minute
)

// samples keeps, per endpoint, the body of one recent request the remote
// engine answered with a 2xx.
type samples struct {
	mu     sync.Mutex
	bodies map[string]sample
}

type sample struct {
	body []byte // never changed once kept: health checks read it unlocked
	kept time.Time
}

// keep records that the server answered body, sent to endpoint, with a 2xx.
// Bodies over maxSampleBytes are not kept.
func (s *samples) keep(endpoint string, body []byte, now time.Time) {
	if len(body) > maxSampleBytes {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.bodies[endpoint]; ok && now.Sub(old.kept) < sampleRefresh {
		return
	}
	if s.bodies == nil {
		s.bodies = make(map[string]sample)
	}
	s.bodies[endpoint] = sample{body: bytes.Clone(body), kept: now}
}

// get returns the kept body for endpoint, or nil.
func (s *samples) get(endpoint string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies[endpoint].body
}

// healthCheck sends body, a known-good request for endpoint, to r and
// reports whether r served it (a 2xx with a JSON body, or a refusal, as
// pool.served counts), with a summary of the answer for logs. A failed,
// throttled or cut-off check is not evidence that r is up. The answer is
// discarded.
func (e *Engine) healthCheck(ctx context.Context, r *replica, endpoint string, body []byte) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.AttemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpointURL(r.base, endpoint), bytes.NewReader(body))
	if err != nil {
		return false, fmt.Sprintf("new health check: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "batchd")
	req.Header.Set(HealthCheckHeader, "true")
	if e.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+e.cfg.APIKey)
	}
	// Straight to the shared connection pool: a health check is no attempt
	// of any request (pool.pick, Stats and the hang watchdog never see it).
	resp, err := e.prober.client.Do(req)
	var answer []byte
	if err == nil {
		answer, err = io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
		_ = resp.Body.Close()
		if err == nil && int64(len(answer)) > maxResponseBytes {
			err = fmt.Errorf("response body over %d bytes", maxResponseBytes)
		}
	}
	if err != nil {
		return false, err.Error()
	}
	got := fmt.Sprintf("status %d", resp.StatusCode)
	if resp.StatusCode < 300 && !json.Valid(answer) {
		got += " with a body that is not JSON"
	}
	if serverFailed(resp, answer, nil) || throttled(resp) {
		return false, got
	}
	e.pool.answered(r, false) // it is up, but this serves no other request
	return true, got
}
