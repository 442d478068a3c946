package openai

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// replica is one base URL. Its fields other than base and logURL are
// guarded by pool.mu.
type replica struct {
	base   string // no trailing slash, may hold user info
	logURL string // base with any password redacted
	idx    int    // in pool.replicas

	inflight int    // attempts being sent to it now
	fails    int    // consecutive failed attempts
	served   uint64 // attempts answered with a 2xx or a refusal, ever
	down     bool   // skipped by pick while another replica is up
}

// pool chooses replicas and tracks whether the remote engine as a whole is
// up. A single mutex guards all of it: the critical sections are a few
// comparisons per attempt.
type pool struct {
	replicas  []*replica
	downAfter int
	logger    *slog.Logger

	mu    sync.Mutex
	next  int  // round-robin cursor for ties
	fails int  // consecutive failed attempts across all replicas
	down  bool // the engine is wholly down: callers are held
	// outage: the engine went down and no request has been answered
	// since. A probe (GET /models) ends down, so held callers try again,
	// but not outage: a server can answer its probe and fail every
	// request (5xx), and batches are paused until one is answered.
	outage bool
	up     chan struct{} // closed while up; a fresh open one while down

	// For the hang watchdog: attempts on the wire, and since when the
	// engine owes an answer: set by the first attempt sent after the
	// engine last reacted, restarted by every response byte (or refused or
	// reset connection), cleared when nothing is left waiting. An attempt
	// cut off by its timeout does not restart it.
	wire    int
	waiting time.Time
}

func newPool(bases []string, logURLs []string, downAfter int, logger *slog.Logger) *pool {
	p := &pool{downAfter: downAfter, logger: logger, up: make(chan struct{})}
	close(p.up)
	for i, b := range bases {
		p.replicas = append(p.replicas, &replica{base: b, logURL: logURLs[i], idx: i})
	}
	return p
}

// pick returns the replica with the fewest attempts in flight among those
// not marked down (all of them if every one is), ties broken round robin,
// and counts an attempt in flight on it. The caller must call release.
func (p *pool) pick() *replica {
	p.mu.Lock()
	defer p.mu.Unlock()
	anyUp := false
	for _, r := range p.replicas {
		if !r.down {
			anyUp = true
			break
		}
	}
	n := len(p.replicas)
	best := -1
	for i := range n {
		idx := (p.next + i) % n
		r := p.replicas[idx]
		if anyUp && r.down {
			continue
		}
		if best < 0 || r.inflight < p.replicas[best].inflight {
			best = idx
		}
	}
	p.next = (best + 1) % n
	r := p.replicas[best]
	r.inflight++
	if p.wire == 0 && p.waiting.IsZero() {
		p.waiting = time.Now()
	}
	p.wire++
	return r
}

// release ends an attempt on r. reacted says the engine reacted to it (any
// response byte, or a refused or reset connection); an attempt cut off by
// its timeout or its caller did not.
func (p *pool) release(r *replica, reacted bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r.inflight--
	p.wire--
	if reacted && p.wire == 0 {
		p.waiting = time.Time{}
	}
}

// heard records that the engine reacted to an attempt still on the wire
// (a response byte arrived): whatever else is on the wire waits from now.
func (p *pool) heard() {
	p.mu.Lock()
	p.waiting = time.Now()
	p.mu.Unlock()
}

// idle records that no request is in flight: nothing waits for the engine.
func (p *pool) idle() {
	p.mu.Lock()
	if p.wire == 0 {
		p.waiting = time.Time{}
	}
	p.mu.Unlock()
}

// waitingFor returns how long the engine has owed an answer (see
// pool.waiting), and the attempts on the wire.
func (p *pool) waitingFor(now time.Time) (time.Duration, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting.IsZero() {
		return 0, p.wire
	}
	return now.Sub(p.waiting), p.wire
}

// answered records that r answered an attempt (any status but a retryable
// 5xx): the server is alive, so a down engine or replica is up again.
// served says the answer was a 2xx or a refusal, not a 408 or 429.
func (p *pool) answered(r *replica, served bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if served {
		r.served++
	}
	p.markUpLocked(r, "request")
}

// served returns, in dst, how many attempts each replica has answered with
// a 2xx or a refusal so far.
func (p *pool) served(dst []uint64) []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	dst = dst[:0]
	for _, r := range p.replicas {
		dst = append(dst, r.served)
	}
	return dst
}

// servedSince reports whether r has answered an attempt with a 2xx or a
// refusal since seen was taken by served.
func (p *pool) servedSince(r *replica, seen []uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return r.served > seen[r.idx]
}

// failed records a failed attempt on r (transport error, timeout, 5xx, a
// 2xx that is not JSON) and marks r, then the engine, down after downAfter
// consecutive failures.
func (p *pool) failed(r *replica, cause string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r.fails++
	p.fails++
	if !r.down && r.fails >= p.downAfter && len(p.replicas) > 1 {
		r.down = true
		p.logger.Warn("replica unreachable; sending to the others, probing",
			keyURL, r.logURL, "failed_attempts", r.fails, "last_error", cause)
	}
	if !p.down && p.fails >= p.downAfter {
		p.goDownLocked(cause)
	}
}

func (p *pool) goDownLocked(cause string) {
	p.down = true
	p.up = make(chan struct{})
	if p.outage { // a probe answered, the requests still fail: logged already
		p.logger.Debug("remote engine still failing requests after its probe answered; held again",
			"failed_attempts", p.fails, "last_error", cause)
		return
	}
	p.outage = true
	p.logger.Warn("remote engine unreachable; batches paused, probing",
		"failed_attempts", p.fails, "last_error", cause)
}

// markUpLocked clears the failure counts of r and, if the engine was down,
// releases everyone waiting for it. how says what showed it is up.
func (p *pool) markUpLocked(r *replica, how string) {
	r.fails = 0
	p.fails = 0
	if r.down {
		r.down = false
		p.logger.Info("replica back", keyURL, r.logURL, "seen_by", how)
	}
	if p.down {
		p.down = false
		close(p.up)
	}
	switch {
	case !p.outage:
	case how == seenByProbe:
		p.logger.Debug("remote engine answers its probe; retrying the held requests", keyURL, r.logURL)
	default:
		p.outage = false
		p.logger.Info("remote engine back; resuming", keyURL, r.logURL, "seen_by", how)
	}
}

// seenByProbe is markUpLocked's how for a probe: it releases held callers
// but does not end an outage (see pool.outage).
const seenByProbe = "probe"

// paused reports whether batches are paused for an outage: the engine is
// down, or only a probe has answered since it was and busy says requests
// still wait for an answer. With none waiting, a probe's answer is all
// there is to go on.
func (p *pool) paused(busy bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down || p.outage && busy
}

// isDown reports whether the engine is wholly down.
func (p *pool) isDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down
}

// waitUp returns at once while the engine is up, and otherwise waits for it
// to come back, ctx to be done (ctx.Err()) or stop to close (errStop). It
// reports whether it waited.
func (p *pool) waitUp(ctx context.Context, stop <-chan struct{}, errStop error) (bool, error) {
	p.mu.Lock()
	down, up := p.down, p.up
	p.mu.Unlock()
	if !down {
		return false, nil
	}
	select {
	case <-up:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	case <-stop:
		return true, errStop
	}
}

// probeTargets returns the replicas to probe now: all of them while the
// engine is down, otherwise those marked down.
func (p *pool) probeTargets() []*replica {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*replica
	for _, r := range p.replicas {
		if p.down || r.down {
			out = append(out, r)
		}
	}
	return out
}

// prober checks replicas with GET {base}/models.
type prober struct {
	pool     *pool
	client   *http.Client
	apiKey   string
	interval time.Duration
	timeout  time.Duration
	logger   *slog.Logger
}

// run probes every interval until ctx is done.
func (pr *prober) run(ctx context.Context) {
	t := time.NewTicker(pr.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		targets := pr.pool.probeTargets()
		var wg sync.WaitGroup
		for _, r := range targets {
			wg.Go(func() {
				if err := pr.probe(ctx, r); err != nil {
					pr.logger.Debug("probe failed", keyURL, r.logURL, "error", err)
					return
				}
				pr.pool.mu.Lock()
				pr.pool.markUpLocked(r, seenByProbe)
				pr.pool.mu.Unlock()
			})
		}
		wg.Wait()
	}
}

// probe returns nil when r answers GET {base}/models with a status below 500.
func (pr *prober) probe(ctx context.Context, r *replica) error {
	ctx, cancel := context.WithTimeout(ctx, pr.timeout)
	defer cancel()
	u := endpointURL(r.base, "/v1/models")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("new probe request: %w", err)
	}
	if pr.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+pr.apiKey)
	}
	resp, err := pr.client.Do(req)
	if err != nil {
		return fmt.Errorf("get %s/models: %w", r.logURL, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if resp.StatusCode >= 500 {
		return fmt.Errorf("get %s/models: status %d", r.logURL, resp.StatusCode)
	}
	return nil
}
