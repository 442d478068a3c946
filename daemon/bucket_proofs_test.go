package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/internal/miniotest"
	"github.com/batchd/batchd/pipeline"
)

// etag is the current ETag of key, without quotes.
func (e *bucketEnv) etag(key string) string {
	e.t.Helper()
	info, err := e.minio.Client().StatObject(context.Background(), e.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		e.t.Fatalf("stat %s: %v", key, err)
	}
	return strings.Trim(info.ETag, `"`)
}

// postEvent posts a MinIO-shaped ObjectCreated notification naming key
// (as MinIO sends it: URL-encoded by the caller) at etag.
func postEvent(t *testing.T, addr, token, bucket, key, etag string) {
	t.Helper()
	var ev struct {
		EventName string
		Key       string
		Records   []map[string]any
	}
	ev.EventName, ev.Key = "s3:ObjectCreated:Put", bucket+"/"+key
	ev.Records = []map[string]any{{
		"eventName": "s3:ObjectCreated:Put",
		"s3": map[string]any{
			"bucket": map[string]any{"name": bucket},
			"object": map[string]any{"key": key, "eTag": etag, "size": 10},
		},
	}}
	body, _ := json.Marshal(ev)
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/bucket-events", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post event for %q: %v", key, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("post event for %q: %s", key, resp.Status)
	}
}

// Webhook events naming keys that would leave the prefix jobs/ (or its
// inbox) — dot segments plain and URL-encoded, nested, another prefix's
// inbox, a newline, 2000 bytes — make batchd read or write nothing outside
// jobs/: the bucket holds only the keys expected afterwards, nothing in the
// outbox is named after an escaped key, and no local file lies outside DATA.
func TestBucketWebhookKeysCannotEscapePrefix(t *testing.T) {
	addr := miniotest.FreeAddr(t)
	const token = "hook-secret"
	e := newBucketEnv(t, openaitest.Options{})
	cfg := e.bucketConfig("hooked")
	cfg.Listen = addr
	cfg.S3.ListInterval = time.Hour // after the first listing, only events deliver
	cfg.S3.WebhookToken = token
	e.put("jobs/inbox/first.jsonl", chatBatch(2, "first"))
	e.open(cfg)
	e.waitPublished("first", 60*time.Second) // the listing at start is done

	// Real objects the events may name: a nested input, another prefix's
	// inbox, and a key MinIO may refuse.
	e.put("jobs/inbox/a/b.jsonl", chatBatch(2, "nested"))
	e.put("other/inbox/x.jsonl", chatBatch(2, "other"))
	otherTag := e.etag("other/inbox/x.jsonl")
	long := "jobs/inbox/" + strings.Repeat("k", 2000) + ".jsonl"
	if _, err := e.minio.Client().PutObject(context.Background(), e.bucket, long, strings.NewReader("{}"), 2, minio.PutObjectOptions{}); err == nil {
		t.Fatalf("MinIO stored a %d-byte key; the test assumes it refuses it", len(long))
	}
	e.put("jobs/outbox/keep.txt", "not batchd's") // an object batchd must leave alone

	events := map[string]string{ // key as the event carries it → ETag
		"jobs/inbox/../outbox/x.jsonl":             "0123456789abcdef0123456789abcdef",
		"jobs/inbox/%2e%2e/x.jsonl":                "0123456789abcdef0123456789abcdef",
		"jobs%2Finbox%2F%2E%2E%2Foutbox%2Fx.jsonl": "0123456789abcdef0123456789abcdef",
		"jobs/inbox/%252e%252e/x.jsonl":            "0123456789abcdef0123456789abcdef",
		"jobs/inbox/a/b.jsonl":                     e.etag("jobs/inbox/a/b.jsonl"),
		"other/inbox/x.jsonl":                      otherTag,
		"jobs/inbox/new%0Aline.jsonl":              "0123456789abcdef0123456789abcdef",
		"jobs/inbox/new\nline.jsonl":               "0123456789abcdef0123456789abcdef",
		long:                                       "0123456789abcdef0123456789abcdef",
		"jobs/inbox/%FF.jsonl":                     "0123456789abcdef0123456789abcdef", // not UTF-8
	}
	for key, tag := range events {
		postEvent(t, addr, token, e.bucket, key, tag)
	}
	// The nested input is refused under its safe name; an input that
	// arrives after the events still runs.
	nested := filecontract.SafeName("a/b")
	waitFor(t, 60*time.Second, "refusal of a/b.jsonl", func() bool {
		_, ok := e.minio.Get(e.bucket, "jobs/rejected/"+nested+".jsonl")
		return ok
	})
	e.put("jobs/inbox/ok.jsonl", chatBatch(2, "ok"))
	postEvent(t, addr, token, e.bucket, "jobs/inbox/ok.jsonl", e.etag("jobs/inbox/ok.jsonl"))
	e.waitPublished("ok", 60*time.Second)
	e.bucketCheck(cfg, "ok")
	waitFor(t, 30*time.Second, "leases to be released", func() bool {
		return len(e.minio.Keys(e.bucket, "jobs/.batchd/")) == 0
	})

	// Every key in the bucket is one the test wrote, or a result of first,
	// ok or the refused nested input.
	for _, k := range e.minio.Keys(e.bucket, "") {
		switch k {
		case "other/inbox/x.jsonl", "jobs/outbox/keep.txt":
			continue
		}
		rest, ok := strings.CutPrefix(k, "jobs/")
		dir, base, _ := strings.Cut(rest, "/")
		name, _, _ := strings.Cut(base, ".")
		if !ok || strings.Contains(base, "/") || dir != "outbox" && dir != "done" && dir != "rejected" ||
			name != "first" && name != "ok" && name != nested {
			t.Errorf("unexpected key %q", k)
		}
	}
	if got := e.etag("other/inbox/x.jsonl"); got != otherTag {
		t.Errorf("other/inbox/x.jsonl was replaced: ETag %s, was %s", got, otherTag)
	}
	if got := e.srv.Requests(); got != 4 {
		t.Errorf("engine saw %d requests, want the 4 of first and ok", got)
	}
	logs := e.logs.String()
	if n := strings.Count(logs, `msg="inbox object refused"`); n != 1 {
		t.Errorf("refused %d objects, want 1 (a/b.jsonl)", n)
	}
	// Dot elements (plain and encoded), the long key and the one not UTF-8
	// name no key a request can address: they are ignored, not refused.
	if n := strings.Count(logs, `msg="inbox key ignored`); n != 5 {
		t.Errorf("ignored %d keys, want 5", n)
	}
	// Locally: DATA is alone in its parent, and no file in it is named
	// after an escaped key.
	parent := filepath.Dir(cfg.Data)
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != filepath.Base(cfg.Data) {
		t.Errorf("files next to DATA: %v", entries)
	}
	filepath.WalkDir(cfg.Data, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n := d.Name(); strings.HasPrefix(n, "x.") || strings.Contains(n, "line") || strings.Contains(n, "kkkk") {
			t.Errorf("local file named after an escaped key: %s", p)
		}
		return nil
	})
}

// The ETag promise: an input replaced while its batch runs. The run
// finishes and publishes on the version it claimed; the input is not
// retired (the new version stays in the inbox); the new version then
// runs as a new batch and its results replace the first's. The outputs
// of the two versions never mix, and `batchd check --source` passes.
func TestBucketInputReplacedWhileRunning(t *testing.T) {
	gateOne, gateTwo := make(chan struct{}), make(chan struct{})
	var heldOne, heldTwo atomic.Int64
	hold := func(r *http.Request, n *atomic.Int64, gate chan struct{}) {
		n.Add(1)
		select {
		case <-gate:
		case <-r.Context().Done():
		}
	}
	e := newBucketEnv(t, openaitest.Options{Fault: func(_ int64, r *http.Request, body []byte) openaitest.Fault {
		switch {
		case bytes.Contains(body, []byte("batch one")):
			hold(r, &heldOne, gateOne)
		case bytes.Contains(body, []byte("batch two")):
			hold(r, &heldTwo, gateTwo)
		}
		return openaitest.Fault{}
	}})
	cfg := e.bucketConfig("solo")
	cfg.Pipeline.Workers = 2
	cfg.S3.LeaseTTL = 10 * time.Second
	e.open(cfg)
	e.put("jobs/inbox/v.jsonl", chatBatch(4, "one"))
	waitFor(t, 60*time.Second, "the first version to reach the engine", func() bool { return heldOne.Load() > 0 })
	e.put("jobs/inbox/v.jsonl", chatBatch(3, "two")) // replaced while its batch runs
	close(gateOne)

	// The first version publishes its own results; its input is not
	// retired, since the object in the inbox is no longer the one it ran.
	var first []byte
	waitFor(t, 60*time.Second, "the first version's results", func() bool {
		first, _ = e.minio.Get(e.bucket, "jobs/outbox/v.output.jsonl")
		return bytes.Contains(first, []byte(`"one-`))
	})
	assertOnly(t, "first version's output", first, "one-", 4)
	obj, _ := e.minio.Get(e.bucket, "jobs/outbox/v.batch.json")
	var o pipeline.BatchObject
	if err := json.Unmarshal(obj, &o); err != nil || o.RequestCounts.Total != 4 || o.RequestCounts.Completed != 4 {
		t.Fatalf("first version's batch object: %v %s", err, obj)
	}
	if _, ok := e.minio.Get(e.bucket, "jobs/done/v.jsonl"); ok {
		t.Fatal("the replaced input was retired to done/ by the first version's run")
	}
	if in, ok := e.minio.Get(e.bucket, "jobs/inbox/v.jsonl"); !ok || !bytes.Contains(in, []byte(`"two-0"`)) {
		t.Fatalf("the second version left the inbox before it ran: %q", in)
	}

	// The second version runs as a new batch and replaces the results.
	waitFor(t, 60*time.Second, "the second version to reach the engine", func() bool { return heldTwo.Load() > 0 })
	close(gateTwo)
	e.waitPublished("v", 60*time.Second)
	rep := e.bucketCheck(cfg, "v")
	if rep.Lines != 3 || rep.OutputLines != 3 || rep.Status != "completed" {
		t.Fatalf("second version: %+v", rep)
	}
	final, _ := e.minio.Get(e.bucket, "jobs/outbox/v.output.jsonl")
	assertOnly(t, "final output", final, "two-", 3)
	if done, _ := e.minio.Get(e.bucket, "jobs/done/v.jsonl"); string(done) != chatBatch(3, "two") {
		t.Fatalf("done/v.jsonl is not the second version:\n%s", done)
	}
	if keys := e.minio.Keys(e.bucket, "jobs/inbox/"); len(keys) != 0 {
		t.Fatalf("inbox not empty: %v", keys)
	}
	if n := strings.Count(e.logs.String(), `msg="results published"`); n != 2 {
		t.Fatalf("published %d times, want 2 (one per version)", n)
	}
	if got := e.srv.Requests(); got != 7 {
		t.Fatalf("engine saw %d requests, want 4 + 3", got)
	}
}

// assertOnly fails unless output holds exactly n lines, each one answer
// whose custom_id has prefix and whose content is its own request's.
func assertOnly(t *testing.T, what string, output []byte, prefix string, n int) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(string(output)), "\n")
	if len(lines) != n {
		t.Fatalf("%s: %d lines, want %d:\n%s", what, len(lines), n, output)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		var r struct {
			CustomID string `json:"custom_id"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil || !strings.HasPrefix(r.CustomID, prefix) || seen[r.CustomID] {
			t.Fatalf("%s: line not one of %s*, or twice: %s", what, prefix, l)
		}
		other := "one-"
		if prefix == other {
			other = "two-"
		}
		if strings.Contains(l, other) || strings.Contains(l, "batch "+strings.TrimSuffix(other, "-")) {
			t.Fatalf("%s: line mixes the two versions: %s", what, l)
		}
		seen[r.CustomID] = true
	}
}
