package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/notification"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/internal/miniotest"
	"github.com/batchd/batchd/pipeline"
)

// bucketEnv is a MinIO server with one bucket, and a stand-in engine.
type bucketEnv struct {
	*env
	minio  *miniotest.Server
	bucket string
}

func newBucketEnv(t *testing.T, opts openaitest.Options, minioEnv ...string) *bucketEnv {
	t.Helper()
	srv := miniotest.Start(t, minioEnv...)
	return &bucketEnv{env: newEnv(t, opts), minio: srv, bucket: srv.Bucket()}
}

// bucketConfig is a daemon config on the bucket (prefix jobs/), each daemon
// with its own data directory and owner name.
func (e *bucketEnv) bucketConfig(owner string) daemon.Config {
	cfg := e.config()
	cfg.Data = filepath.Join(e.t.TempDir(), owner)
	cfg.Source = "s3://" + e.bucket + "/jobs"
	cfg.S3.Endpoint = e.minio.Endpoint
	cfg.S3.AccessKey, cfg.S3.SecretKey = miniotest.AccessKey, miniotest.SecretKey
	cfg.S3.Owner = owner
	cfg.S3.ListInterval = 100 * time.Millisecond
	cfg.S3.LeaseTTL = 2 * time.Second
	cfg.S3.CheckpointInterval = 100 * time.Millisecond
	return cfg
}

// notify points the bucket's object-created events under jobs/inbox/ (with
// suffix, when given) at MinIO's webhook target BATCHD.
func (e *bucketEnv) notify(suffix string) {
	e.t.Helper()
	nc := notification.NewConfig(notification.NewArn("minio", "sqs", "", "BATCHD", "webhook"))
	nc.AddEvents(notification.ObjectCreatedAll)
	nc.AddFilterPrefix("jobs/inbox/")
	if suffix != "" {
		nc.AddFilterSuffix(suffix)
	}
	var bn notification.Configuration
	bn.AddQueue(nc)
	// MinIO registers the webhook target of its environment in the
	// background after it starts serving: until then the ARN "does not
	// exist". Try again until it does.
	var err error
	waitFor(e.t, 60*time.Second, "MinIO to register its webhook target", func() bool {
		err = e.minio.Client().SetBucketNotification(context.Background(), e.bucket, bn)
		return err == nil || !strings.Contains(err.Error(), "ARN does not exist")
	})
	if err != nil {
		e.t.Fatalf("configure the webhook: %v", err)
	}
}

func (e *bucketEnv) put(key, content string) { e.minio.Put(e.bucket, key, []byte(content)) }

// waitPublished waits until batch name's input is in done/ and its result
// objects are in the outbox.
func (e *bucketEnv) waitPublished(name string, timeout time.Duration) {
	e.t.Helper()
	waitFor(e.t, timeout, "batch "+name+" to be published", func() bool {
		if _, ok := e.minio.Get(e.bucket, "jobs/done/"+name+".jsonl"); !ok {
			return false
		}
		_, ok := e.minio.Get(e.bucket, "jobs/outbox/"+name+".batch.json")
		return ok
	})
}

// bucketCheck runs the exactly-once oracle on a published batch, through
// the same path as `batchd check --source`.
func (e *bucketEnv) bucketCheck(cfg daemon.Config, name string) *pipeline.CheckReport {
	e.t.Helper()
	in, err := daemon.FetchBucketBatch(context.Background(), cfg, name, e.t.TempDir())
	if err != nil {
		e.t.Fatalf("fetch %s: %v", name, err)
	}
	rep, err := pipeline.Check(in)
	if err != nil {
		e.t.Fatalf("check %s: %v", name, err)
	}
	if !rep.OK() {
		e.t.Fatalf("check %s:\n%s", name, strings.Join(rep.Problems, "\n"))
	}
	return rep
}

func TestBucketFiftyInputs(t *testing.T) {
	e := newBucketEnv(t, openaitest.Options{})
	cfg := e.bucketConfig("solo")
	e.open(cfg)
	e.put("jobs/inbox/b00.options.json", `{"metadata":{"team":"x"}}`)
	for i := range 50 {
		e.put(fmt.Sprintf("jobs/inbox/b%02d.jsonl", i), chatBatch(3, fmt.Sprintf("b%02d", i)))
	}
	for i := range 50 {
		name := fmt.Sprintf("b%02d", i)
		e.waitPublished(name, 60*time.Second)
		rep := e.bucketCheck(cfg, name)
		if rep.Lines != 3 || rep.OutputLines != 3 || rep.Status != "completed" {
			t.Fatalf("%s: %+v", name, rep)
		}
	}
	if got := e.srv.Requests(); got != 150 {
		t.Fatalf("engine saw %d requests, want 150", got)
	}
	// The inbox is empty, options went to done/, and no lease, checkpoint
	// or staged object is left.
	if keys := e.minio.Keys(e.bucket, "jobs/inbox/"); len(keys) != 0 {
		t.Fatalf("inbox not empty: %v", keys)
	}
	if _, ok := e.minio.Get(e.bucket, "jobs/done/b00.options.json"); !ok {
		t.Fatal("options not moved to done/")
	}
	waitFor(t, 10*time.Second, "leases to be released", func() bool {
		return len(e.minio.Keys(e.bucket, "jobs/.batchd/")) == 0
	})
	obj, _ := e.minio.Get(e.bucket, "jobs/outbox/b00.batch.json")
	if !strings.Contains(string(obj), `"team": "x"`) {
		t.Fatalf("options not applied: %s", obj)
	}
}

// Two daemons on one bucket: every input runs on one of them, and its
// outputs are exactly once. The lease (10 s, renewed every 3.3 s by a
// goroutine no upload holds up, each attempt giving up after 3 s) holds on
// a loaded machine; should one still lapse, the daemon taking over re-runs
// only what no checkpoint holds: at most the input's 5 lines per takeover.
func TestBucketTwoDaemonsShareOneBucket(t *testing.T) {
	e := newBucketEnv(t, openaitest.Options{})
	a, b := e.bucketConfig("a"), e.bucketConfig("b")
	a.S3.LeaseTTL, b.S3.LeaseTTL = 10*time.Second, 10*time.Second
	e.open(a)
	e.open(b)
	const inputs, lines = 40, 5
	for i := range inputs {
		e.put(fmt.Sprintf("jobs/inbox/s%02d.jsonl", i), chatBatch(lines, fmt.Sprintf("s%02d", i)))
	}
	for i := range inputs {
		name := fmt.Sprintf("s%02d", i)
		e.waitPublished(name, 60*time.Second)
		if rep := e.bucketCheck(a, name); rep.OutputLines != lines {
			t.Fatalf("%s: %+v", name, rep)
		}
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "owner=a") || !strings.Contains(logs, "owner=b") {
		t.Fatalf("both daemons should have connected:\n%s", logs)
	}
	takeovers := strings.Count(logs, "took over an expired lease")
	got := int(e.srv.Requests())
	t.Logf("engine requests %d for %d lines; leases taken over %d; slowest renewal %s", got, inputs*lines, takeovers, slowestRenewal(logs))
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "lease") && !strings.Contains(line, "level=DEBUG") {
			t.Log(line)
		}
	}
	if got < inputs*lines || got > inputs*lines+takeovers*lines {
		t.Fatalf("engine saw %d requests for %d lines with %d leases taken over: work ran twice beyond what a takeover re-runs (or not at all)",
			got, inputs*lines, takeovers)
	}
}

// slowestRenewal is the longest "lease renewed" took= in a daemon log.
func slowestRenewal(logs string) time.Duration {
	var slowest time.Duration
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `msg="lease renewed"`) {
			continue
		}
		_, took, ok := strings.Cut(line, " took=")
		if !ok {
			continue
		}
		took, _, _ = strings.Cut(took, " ")
		if d, err := time.ParseDuration(took); err == nil {
			slowest = max(slowest, d)
		}
	}
	return slowest
}

// MinIO restarted in the middle of a batch: the daemon reconnects and
// finishes it, exactly once.
func TestBucketMinIORestartMidBatch(t *testing.T) {
	var slow atomic.Bool
	slow.Store(true)
	e := newBucketEnv(t, openaitest.Options{Fault: func(n int64, r *http.Request, body []byte) openaitest.Fault {
		if slow.Load() {
			time.Sleep(5 * time.Millisecond) // a slow engine, so the batch is still running
		}
		return openaitest.Fault{}
	}})
	cfg := e.bucketConfig("solo")
	cfg.Pipeline.Workers = 2
	cfg.S3.LeaseTTL = 3 * time.Second
	e.open(cfg)
	e.put("jobs/inbox/long.jsonl", chatBatch(400, "long"))
	waitFor(t, 60*time.Second, "a checkpoint", func() bool {
		return len(e.minio.Keys(e.bucket, "jobs/.batchd/checkpoints/")) > 0
	})
	e.minio.Stop()
	waitFor(t, 30*time.Second, "the daemon to notice", func() bool {
		return strings.Contains(e.logs.String(), "bucket unreachable; retrying")
	})
	e.minio.Start()
	slow.Store(false)
	e.waitPublished("long", 90*time.Second)
	rep := e.bucketCheck(cfg, "long")
	if rep.OutputLines != 400 {
		t.Fatalf("%+v", rep)
	}
}

// With MinIO's webhook target pointed at the daemon, a new input starts at
// once: the listing (every hour here) has no part in it.
func TestBucketWebhookNotification(t *testing.T) {
	addr := miniotest.FreeAddr(t)
	const token = "hook-secret"
	e := newBucketEnv(t, openaitest.Options{},
		"MINIO_NOTIFY_WEBHOOK_ENABLE_BATCHD=on",
		"MINIO_NOTIFY_WEBHOOK_ENDPOINT_BATCHD=http://"+addr+"/v1/bucket-events",
		"MINIO_NOTIFY_WEBHOOK_AUTH_TOKEN_BATCHD="+token)
	e.notify("")
	cfg := e.bucketConfig("hooked")
	cfg.Listen = addr
	cfg.S3.ListInterval = time.Hour
	cfg.S3.WebhookToken = token
	cfg.API.Keys = []string{"sk-not-what-minio-sends"} // the token, not a key, opens the route
	e.open(cfg)
	// The first input may be found by the listing at start; the second
	// only by the notification.
	e.put("jobs/inbox/first.jsonl", chatBatch(2, "first"))
	e.waitPublished("first", 60*time.Second)
	e.put("jobs/inbox/second.jsonl", chatBatch(2, "second"))
	e.waitPublished("second", 60*time.Second)
	e.bucketCheck(cfg, "second")
	if !strings.Contains(e.logs.String(), `msg="bucket notification"`) {
		t.Fatal("no notification was received")
	}
	// Without the token, the endpoint refuses.
	resp, err := http.Post("http://"+addr+"/v1/bucket-events", "application/json", strings.NewReader(`{"Records":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unauthenticated post: %s", resp.Status)
	}
}

// With api.keys and no s3.webhook_token, the webhook route needs an API
// key like every other: MinIO's target sends one as its auth token.
func TestBucketWebhookWithAPIKey(t *testing.T) {
	addr := miniotest.FreeAddr(t)
	const key = "sk-bucket-key"
	e := newBucketEnv(t, openaitest.Options{},
		"MINIO_NOTIFY_WEBHOOK_ENABLE_BATCHD=on",
		"MINIO_NOTIFY_WEBHOOK_ENDPOINT_BATCHD=http://"+addr+"/v1/bucket-events",
		"MINIO_NOTIFY_WEBHOOK_AUTH_TOKEN_BATCHD="+key)
	e.notify("")
	cfg := e.bucketConfig("keyed")
	cfg.Listen = addr
	cfg.S3.ListInterval = time.Hour
	cfg.API.Keys = []string{key}
	e.open(cfg)
	e.put("jobs/inbox/first.jsonl", chatBatch(2, "first"))
	e.waitPublished("first", 60*time.Second)
	e.put("jobs/inbox/second.jsonl", chatBatch(2, "second"))
	e.waitPublished("second", 60*time.Second)
	if !strings.Contains(e.logs.String(), `msg="bucket notification"`) {
		t.Fatal("no notification was received")
	}
	for _, auth := range []string{"", "Bearer wrong"} {
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/bucket-events", strings.NewReader(`{"Records":[]}`))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("post with %q: %s", auth, resp.Status)
		}
	}
}

// A cancel object stops a running bucket batch: it ends cancelled, its
// unfinished requests are batch_cancelled lines, every line exactly once.
func TestBucketCancelObject(t *testing.T) {
	e := newBucketEnv(t, openaitest.Options{Fault: func(n int64, r *http.Request, body []byte) openaitest.Fault {
		time.Sleep(5 * time.Millisecond) // a slow engine, so the batch is still running
		return openaitest.Fault{}
	}})
	cfg := e.bucketConfig("solo")
	cfg.Pipeline.Workers = 2
	e.open(cfg)
	e.put("jobs/inbox/c.jsonl", chatBatch(2000, "c"))
	waitFor(t, 60*time.Second, "the batch to make progress", func() bool {
		return len(e.minio.Keys(e.bucket, "jobs/.batchd/checkpoints/")) > 0
	})
	e.put("jobs/inbox/c.cancel", "")
	e.waitPublished("c", 60*time.Second)
	rep := e.bucketCheck(cfg, "c")
	if rep.Status != "cancelled" || rep.ErrorLines == 0 || rep.OutputLines == 0 {
		t.Fatalf("%+v", rep)
	}
	if _, ok := e.minio.Get(e.bucket, "jobs/inbox/c.cancel"); ok {
		t.Fatal("the cancel object was left in the inbox")
	}
}

// Credentials may come from the environment instead of the config.
func TestBucketCredentialsFromEnvironment(t *testing.T) {
	e := newBucketEnv(t, openaitest.Options{})
	cfg := e.bucketConfig("env")
	cfg.S3.AccessKey, cfg.S3.SecretKey = "", ""
	t.Setenv("AWS_ACCESS_KEY_ID", miniotest.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", miniotest.SecretKey)
	e.open(cfg)
	e.put("jobs/inbox/e.jsonl", chatBatch(2, "e"))
	e.waitPublished("e", 60*time.Second)
}

// An input whose notification never arrives (MinIO is told to notify only
// for .jsonl objects) is found by the listing; a .json requests document
// runs like a folder one.
func TestBucketLostNotificationFoundByListing(t *testing.T) {
	addr := miniotest.FreeAddr(t)
	e := newBucketEnv(t, openaitest.Options{},
		"MINIO_NOTIFY_WEBHOOK_ENABLE_BATCHD=on",
		"MINIO_NOTIFY_WEBHOOK_ENDPOINT_BATCHD=http://"+addr+"/v1/bucket-events")
	e.notify(".jsonl")
	cfg := e.bucketConfig("lister")
	cfg.Listen = addr
	cfg.S3.ListInterval = 300 * time.Millisecond
	e.open(cfg)
	e.put("jobs/inbox/doc.json", `{"url":"/v1/chat/completions","defaults":{"max_tokens":4},"requests":[`+
		`{"custom_id":"a","messages":[{"role":"user","content":"one"}]},{"custom_id":"b","messages":[{"role":"user","content":"two"}]}]}`)
	waitFor(t, 60*time.Second, "doc to be published", func() bool {
		_, ok := e.minio.Get(e.bucket, "jobs/done/doc.json")
		return ok
	})
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(line, `msg="bucket notification"`) && strings.Contains(line, "doc.json") {
			t.Fatalf("doc.json was notified; the test needs it not to be: %s", line)
		}
	}
	in, err := daemon.FetchBucketBatch(context.Background(), cfg, "doc", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rep, err := pipeline.Check(in)
	if err != nil || !rep.OK() || rep.OutputLines != 2 {
		t.Fatalf("check doc: %+v %v", rep, err)
	}
}

// A cancel object for a batch that is not in the inbox is removed, so that
// it cannot cancel a later batch of the same name.
func TestBucketStaleCancelRemoved(t *testing.T) {
	e := newBucketEnv(t, openaitest.Options{})
	cfg := e.bucketConfig("solo")
	e.open(cfg)
	e.put("jobs/inbox/gone.cancel", "")
	waitFor(t, 30*time.Second, "the stale cancel to be removed", func() bool {
		_, ok := e.minio.Get(e.bucket, "jobs/inbox/gone.cancel")
		return !ok
	})
	e.put("jobs/inbox/gone.jsonl", chatBatch(2, "gone"))
	e.waitPublished("gone", 60*time.Second)
	if rep := e.bucketCheck(cfg, "gone"); rep.Status != "completed" {
		t.Fatalf("%+v", rep)
	}
}

// Inputs whose names batchd cannot use — in a nested prefix, too long for
// the names derived from them, with a newline — are refused unread: a
// failed NAME.batch.json under the safe name in the outbox, the object in
// rejected/, nothing retried; the daemon goes on with other inputs.
func TestBucketRefusesUnusableNames(t *testing.T) {
	e := newBucketEnv(t, openaitest.Options{})
	a, b := e.bucketConfig("a"), e.bucketConfig("b")
	e.open(a)
	e.open(b)
	long := strings.Repeat("L", 240)
	refused := map[string]string{ // key under jobs/inbox/ → code
		"sub/nested.jsonl": filecontract.CodeInvalidName,
		long + ".jsonl":    filecontract.CodeNameTooLong,
	}
	for rest := range refused {
		e.put("jobs/inbox/"+rest, chatBatch(2, "x"))
	}
	// MinIO may refuse such keys itself; batchd must when it does not.
	for _, rest := range []string{"new\nline.json", "../up.jsonl", "/rooted.jsonl"} {
		_, err := e.minio.Client().PutObject(context.Background(), e.bucket, "jobs/inbox/"+rest, strings.NewReader("{}"), 2, minio.PutObjectOptions{})
		if err != nil {
			t.Logf("MinIO refuses the key jobs/inbox/%q: %v", rest, err)
			continue
		}
		refused[rest] = filecontract.CodeInvalidName
	}
	e.put("jobs/inbox/after.jsonl", chatBatch(2, "after"))
	for rest, code := range refused {
		ext := path.Ext(rest)
		safe := filecontract.SafeName(strings.TrimSuffix(rest, ext))
		waitFor(t, 60*time.Second, "refusal of "+rest, func() bool {
			_, ok := e.minio.Get(e.bucket, "jobs/rejected/"+safe+ext)
			return ok
		})
		data, ok := e.minio.Get(e.bucket, "jobs/outbox/"+safe+".batch.json")
		var o pipeline.BatchObject
		if !ok || json.Unmarshal(data, &o) != nil || o.Status != pipeline.StatusFailed || o.Errors == nil || len(o.Errors.Data) != 1 || o.Errors.Data[0].Code != code {
			t.Fatalf("%q: batch object %s", rest, data)
		}
		if o.Batchd.InputFile != rest {
			t.Fatalf("%q: input file %q", rest, o.Batchd.InputFile)
		}
		if _, ok := e.minio.Get(e.bucket, "jobs/inbox/"+rest); ok {
			t.Fatalf("%q left in the inbox", rest)
		}
	}
	e.waitPublished("after", 60*time.Second)
	if rep := e.bucketCheck(a, "after"); rep.Status != "completed" {
		t.Fatalf("after: %+v", rep)
	}
	// Nothing else was written: no key outside outbox/, done/, rejected/
	// and batchd's own, none nested.
	for _, k := range e.minio.Keys(e.bucket, "") {
		rest, ok := strings.CutPrefix(k, "jobs/")
		dir, base, _ := strings.Cut(rest, "/")
		if !ok || dir != ".batchd" && (strings.Contains(base, "/") || dir != "outbox" && dir != "done" && dir != "rejected") {
			t.Errorf("unexpected key %q", k)
		}
	}
	logs := e.logs.String()
	if n := strings.Count(logs, `msg="inbox object refused"`); n != len(refused) {
		t.Fatalf("refused %d times, want %d (once each)", n, len(refused))
	}
	if strings.Contains(logs, "retried") || e.srv.Requests() != 2 {
		t.Fatalf("retried, or the engine saw %d requests, want the 2 of after", e.srv.Requests())
	}
}

// A finished batch of the bucket is retried over the API: its input returns
// from done/ with a retry mark (bucket.Unretire), only the failed requests
// run again, the completed ones are kept, and the retire that ends the
// rerun removes the mark.
func TestBucketRetryOverAPI(t *testing.T) {
	var refuse atomic.Bool
	e := newBucketEnv(t, refuseLineOne(&refuse))
	a := &apiEnv{env: e.env, key: "sk-test-key"}
	cfg := e.bucketConfig("solo")
	cfg.Listen = "127.0.0.1:0"
	cfg.API.Keys = []string{a.key}
	a.d = a.open(cfg)
	a.base = "http://" + a.d.HTTPAddr()
	e.put("jobs/inbox/r.jsonl", chatBatch(20, "r"))
	e.waitPublished("r", 60*time.Second)
	raw, _ := e.minio.Get(e.bucket, "jobs/outbox/r.batch.json")
	var o pipeline.BatchObject
	if err := json.Unmarshal(raw, &o); err != nil {
		t.Fatal(err)
	}
	a.retryRunsOnlyFailed(o.ID, &refuse)
	e.waitPublished("r", 60*time.Second)
	waitFor(t, 60*time.Second, "the retry mark to go", func() bool {
		_, ok := e.minio.Get(e.bucket, "jobs/inbox/r.retry")
		return !ok
	})
	if rep := e.bucketCheck(cfg, "r"); rep.OutputLines != 20 || rep.ErrorLines != 0 {
		t.Fatalf("after the retry: %+v", rep)
	}
}
