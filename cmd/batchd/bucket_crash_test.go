package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/internal/miniotest"
)

// bucketDaemonConfig is the config of one daemon of the bucket kill test:
// the crash test's intervals, on the bucket.
func bucketDaemonConfig(srv *miniotest.Server, bucket, owner string) string {
	return fmt.Sprintf(`
source: s3://%s/jobs
s3:
  endpoint: %s
  access_key: %s
  secret_key: %s
  owner: %s
  list_interval: 100ms
  lease_ttl: 2s
  checkpoint_interval: 200ms
`, bucket, srv.Endpoint, miniotest.AccessKey, miniotest.SecretKey, owner) + crashConfig
}

// One daemon is killed with SIGKILL in the middle of a bucket batch; the
// other takes the batch over once the lease lapses, resumes it from the
// checkpoints in the bucket, and `batchd check --source` finds every
// request exactly once.
func TestBucketKillOtherDaemonFinishes(t *testing.T) {
	bin := needBinary(t)
	minio := miniotest.Start(t)
	bucket := minio.Bucket()
	srv := openaitest.NewServer(openaitest.Options{
		Fault: func(n int64, r *http.Request, body []byte) openaitest.Fault {
			time.Sleep(3 * time.Millisecond) // simulated model latency, not synchronisation
			return openaitest.Fault{}
		},
	})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	root := t.TempDir()
	start := func(owner string) *proc {
		cfg := filepath.Join(root, owner+".yaml")
		if err := os.WriteFile(cfg, []byte(bucketDaemonConfig(minio, bucket, owner)), 0o644); err != nil {
			t.Fatal(err)
		}
		p := startBatchd(t, bin, filepath.Join(root, owner), cfg, srv.URL(), filepath.Join(root, owner+".log"))
		p.waitReady(t)
		return p
	}

	const requests = 1500
	content, invalid := crashInput(requests)
	a := start("a")
	minio.Put(bucket, "jobs/inbox/big.jsonl", content)
	waitFor(t, 2*time.Minute, "daemon a to checkpoint some progress", func() bool {
		if !a.running() {
			t.Fatalf("daemon a exited: %v\n%s", a.err, logTail(a.log))
		}
		return len(minio.Keys(bucket, "jobs/.batchd/checkpoints/")) >= 2
	})
	a.signal(t, syscall.SIGKILL)
	if _, ok := minio.Get(bucket, "jobs/done/big.jsonl"); ok {
		t.Fatal("the batch finished before the kill; nothing was tested")
	}
	before := srv.Requests()

	b := start("b")
	waitFor(t, 3*time.Minute, "daemon b to publish the batch", func() bool {
		if !b.running() {
			t.Fatalf("daemon b exited: %v\n%s", b.err, logTail(b.log))
		}
		_, ok := minio.Get(bucket, "jobs/done/big.jsonl")
		return ok
	})
	logB, _ := os.ReadFile(b.log)
	if !strings.Contains(string(logB), "took over an expired lease") {
		t.Fatalf("daemon b did not report the takeover\n%s", logTail(b.log))
	}
	m := regexp.MustCompile(`resumed from checkpoint".*? lines=(\d+)`).FindSubmatch(logB)
	if m == nil {
		t.Fatalf("daemon b did not resume from the checkpoints\n%s", logTail(b.log))
	}
	seeded, _ := strconv.Atoi(string(m[1]))
	t.Logf("a sent %d requests before the kill; b resumed %d lines from checkpoints and sent %d requests for the other %d",
		before, seeded, srv.Requests()-before, requests-invalid-seeded)
	if seeded == 0 {
		t.Fatal("b resumed nothing from the checkpoints")
	}

	check := exec.Command(bin, "check", "--source", "s3://"+bucket+"/jobs", "--s3-endpoint", minio.Endpoint, "big")
	check.Env = append(hermeticEnv(), "BATCHD_S3_ACCESS_KEY="+miniotest.AccessKey, "BATCHD_S3_SECRET_KEY="+miniotest.SecretKey)
	out, err := check.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "OK big") {
		t.Fatalf("batchd check: %v\n%s", err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
	b.signal(t, syscall.SIGTERM)
}
