package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/internal/syncbuf"
)

// waitLimit only keeps a broken test from hanging; nothing waits for it.
const waitLimit = 20 * time.Second

// testKey is the raw key behind testSecret.
var testKey = []byte("0123456789abcdef0123456789abcdef")

var testSecret = "whsec_" + base64.StdEncoding.EncodeToString(testKey)

// delivery is one request a receiver got.
type delivery struct {
	header http.Header
	body   []byte
}

// receiver is a loopback HTTP server that answers with the statuses its
// respond function picks and reports each request on got.
type receiver struct {
	srv   *httptest.Server
	got   chan delivery
	count atomic.Int64
}

// newReceiver starts a receiver; respond gets the 1-based request number and
// may set headers.
func newReceiver(t *testing.T, respond func(n int, h http.Header) int) *receiver {
	t.Helper()
	r := &receiver{got: make(chan delivery, 4096)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			t.Errorf("receiver: read body: %v", err)
		}
		n := int(r.count.Add(1))
		status := respond(n, w.Header())
		select {
		case r.got <- delivery{header: req.Header.Clone(), body: body}:
		default: // a test that retries forever reads only the first few
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// next returns the next delivery, failing the test if none comes.
func (r *receiver) next(t *testing.T) delivery {
	t.Helper()
	select {
	case d := <-r.got:
		return d
	case <-time.After(waitLimit):
		t.Fatalf("receiver %s: no delivery after %d", r.srv.URL, r.count.Load())
		return delivery{}
	}
}

func always(status int) func(int, http.Header) int {
	return func(int, http.Header) int { return status }
}

// logBuffer collects JSON log lines.
type logBuffer struct{ syncbuf.Buffer }

// records returns the logged records whose message contains msg.
func (b *logBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(b.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m, _ := rec["msg"].(string); strings.Contains(m, msg) {
			out = append(out, rec)
		}
	}
	return out
}

func testConfig(t *testing.T, dir string, logs *logBuffer, urls ...string) Config {
	t.Helper()
	return Config{
		URLs:     urls,
		Secret:   testSecret,
		SpoolDir: dir,
		RetryMin: time.Millisecond,
		RetryMax: 5 * time.Millisecond,
		Timeout:  waitLimit,
		Logger:   slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

func startSender(t *testing.T, cfg Config) *Sender {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func closeSender(t *testing.T, s *Sender) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// spoolFiles lists the event files in dir.
func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*"+spoolExt))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// TestStandardWebhooksVector checks signing against the example in the
// Standard Webhooks specification.
func TestStandardWebhooksVector(t *testing.T) {
	const (
		secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		id     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		ts     = "1614265330"
		body   = `{"test": 2432232314}`
		want   = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	key, err := signingKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	if got := "v1," + sign(key, id, ts, []byte(body)); got != want {
		t.Fatalf("signature = %s, want %s", got, want)
	}
	h := http.Header{}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, ts)
	h.Set(HeaderSignature, "v1,bm90IGl0 "+want) // a receiver must accept any listed match
	if err := Verify(secret, h, []byte(body), time.Minute, time.Unix(1614265330, 0)); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

func TestDeliverySignedAndShaped(t *testing.T) {
	for _, tc := range []struct {
		name, secret string
		key          []byte
	}{
		{"whsec secret", testSecret, testKey},
		{"plain secret", "not-base64: plain bytes", []byte("not-base64: plain bytes")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_750_000_000, 0)
			clk := &clock{t: now}
			r := newReceiver(t, always(http.StatusOK))
			var logs logBuffer
			cfg := testConfig(t, t.TempDir(), &logs, r.srv.URL+"/hook")
			cfg.Secret = tc.secret
			cfg.Now = clk.Now
			s := startSender(t, cfg)
			if err := s.Notify(EventBatchCompleted, "batch_abc"); err != nil {
				t.Fatalf("Notify: %v", err)
			}
			d := r.next(t)

			var ev struct {
				ID        string `json:"id"`
				Object    string `json:"object"`
				CreatedAt int64  `json:"created_at"`
				Type      string `json:"type"`
				Data      struct {
					ID string `json:"id"`
				} `json:"data"`
			}
			if err := json.Unmarshal(d.body, &ev); err != nil {
				t.Fatalf("body %s: %v", d.body, err)
			}
			if !regexp.MustCompile(`^evt_[0-9a-f]{32}$`).MatchString(ev.ID) || ev.Object != "event" ||
				ev.CreatedAt != now.Unix() || ev.Type != EventBatchCompleted || ev.Data.ID != "batch_abc" {
				t.Errorf("body = %s", d.body)
			}
			for k, want := range map[string]string{
				"Content-Type":  "application/json",
				"User-Agent":    "batchd-webhook/1",
				HeaderID:        ev.ID,
				HeaderTimestamp: strconv.FormatInt(now.Unix(), 10),
			} {
				if got := d.header.Get(k); got != want {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}

			// An independent computation of the Standard Webhooks signature.
			m := hmac.New(sha256.New, tc.key)
			m.Write([]byte(d.header.Get(HeaderID) + "." + d.header.Get(HeaderTimestamp) + "."))
			m.Write(d.body)
			want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
			if got := d.header.Get(HeaderSignature); got != want {
				t.Fatalf("signature = %q, want %q", got, want)
			}

			if err := Verify(tc.secret, d.header, d.body, time.Minute, now.Add(30*time.Second)); err != nil {
				t.Errorf("Verify: %v", err)
			}
			tampered := bytes.Replace(d.body, []byte("batch_abc"), []byte("batch_abd"), 1)
			if err := Verify(tc.secret, d.header, tampered, time.Minute, now); !errors.Is(err, ErrSignature) {
				t.Errorf("Verify(tampered body) = %v, want ErrSignature", err)
			}
			if err := Verify("whsec_"+base64.StdEncoding.EncodeToString([]byte("other key")), d.header, d.body, time.Minute, now); !errors.Is(err, ErrSignature) {
				t.Errorf("Verify(wrong secret) = %v, want ErrSignature", err)
			}
			if err := Verify(tc.secret, d.header, d.body, time.Minute, now.Add(2*time.Minute)); !errors.Is(err, ErrTimestamp) {
				t.Errorf("Verify(old timestamp) = %v, want ErrTimestamp", err)
			}
			if err := Verify(tc.secret, d.header, d.body, time.Minute, now.Add(-2*time.Minute)); !errors.Is(err, ErrTimestamp) {
				t.Errorf("Verify(future timestamp) = %v, want ErrTimestamp", err)
			}
			noSig := d.header.Clone()
			noSig.Del(HeaderSignature)
			if err := Verify(tc.secret, noSig, d.body, time.Minute, now); !errors.Is(err, ErrSignature) {
				t.Errorf("Verify(no signature) = %v, want ErrSignature", err)
			}
			closeSender(t, s)
			if strings.Contains(logs.String(), tc.secret) {
				t.Error("the log contains the secret")
			}
		})
	}
}

func TestRetriesUntilSuccess(t *testing.T) {
	r := newReceiver(t, func(n int, _ http.Header) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	var logs logBuffer
	dir := t.TempDir()
	s := startSender(t, testConfig(t, dir, &logs, r.srv.URL))
	if err := s.Notify(EventBatchFailed, "batch_1"); err != nil {
		t.Fatalf("Notify: %v", err)
	}
	first := r.next(t)
	for i := 2; i <= 3; i++ {
		d := r.next(t)
		if id := d.header.Get(HeaderID); id != first.header.Get(HeaderID) {
			t.Errorf("attempt %d: webhook-id %q, want %q", i, id, first.header.Get(HeaderID))
		}
		if !bytes.Equal(d.body, first.body) {
			t.Errorf("attempt %d: body %s, want %s", i, d.body, first.body)
		}
		if err := Verify(testSecret, d.header, d.body, time.Minute, time.Now()); err != nil {
			t.Errorf("attempt %d: Verify: %v", i, err)
		}
	}
	// Close waits for the attempt in flight, so the 200 has been handled.
	closeSender(t, s)
	if n := r.count.Load(); n != 3 {
		t.Errorf("receiver got %d requests, want 3", n)
	}
	if files := spoolFiles(t, dir); len(files) != 0 {
		t.Errorf("spool still holds %v", files)
	}
	if recs := logs.records(t, "will retry"); len(recs) != 2 {
		t.Errorf("logged %d retries, want 2", len(recs))
	}
}

func TestClientErrorGivesUp(t *testing.T) {
	r := newReceiver(t, always(http.StatusBadRequest))
	var logs logBuffer
	dir := t.TempDir()
	s := startSender(t, testConfig(t, dir, &logs, r.srv.URL+"/in"))
	if err := s.Notify(EventBatchExpired, "batch_2"); err != nil {
		t.Fatalf("Notify: %v", err)
	}
	r.next(t)
	closeSender(t, s)
	if n := r.count.Load(); n != 1 {
		t.Errorf("receiver got %d requests, want 1", n)
	}
	if files := spoolFiles(t, dir); len(files) != 0 {
		t.Errorf("spool still holds %v", files)
	}
	recs := logs.records(t, "given up")
	if len(recs) != 1 {
		t.Fatalf("logged %d give-ups, want 1:\n%s", len(recs), logs.String())
	}
	if recs[0]["level"] != "WARN" || recs[0][keyURL] != r.srv.URL+"/in" || recs[0][keyStatus] != float64(400) {
		t.Errorf("give-up record = %v", recs[0])
	}
	if strings.Contains(logs.String(), testSecret) || strings.Contains(logs.String(), string(testKey)) {
		t.Error("the log contains the secret")
	}
}

func TestMaxAttempts(t *testing.T) {
	r := newReceiver(t, always(http.StatusServiceUnavailable))
	var logs logBuffer
	dir := t.TempDir()
	cfg := testConfig(t, dir, &logs, r.srv.URL)
	cfg.MaxAttempts = 3
	s := startSender(t, cfg)
	if err := s.Notify(EventBatchCompleted, "batch_3"); err != nil {
		t.Fatalf("Notify: %v", err)
	}
	for range 3 {
		r.next(t)
	}
	closeSender(t, s)
	if n := r.count.Load(); n != 3 {
		t.Errorf("receiver got %d requests, want 3", n)
	}
	if files := spoolFiles(t, dir); len(files) != 0 {
		t.Errorf("spool still holds %v", files)
	}
	if recs := logs.records(t, "too many attempts"); len(recs) != 1 || recs[0]["level"] != "WARN" {
		t.Errorf("give-up records = %v", recs)
	}
}

func TestMaxAgeGivesUp(t *testing.T) {
	start := time.Unix(1_750_000_000, 0)
	clk := &clock{t: start}
	// The clock jumps a day ahead while the first attempt is answered, so
	// the retry would come too late.
	r := newReceiver(t, func(int, http.Header) int {
		clk.Set(start.Add(25 * time.Hour))
		return http.StatusServiceUnavailable
	})
	var logs logBuffer
	dir := t.TempDir()
	cfg := testConfig(t, dir, &logs, r.srv.URL)
	cfg.Now = clk.Now
	s := startSender(t, cfg)
	if err := s.Notify(EventBatchCompleted, "batch_4"); err != nil {
		t.Fatalf("Notify: %v", err)
	}
	r.next(t)
	closeSender(t, s)
	if n := r.count.Load(); n != 1 {
		t.Errorf("receiver got %d requests, want 1", n)
	}
	if files := spoolFiles(t, dir); len(files) != 0 {
		t.Errorf("spool still holds %v", files)
	}
	if recs := logs.records(t, "too old"); len(recs) != 1 || recs[0]["level"] != "WARN" {
		t.Errorf("give-up records = %v", recs)
	}
}

func TestRetryAfterClamped(t *testing.T) {
	r := newReceiver(t, func(n int, h http.Header) int {
		if n == 1 {
			h.Set("Retry-After", "3600")
			return http.StatusTooManyRequests
		}
		return http.StatusOK
	})
	var logs logBuffer
	cfg := testConfig(t, t.TempDir(), &logs, r.srv.URL)
	s := startSender(t, cfg)
	if err := s.Notify(EventBatchCancelled, "batch_5"); err != nil {
		t.Fatalf("Notify: %v", err)
	}
	r.next(t)
	r.next(t) // an hour's Retry-After would never get here
	closeSender(t, s)
	recs := logs.records(t, "will retry")
	if len(recs) != 1 {
		t.Fatalf("logged %d retries, want 1", len(recs))
	}
	// slog's JSON handler writes durations in nanoseconds.
	if got := recs[0][keyDelay]; got != float64(cfg.RetryMax) {
		t.Errorf("retry delay = %v ns, want RetryMax %d ns", got, cfg.RetryMax)
	}
}

func TestRetryDelay(t *testing.T) {
	now := time.Unix(1_750_000_000, 0)
	s, err := New(Config{
		URLs: []string{"http://example.invalid/"}, Secret: "k", SpoolDir: t.TempDir(),
		RetryMin: time.Second, RetryMax: 5 * time.Minute, Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		retryAfter string
		want       time.Duration
	}{
		{"2", 2 * time.Second},
		{"0", 0},
		{"3600", 5 * time.Minute},
		{"99999999999999999", 5 * time.Minute},
		{now.Add(30 * time.Second).UTC().Format(http.TimeFormat), 30 * time.Second},
		{now.Add(-time.Hour).UTC().Format(http.TimeFormat), 0},
	} {
		if got := s.retryDelay(1, tc.retryAfter); got != tc.want {
			t.Errorf("Retry-After %q: delay %v, want %v", tc.retryAfter, got, tc.want)
		}
	}
	// Without a usable Retry-After: exponential backoff, jittered within
	// [d/2, d], capped at RetryMax.
	for _, tc := range []struct {
		attempts   int
		retryAfter string
		d          time.Duration
	}{
		{1, "", time.Second},
		{2, "-5", 2 * time.Second},
		{4, "soon", 8 * time.Second},
		{9, "", 256 * time.Second},
		{10, "", 5 * time.Minute},
		{200, "", 5 * time.Minute},
	} {
		for range 50 {
			if got := s.retryDelay(tc.attempts, tc.retryAfter); got < tc.d/2 || got > tc.d {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", tc.attempts, got, tc.d/2, tc.d)
			}
		}
	}
}

// TestSpoolSurvivesRestart: an event notified while the receiver refuses
// it is still in the spool after Close and is delivered by a new Sender.
func TestSpoolSurvivesRestart(t *testing.T) {
	var up atomic.Bool
	r := newReceiver(t, func(int, http.Header) int {
		if up.Load() {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	var logs logBuffer
	dir := t.TempDir()
	cfg := testConfig(t, dir, &logs, r.srv.URL)
	s1 := startSender(t, cfg)
	if err := s1.Notify(EventBatchCompleted, "batch_6"); err != nil {
		t.Fatalf("Notify: %v", err)
	}
	refused := r.next(t)
	closeSender(t, s1)
	if files := spoolFiles(t, dir); len(files) != 1 {
		t.Fatalf("spool after Close = %v, want one event", files)
	}

	up.Store(true)
	for len(r.got) > 0 { // the refused retries of the first sender
		<-r.got
	}
	s2 := startSender(t, cfg)
	d := r.next(t)
	if d.header.Get(HeaderID) != refused.header.Get(HeaderID) || !bytes.Equal(d.body, refused.body) {
		t.Errorf("re-sent %s %s, want %s %s", d.header.Get(HeaderID), d.body, refused.header.Get(HeaderID), refused.body)
	}
	if err := Verify(testSecret, d.header, d.body, time.Minute, time.Now()); err != nil {
		t.Errorf("Verify: %v", err)
	}
	closeSender(t, s2)
	if files := spoolFiles(t, dir); len(files) != 0 {
		t.Errorf("spool still holds %v", files)
	}
}

// TestTwoURLs: each URL gets the event; the spool remembers which are done,
// so a restart re-sends only to the others.
func TestTwoURLs(t *testing.T) {
	a := newReceiver(t, always(http.StatusOK))
	var bUp atomic.Bool
	b := newReceiver(t, func(int, http.Header) int {
		if bUp.Load() {
			return http.StatusNoContent
		}
		return http.StatusBadGateway
	})
	var logs logBuffer
	dir := t.TempDir()
	cfg := testConfig(t, dir, &logs, a.srv.URL, b.srv.URL)
	s1 := startSender(t, cfg)
	if err := s1.Notify(EventBatchCompleted, "batch_7"); err != nil {
		t.Fatalf("Notify: %v", err)
	}
	da, db := a.next(t), b.next(t)
	if da.header.Get(HeaderID) != db.header.Get(HeaderID) || !bytes.Equal(da.body, db.body) {
		t.Errorf("URLs got different events: %s and %s", da.body, db.body)
	}
	closeSender(t, s1)

	files := spoolFiles(t, dir)
	if len(files) != 1 {
		t.Fatalf("spool = %v, want one event", files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var rec spoolRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.Pending, []string{b.srv.URL}) {
		t.Fatalf("spooled pending URLs = %v, want only %s", rec.Pending, b.srv.URL)
	}

	bUp.Store(true)
	for len(b.got) > 0 {
		<-b.got
	}
	s2 := startSender(t, cfg)
	if d := b.next(t); d.header.Get(HeaderID) != da.header.Get(HeaderID) {
		t.Errorf("re-sent event %s, want %s", d.header.Get(HeaderID), da.header.Get(HeaderID))
	}
	closeSender(t, s2)
	if n := a.count.Load(); n != 1 {
		t.Errorf("first URL got %d requests, want 1", n)
	}
	if files := spoolFiles(t, dir); len(files) != 0 {
		t.Errorf("spool still holds %v", files)
	}
}

// TestBadSpoolFiles: a torn file is moved aside and a leftover temporary
// file removed, and neither stops the good events.
func TestBadSpoolFiles(t *testing.T) {
	r := newReceiver(t, always(http.StatusOK))
	var logs logBuffer
	dir := t.TempDir()
	cfg := testConfig(t, dir, &logs, r.srv.URL)

	// A good event, spooled by a Sender that never delivered it.
	s1, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	good := &event{id: "evt_00000000000000000000000000000001", typ: EventBatchCompleted, batch: "batch_8",
		created: time.Now(), body: []byte(`{"id":"evt_00000000000000000000000000000001"}`), pending: []string{r.srv.URL}}
	if err := s1.writeEvent(good); err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(dir, "evt_00000000000000000000000000000002.json")
	if err := os.WriteFile(torn, []byte(`{"version":1,"id":"evt_0000`), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".evt_00000000000000000000000000000003.123"+tmpExt)
	if err := os.WriteFile(tmp, []byte(`{"vers`), 0o600); err != nil {
		t.Fatal(err)
	}

	s2 := startSender(t, cfg)
	if d := r.next(t); d.header.Get(HeaderID) != good.id || !bytes.Equal(d.body, good.body) {
		t.Errorf("delivered %s %s, want the good event", d.header.Get(HeaderID), d.body)
	}
	closeSender(t, s2)
	if _, err := os.Stat(torn + corruptExt); err != nil {
		t.Errorf("torn file not moved aside: %v", err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left: %v", err)
	}
	if files := spoolFiles(t, dir); len(files) != 0 {
		t.Errorf("spool still holds %v", files)
	}
	if recs := logs.records(t, "unreadable spool file"); len(recs) != 1 {
		t.Errorf("logged %d unreadable files, want 1", len(recs))
	}
}

func TestNotifyErrors(t *testing.T) {
	var logs logBuffer
	cfg := testConfig(t, t.TempDir(), &logs, "http://127.0.0.1:1/")
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Notify(EventBatchCompleted, "batch_9"); !errors.Is(err, ErrNotStarted) {
		t.Errorf("Notify before Start = %v, want ErrNotStarted", err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.Notify("batch.in_progress", "batch_9"); !errors.Is(err, ErrEventType) {
		t.Errorf("Notify(batch.in_progress) = %v, want ErrEventType", err)
	}
	if err := s.Notify(EventBatchCompleted, ""); err == nil {
		t.Error("Notify with no batch id succeeded")
	}
	closeSender(t, s)
	if err := s.Notify(EventBatchCompleted, "batch_9"); !errors.Is(err, ErrClosed) {
		t.Errorf("Notify after Close = %v, want ErrClosed", err)
	}
	if files := spoolFiles(t, cfg.SpoolDir); len(files) != 0 {
		t.Errorf("rejected events were spooled: %v", files)
	}
}

func TestConfigValidate(t *testing.T) {
	valid := Config{URLs: []string{"https://example.com/hook"}, Secret: "s", SpoolDir: "spool"}
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		field  string
		modify func(*Config)
	}{
		{"URLs", func(c *Config) { c.URLs = nil }},
		{"URLs[1]", func(c *Config) { c.URLs = append(c.URLs, "ftp://example.com/") }},
		{"URLs[1]", func(c *Config) { c.URLs = append(c.URLs, "/relative") }},
		{"URLs[1]", func(c *Config) { c.URLs = append(c.URLs, "http://") }},
		{"URLs[1]", func(c *Config) { c.URLs = append(c.URLs, "http://a b/") }},
		{"URLs[1]", func(c *Config) { c.URLs = append(c.URLs, c.URLs[0]) }},
		{"Secret", func(c *Config) { c.Secret = "" }},
		{"Secret", func(c *Config) { c.Secret = "whsec_!!!" }},
		{"SpoolDir", func(c *Config) { c.SpoolDir = "" }},
		{"MaxAttempts", func(c *Config) { c.MaxAttempts = -1 }},
		{"MaxAge", func(c *Config) { c.MaxAge = -time.Second }},
		{"RetryMin", func(c *Config) { c.RetryMin = -time.Second }},
		{"RetryMin", func(c *Config) { c.RetryMin = time.Hour }},
		{"RetryMax", func(c *Config) { c.RetryMax = -time.Second }},
		{"Timeout", func(c *Config) { c.Timeout = -time.Second }},
		{"Workers", func(c *Config) { c.Workers = -1 }},
	} {
		c := valid
		c.URLs = slices.Clone(valid.URLs)
		tc.modify(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%s: Validate() = %v, want an error naming it", tc.field, err)
		}
		if _, nerr := New(c); nerr == nil {
			t.Errorf("%s: New accepted the config", tc.field)
		}
	}
}

// TestCloseAbortsHungAttempt: Close whose ctx ends aborts an attempt the
// receiver never answers, and the event stays in the spool.
func TestCloseAbortsHungAttempt(t *testing.T) {
	release := make(chan struct{})
	got := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		got <- struct{}{}
		<-release
	}))
	defer srv.Close()
	defer close(release) // before srv.Close, which waits for the handler
	var logs logBuffer
	dir := t.TempDir()
	s := startSender(t, testConfig(t, dir, &logs, srv.URL))
	if err := s.Notify(EventBatchCompleted, "batch_10"); err != nil {
		t.Fatalf("Notify: %v", err)
	}
	select {
	case <-got:
	case <-time.After(waitLimit):
		t.Fatal("no delivery")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Close = %v, want context.Canceled", err)
	}
	if files := spoolFiles(t, dir); len(files) != 1 {
		t.Errorf("spool = %v, want the event kept", files)
	}
	if recs := logs.records(t, "given up"); len(recs) != 0 {
		t.Errorf("an aborted attempt was given up: %v", recs)
	}
}

// A spool folder that is a symbolic link is refused at start: no event is
// ever written where it points.
func TestSpoolDirLinkIsRefused(t *testing.T) {
	outside := t.TempDir()
	dir := filepath.Join(t.TempDir(), "webhooks")
	if err := os.Symlink(outside, dir); err != nil {
		t.Fatal(err)
	}
	s, err := New(testConfig(t, dir, &logBuffer{}, "http://example.invalid/"))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start(t.Context())
	if err == nil {
		_ = s.Close(context.Background())
		t.Fatal("a sender started on a linked spool folder")
	}
	if !errors.Is(err, fsx.ErrLink) || !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q does not refuse the link at %s", err, dir)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("%d entries written through the link", len(ents))
	}
}
