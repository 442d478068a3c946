package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/hashicorp/go-retryablehttp"
)

var (
	_ engine.Engine        = (*Engine)(nil)
	_ engine.StatsReporter = (*Engine)(nil)
)

// Log keys.
const (
	keyAttempt  = "attempt"
	keyCustomID = "custom_id"
	keyURL      = "url"
)

const (
	// maxResponseBytes bounds one response body held in memory.
	maxResponseBytes = 256 << 20
	// maxResumes bounds how often one request waits out an outage and
	// starts its retries again. It only matters when a server answers the
	// probe but fails every request; a real outage costs a request one
	// resume however long it lasts.
	maxResumes = 3
)

var (
	errClosed  = fmt.Errorf("openai engine closed: %w", engine.ErrUnavailable)
	errNotOpen = fmt.Errorf("openai engine not open: %w", engine.ErrUnavailable)
)

// Engine sends requests to OpenAI-compatible servers. Create it with New,
// then Open it; Do is safe for concurrent use between Open and Close.
//
// Do holds callers while the remote engine is wholly down (see Config.DownAfter)
// and resumes them when a probe or a request gets an answer, so an outage
// pauses batches instead of failing their requests. A request fails with
// engine.ErrUnavailable only when its retries run out while other attempts
// show the remote engine is up.
type Engine struct {
	cfg       Config
	logger    *slog.Logger
	pool      *pool
	prober    *prober
	transport *http.Transport // shared connection pool
	client    *http.Client    // sends attempts through attemptTransport
	urlStub   string          // URL given to go-retryablehttp; the transport picks the replica
	sem       chan struct{}   // the in-flight window
	inflight  atomic.Int64
	retries   atomic.Int64 // attempts that repeated an earlier one (Stats)
	jitter    func(n int64) int64

	ctx    context.Context // private: cancelled by Close
	cancel context.CancelFunc

	mu        sync.Mutex
	opened    bool
	closed    bool
	calls     sync.WaitGroup // Do calls in progress
	probeDone chan struct{}
}

// New checks cfg and builds an Engine. It does no I/O.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "engine.openai")

	bases := make([]string, len(cfg.URLs))
	logURLs := make([]string, len(cfg.URLs))
	var stub string
	for i, raw := range cfg.URLs {
		u, _ := parseBaseURL(raw) // checked by Validate
		bases[i] = u.String()
		logURLs[i] = u.Redacted()
		if i == 0 {
			noUser := *u
			noUser.User = nil
			stub = noUser.String()
		}
	}

	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = cfg.MaxInFlight
	transport.MaxIdleConns = cfg.MaxInFlight * len(bases)

	p := newPool(bases, logURLs, cfg.DownAfter, logger)
	ctx, cancel := context.WithCancel(context.Background())
	e := &Engine{
		cfg:       cfg,
		logger:    logger,
		pool:      p,
		transport: transport,
		client: &http.Client{Transport: &attemptTransport{
			base: transport, pool: p, timeout: cfg.AttemptTimeout, maxBody: maxResponseBytes,
		}},
		urlStub: stub,
		sem:     make(chan struct{}, cfg.MaxInFlight),
		jitter:  rand.Int64N,
		ctx:     ctx,
		cancel:  cancel,
	}
	e.prober = &prober{
		pool:     p,
		client:   &http.Client{Transport: transport},
		apiKey:   cfg.APIKey,
		interval: cfg.ProbeInterval,
		timeout:  min(cfg.AttemptTimeout, max(cfg.ProbeInterval, 5*time.Second)),
		logger:   logger,
	}
	return e, nil
}

// Open starts the probe goroutine. An Engine is opened once.
func (e *Engine) Open(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return errors.New("open openai engine: already closed")
	case e.opened:
		return errors.New("open openai engine: already open")
	}
	e.opened = true
	e.probeDone = make(chan struct{})
	go func() {
		defer close(e.probeDone)
		e.prober.run(e.ctx)
	}()
	e.logger.Info("engine open", "replicas", len(e.pool.replicas), "max_in_flight", e.cfg.MaxInFlight)
	return nil
}

// Close cancels attempts in flight and held callers (their Do returns an
// error wrapping engine.ErrUnavailable), stops probing and waits for all of
// it, or for ctx.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	opened := e.opened
	e.mu.Unlock()

	e.cancel()
	done := make(chan struct{})
	go func() {
		e.calls.Wait()
		if opened {
			<-e.probeDone
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("close openai engine: %w", ctx.Err())
	}
	e.transport.CloseIdleConnections()
	return nil
}

// Stats reports the requests holding a slot of the in-flight window
// (sending, backing off or held by an outage) and whether callers are held.
func (e *Engine) Stats() engine.Stats {
	return engine.Stats{InFlight: int(e.inflight.Load()), Paused: e.pool.isDown(), Retries: e.retries.Load()}
}

// enter registers a Do call, refusing it before Open and after Close.
func (e *Engine) enter() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return errClosed
	case !e.opened:
		return errNotOpen
	}
	e.calls.Add(1)
	return nil
}

// Do sends req and returns the server's answer: a Response for a 2xx or a
// refusal (4xx but 408/429, and 501, whose body is always an OpenAI error
// object), an error wrapping engine.ErrUnavailable when retries run out
// while the remote engine is up (or a 2xx body is not JSON, or the engine is
// closed), or ctx.Err().
//
// While the remote engine is down, Do waits before sending, and a request
// whose retries run out waits for the engine to come back and starts its
// retries again (at most maxResumes times). Close ends those waits with
// engine.ErrUnavailable, so callers should cancel their contexts first.
func (e *Engine) Do(ctx context.Context, req *engine.Request) (*engine.Response, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.calls.Done()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	body := []byte(req.Body)
	if e.cfg.Model != "" {
		b, err := replaceModel(body, e.cfg.Model)
		if err != nil {
			// The pipeline validated the body; a body this engine cannot
			// edit is that request's fault, not the server's.
			msg := fmt.Sprintf("set model %q: %v", e.cfg.Model, err)
			return &engine.Response{
				StatusCode: http.StatusBadRequest,
				RequestID:  requestID(req.Endpoint, req.CustomID),
				Body:       errorBody(http.StatusBadRequest, []byte(msg)),
			}, nil
		}
		body = b
	}

	// New requests wait while the remote engine is down.
	if err := e.pool.waitUp(ctx, e.ctx.Done(), errClosed); err != nil {
		return nil, err
	}
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-e.ctx.Done():
		return nil, errClosed
	}
	defer func() { <-e.sem }()
	e.inflight.Add(1)
	defer e.inflight.Add(-1)

	// Attempts stop when the caller gives up or the engine closes.
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(e.ctx, cancel)()

	c := &call{e: e, customID: req.CustomID, endpoint: req.Endpoint}
	callCtx = context.WithValue(callCtx, ctxKey{}, c)
	client := &retryablehttp.Client{
		HTTPClient:   e.client,
		Logger:       nil, // the call logs, with custom_id
		RetryWaitMin: e.cfg.RetryWaitMin,
		RetryWaitMax: e.cfg.RetryWaitMax,
		RetryMax:     e.cfg.MaxRetries,
		CheckRetry:   c.checkRetry,
		Backoff:      c.backoff,
		ErrorHandler: c.giveUp,
	}
	for resumes := 0; ; resumes++ {
		c.round = roundStats{}
		resp, err := c.send(callCtx, client, body)
		if err == nil {
			return c.result(resp)
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		if e.ctx.Err() != nil {
			return nil, errClosed
		}
		allFailed := c.round.failures == c.round.attempts
		if resumes < maxResumes && e.pool.holdExhausted(allFailed, c.round.attempts, c.last) {
			e.logger.Debug("holding request until the remote engine is back",
				keyCustomID, req.CustomID, keyAttempt, c.attempts, keyURL, c.url)
			if err := e.pool.waitUp(ctx, e.ctx.Done(), errClosed); err != nil {
				return nil, err
			}
			continue
		}
		e.logger.Warn("request failed after retries",
			keyCustomID, req.CustomID, keyAttempt, c.attempts, keyURL, c.url, "last", c.last)
		return nil, fmt.Errorf("post %s for custom_id %q: gave up after %d attempts, last: %s: %w",
			c.url, req.CustomID, c.attempts, c.last, engine.ErrUnavailable)
	}
}

// roundStats counts the attempts of one round of retries.
type roundStats struct {
	attempts int
	failures int // attempts that count against the remote engine's health
}

// call is the state of one Do, shared by its attempts. Its fields are only
// touched by the goroutine running Do (the transport runs in it too).
type call struct {
	e        *Engine
	customID string
	endpoint string

	replica  *replica // of the latest attempt, set by attemptTransport
	url      string   // of the latest attempt, redacted
	respBody []byte   // of the latest attempt, set by attemptTransport
	attempts int      // all rounds
	round    roundStats
	last     string // the latest attempt's status or error
}

func (c *call) send(ctx context.Context, client *retryablehttp.Client, body []byte) (*http.Response, error) {
	rreq, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, endpointURL(c.e.urlStub, c.endpoint), body)
	if err != nil {
		return nil, fmt.Errorf("new request for %s: %w", c.endpoint, err)
	}
	rreq.Header.Set("Content-Type", "application/json")
	rreq.Header.Set("Accept", "application/json")
	rreq.Header.Set("User-Agent", "batchd")
	if c.e.cfg.APIKey != "" {
		rreq.Header.Set("Authorization", "Bearer "+c.e.cfg.APIKey)
	}
	return client.Do(rreq)
}

// checkRetry is the go-retryablehttp CheckRetry: it records each attempt's
// outcome for the outage detector and retries transport errors, timeouts,
// 408, 429 and 5xx but 501.
func (c *call) checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	c.attempts++
	c.round.attempts++
	if c.attempts > 1 {
		c.e.retries.Add(1)
	}
	c.last = c.describe(resp, err)
	if c.replica != nil {
		if serverFailed(resp, err) {
			c.round.failures++
			c.e.pool.failed(c.replica, c.last)
		} else {
			c.e.pool.answered(c.replica)
		}
	}
	return retryable(resp, err), nil
}

// backoff is the go-retryablehttp Backoff; it is called only before a
// retry, so it also logs the retry.
func (c *call) backoff(min, max time.Duration, n int, resp *http.Response) time.Duration {
	wait := backoff(min, max, n, resp, time.Now(), c.e.jitter)
	level := slog.LevelWarn
	// Rate limits are the server working as meant, and during an outage the
	// engine has already warned once.
	if resp != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout) || c.e.pool.isDown() {
		level = slog.LevelDebug
	}
	c.e.logger.Log(context.Background(), level, "retrying request",
		keyAttempt, c.attempts, keyCustomID, c.customID, keyURL, c.url, "last", c.last, "wait", wait)
	return wait
}

// giveUp is the go-retryablehttp ErrorHandler, called when a round of
// retries ends without a usable response. The last status or error is kept
// in c.last for Do's error.
func (c *call) giveUp(resp *http.Response, err error, _ int) (*http.Response, error) {
	if resp != nil {
		_ = resp.Body.Close()
	}
	if err == nil {
		err = errors.New(c.last)
	}
	return nil, err
}

// describe summarises an attempt for logs and errors.
func (c *call) describe(resp *http.Response, err error) string {
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its URL is the stub; c.url names the replica
		}
		return err.Error()
	}
	if s := snippet(c.respBody); s != "" {
		return fmt.Sprintf("status %d: %s", resp.StatusCode, s)
	}
	return fmt.Sprintf("status %d", resp.StatusCode)
}

// result maps the final response of a call.
func (c *call) result(resp *http.Response) (*engine.Response, error) {
	body, err := io.ReadAll(resp.Body) // buffered by attemptTransport
	_ = resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("read response from %s: %w: %w", c.url, err, engine.ErrUnavailable)
	}
	id := resp.Header.Get("X-Request-Id")
	if id == "" {
		id = requestID(c.endpoint, c.customID)
	}
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		if !json.Valid(body) {
			return nil, fmt.Errorf("post %s: status %d with a body that is not JSON: %s: %w",
				c.url, code, snippet(body), engine.ErrUnavailable)
		}
		return &engine.Response{StatusCode: code, RequestID: id, Body: body}, nil
	case code >= 400 && code < 500, code == http.StatusNotImplemented:
		return &engine.Response{StatusCode: code, RequestID: id, Body: errorBody(code, body)}, nil
	}
	return nil, fmt.Errorf("post %s: unexpected status %d: %s: %w", c.url, code, snippet(body), engine.ErrUnavailable)
}
