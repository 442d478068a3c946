package bucket_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/internal/miniotest"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/store/bucket"
	"github.com/batchd/batchd/store/bucket/s3client"
	"github.com/batchd/batchd/store/bucket/s3client/s3clienttest"
)

// stallProxy is a chaos wrapper of the bucket boundary: a reverse proxy on
// loopback in front of a real MinIO that holds every checkpoint upload
// until release is closed (or the client gives up).
type stallProxy struct {
	*httptest.Server
	release   chan struct{}
	stalledAt atomic.Int64 // Unix ms of the first held upload; 0 before
}

func newStallProxy(t *testing.T, endpoint string) *stallProxy {
	p := &stallProxy{release: make(chan struct{})}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: endpoint})
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) { w.WriteHeader(http.StatusBadGateway) }
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/.batchd/checkpoints/") {
			p.stalledAt.CompareAndSwap(0, time.Now().UnixMilli())
			select {
			case <-p.release:
			case <-r.Context().Done():
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	t.Cleanup(p.unstall)
	return p
}

func (p *stallProxy) unstall() {
	select {
	case <-p.release:
	default:
		close(p.release)
	}
}

func newBucket(t *testing.T, endpoint, url, owner string, ttl time.Duration) *s3client.Bucket {
	t.Helper()
	cfg := s3clienttest.Config(endpoint, url, owner)
	cfg.LeaseTTL = ttl
	return s3clienttest.Connect(t, cfg)
}

// A checkpoint upload that hangs does not hold up the lease's renewal:
// the lease is renewed again and again while the upload waits, and
// another daemon cannot take the batch over.
func TestRenewalNotHeldUpBySlowUploads(t *testing.T) {
	srv := miniotest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	proxy := newStallProxy(t, srv.Endpoint)
	name := srv.Bucket()
	url := "s3://" + name + "/team"
	const ttl = 2 * time.Second
	b := newBucket(t, strings.TrimPrefix(proxy.URL, "http://"), url, "a", ttl)
	key := b.InboxKey("r.jsonl")
	srv.Put(name, key, []byte("{\"custom_id\":\"a\"}\n"))
	tag, _, err := b.Stat(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	st, err := bucket.Open(ctx, bucket.Config{Bucket: b, Spool: t.TempDir(), CheckpointInterval: 20 * time.Millisecond}, "r", key, tag)
	if err != nil || st == nil {
		t.Fatalf("Open: %v %v", st, err)
	}
	if err := st.Checkpoint([]pipeline.Committed{{Line: 1, Data: []byte(`{"custom_id":"a"}`)}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for proxy.stalledAt.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint upload was attempted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Wait for a renewal written a whole TTL after the upload began to
	// hang: the lease then expires two TTLs after it.
	leaseKey := b.Key(".batchd/leases", "r.json")
	want := proxy.stalledAt.Load() + 2*ttl.Milliseconds()
	var expires int64
	for deadline = time.Now().Add(time.Minute); expires <= want; {
		if time.Now().After(deadline) {
			t.Fatalf("the lease was not renewed while a checkpoint upload hung: it expires at %d, want after %d", expires, want)
		}
		if data, ok := srv.Get(name, leaseKey); ok {
			var l struct {
				Expires int64 `json:"expires_unix_ms"`
			}
			if err := json.Unmarshal(data, &l); err != nil {
				t.Fatalf("lease object %s: %v", data, err)
			}
			expires = l.Expires
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st.Context().Err() != nil {
		t.Fatalf("the run stopped: %v", context.Cause(st.Context()))
	}
	// Another daemon finds the lease live.
	other := newBucket(t, srv.Endpoint, url, "b", ttl)
	if err := bucket.Claim(ctx, other, "r", key, tag); !errors.Is(err, bucket.ErrHeld) {
		t.Fatalf("claim by another daemon: %v, want ErrHeld", err)
	}
	proxy.unstall()
	if err := st.Close(nil); err != nil {
		t.Fatal(err)
	}
}
