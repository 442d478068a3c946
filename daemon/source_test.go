package daemon_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// The API is a source like the inbox: a cancel request for an API batch
// that waits to run is an event of that source, kept in its records, and
// delivered again with the batch after a restart, so the batch starts
// cancelled and runs nothing.
func TestAPICancelOfAWaitingBatchSurvivesARestart(t *testing.T) {
	var hang atomic.Bool
	hang.Store(true)
	e := newAPIEnv(t, openaitest.Options{Fault: func(n int64, r *http.Request, body []byte) openaitest.Fault {
		if hang.Load() && bytes.Contains(body, []byte("blocker")) {
			return openaitest.Fault{Hang: true}
		}
		return openaitest.Fault{}
	}}, func(c *daemon.Config) { c.Pipeline.MaxConcurrentBatches = 1 })
	create := func(name, content string) string {
		_, f := e.upload("batch", name, content)
		var o pipeline.BatchObject
		if st := e.postJSON("/v1/batches", map[string]any{"input_file_id": f["id"], "endpoint": "/v1/chat/completions"}, &o); st != 200 {
			t.Fatalf("create %s: %d", name, st)
		}
		return o.ID
	}
	blocker := create("blocker.jsonl", chatBatch(2, "blocker"))
	e.waitBatch(blocker, func(o *pipeline.BatchObject) bool { return o.Status == pipeline.StatusInProgress })
	waiting := create("waiting.jsonl", chatBatch(3, "waiting"))
	var c pipeline.BatchObject
	if st := e.postJSON("/v1/batches/"+waiting+"/cancel", nil, &c); st != 200 || c.Status != pipeline.StatusCancelling {
		t.Fatalf("cancel: %d %s", st, c.Status)
	}
	cfg := e.config()
	cfg.Listen, cfg.API.Keys, cfg.Pipeline.MaxConcurrentBatches = "127.0.0.1:0", []string{e.key}, 1
	closeDaemon(t, e.d)
	hang.Store(false)
	before := e.srv.Requests()
	e.d = e.open(cfg)
	e.base = "http://" + e.d.HTTPAddr()
	end := e.waitBatch(waiting, func(o *pipeline.BatchObject) bool { return pipeline.Terminal(o.Status) })
	if end.Status != pipeline.StatusCancelled || end.RequestCounts.Completed != 0 || end.RequestCounts.Failed != 3 {
		t.Fatalf("waiting batch after restart: %s %+v; want cancelled with its 3 requests failed", end.Status, end.RequestCounts)
	}
	b := e.waitBatch(blocker, func(o *pipeline.BatchObject) bool { return pipeline.Terminal(o.Status) })
	if b.Status != pipeline.StatusCompleted || b.RequestCounts.Completed != 2 {
		t.Fatalf("blocker after restart: %s %+v", b.Status, b.RequestCounts)
	}
	// Only the blocker's requests reached the engine after the restart.
	if got := e.srv.Requests() - before; got > 2 {
		t.Fatalf("%d requests after the restart; the cancelled batch sent some", got)
	}
}

// A bucket batch cancelled over the HTTP API: its source (the bucket)
// records the request as the cancel object, and the batch ends cancelled.
func TestBucketBatchCancelledOverTheAPI(t *testing.T) {
	e := newBucketEnv(t, openaitest.Options{Fault: func(n int64, r *http.Request, body []byte) openaitest.Fault {
		return openaitest.Fault{Hang: true} // the batch runs until it is cancelled
	}})
	cfg := e.bucketConfig("solo")
	cfg.Listen = "127.0.0.1:0"
	d := e.open(cfg)
	base := "http://" + d.HTTPAddr()
	e.put("jobs/inbox/c.jsonl", chatBatch(5, "c"))
	var id string
	waitFor(t, 60*time.Second, "the batch to run", func() bool {
		var list struct {
			Data []pipeline.BatchObject `json:"data"`
		}
		resp, err := http.Get(base + "/v1/batches")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			t.Fatal(err)
		}
		for _, o := range list.Data {
			if o.Status == pipeline.StatusInProgress {
				id = o.ID
			}
		}
		return id != ""
	})
	resp, err := http.Post(base+"/v1/batches/"+id+"/cancel", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("cancel: %d", resp.StatusCode)
	}
	e.waitPublished("c", 60*time.Second)
	if rep := e.bucketCheck(cfg, "c"); rep.Status != pipeline.StatusCancelled || rep.ErrorLines != 5 {
		t.Fatalf("%+v", rep)
	}
	if _, ok := e.minio.Get(e.bucket, "jobs/inbox/c.cancel"); ok {
		t.Fatal("the cancel object was left in the inbox")
	}
}
