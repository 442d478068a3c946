package s3client_test

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

	"github.com/batchd/batchd/internal/goroutines"
	"github.com/batchd/batchd/internal/miniotest"
	"github.com/batchd/batchd/internal/syncbuf"
	"github.com/batchd/batchd/store/bucket/s3client"
	"github.com/batchd/batchd/store/bucket/s3client/s3clienttest"
)

// testBucket is a connected client of bucket's team/ prefix on srv.
func testBucket(t *testing.T, srv *miniotest.Server, bucket, owner string, set func(*s3client.Config)) *s3client.Bucket {
	t.Helper()
	cfg := s3clienttest.Config(srv.Endpoint, "s3://"+bucket+"/team", owner)
	if set != nil {
		set(&cfg)
	}
	return s3clienttest.Connect(t, cfg)
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
		b, p, err := s3client.ParseURL(tc.in)
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
	tag1, err := b.Upload(ctx, key, big, "application/jsonl", s3client.IfETag(""))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Upload(ctx, key, big, "application/jsonl", s3client.IfETag("")); !errors.Is(err, s3client.ErrPrecondition) {
		t.Fatalf("create over an existing object: %v, want ErrPrecondition", err)
	}
	// (The pinned MinIO does not check If-Match when a multipart upload
	// completes, which is why results are published through a record
	// created with If-None-Match; see TestPublishOnce.)
	if err := os.WriteFile(big, bytes.Repeat([]byte("fedcba9876543210\n"), (20<<20)/17), 0o644); err != nil {
		t.Fatal(err)
	}
	tag2, err := b.Upload(ctx, key, big, "application/jsonl", s3client.IfETag(tag1))
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
	if err := b.Download(ctx, key, tag1, got); !errors.Is(err, s3client.ErrChanged) {
		t.Fatalf("download at a stale etag: %v, want ErrChanged", err)
	}
}

// A missing bucket and bad credentials are clear errors at once, naming
// the bucket; a server that is down is retried until it is up.
func TestConnectErrors(t *testing.T) {
	srv := miniotest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := s3client.DefaultConfig("s3://no-such-bucket/p")
	cfg.Endpoint, cfg.AccessKey, cfg.SecretKey = srv.Endpoint, miniotest.AccessKey, miniotest.SecretKey
	b, _ := s3client.NewBucket(cfg)
	if err := b.Connect(ctx); err == nil || !strings.Contains(err.Error(), `bucket "no-such-bucket" does not exist`) {
		t.Fatalf("missing bucket: %v", err)
	}
	bucket := srv.Bucket()
	cfg.URL, cfg.SecretKey = "s3://"+bucket, "wrong"
	b, _ = s3client.NewBucket(cfg)
	if err := b.Connect(ctx); err == nil || !strings.Contains(err.Error(), `access denied to bucket "`+bucket+`"`) {
		t.Fatalf("bad credentials: %v", err)
	}
	srv.Stop()
	cfg.SecretKey = miniotest.SecretKey
	cfg.RetryMin, cfg.RetryMax = 20*time.Millisecond, 100*time.Millisecond
	b, _ = s3client.NewBucket(cfg)
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
	b := testBucket(t, srv, bucket, "a", func(c *s3client.Config) {
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
