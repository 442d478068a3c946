package daemon_test

import (
	"bytes"
	"context"
	"mime/multipart"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// uploadExpiring uploads content with the form fields fields besides
// purpose=batch and the file.
func (e *apiEnv) uploadExpiring(content string, fields map[string]string) (int, map[string]any) {
	e.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	mw.WriteField("purpose", "batch")
	for k, v := range fields {
		mw.WriteField(k, v)
	}
	fw, _ := mw.CreateFormFile("file", "in.jsonl")
	fw.Write([]byte(content))
	mw.Close()
	var out map[string]any
	status := e.call("POST", "/v1/files", mw.FormDataContentType(), &buf, &out)
	return status, out
}

// expireAt runs the expiry sweep as if the clock showed at, until it has
// removed something (a batch's run holds its record a moment after it
// ended), and returns how many files it removed.
func (e *apiEnv) expireAt(at time.Time) int {
	e.t.Helper()
	n := 0
	waitFor(e.t, 10*time.Second, "the expiry sweep to remove something", func() bool {
		n = e.d.ExpireFiles(context.Background(), at)
		return n > 0
	})
	return n
}

// status is the status of GET path.
func (e *apiEnv) status(path string) int {
	e.t.Helper()
	return e.call("GET", path, "", nil, nil)
}

func expiryAfter(seconds int) map[string]any {
	return map[string]any{"anchor": "created_at", "seconds": seconds}
}

// An upload with expires_after shows expires_at, answers 404 once it has
// passed, and is removed from disk by the sweep; one without stays.
func TestUploadExpires(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	st, f := e.uploadExpiring(chatBatch(1, "x"), map[string]string{"expires_after[anchor]": "created_at", "expires_after[seconds]": "3600"})
	if st != 200 {
		t.Fatalf("upload: %d %v", st, f)
	}
	id := f["id"].(string)
	exp, ok := f["expires_at"].(float64)
	if !ok || int64(exp) != int64(f["created_at"].(float64))+3600 {
		t.Fatalf("expires_at %v, want created_at %v + 3600", f["expires_at"], f["created_at"])
	}
	_, keep := e.upload("batch", "keep.jsonl", chatBatch(1, "k"))
	if v, ok := keep["expires_at"]; !ok || v != nil {
		t.Fatalf("an upload without expires_after: expires_at %v (present %v), want null", v, ok)
	}
	var got map[string]any
	if st := e.call("GET", "/v1/files/"+id, "", nil, &got); st != 200 || got["expires_at"] != f["expires_at"] {
		t.Fatalf("GET before expiry: %d %v", st, got)
	}
	// Half an hour on, nothing has expired.
	if n := e.d.ExpireFiles(context.Background(), time.Now().Add(30*time.Minute)); n != 0 {
		t.Fatalf("the sweep half an hour on removed %d files", n)
	}
	if st := e.status("/v1/files/" + id + "/content"); st != 200 {
		t.Fatalf("content before expiry: %d", st)
	}
	if n := e.expireAt(time.Now().Add(2 * time.Hour)); n != 1 {
		t.Fatalf("the sweep removed %d files, want 1", n)
	}
	for _, p := range []string{"/v1/files/" + id, "/v1/files/" + id + "/content"} {
		if st := e.status(p); st != 404 {
			t.Errorf("GET %s after expiry: %d, want 404", p, st)
		}
	}
	for _, p := range []string{id, id + ".json"} {
		if _, err := os.Lstat(filepath.Join(e.dirs.Root, "files", p)); !os.IsNotExist(err) {
			t.Errorf("files/%s after expiry: %v, want gone", p, err)
		}
	}
	var list struct {
		Data []map[string]any `json:"data"`
	}
	if st := e.call("GET", "/v1/files", "", nil, &list); st != 200 || len(list.Data) != 1 || list.Data[0]["id"] != keep["id"] {
		t.Fatalf("list after expiry: %d %v, want only %v", st, list.Data, keep["id"])
	}
	// A batch can no longer be created from it.
	var ae apiErr
	if st := e.postJSON("/v1/batches", map[string]any{"input_file_id": id, "endpoint": "/v1/chat/completions"}, &ae); st != 404 {
		t.Fatalf("batch over an expired file: %d %+v", st, ae)
	}
}

// A batch's output_expires_after removes its output and error files at
// expiry: the file ids answer 404, the outbox files are gone, the batch
// object stays; another batch's results stay.
func TestBatchOutputExpires(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	run := func(tag string, expiry map[string]any) *pipeline.BatchObject {
		_, f := e.upload("batch", tag+".jsonl", chatBatch(3, tag)+"not json\n")
		body := map[string]any{"input_file_id": f["id"], "endpoint": "/v1/chat/completions"}
		if expiry != nil {
			body["output_expires_after"] = expiry
		}
		var o pipeline.BatchObject
		if st := e.postJSON("/v1/batches", body, &o); st != 200 {
			t.Fatalf("create: %d", st)
		}
		o = *e.waitBatch(o.ID, func(o *pipeline.BatchObject) bool { return pipeline.Terminal(o.Status) })
		if o.OutputFileID == nil || o.ErrorFileID == nil {
			t.Fatalf("batch %s ended as %+v", tag, o)
		}
		return &o
	}
	before := time.Now().Unix()
	o := run("gone", expiryAfter(3600))
	kept := run("kept", nil)
	var fo map[string]any
	if st := e.call("GET", "/v1/files/"+*o.OutputFileID, "", nil, &fo); st != 200 {
		t.Fatalf("output file: %d", st)
	}
	if exp, ok := fo["expires_at"].(float64); !ok || int64(exp) < before+3600 || int64(exp) > time.Now().Unix()+3600 {
		t.Fatalf("output file expires_at %v, want an hour after the batch ended", fo["expires_at"])
	}
	fo = nil
	if st := e.call("GET", "/v1/files/"+*kept.OutputFileID, "", nil, &fo); st != 200 || fo["expires_at"] != nil {
		t.Fatalf("the other batch's output file: %d %v, want expires_at null", st, fo)
	}
	outbox := func(name, suffix string) string { return filepath.Join(e.dirs.Outbox, name+suffix) }
	for _, s := range []string{".output.jsonl", ".errors.jsonl"} {
		if _, err := os.Stat(outbox(o.ID, s)); err != nil {
			t.Fatalf("published %s before expiry: %v", s, err)
		}
	}
	if n := e.d.ExpireFiles(context.Background(), time.Now().Add(59*time.Minute)); n != 0 {
		t.Fatalf("the sweep before expiry removed %d", n)
	}
	e.expireAt(time.Now().Add(2 * time.Hour))
	for _, id := range []string{*o.OutputFileID, *o.ErrorFileID} {
		for _, p := range []string{"/v1/files/" + id, "/v1/files/" + id + "/content"} {
			if st := e.status(p); st != 404 {
				t.Errorf("GET %s after expiry: %d, want 404", p, st)
			}
		}
	}
	for _, s := range []string{".output.jsonl", ".errors.jsonl"} {
		if _, err := os.Lstat(outbox(o.ID, s)); !os.IsNotExist(err) {
			t.Errorf("outbox %s after expiry: %v, want gone", s, err)
		}
		if _, err := os.Stat(outbox(kept.ID, s)); err != nil {
			t.Errorf("the other batch's %s: %v", s, err)
		}
	}
	if _, err := os.Stat(outbox(o.ID, ".batch.json")); err != nil {
		t.Errorf("the batch object in the outbox must stay: %v", err)
	}
	// The batch stays, naming the files that are gone; its results are empty.
	var again pipeline.BatchObject
	if st := e.call("GET", "/v1/batches/"+o.ID, "", nil, &again); st != 200 || again.Status != "completed" ||
		again.OutputFileID == nil || *again.OutputFileID != *o.OutputFileID {
		t.Fatalf("batch after its output expired: %d %+v", st, again)
	}
	var page struct {
		Data []any `json:"data"`
	}
	if st := e.call("GET", "/v1/batches/"+o.ID+"/results", "", nil, &page); st != 200 || len(page.Data) != 0 {
		t.Fatalf("results after expiry: %d %d lines", st, len(page.Data))
	}
	for _, id := range []string{*kept.OutputFileID, *kept.ErrorFileID} {
		if st := e.status("/v1/files/" + id + "/content"); st != 200 {
			t.Errorf("the other batch's %s: %d", id, st)
		}
	}
	// The same content again runs anew: no result is reused from files
	// that are gone.
	redo := run("gone", nil)
	if *redo.OutputFileID == *o.OutputFileID || redo.RequestCounts.Completed != 3 {
		t.Fatalf("rerun after expiry: %+v", redo)
	}
	if st := e.status("/v1/files/" + *redo.OutputFileID + "/content"); st != 200 {
		t.Fatalf("rerun's output: %d", st)
	}
}

// expires_after and output_expires_after are OpenAI's: anchor created_at,
// 3600 to 2592000 seconds; anything else is a 400 naming the field.
func TestExpiryFieldsAreChecked(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	for _, tc := range []struct {
		fields map[string]string
		param  string
	}{
		{map[string]string{"expires_after[seconds]": "3600"}, "expires_after[anchor]"},
		{map[string]string{"expires_after[anchor]": "last_active_at", "expires_after[seconds]": "3600"}, "expires_after[anchor]"},
		{map[string]string{"expires_after[anchor]": "created_at"}, "expires_after[seconds]"},
		{map[string]string{"expires_after[anchor]": "created_at", "expires_after[seconds]": "3599"}, "expires_after[seconds]"},
		{map[string]string{"expires_after[anchor]": "created_at", "expires_after[seconds]": "2592001"}, "expires_after[seconds]"},
		{map[string]string{"expires_after[anchor]": "created_at", "expires_after[seconds]": "1h"}, "expires_after[seconds]"},
	} {
		st, out := e.uploadExpiring(chatBatch(1, "x"), tc.fields)
		errObj, _ := out["error"].(map[string]any)
		if st != 400 || errObj == nil || errObj["param"] != tc.param {
			t.Errorf("upload with %v: %d %v, want 400 naming %s", tc.fields, st, out, tc.param)
		}
	}
	if st, f := e.uploadExpiring(chatBatch(1, "x"), map[string]string{"expires_after[anchor]": "created_at", "expires_after[seconds]": "2592000"}); st != 200 {
		t.Fatalf("30 days: %d %v", st, f)
	}
	_, f := e.upload("batch", "in.jsonl", chatBatch(1, "x"))
	for _, tc := range []struct {
		expiry any
		param  string
	}{
		{map[string]any{"seconds": 3600}, "output_expires_after.anchor"},
		{map[string]any{"anchor": "created", "seconds": 3600}, "output_expires_after.anchor"},
		{map[string]any{"anchor": "created_at"}, "output_expires_after.seconds"},
		{expiryAfter(60), "output_expires_after.seconds"},
		{expiryAfter(2592001), "output_expires_after.seconds"},
		{map[string]any{"anchor": "created_at", "seconds": 3600.5}, "output_expires_after"},
		{"1h", "output_expires_after"},
	} {
		var ae apiErr
		st := e.postJSON("/v1/batches", map[string]any{"input_file_id": f["id"], "endpoint": "/v1/chat/completions", "output_expires_after": tc.expiry}, &ae)
		if st != 400 || ae.Error.Param == nil || *ae.Error.Param != tc.param {
			t.Errorf("output_expires_after %v: %d %+v, want 400 naming %s", tc.expiry, st, ae, tc.param)
		}
	}
	var list struct {
		Data []any `json:"data"`
	}
	if st := e.call("GET", "/v1/batches", "", nil, &list); st != 200 || len(list.Data) != 0 {
		t.Fatalf("a refused batch was created: %d %v", st, list.Data)
	}
}

// The config's expiry keys are the defaults: for uploads without
// expires_after, and for dropped batches' outbox files.
func TestExpiryConfigDefaults(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, func(c *daemon.Config) {
		c.Expiry.Files, c.Expiry.Outputs = 2*time.Hour, time.Hour
	})
	_, f := e.upload("batch", "in.jsonl", chatBatch(1, "x"))
	if exp, ok := f["expires_at"].(float64); !ok || int64(exp) != int64(f["created_at"].(float64))+7200 {
		t.Fatalf("upload expires_at %v, want created_at + 7200", f["expires_at"])
	}
	e.drop("dropped.jsonl", chatBatch(2, "d")+"not json\n")
	o := e.waitEnded("dropped", "jsonl")
	if o.Status != "completed" {
		t.Fatalf("dropped batch: %+v", o)
	}
	out := filepath.Join(e.dirs.Outbox, "dropped.output.jsonl")
	if _, err := os.Stat(out); err != nil {
		t.Fatal(err)
	}
	// An hour and a half on, the dropped batch's results are gone, the
	// upload not yet.
	e.expireAt(time.Now().Add(90 * time.Minute))
	for _, s := range []string{".output.jsonl", ".errors.jsonl"} {
		if _, err := os.Lstat(filepath.Join(e.dirs.Outbox, "dropped"+s)); !os.IsNotExist(err) {
			t.Errorf("outbox dropped%s after expiry: %v, want gone", s, err)
		}
	}
	if e.object("dropped") == nil {
		t.Error("the dropped batch's object must stay")
	}
	if st := e.status("/v1/files/" + f["id"].(string)); st != 200 {
		t.Errorf("upload before its expiry: %d", st)
	}
	if _, err := os.Stat(filepath.Join(e.dirs.Done, "dropped.jsonl")); err != nil {
		t.Errorf("the input in done/ stays: %v", err)
	}
}

// The config's expiry keys are none, or OpenAI's range.
func TestExpiryConfigRange(t *testing.T) {
	for _, tc := range []struct {
		edit func(*daemon.Config)
		want string
	}{
		{func(c *daemon.Config) { c.Expiry.Files = 30 * time.Minute }, "expiry.files: 30m is out of range (0, or 1h..720h)"},
		{func(c *daemon.Config) { c.Expiry.Outputs = 721 * time.Hour }, "expiry.outputs: 721h is out of range (0, or 1h..720h)"},
		{func(c *daemon.Config) { c.Expiry.Outputs = -time.Hour }, "expiry.outputs: "},
	} {
		cfg := daemon.DefaultConfig()
		cfg.Engine = "openai"
		tc.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
	cfg := daemon.DefaultConfig()
	cfg.Engine = "openai"
	cfg.Expiry.Files, cfg.Expiry.Outputs = time.Hour, 720*time.Hour
	if err := cfg.Validate(); err != nil {
		t.Errorf("the ends of the range: %v", err)
	}
}

// In a bucket, a batch's results expire as the config says: the outbox
// objects go, the batch object stays.
func TestBucketOutputExpires(t *testing.T) {
	e := newBucketEnv(t, openaitest.Options{})
	cfg := e.bucketConfig("solo")
	cfg.Expiry.Outputs = time.Hour
	d := e.open(cfg)
	e.put("jobs/inbox/x.jsonl", chatBatch(2, "x")+"not json\n")
	e.waitPublished("x", 60*time.Second)
	for _, s := range []string{".output.jsonl", ".errors.jsonl"} {
		if _, ok := e.minio.Get(e.bucket, "jobs/outbox/x"+s); !ok {
			t.Fatalf("outbox x%s not published", s)
		}
	}
	if n := d.ExpireFiles(context.Background(), time.Now().Add(30*time.Minute)); n != 0 {
		t.Fatalf("the sweep before expiry removed %d", n)
	}
	waitFor(t, 10*time.Second, "the expiry sweep", func() bool {
		return d.ExpireFiles(context.Background(), time.Now().Add(2*time.Hour)) > 0
	})
	for _, s := range []string{".output.jsonl", ".errors.jsonl"} {
		if _, ok := e.minio.Get(e.bucket, "jobs/outbox/x"+s); ok {
			t.Errorf("outbox x%s after expiry: still there", s)
		}
	}
	if _, ok := e.minio.Get(e.bucket, "jobs/outbox/x.batch.json"); !ok {
		t.Error("the batch object must stay")
	}
}

// Expiry is durable: after a restart the sweep removes what expired.
func TestExpiryOutlivesARestart(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	st, f := e.uploadExpiring(chatBatch(2, "r"), map[string]string{"expires_after[anchor]": "created_at", "expires_after[seconds]": "7200"})
	if st != 200 {
		t.Fatalf("upload: %d %v", st, f)
	}
	var o pipeline.BatchObject
	if st := e.postJSON("/v1/batches", map[string]any{"input_file_id": f["id"], "endpoint": "/v1/chat/completions",
		"output_expires_after": expiryAfter(3600)}, &o); st != 200 {
		t.Fatalf("create: %d", st)
	}
	o = *e.waitBatch(o.ID, func(o *pipeline.BatchObject) bool { return pipeline.Terminal(o.Status) })
	closeDaemon(t, e.d)
	cfg := e.config()
	cfg.Listen, cfg.API.Keys = "127.0.0.1:0", []string{e.key}
	e.d = e.open(cfg)
	e.base = "http://" + e.d.HTTPAddr()
	if n := e.expireAt(time.Now().Add(3 * time.Hour)); n != 2 {
		t.Fatalf("the sweep after a restart removed %d, want the upload and the batch's results", n)
	}
	for _, id := range []string{f["id"].(string), *o.OutputFileID} {
		if st := e.status("/v1/files/" + id); st != 404 {
			t.Errorf("%s after expiry: %d, want 404", id, st)
		}
	}
	if _, err := os.Lstat(filepath.Join(e.dirs.Outbox, o.ID+".output.jsonl")); !os.IsNotExist(err) {
		t.Errorf("outbox output after expiry: %v, want gone", err)
	}
}

// A dropped batch's options set its own output expiry (OpenAI's
// output_expires_after), over the config's expiry.outputs or with none
// configured; an out-of-range one fails the batch naming the field.
func TestDroppedBatchOwnOutputExpiry(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, func(c *daemon.Config) {
		c.Expiry.Outputs = 10 * time.Hour
	})
	e.drop("own.options.json", `{"output_expires_after":{"anchor":"created_at","seconds":7200}}`)
	e.drop("own.jsonl", chatBatch(2, "o")+"not json\n")
	e.drop("plain.jsonl", chatBatch(1, "p"))
	e.drop("bad.options.json", `{"output_expires_after":{"anchor":"created_at","seconds":60}}`)
	e.drop("bad.jsonl", chatBatch(1, "b"))
	for _, name := range []string{"own", "plain"} {
		if o := e.waitEnded(name, "jsonl"); o.Status != "completed" {
			t.Fatalf("%s: %+v", name, o)
		}
	}
	if o := e.waitEnded("bad", "jsonl"); o.Status != "failed" || o.Errors == nil || len(o.Errors.Data) == 0 ||
		!strings.Contains(o.Errors.Data[0].Message, "output_expires_after.seconds") {
		t.Fatalf("bad: %+v, want failed naming output_expires_after.seconds", o)
	}
	gone := func(name string) bool {
		_, err := os.Lstat(filepath.Join(e.dirs.Outbox, name+".output.jsonl"))
		return os.IsNotExist(err)
	}
	// Three hours on, own's results are gone (2 hours), plain's stay (10).
	e.expireAt(time.Now().Add(3 * time.Hour))
	if !gone("own") {
		t.Error("own's output outlived its own output_expires_after")
	}
	if _, err := os.Lstat(filepath.Join(e.dirs.Outbox, "own.errors.jsonl")); !os.IsNotExist(err) {
		t.Errorf("own's errors file after its expiry: %v, want gone", err)
	}
	if gone("plain") {
		t.Error("plain's output went before the config's expiry.outputs")
	}
	e.expireAt(time.Now().Add(11 * time.Hour))
	if !gone("plain") {
		t.Error("plain's output outlived expiry.outputs")
	}
}
