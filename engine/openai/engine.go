package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/wire"
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
// engine.ErrUnavailable only when its retries run out while other requests,
// or health checks, show the remote engine is up, or its own answers do
// (408, 429, over Config.MaxAnswerBytes; see Config.MaxRetries).
//
// Answers are read within Config.MaxAnswerBytes each and
// Config.MaxAnswerBytesInFlight together (see answerBudget), and
// Config.AttemptTimeout bounds reading each one.
type Engine struct {
	cfg       Config
	logger    *slog.Logger
	pool      *pool
	prober    *prober
	transport *http.Transport // shared connection pool
	client    *http.Client    // sends attempts through attemptTransport
	answers   *answerBudget   // bounds the answer bytes held, each and all
	urlStub   string          // URL given to go-retryablehttp; the transport picks the replica
	win       *window         // the in-flight window
	inflight  atomic.Int64
	active    atomic.Int64 // Do calls past enter, held ones included
	retries   atomic.Int64 // attempts that repeated an earlier one (Stats)
	hung      atomic.Bool  // set and cleared by watch (Stats)
	samples   samples      // known-good bodies for health checks
	checks    *checks      // health checks in flight and their results
	responses responsesRoute
	jitter    func(n int64) int64

	ctx    context.Context // private: cancelled by Close
	cancel context.CancelFunc

	mu     sync.Mutex
	opened bool
	closed bool
	calls  sync.WaitGroup // Do calls in progress
	bgDone chan struct{}  // closed when the prober and the watchdog end
}

// New checks cfg and builds an Engine. It does no I/O. A config with
// routes is refused: NewRouter builds one.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.Routes) > 0 {
		return nil, errors.New("openai.routes: an engine with routes is built by NewRouter")
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
	// Answers read at once: one attempt per request in flight, and one
	// health check per replica.
	answers := newAnswerBudget(cfg.MaxAnswerBytesInFlight, cfg.MaxAnswerBytes, cfg.MaxInFlight+len(bases))
	ctx, cancel := context.WithCancel(context.Background())
	e := &Engine{
		cfg:       cfg,
		logger:    logger,
		pool:      p,
		transport: transport,
		answers:   answers,
		client: &http.Client{Transport: &attemptTransport{
			base: transport, pool: p, timeout: cfg.AttemptTimeout, answers: answers,
		}},
		urlStub: stub,
		checks:  newChecks(len(bases)),
		win:     newWindow(cfg.MaxInFlight),
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
	e.bgDone = make(chan struct{})
	go func() {
		defer close(e.bgDone)
		var wg sync.WaitGroup
		wg.Go(func() { e.prober.run(e.ctx) })
		wg.Go(func() { e.watch(e.ctx) })
		wg.Wait()
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
			<-e.bgDone
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
// (sending, backing off or held by an outage), whether batches are paused
// for an outage (callers held, or retrying after only a probe answered:
// see pool.outage), and whether the remote engine looks hung (see Config.HangAfter).
func (e *Engine) Stats() engine.Stats {
	inflight := e.inflight.Load()
	return engine.Stats{
		InFlight: int(inflight), Paused: e.pool.paused(inflight > 0), Hung: e.hung.Load(),
		Retries: e.retries.Load(),
	}
}

// watch is the hang watchdog: while requests are in flight and the engine
// has owed an answer for Config.HangAfter (no response byte since an
// attempt was sent; see pool.waiting), the engine counts as hung
// (Stats().Hung, logged once at WARN) until it reacts or no request is left
// in flight. Attempts timing out and being sent again do not end it. It
// runs until ctx is done.
func (e *Engine) watch(ctx context.Context) {
	t := time.NewTicker(clamp(e.cfg.HangAfter/4, 10*time.Millisecond, 5*time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		owed, wire := e.pool.waitingFor(time.Now())
		hung := owed >= e.cfg.HangAfter && e.inflight.Load() > 0
		if hung == e.hung.Load() {
			continue
		}
		e.hung.Store(hung)
		if hung {
			e.logger.Warn("remote engine not answering: requests sent, no response",
				"attempts_in_flight", wire, "silent_for", owed.Round(time.Millisecond), "hang_after", e.cfg.HangAfter)
		} else {
			e.logger.Info("remote engine no longer hung", "attempts_in_flight", wire)
		}
	}
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

// Do sends req and returns the server's answer: a Response for a 2xx with a
// JSON body or a refusal (4xx but 408/429, and 501, whose body is always an
// OpenAI error object), an error wrapping engine.ErrUnavailable when the
// request's retries run out while the remote engine is up (see
// Config.MaxRetries) or the engine is closed, or ctx.Err(). A 2xx whose
// whole body is not JSON (a syntax error, nesting too deep) is retried
// Config.MaxRetries times, then returned as it is: the pipeline makes it
// that request's engine_bad_response line.
//
// Failures of the remote engine (5xx, transport errors, timeouts, a 2xx
// whose body is cut short) are retried for as long as they last: while the
// engine is down, Do waits before sending and between retries. Close ends
// those waits with engine.ErrUnavailable, so callers should cancel their
// contexts first.
//
// A /v1/responses request is forwarded as it is when every server has the
// route, else sent as the chat completion it translates to and its answer
// turned into a Response object (see responsesForward).
func (e *Engine) Do(ctx context.Context, req *engine.Request) (*engine.Response, error) {
	if req.Endpoint == engine.EndpointResponses {
		// Refused alike whatever the server; forwarded as it is to
		// servers with the route, else sent as a chat completion whose
		// answer comes back as a Response object.
		chat, answer, refused := engine.AsChat(req)
		if refused != nil {
			refused.RequestID = requestID(req.Endpoint, req.CustomID)
			return refused, nil
		}
		if e.responsesForward(ctx) {
			fwd := *req
			fwd.Body = forwardedResponses(req.Body)
			return e.send(ctx, &fwd)
		}
		resp, err := e.send(ctx, chat)
		return answer(resp), err
	}
	return e.send(ctx, req)
}

// send is Do for a request sent as it is.
func (e *Engine) send(ctx context.Context, req *engine.Request) (*engine.Response, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.calls.Done()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e.active.Add(1)
	defer e.active.Add(-1)

	body := []byte(req.Body)
	if inv := wire.CheckRemoteBody(body); inv != nil {
		// Never forwarded: the server would ignore it, or read a path
		// on its own disk.
		return &engine.Response{
			StatusCode: http.StatusBadRequest,
			RequestID:  requestID(req.Endpoint, req.CustomID),
			Body:       inv.Body(),
		}, nil
	}
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

	inlined, err := inlineMedia(body, e.cfg.MediaRoot)
	if err != nil {
		var me *mediaError
		if !errors.As(err, &me) {
			return nil, fmt.Errorf("inline media: %w", err)
		}
		return &engine.Response{
			StatusCode: http.StatusBadRequest,
			RequestID:  requestID(req.Endpoint, req.CustomID),
			Body:       mediaResponseBody(me),
		}, nil
	}
	body = inlined

	// New requests wait while the remote engine is down.
	if _, err := e.pool.waitUp(ctx, e.ctx.Done(), errClosed); err != nil {
		return nil, err
	}
	if err := e.win.acquire(ctx, e.ctx.Done(), req.Priority); err != nil {
		return nil, err
	}
	defer e.win.release()
	e.inflight.Add(1)
	defer func() {
		if e.inflight.Add(-1) == 0 {
			e.pool.idle()
		}
	}()

	// Attempts stop when the caller gives up or the engine closes.
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(e.ctx, cancel)()

	c := &call{e: e, customID: req.CustomID, endpoint: req.Endpoint}
	defer c.release()
	c.remember()
	callCtx = context.WithValue(callCtx, ctxKey{}, c)
	client := &retryablehttp.Client{
		HTTPClient:   e.client,
		Logger:       nil, // the call logs, with custom_id
		RetryWaitMin: e.cfg.RetryWaitMin,
		RetryWaitMax: e.cfg.RetryWaitMax,
		RetryMax:     math.MaxInt, // checkRetry decides when to stop
		CheckRetry:   c.checkRetry,
		Backoff:      c.backoff,
		ErrorHandler: c.giveUp,
	}
	resp, err := c.send(callCtx, client, body)
	if err == nil {
		res, err := c.result(resp)
		if err == nil && res.StatusCode < 300 && c.jsonBody {
			e.samples.keep(req.Endpoint, body, time.Now())
		}
		return res, err
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, ctxErr
	}
	if e.ctx.Err() != nil {
		return nil, errClosed
	}
	e.logger.Warn("request failed after retries",
		keyCustomID, req.CustomID, keyAttempt, c.attempts, keyURL, c.url, "last", c.last, "reason", c.reason)
	return nil, fmt.Errorf("post %s for custom_id %q: gave up after %d attempts (%s), last: %s: %w",
		c.url, req.CustomID, c.attempts, c.reason, c.last, engine.ErrUnavailable)
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
	held     int64    // bytes of the answer budget respBody holds
	jsonBody bool     // respBody is JSON (checked by checkRetry on a 2xx)
	badBody  bool     // respBody is a 2xx's whole body that is not JSON (see badAnswer)
	attempts int
	streak   int      // attempts since the call last waited for the engine to come back
	strikes  int      // attempts that count against this request (see checkRetry)
	checked  int      // strikes shown by a health check
	warned   bool     // that no health check could be sent
	seen     []uint64 // pool.served when the previous attempt ended
	checks   []uint64 // checks.ended when the previous attempt ended
	last     string   // the latest attempt's status or error
	reason   string   // why the call gave up
	oversize int      // answers over Config.MaxAnswerBytes
	unended  int      // 2xx answers still arriving at Config.AttemptTimeout
}

// answerReason is why a call gave up on answers too large or too slow.
func (c *call) answerReason() string {
	var parts []string
	if c.oversize > 0 {
		parts = append(parts, fmt.Sprintf("%d answers over openai.max_answer_bytes (%d bytes)", c.oversize, c.e.cfg.MaxAnswerBytes))
	}
	if c.unended > 0 {
		parts = append(parts, fmt.Sprintf("%d answers still arriving at openai.attempt_timeout (%s)", c.unended, c.e.cfg.AttemptTimeout))
	}
	if others := c.strikes - c.oversize - c.unended; others > 0 {
		parts = append(parts, fmt.Sprintf("%d other failures", others))
	}
	return strings.Join(parts, ", ")
}

// release drops the latest attempt's answer and returns its bytes to the
// answer budget.
func (c *call) release() {
	c.e.answers.release(c.held)
	c.held = 0
	c.respBody = nil
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
// outcome for the outage detector and decides whether to try again.
//
// A 2xx with a JSON body, or a refusal, ends the call. Everything else is
// retried, with a limit only on attempts that count against this request
// (strikes); the call gives up once it has more than Config.MaxRetries:
//   - A 408 or 429 is always a strike: the server is up and said no.
//   - An answer over Config.MaxAnswerBytes is always a strike: the server
//     is up and sent more than this engine holds for one answer.
//   - A 2xx whose whole body is not JSON is always a strike, and the
//     call then ends with that answer (see badAnswer).
//   - A failure of the remote engine (5xx, transport error, timeout, a 2xx
//     whose body is cut short) is a strike when the replica that failed it
//     answered another request since this one's previous attempt; or when
//     this is the only request left and it already has a strike; or when
//     the server answered it (a 5xx, a 2xx cut short, or an answer
//     cut short or still arriving when the attempt timed out) and a
//     health check (see serverUp) shows the replica serving a known-good
//     request meanwhile, so several requests failing at the end of a
//     batch are told apart from an outage as one alone is. It is never a
//     strike when the connection could not be made (refused,
//     unreachable). A request the server fails while serving others is
//     the request's fault, and does not count against the engine's
//     health. Otherwise it is an outage (pool.failed counts it towards
//     DownAfter), and while the engine is down the call waits for it to
//     come back before trying again.
func (c *call) checkRetry(ctx context.Context, resp *http.Response, err error) (retry bool, _ error) {
	defer func() {
		if retry { // the answer is not needed while the call waits
			c.release()
		}
	}()
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	c.attempts++
	c.streak++
	if c.attempts > 1 {
		c.e.retries.Add(1)
	}
	c.last = c.describe(resp, err)
	if c.replica == nil { // no attempt reached the transport
		return false, err
	}
	pool := c.e.pool
	if over, slow := errors.Is(err, errAnswerTooLarge), stillArriving(err); over || slow {
		// The server answered, so it is up; what it sent is more than
		// this engine holds for one answer, or did not end within
		// attempt_timeout: the request's own failure.
		pool.answered(c.replica, false)
		c.remember()
		c.strikes++
		if over {
			c.oversize++
		} else {
			c.unended++
		}
		if c.strikes > c.e.cfg.MaxRetries {
			c.reason = c.answerReason()
			return false, errors.New(c.last)
		}
		return true, nil
	}
	success := err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300
	c.jsonBody = success && json.Valid(c.respBody)
	c.badBody = success && !c.jsonBody && !cutShort(c.respBody)
	if c.badBody {
		return c.badAnswer()
	}
	if !serverFailed(resp, c.jsonBody, err) {
		if !throttled(resp) {
			pool.answered(c.replica, true)
			return false, nil
		}
		pool.answered(c.replica, false)
		c.remember()
		c.strikes++
		if c.strikes > c.e.cfg.MaxRetries {
			c.reason = fmt.Sprintf("throttled %d times", c.strikes)
			return false, errors.New(c.last)
		}
		return true, nil
	}

	if success {
		c.e.logger.Warn("success response is not JSON; retrying",
			keyCustomID, c.customID, keyAttempt, c.attempts, keyURL, c.url, "body", snippet(c.respBody))
	}
	others := pool.servedSince(c.replica, c.seen)
	checkedSince := c.checks[c.replica.idx]
	c.remember()
	alone := c.e.active.Load() == 1
	switch {
	case unreached(err):
		// A connection that could not be made never reached the server,
		// so it says nothing about this request: it is always the
		// engine's failure.
		pool.failed(c.replica, c.last)
	case others || (c.strikes > 0 && alone):
		// The request's fault, not the engine's: it does not count
		// towards taking the engine down.
		c.strikes++
	case (err == nil || answered(err)) && c.serverUp(ctx, checkedSince, alone):
		// It answered (a 5xx, a 2xx that is not JSON, or an answer cut
		// short or still arriving when the attempt's time ran out) and a
		// known-good request shows the replica serving.
		c.strikes++
		c.checked++
	case ctx.Err() != nil: // cancelled during the health check
		return false, ctx.Err()
	default:
		pool.failed(c.replica, c.last)
	}
	if c.strikes > c.e.cfg.MaxRetries {
		c.reason = fmt.Sprintf("%d failed while the remote engine answered other requests", c.strikes)
		if c.checked > 0 {
			c.reason = fmt.Sprintf("%d failed while the remote engine answered other requests or a health check", c.strikes)
		}
		return false, errors.New(c.last)
	}
	waited, werr := pool.waitUp(ctx, c.e.ctx.Done(), errClosed)
	if werr != nil {
		return false, werr
	}
	if waited {
		c.streak = 0
		c.remember()
	}
	return true, nil
}

// badAnswer is checkRetry for a 2xx whose body, read whole, is not JSON
// (a syntax error, nesting deeper than encoding/json reads, data after
// the value): the server is up and this is its answer to this request,
// so each such attempt is a strike, never an outage, and once the
// strikes pass Config.MaxRetries the answer is returned as it is, for
// the pipeline to fail the request with it (engine_bad_response). Held
// as an outage, the request would be sent again for ever.
func (c *call) badAnswer() (bool, error) {
	c.e.pool.answered(c.replica, true)
	c.remember()
	c.strikes++
	if c.strikes > c.e.cfg.MaxRetries {
		c.e.logger.Warn("success response is not JSON; answering with it",
			keyCustomID, c.customID, keyAttempt, c.attempts, keyURL, c.url, "body", snippet(c.respBody))
		return false, nil
	}
	c.e.logger.Warn("success response is not JSON; retrying",
		keyCustomID, c.customID, keyAttempt, c.attempts, keyURL, c.url, "body", snippet(c.respBody))
	return true, nil
}

// cutShort reports whether body, which is not JSON, ends before its
// first value does (or is empty): a body cut short, which the server
// failing mid-answer sends, unlike a whole answer that is not JSON.
func cutShort(body []byte) bool {
	var v json.RawMessage
	err := json.NewDecoder(bytes.NewReader(body)).Decode(&v)
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// remember records what the replicas have served, and the health checks
// ended, when an attempt ends: the evidence for its next one starts there.
func (c *call) remember() {
	c.seen = c.e.pool.served(c.seen)
	c.checks = c.e.checks.ended(c.checks)
}

// serverUp reports whether the replica that just failed this call, while
// serving no other request, served a health check that ended since the
// call's previous attempt (since checks had ended then): one in flight, or
// one sent now (see checks.result). Without a known-good body for the
// endpoint (nothing has succeeded on it yet) no check is sent; a call that
// is the only request left then warns, once, that it waits as in an outage.
func (c *call) serverUp(ctx context.Context, since uint64, alone bool) bool {
	e, r := c.e, c.replica
	var send func() bool
	if body := e.samples.get(c.endpoint); body != nil {
		customID, attempt, logURL, endpoint := c.customID, c.attempts, c.url, c.endpoint
		send = func() bool {
			// Under the engine's context, not the call's: others may
			// wait for this check after this call gives up.
			up, got := e.healthCheck(e.ctx, r, endpoint, body)
			e.logger.Debug("health check with an earlier request that succeeded",
				keyCustomID, customID, keyAttempt, attempt, keyURL, logURL, "up", up, "health_check", got)
			return up
		}
	}
	up, ok := e.checks.result(ctx, r.idx, since, send, &e.calls)
	if !ok && send == nil && alone && !c.warned {
		c.warned = true
		e.logger.Warn("request fails with nothing else running and no earlier request succeeded to check the server with; waiting as in an outage until it succeeds or its batch is cancelled",
			keyCustomID, c.customID, keyAttempt, c.attempts, keyURL, c.url, "last", c.last)
	}
	return up
}

// backoff is the go-retryablehttp Backoff; it is called only before a
// retry, so it also logs the retry.
//
// The step grows with the attempts since the call last waited for the
// engine to come back, so a resumed call starts again from the shortest wait.
func (c *call) backoff(waitMin, waitMax time.Duration, _ int, resp *http.Response) time.Duration {
	wait := backoff(waitMin, waitMax, max(c.streak-1, 0), resp, time.Now(), c.e.jitter)
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

// giveUp is the go-retryablehttp ErrorHandler, called when checkRetry ends
// the call without a usable response. The last status or error is kept
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
	body := c.respBody // read by attemptTransport; resp.Body holds the same bytes
	_ = resp.Body.Close()
	id := resp.Header.Get("X-Request-Id")
	if id == "" {
		id = requestID(c.endpoint, c.customID)
	}
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		// checkRetry read the same bytes (attemptTransport buffered them).
		// A body that is not JSON after every retry is answered as it
		// is: the pipeline fails the request with it.
		if !c.jsonBody && !c.badBody {
			return nil, fmt.Errorf("post %s: status %d with a body that is not JSON: %s: %w",
				c.url, code, snippet(body), engine.ErrUnavailable)
		}
		return &engine.Response{StatusCode: code, RequestID: id, Body: body}, nil
	case code >= 400 && code < 500, code == http.StatusNotImplemented:
		return &engine.Response{StatusCode: code, RequestID: id, Body: errorBody(code, body)}, nil
	}
	return nil, fmt.Errorf("post %s: unexpected status %d: %s: %w", c.url, code, snippet(body), engine.ErrUnavailable)
}
