package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// A request the server fails while it serves no other request (the last of
// a batch, or every request still in flight failing) gives no evidence from
// other requests (see call.checkRetry), so on its own it cannot be told from
// an outage. The engine then re-sends a known-good request: the body of a
// recent request of the same endpoint that the server answered with a 2xx.
// If the server answers that, the failure is the request's own.
//
// Checks are shared (see checks): at most one is in flight per replica, and
// its result serves every request that failed on that replica before it
// ended, so N requests failing together cost one check per round of
// attempts, not N.
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
	var jsonBody bool
	if err == nil {
		// Read within the answer budget like any answer, and dropped at once.
		var answer []byte
		var held int64
		answer, held, err = e.answers.read(ctx, resp.Body, resp.ContentLength)
		_ = resp.Body.Close()
		jsonBody = err == nil && json.Valid(answer)
		e.answers.release(held)
	}
	if err != nil {
		return false, err.Error()
	}
	got := fmt.Sprintf("status %d", resp.StatusCode)
	if resp.StatusCode < 300 && !jsonBody {
		got += " with a body that is not JSON"
	}
	if serverFailed(resp, jsonBody, nil) || throttled(resp) {
		return false, got
	}
	e.pool.answered(r, false) // it is up, but this serves no other request
	return true, got
}

// checks shares health checks among the requests failing on each replica.
type checks struct {
	mu    sync.Mutex
	state []checkState // by replica.idx; never resized
}

type checkState struct {
	ended   uint64        // checks ended on the replica, ever
	up      bool          // whether the latest ended check was served
	running chan struct{} // closed when the check in flight ends; nil if none
}

func newChecks(replicas int) *checks {
	return &checks{state: make([]checkState, replicas)}
}

// ended returns, in dst, how many checks have ended on each replica so far.
func (cs *checks) ended(dst []uint64) []uint64 {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	dst = dst[:0]
	for _, st := range cs.state {
		dst = append(dst, st.ended)
	}
	return dst
}

// result returns whether replica idx served a health check that ended
// after since (the count ended then, from ended): the latest one if one
// has ended since, else the one in flight, else one started now that runs
// send in its own goroutine (tracked by wg), so a caller that gives up does
// not cut it short for the others. ok is false when ctx ended first, or
// when no check ended since, none is in flight and send is nil (there is
// nothing to check with).
func (cs *checks) result(ctx context.Context, idx int, since uint64, send func() bool, wg *sync.WaitGroup) (up, ok bool) {
	cs.mu.Lock()
	st := &cs.state[idx]
	if st.ended > since {
		defer cs.mu.Unlock()
		return st.up, true
	}
	done := st.running
	if done == nil {
		if send == nil {
			cs.mu.Unlock()
			return false, false
		}
		done = make(chan struct{})
		st.running = done
		wg.Go(func() {
			up := send()
			cs.mu.Lock()
			st.ended++
			st.up = up
			st.running = nil
			cs.mu.Unlock()
			close(done)
		})
	}
	cs.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return false, false
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return st.up, true
}
