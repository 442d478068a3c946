package bucket

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batchd/batchd/internal/miniotest"
	"github.com/batchd/batchd/store/bucket/s3client"
	"github.com/batchd/batchd/store/bucket/s3client/s3clienttest"
)

// testBucket is a connected client of bucket's team/ prefix on srv for the
// daemon named owner, its leases lasting ttl (0: the default).
func testBucket(t *testing.T, srv *miniotest.Server, bucket, owner string, ttl time.Duration) *s3client.Bucket {
	t.Helper()
	cfg := s3clienttest.Config(srv.Endpoint, "s3://"+bucket+"/team", owner)
	if ttl != 0 {
		cfg.LeaseTTL = ttl
	}
	return s3clienttest.Connect(t, cfg)
}

// One claim wins; a live lease holds others off; an expired one is taken
// over by exactly one daemon, and the old owner's renewal then fails.
func TestLeaseExclusive(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	a := testBucket(t, srv, bucket, "a", time.Second)
	b := testBucket(t, srv, bucket, "b", time.Second)
	c := testBucket(t, srv, bucket, "c", time.Second)
	ctx := context.Background()
	la, err := claim(ctx, a, "x", "team/inbox/x.jsonl", "e1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := claim(ctx, b, "x", "team/inbox/x.jsonl", "e1"); !errors.Is(err, errHeld) {
		t.Fatalf("second claim: %v, want ErrHeld", err)
	}
	if err := la.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	// Let a's lease lapse (its clock decides: the TTL is 1s).
	for deadline := time.Now().Add(5 * time.Second); ; {
		cur, _, err := readLease(ctx, a, la.key)
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
	lb, errB := claim(ctx, b, "x", "team/inbox/x.jsonl", "e1")
	_, errC := claim(ctx, c, "x", "team/inbox/x.jsonl", "e1")
	if errB != nil || !errors.Is(errC, errHeld) {
		t.Fatalf("takeover: b %v, c %v; want b to win and c held off", errB, errC)
	}
	if !lb.resumed || lb.prevOwner != "a" {
		t.Fatalf("takeover not reported: resumed %v from %q", lb.resumed, lb.prevOwner)
	}
	if err := la.Renew(ctx); !errors.Is(err, errLeaseTaken) {
		t.Fatalf("stale owner's renewal: %v, want errLeaseTaken", err)
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
	if _, err := claim(ctx, c, "x", "team/inbox/x.jsonl", "e1"); err != nil {
		t.Fatalf("claim after release: %v", err)
	}
}

// Exactly one daemon's results are published for an input version: the
// first commit record wins, a later one gets the winner's record back, and
// installing copies the winner's staged objects to the outbox.
func TestPublishOnce(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	a := testBucket(t, srv, bucket, "a", 0)
	b := testBucket(t, srv, bucket, "b", 0)
	ctx := context.Background()
	stage := func(x *s3client.Bucket, content string) publication {
		sk := stagingKey(x, "job", "e1", "job.output.jsonl")
		if _, err := x.PutBytes(ctx, sk, []byte(content), "application/jsonl", s3client.Any); err != nil {
			t.Fatal(err)
		}
		return publication{Owner: x.Owner(), Objects: map[string]string{x.OutboxKey("job.output.jsonl"): sk}}
	}
	pa, pb := stage(a, "from a\n"), stage(b, "from b\n")
	got, err := commit(ctx, b, "job", "e1", pb)
	if err != nil || got.Owner != "b" {
		t.Fatalf("first commit: %+v %v", got, err)
	}
	got, err = commit(ctx, a, "job", "e1", pa)
	if err != nil || got.Owner != "b" {
		t.Fatalf("second commit got %+v %v, want b's record", got, err)
	}
	if err := install(ctx, a, got); err != nil {
		t.Fatal(err)
	}
	if data, _ := srv.Get(bucket, "team/outbox/job.output.jsonl"); string(data) != "from b\n" {
		t.Fatalf("outbox holds %q, want b's results", data)
	}
	if err := unpublish(ctx, a, "job", "e1"); err != nil {
		t.Fatal(err)
	}
	if keys := srv.Keys(bucket, "team/.batchd/"); len(keys) != 0 {
		t.Fatalf("left after unpublish: %v", keys)
	}
}

// Unretire brings a retired input back to the inbox with its options and
// a retry mark, and takes them out of done/; an input not in done/, or one
// whose name waits in the inbox already, is refused and changes nothing.
func TestUnretire(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.Bucket()
	b := testBucket(t, srv, bucket, "a", 0)
	ctx := context.Background()
	if err := Unretire(ctx, b, "x", "x.jsonl"); !errors.Is(err, ErrNotRetired) {
		t.Fatalf("unretire of an input not in done/: %v, want ErrNotRetired", err)
	}
	srv.Put(bucket, "team/done/x.jsonl", []byte("{}\n"))
	srv.Put(bucket, "team/done/x.options.json", []byte(`{"metadata":{"k":"v"}}`))
	srv.Put(bucket, "team/inbox/x.jsonl", []byte("newer\n"))
	if err := Unretire(ctx, b, "x", "x.jsonl"); !errors.Is(err, ErrInputWaiting) {
		t.Fatalf("unretire over a waiting input: %v, want ErrInputWaiting", err)
	}
	if keys := srv.Keys(bucket, "team/inbox/"); len(keys) != 1 {
		t.Fatalf("a refused unretire changed the inbox: %v", keys)
	}
	if err := b.Remove(ctx, "team/inbox/x.jsonl"); err != nil {
		t.Fatal(err)
	}
	if err := Unretire(ctx, b, "x", "x.jsonl"); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"team/inbox/x.jsonl": "{}\n", "team/inbox/x.options.json": `{"metadata":{"k":"v"}}`, "team/inbox/x.retry": ""} {
		if got, ok := srv.Get(bucket, key); !ok || string(got) != want {
			t.Errorf("%s after unretire: %q (there: %v), want %q", key, got, ok, want)
		}
	}
	if keys := srv.Keys(bucket, "team/done/"); len(keys) != 0 {
		t.Errorf("done/ still holds %v after unretire", keys)
	}
}
