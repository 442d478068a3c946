// Package webhook POSTs OpenAI-style batch events ("batch.completed", ...) to
// configured URLs, signed the Standard Webhooks way that OpenAI uses, with
// retries and a crash-safe spool.
//
// Delivery is at least once per (event, URL): an event is written to the
// spool folder (file and folder fsynced) before Notify returns, and its file
// is removed only once every URL has answered 2xx or been given up on. A
// crash or Close between a receiver's 2xx and the spool update re-sends the
// event on the next Start, so receivers deduplicate on the webhook-id header.
//
// It owns its spool folder and nothing else, and imports no batchd package.
package webhook

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Event types a Sender accepts.
const (
	EventBatchCompleted = "batch.completed"
	EventBatchFailed    = "batch.failed"
	EventBatchExpired   = "batch.expired"
	EventBatchCancelled = "batch.cancelled"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultMaxAttempts = 20
	DefaultMaxAge      = 24 * time.Hour
	DefaultRetryMin    = time.Second
	DefaultRetryMax    = 5 * time.Minute
	DefaultTimeout     = 10 * time.Second
	DefaultWorkers     = 4
)

const (
	userAgent = "batchd-webhook/1"

	// Log keys.
	keyEvent   = "event"
	keyType    = "type"
	keyBatch   = "batch"
	keyURL     = "url"
	keyStatus  = "status"
	keyAttempt = "attempt"
	keyDelay   = "delay"
	keyError   = "error"
	keyFile    = "file"
)

var (
	// ErrClosed is returned by Notify after Close.
	ErrClosed = errors.New("webhook: sender closed")
	// ErrNotStarted is returned by Notify before Start.
	ErrNotStarted = errors.New("webhook: sender not started")
	// ErrEventType is returned by Notify for an event type it does not know.
	ErrEventType = errors.New("webhook: unknown event type")
)

// Config configures a Sender. Zero durations and counts take the defaults.
type Config struct {
	// URLs receive every event; each must be an absolute http or https URL.
	URLs []string
	// Secret signs the deliveries. "whsec_<base64>" (the Standard Webhooks
	// and OpenAI format) means the base64-decoded bytes are the key; any
	// other string is used as the key as is.
	Secret string
	// SpoolDir holds one file per undelivered event, so that a restart
	// re-sends them. Start creates it.
	SpoolDir string
	// MaxAttempts bounds the attempts per (event, URL) within one run of the
	// Sender (the count is not persisted; MaxAge bounds restarts).
	MaxAttempts int
	// MaxAge gives up on an event older than this.
	MaxAge time.Duration
	// RetryMin and RetryMax bound the exponential backoff between attempts;
	// a Retry-After header is honoured but clamped to RetryMax.
	RetryMin, RetryMax time.Duration
	// Timeout bounds one attempt.
	Timeout time.Duration
	// Workers is how many deliveries may be in flight at once.
	Workers int
	// Client sends the requests; nil means one that does not follow
	// redirects (a 3xx is then given up on, like a 4xx).
	Client *http.Client
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock for event and signature timestamps and for MaxAge;
	// nil means time.Now. Backoff waits use the real clock.
	Now func() time.Time
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxAge == 0 {
		c.MaxAge = DefaultMaxAge
	}
	if c.RetryMin == 0 {
		c.RetryMin = DefaultRetryMin
	}
	if c.RetryMax == 0 {
		c.RetryMax = DefaultRetryMax
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Client == nil {
		c.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}
	}
	return c
}

// Validate reports the first bad field, by name. Zero fields are valid (they
// take the defaults).
func (c Config) Validate() error {
	if len(c.URLs) == 0 {
		return errors.New("webhook: URLs: at least one URL is required")
	}
	for i, raw := range c.URLs {
		if err := validateURL(raw); err != nil {
			return fmt.Errorf("webhook: URLs[%d]: %w", i, err)
		}
		if slices.Index(c.URLs, raw) != i {
			return fmt.Errorf("webhook: URLs[%d]: duplicate of URLs[%d]", i, slices.Index(c.URLs, raw))
		}
	}
	if c.Secret == "" {
		return errors.New("webhook: Secret: required")
	}
	if _, err := signingKey(c.Secret); err != nil {
		return fmt.Errorf("webhook: Secret: %w", err)
	}
	if c.SpoolDir == "" {
		return errors.New("webhook: SpoolDir: required")
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxAttempts", int64(c.MaxAttempts)},
		{"MaxAge", int64(c.MaxAge)},
		{"RetryMin", int64(c.RetryMin)},
		{"RetryMax", int64(c.RetryMax)},
		{"Timeout", int64(c.Timeout)},
		{"Workers", int64(c.Workers)},
	} {
		if f.v < 0 {
			return fmt.Errorf("webhook: %s: must not be negative", f.name)
		}
	}
	d := c.withDefaults()
	if d.RetryMin > d.RetryMax {
		return fmt.Errorf("webhook: RetryMin: %v is above RetryMax %v", d.RetryMin, d.RetryMax)
	}
	return nil
}

func validateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("parse url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: scheme must be http or https", u.Redacted())
	}
	if u.Host == "" {
		return fmt.Errorf("%q: host is required", u.Redacted())
	}
	return nil
}

// Sender delivers events. Its methods are safe for concurrent use.
type Sender struct {
	cfg Config
	key []byte
	log *slog.Logger

	mu      sync.Mutex // guards started, closed; held across Notify's spool write
	started bool
	closed  bool

	add  chan *job      // to the scheduler: new and rescheduled jobs
	work chan *job      // from the scheduler: due jobs
	stop chan struct{}  // closed by Close: no new attempts
	wg   sync.WaitGroup // scheduler and workers

	// runCtx bounds attempts; Close cancels it only when its ctx ends
	// before the in-flight attempts do.
	runCtx    context.Context
	runCancel context.CancelFunc
}

// New checks cfg and returns a Sender; it does no I/O.
func New(cfg Config) (*Sender, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cfg.URLs = slices.Clone(cfg.URLs)
	key, err := signingKey(cfg.Secret)
	if err != nil {
		return nil, fmt.Errorf("webhook: Secret: %w", err)
	}
	return &Sender{
		cfg:  cfg,
		key:  key,
		log:  cfg.Logger.With("component", "webhook"),
		add:  make(chan *job),
		work: make(chan *job),
		stop: make(chan struct{}),
	}, nil
}

// Start loads the spool (re-sending what an earlier run left) and starts
// delivering. ctx is used only while loading; Close stops the deliveries.
func (s *Sender) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.started {
		return errors.New("webhook: start: already started")
	}
	events, err := s.loadSpool(ctx)
	if err != nil {
		return err
	}
	s.runCtx, s.runCancel = context.WithCancel(context.Background())
	var jobs []*job
	for _, ev := range events {
		for _, u := range ev.urls() {
			jobs = append(jobs, &job{ev: ev, url: u})
		}
	}
	s.wg.Add(1 + s.cfg.Workers)
	go s.schedule(jobs)
	for range s.cfg.Workers {
		go s.worker()
	}
	s.started = true
	if len(events) > 0 {
		s.log.Info("re-sending spooled events", "count", len(events))
	}
	return nil
}

// Notify records an event of eventType for batchID in the spool, synced to
// disk, and returns; the deliveries happen in the background. It is valid
// between Start and Close.
func (s *Sender) Notify(eventType, batchID string) error {
	switch eventType {
	case EventBatchCompleted, EventBatchFailed, EventBatchExpired, EventBatchCancelled:
	default:
		return fmt.Errorf("%w: %q", ErrEventType, eventType)
	}
	if batchID == "" {
		return errors.New("webhook: notify: empty batch id")
	}
	id, err := newEventID()
	if err != nil {
		return err
	}
	created := s.cfg.Now().Unix()
	body, err := json.Marshal(eventBody{
		ID: id, Object: "event", CreatedAt: created, Type: eventType,
		Data: eventData{ID: batchID},
	})
	if err != nil {
		return fmt.Errorf("webhook: encode event: %w", err)
	}
	ev := &event{
		id: id, typ: eventType, batch: batchID, created: time.Unix(created, 0),
		body: body,
	}

	// The lock makes Close wait for a Notify in progress, so an event that
	// Notify accepted is either spooled and queued or rejected, never lost.
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case !s.started:
		return ErrNotStarted
	}
	ev.pending = slices.Clone(s.cfg.URLs) // under s.mu: SetURLs may change them
	if err := s.writeEvent(ev); err != nil {
		return err
	}
	s.log.Debug("event spooled", keyEvent, id, keyType, eventType, keyBatch, batchID)
	for _, u := range s.cfg.URLs {
		select {
		case s.add <- &job{ev: ev, url: u}:
		case <-s.stop: // unreachable while s.mu is held; kept for safety
		}
	}
	return nil
}

// SetURLs replaces the URLs that later events go to (a config reload);
// events already spooled keep the URLs they were addressed to.
func (s *Sender) SetURLs(urls []string) error {
	c := s.cfg
	c.URLs = urls
	if err := c.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg.URLs = slices.Clone(urls)
	return nil
}

// Close stops delivering: no attempt starts after it is called, and it waits
// for the attempts in flight until ctx ends, then aborts them and returns
// ctx's error. Undelivered events stay in the spool for the next Start.
func (s *Sender) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	started := s.started
	s.mu.Unlock()
	if !started {
		return nil
	}
	close(s.stop)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.runCancel()
		<-done
		err = fmt.Errorf("webhook: close: %w", ctx.Err())
	}
	s.runCancel()
	return err
}

// eventBody is OpenAI's webhook event object; field order is the wire order.
type eventBody struct {
	ID        string    `json:"id"`
	Object    string    `json:"object"`
	CreatedAt int64     `json:"created_at"`
	Type      string    `json:"type"`
	Data      eventData `json:"data"`
}

type eventData struct {
	ID string `json:"id"`
}

func newEventID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("webhook: event id: %w", err)
	}
	return "evt_" + hex.EncodeToString(b[:]), nil
}

// event is one spooled event and the URLs it still has to reach.
type event struct {
	id      string
	typ     string
	batch   string
	created time.Time
	body    []byte

	mu      sync.Mutex // guards pending and the event's spool file
	pending []string
}

func (e *event) urls() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.pending)
}

// job is one (event, URL) delivery.
type job struct {
	ev       *event
	url      string
	attempts int       // made so far
	due      time.Time // zero: now
}

// worker runs due jobs until Close.
func (s *Sender) worker() {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		case j := <-s.work:
			select {
			case <-s.stop: // Close raced the hand-off; the spool keeps the job
				return
			default:
			}
			s.attempt(j)
		}
	}
}

// attempt makes one delivery attempt of j and settles it: done, given up,
// or rescheduled.
func (s *Sender) attempt(j *job) {
	log := s.log.With(keyEvent, j.ev.id, keyBatch, j.ev.batch, keyURL, redact(j.url))
	if age := s.cfg.Now().Sub(j.ev.created); age > s.cfg.MaxAge {
		log.Warn("webhook given up: event too old", keyAttempt, j.attempts, "age", age)
		s.finish(j)
		return
	}
	j.attempts++
	res := s.post(j)
	if s.runCtx.Err() != nil {
		return // aborted by Close; the spool keeps the job
	}
	switch {
	case res.err == nil && res.status >= 200 && res.status < 300:
		log.Debug("webhook delivered", keyAttempt, j.attempts, keyStatus, res.status)
		s.finish(j)
		return
	case res.err == nil && !retryable(res.status):
		log.Warn("webhook given up: receiver refused it", keyStatus, res.status, keyAttempt, j.attempts)
		s.finish(j)
		return
	}
	if j.attempts >= s.cfg.MaxAttempts {
		log.Warn("webhook given up: too many attempts", keyAttempt, j.attempts, keyStatus, res.status, keyError, errString(res.err))
		s.finish(j)
		return
	}
	delay := s.retryDelay(j.attempts, res.retryAfter)
	if s.cfg.Now().Add(delay).Sub(j.ev.created) > s.cfg.MaxAge {
		log.Warn("webhook given up: event would be too old at the next attempt", keyAttempt, j.attempts, keyStatus, res.status, keyError, errString(res.err))
		s.finish(j)
		return
	}
	log.Info("webhook attempt failed; will retry", keyAttempt, j.attempts, keyStatus, res.status, keyError, errString(res.err), keyDelay, delay)
	j.due = time.Now().Add(delay)
	select {
	case s.add <- j:
	case <-s.stop: // the spool keeps the job
	}
}

// retryable reports whether a non-2xx status is worth another attempt.
func retryable(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500
}

type result struct {
	status     int    // 0 on a transport error
	retryAfter string // the Retry-After header, if any
	err        error
}

// post sends one attempt of j.
func (s *Sender) post(j *job) result {
	ctx, cancel := context.WithTimeout(s.runCtx, s.cfg.Timeout)
	defer cancel()
	req, err := s.newRequest(ctx, j.url, j.ev.id, j.ev.body)
	if err != nil {
		return result{err: err}
	}
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return result{err: err}
	}
	drain(resp)
	return result{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
}

// newRequest builds a signed POST of body; the timestamp is this attempt's.
func (s *Sender) newRequest(ctx context.Context, rawURL, id string, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("webhook: new request: %w", err)
	}
	ts := strconv.FormatInt(s.cfg.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, "v1,"+sign(s.key, id, ts, body))
	return req, nil
}

// finish marks j's URL done (delivered or given up) and updates the spool.
// A failed update is logged: the event is then re-sent after a restart,
// which at-least-once delivery allows.
func (s *Sender) finish(j *job) {
	ev := j.ev
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.pending = slices.DeleteFunc(ev.pending, func(u string) bool { return u == j.url })
	var err error
	if len(ev.pending) == 0 {
		err = s.removeEvent(ev.id)
	} else {
		err = s.writeEvent(ev)
	}
	if err != nil {
		s.log.Error("update spool", keyEvent, ev.id, keyError, err)
	}
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable url>"
	}
	return u.Redacted()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
