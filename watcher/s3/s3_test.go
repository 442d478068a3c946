package s3

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/internal/miniotest"
	"github.com/batchd/batchd/store/bucket/s3client"
	"github.com/batchd/batchd/store/bucket/s3client/s3clienttest"
	"github.com/batchd/batchd/watcher"
)

// listingBucket is a connected client of bucket's team/ prefix on srv,
// listing every 50 ms.
func listingBucket(t *testing.T, srv *miniotest.Server, bucket string) *s3client.Bucket {
	cfg := s3clienttest.Config(srv.Endpoint, "s3://"+bucket+"/team", "a")
	cfg.ListInterval = 50 * time.Millisecond
	return s3clienttest.Connect(t, cfg)
}

// listingWatcher is an open watcher of a fresh bucket's team/ prefix,
// listing every 50 ms.
func listingWatcher(t *testing.T) (*miniotest.Server, string, *Watcher) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	b := listingBucket(t, srv, bucket)
	w := NewWatcher(b)
	if err := w.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	return srv, bucket, w
}

// Inputs are found by the listing alone (no notifications), each version
// once; options files and other names are ignored.
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

// Open with a context that is already done starts nothing; the listing of
// an open watcher outlives Open's context (it runs until Close).
func TestWatcherOpenContext(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	b := listingBucket(t, srv, bucket)
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

// Inbox keys whose names batchd cannot use are refused, named so that no
// derived key leaves its prefix; other nested keys are ignored.
func TestWatcherClassify(t *testing.T) {
	cfg := s3client.DefaultConfig("s3://b/team")
	cfg.Endpoint, cfg.Logger = "127.0.0.1:9", slog.New(slog.DiscardHandler)
	b, err := s3client.NewBucket(cfg) // no I/O
	if err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(b)
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
