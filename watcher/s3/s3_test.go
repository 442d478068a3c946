package s3

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/internal/goroutines"
	"github.com/batchd/batchd/internal/miniotest"
	"github.com/batchd/batchd/internal/syncbuf"
	"github.com/batchd/batchd/watcher"
)

func testBucket(t *testing.T, srv *miniotest.Server, bucket, owner string, set func(*Config)) *Bucket {
	t.Helper()
	cfg := DefaultConfig("s3://" + bucket + "/team")
	cfg.Endpoint = srv.Endpoint
	cfg.AccessKey, cfg.SecretKey = miniotest.AccessKey, miniotest.SecretKey
	cfg.Owner = owner
	cfg.RetryMin, cfg.RetryMax = 20*time.Millisecond, 200*time.Millisecond
	if set != nil {
		set(&cfg)
	}
	b, err := NewBucket(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct{ in, bucket, prefix, err string }{
		{"s3://b", "b", "", ""},
		{"s3://b/", "b", "", ""},
		{"s3://b/a/c/", "b", "a/c", ""},
		{"http://b/a", "", "", "not an s3://"},
		{"s3:///a", "", "", "no bucket"},
		{"s3://b/a?x=1", "", "", "only s3://"},
	} {
		b, p, err := ParseURL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || b != tc.bucket || p != tc.prefix {
			t.Errorf("%s: got %q %q %v", tc.in, b, p, err)
		}
	}
}

// One claim wins; a live lease holds others off; an expired one is taken
// over by exactly one daemon, and the old owner's renewal then fails.
func TestLeaseExclusive(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	ttl := func(c *Config) { c.LeaseTTL = time.Second }
	a := testBucket(t, srv, bucket, "a", ttl)
	b := testBucket(t, srv, bucket, "b", ttl)
	c := testBucket(t, srv, bucket, "c", ttl)
	ctx := context.Background()
	la, err := a.Claim(ctx, "x", "team/inbox/x.jsonl", "e1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Claim(ctx, "x", "team/inbox/x.jsonl", "e1"); !errors.Is(err, ErrHeld) {
		t.Fatalf("second claim: %v, want ErrHeld", err)
	}
	if err := la.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	// Let a's lease lapse (its clock decides: the TTL is 1s).
	for deadline := time.Now().Add(5 * time.Second); ; {
		cur, _, err := a.readLease(ctx, la.key)
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().UnixMilli() > cur.Expires {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lease never expired")
		}
		time.Sleep(20 * time.Millisecond)
	}
	lb, errB := b.Claim(ctx, "x", "team/inbox/x.jsonl", "e1")
	_, errC := c.Claim(ctx, "x", "team/inbox/x.jsonl", "e1")
	if errB != nil || !errors.Is(errC, ErrHeld) {
		t.Fatalf("takeover: b %v, c %v; want b to win and c held off", errB, errC)
	}
	if !lb.Resumed || lb.PrevOwner != "a" {
		t.Fatalf("takeover not reported: resumed %v from %q", lb.Resumed, lb.PrevOwner)
	}
	if err := la.Renew(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("stale owner's renewal: %v, want ErrLeaseLost", err)
	}
	// The stale owner's release leaves b's lease alone.
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lb.Renew(ctx); err != nil {
		t.Fatalf("b lost its lease to a's release: %v", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "x", "team/inbox/x.jsonl", "e1"); err != nil {
		t.Fatalf("claim after release: %v", err)
	}
}

// Conditional uploads: a multipart upload (over 16 MiB) to an object that
// changed since it was observed fails, and so does a create over an
// existing object.
func TestConditionalUpload(t *testing.T) {
	srv := miniotest.Start(t)
	b := testBucket(t, srv, srv.Bucket(), "a", nil)
	ctx := context.Background()
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte("0123456789abcdef\n"), (20<<20)/17), 0o644); err != nil {
		t.Fatal(err)
	}
	key := b.OutboxKey("x.output.jsonl")
	tag1, err := b.Upload(ctx, key, big, "application/jsonl", IfETag(""))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Upload(ctx, key, big, "application/jsonl", IfETag("")); !errors.Is(err, ErrPrecondition) {
		t.Fatalf("create over an existing object: %v, want ErrPrecondition", err)
	}
	// (The pinned MinIO does not check If-Match when a multipart upload
	// completes, which is why results are published through a record
	// created with If-None-Match; see TestPublishOnce.)
	if err := os.WriteFile(big, bytes.Repeat([]byte("fedcba9876543210\n"), (20<<20)/17), 0o644); err != nil {
		t.Fatal(err)
	}
	tag2, err := b.Upload(ctx, key, big, "application/jsonl", IfETag(tag1))
	if err != nil {
		t.Fatalf("replace at the observed etag: %v", err)
	}
	// Download streams it back whole.
	got := filepath.Join(dir, "got")
	if err := b.Download(ctx, key, tag2, got); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(big)
	if data, _ := os.ReadFile(got); !bytes.Equal(data, want) {
		t.Fatalf("downloaded %d bytes, want %d", len(data), len(want))
	}
	if err := b.Download(ctx, key, tag1, got); !errors.Is(err, ErrChanged) {
		t.Fatalf("download at a stale etag: %v, want ErrChanged", err)
	}
}

// Exactly one daemon's results are published for an input version: the
// first commit record wins, a later one gets the winner's record back, and
// installing copies the winner's staged objects to the outbox.
func TestPublishOnce(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	a := testBucket(t, srv, bucket, "a", nil)
	b := testBucket(t, srv, bucket, "b", nil)
	ctx := context.Background()
	stage := func(x *Bucket, content string) Publication {
		sk := x.StagingKey("job", "e1", "job.output.jsonl")
		if _, err := x.PutBytes(ctx, sk, []byte(content), "application/jsonl", Any); err != nil {
			t.Fatal(err)
		}
		return Publication{Owner: x.Owner(), Objects: map[string]string{x.OutboxKey("job.output.jsonl"): sk}}
	}
	pa, pb := stage(a, "from a\n"), stage(b, "from b\n")
	got, err := b.Commit(ctx, "job", "e1", pb)
	if err != nil || got.Owner != "b" {
		t.Fatalf("first commit: %+v %v", got, err)
	}
	got, err = a.Commit(ctx, "job", "e1", pa)
	if err != nil || got.Owner != "b" {
		t.Fatalf("second commit got %+v %v, want b's record", got, err)
	}
	if err := a.Install(ctx, got); err != nil {
		t.Fatal(err)
	}
	if data, _ := srv.Get(bucket, "team/outbox/job.output.jsonl"); string(data) != "from b\n" {
		t.Fatalf("outbox holds %q, want b's results", data)
	}
	if err := a.Unpublish(ctx, "job", "e1"); err != nil {
		t.Fatal(err)
	}
	if keys := srv.Keys(bucket, "team/.batchd/"); len(keys) != 0 {
		t.Fatalf("left after unpublish: %v", keys)
	}
}

// Inputs are found by the listing alone (no notifications), each version
// once; options files and other names are ignored.
// listingWatcher is an open watcher of a fresh bucket's team/ prefix,
// listing every 50 ms.
func listingWatcher(t *testing.T) (*miniotest.Server, string, *Watcher) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	b := testBucket(t, srv, bucket, "a", func(c *Config) {
		c.ListInterval = 50 * time.Millisecond
	})
	w := NewWatcher(b)
	if err := w.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	return srv, bucket, w
}

func TestWatcherListing(t *testing.T) {
	srv, bucket, w := listingWatcher(t)
	srv.Put(bucket, "team/inbox/a.jsonl", []byte("{}\n"))
	srv.Put(bucket, "team/inbox/a.options.json", []byte("{}"))
	srv.Put(bucket, "team/inbox/b.cancel", nil)
	srv.Put(bucket, "team/inbox/c.txt", []byte("x"))
	srv.Put(bucket, "team/outbox/d.jsonl", []byte("{}\n"))
	got := map[string]watcher.Event{}
	for len(got) < 2 {
		ev := <-w.Events()
		if _, dup := got[ev.Path]; dup {
			t.Fatalf("delivered twice: %+v", ev)
		}
		got[ev.Path] = ev
	}
	if ev := got["team/inbox/a.jsonl"]; ev.Kind != watcher.Input || ev.Name != "a" || ev.Format != "jsonl" || ev.Version == "" {
		t.Fatalf("input event %+v", ev)
	}
	if ev := got["team/inbox/b.cancel"]; ev.Kind != watcher.Cancel || ev.Name != "b" {
		t.Fatalf("cancel event %+v", ev)
	}
	// A new version is delivered again; Forget lets the same one be redelivered.
	srv.Put(bucket, "team/inbox/a.jsonl", []byte("{}\n{}\n"))
	if ev := <-w.Events(); ev.Path != "team/inbox/a.jsonl" || ev.Version == got["team/inbox/a.jsonl"].Version {
		t.Fatalf("new version: %+v", ev)
	}
	w.Forget("team/inbox/b.cancel")
	if ev := <-w.Events(); ev.Path != "team/inbox/b.cancel" {
		t.Fatalf("after Forget: %+v", ev)
	}
}

// A missing bucket and bad credentials are clear errors at once, naming
// the bucket; a server that is down is retried until it is up.
func TestConnectErrors(t *testing.T) {
	srv := miniotest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := DefaultConfig("s3://no-such-bucket/p")
	cfg.Endpoint, cfg.AccessKey, cfg.SecretKey = srv.Endpoint, miniotest.AccessKey, miniotest.SecretKey
	b, _ := NewBucket(cfg)
	if err := b.Connect(ctx); err == nil || !strings.Contains(err.Error(), `bucket "no-such-bucket" does not exist`) {
		t.Fatalf("missing bucket: %v", err)
	}
	bucket := srv.Bucket()
	cfg.URL, cfg.SecretKey = "s3://"+bucket, "wrong"
	b, _ = NewBucket(cfg)
	if err := b.Connect(ctx); err == nil || !strings.Contains(err.Error(), `access denied to bucket "`+bucket+`"`) {
		t.Fatalf("bad credentials: %v", err)
	}
	srv.Stop()
	cfg.SecretKey = miniotest.SecretKey
	cfg.RetryMin, cfg.RetryMax = 20*time.Millisecond, 100*time.Millisecond
	b, _ = NewBucket(cfg)
	connected := make(chan error, 1)
	go func() { connected <- b.Connect(ctx) }()
	select {
	case err := <-connected:
		t.Fatalf("connected to a stopped server: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	srv.Start()
	if err := <-connected; err != nil {
		t.Fatalf("after the server came up: %v", err)
	}
}

// Connect's probe reads one object of a long inbox and stops: the
// client's listing goroutine ends too, instead of blocking forever on the
// object the probe does not read.
func TestConnectProbeEndsListing(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	b := testBucket(t, srv, bucket, "a", nil)
	for _, name := range []string{"a", "b", "c", "d"} {
		srv.Put(bucket, "team/inbox/"+name+".jsonl", []byte("{}\n"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 3 {
		if err := b.Connect(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The drained channel is closed, so the goroutine is on its way out.
	goroutines.WaitGone(t, time.Minute, "minio-go/v7.(*Client).ListObjects")
}

// Open with a context that is already done starts nothing; the listing of
// an open watcher outlives Open's context (it runs until Close).
func TestWatcherOpenContext(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	b := testBucket(t, srv, bucket, "a", func(c *Config) {
		c.ListInterval = 50 * time.Millisecond
	})
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := NewWatcher(b).Open(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with a cancelled context: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := NewWatcher(b)
	if err := w.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	cancel()
	srv.Put(bucket, "team/inbox/a.jsonl", []byte("{}\n"))
	if ev := <-w.Events(); ev.Path != "team/inbox/a.jsonl" {
		t.Fatalf("event %+v", ev)
	}
}

// dropProxy forwards TCP to target; while drops > 0, a connection whose
// response passes limit bytes is cut there (and drops is decremented).
type dropProxy struct {
	ln     net.Listener
	target string
	limit  int64
	drops  atomic.Int32
}

func newDropProxy(t *testing.T, target string, limit int64, drops int32) *dropProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: target, limit: limit}
	p.drops.Store(drops)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *dropProxy) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	go io.Copy(s, c)
	if p.drops.Load() > 0 {
		n, _ := io.CopyN(c, s, p.limit)
		if n == p.limit && p.drops.Add(-1) >= 0 {
			return // cut mid-response
		}
	}
	io.Copy(c, s)
}

// A download whose connection drops mid-object resumes with a ranged read
// from where it stopped, and the file is whole.
func TestDownloadResumesAfterDroppedConnection(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	data := bytes.Repeat([]byte("line of a big batch input\n"), 200_000) // 5.2 MB
	srv.Put(bucket, "team/inbox/big.jsonl", data)
	proxy := newDropProxy(t, srv.Endpoint, 1<<20, 2)
	var logs syncbuf.Buffer
	b := testBucket(t, srv, bucket, "a", func(c *Config) {
		c.Endpoint = proxy.ln.Addr().String()
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	proxy.drops.Store(2) // Connect's requests went through whole
	dst := filepath.Join(t.TempDir(), "big.jsonl")
	if err := b.Download(context.Background(), "team/inbox/big.jsonl", "", dst); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dst)
	if !bytes.Equal(got, data) {
		t.Fatalf("downloaded %d bytes, want %d identical ones", len(got), len(data))
	}
	if n := strings.Count(logs.String(), "download interrupted; resuming"); n != 2 {
		t.Fatalf("%d resumes logged, want 2:\n%s", n, logs.String())
	}
}

// Inbox keys whose names batchd cannot use are refused, named so that no
// derived key leaves its prefix; other nested keys are ignored.
func TestWatcherClassify(t *testing.T) {
	w := &Watcher{b: &Bucket{prefix: "team", log: slog.New(slog.DiscardHandler)}}
	long := strings.Repeat("l", filecontract.MaxNameBytes+1)
	for _, tt := range []struct {
		key  string
		kind watcher.Kind
		name string
		code string
	}{
		{"team/inbox/a.jsonl", watcher.Input, "a", ""},
		{"team/inbox/a.json", watcher.Input, "a", ""},
		{"team/inbox/a.cancel", watcher.Cancel, "a", ""},
		{"team/inbox/a.options.json", 0, "", ""},
		{"team/inbox/.hidden.jsonl", 0, "", ""},
		{"team/inbox/a.jsonl/", 0, "", ""},
		{"team/inbox/sub/", 0, "", ""},
		{"team/inbox/sub/b.cancel", 0, "", ""},
		{"team/inbox/sub/b.options.json", 0, "", ""},
		{"team/inbox/sub/.b.jsonl", 0, "", ""},
		{"team/outbox/a.jsonl", 0, "", ""},
		{"team/inbox/sub/b.jsonl", watcher.Refused, filecontract.SafeName("sub/b"), filecontract.CodeInvalidName},
		{"team/inbox//b.jsonl", watcher.Refused, filecontract.SafeName("/b"), filecontract.CodeInvalidName},
		{"team/inbox/new\nline.jsonl", watcher.Refused, filecontract.SafeName("new\nline"), filecontract.CodeInvalidName},
		// No request can name these as themselves: ignored, not refused.
		{"team/inbox/../../b.jsonl", 0, "", ""},
		{"team/inbox/../outbox/b.jsonl", 0, "", ""},
		{"team/inbox/./b.jsonl", 0, "", ""},
		{"team/inbox/a/../b.jsonl", 0, "", ""},
		{"team/inbox/bad\xff.json", 0, "", ""},
		{"team/inbox/" + strings.Repeat("k", 1024) + ".jsonl", 0, "", ""},
		{"team/inbox/" + long + ".jsonl", watcher.Refused, filecontract.SafeName(long), filecontract.CodeNameTooLong},
	} {
		ev, ok := w.classify(tt.key)
		if !ok {
			if tt.kind != 0 {
				t.Errorf("%q ignored, want %v", tt.key, tt.kind)
			}
			continue
		}
		if ev.Kind != tt.kind || ev.Name != tt.name || ev.Code != tt.code || ev.Path != tt.key {
			t.Errorf("%q: %+v, want %v %q %q", tt.key, ev, tt.kind, tt.name, tt.code)
		}
		if strings.Contains(ev.Name, "/") || strings.HasPrefix(ev.Name, ".") {
			t.Errorf("%q: name %q would leave the outbox prefix", tt.key, ev.Name)
		}
	}
}

// The listing finds inputs in nested prefixes too, and refuses them.
func TestWatcherRefusesNestedAndBadNames(t *testing.T) {
	srv, bucket, w := listingWatcher(t)
	long := strings.Repeat("l", filecontract.MaxNameBytes+1)
	srv.Put(bucket, "team/inbox/sub/b.jsonl", []byte("{}\n"))
	srv.Put(bucket, "team/inbox/"+long+".jsonl", []byte("{}\n"))
	srv.Put(bucket, "team/inbox/sub/b.options.json", []byte("{}"))
	srv.Put(bucket, "team/inbox/ok.jsonl", []byte("{}\n"))
	got := map[string]watcher.Event{}
	for len(got) < 3 {
		ev := <-w.Events()
		got[ev.Path] = ev
	}
	if ev := got["team/inbox/sub/b.jsonl"]; ev.Kind != watcher.Refused || ev.Code != filecontract.CodeInvalidName || ev.Name != filecontract.SafeName("sub/b") || ev.Version == "" {
		t.Fatalf("nested input: %+v", ev)
	}
	if ev := got["team/inbox/"+long+".jsonl"]; ev.Kind != watcher.Refused || ev.Code != filecontract.CodeNameTooLong {
		t.Fatalf("long name: %+v", ev)
	}
	if ev := got["team/inbox/ok.jsonl"]; ev.Kind != watcher.Input {
		t.Fatalf("plain input: %+v", ev)
	}
}
