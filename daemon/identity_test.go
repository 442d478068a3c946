package daemon_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// fileContent fetches GET /v1/files/{id}/content: its status and body.
func (e *apiEnv) fileContent(id string) (int, string) {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.base+"/v1/files/"+id+"/content", nil)
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// createBatch creates an API batch over uploaded file fileID.
func (e *apiEnv) createBatch(fileID string) *pipeline.BatchObject {
	e.t.Helper()
	var o pipeline.BatchObject
	if st := e.postJSON("/v1/batches", map[string]any{"input_file_id": fileID, "endpoint": "/v1/chat/completions"}, &o); st != 200 {
		e.t.Fatalf("create batch: %d", st)
	}
	return &o
}

// restart closes e's daemon and opens another on the same data directory.
func (e *apiEnv) restart(cfg daemon.Config) {
	e.t.Helper()
	closeDaemon(e.t, e.d)
	e.d = e.open(cfg)
	e.base = "http://" + e.d.HTTPAddr()
}

func apiConfig(e *apiEnv, set func(*daemon.Config)) daemon.Config {
	cfg := e.config()
	cfg.Listen = "127.0.0.1:0"
	cfg.API.Keys = []string{e.key}
	if set != nil {
		set(&cfg)
	}
	return cfg
}

// A folder batch's output file id names its own results: a later batch of
// the same name with other content does not change what it returns.
func TestAFileIDNamesOneContentNotAName(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	e.drop("r.jsonl", chatBatch(3, "a"))
	a := e.waitEnded("r", "jsonl")
	var objA pipeline.BatchObject
	if st := e.call("GET", "/v1/batches/"+a.ID, "", nil, &objA); st != 200 || objA.OutputFileID == nil {
		t.Fatalf("batch A: %d %+v", st, objA)
	}
	st, before := e.fileContent(*objA.OutputFileID)
	if st != 200 || strings.Count(before, `"a-`) != 3 {
		t.Fatalf("A's output before B: %d %q", st, before)
	}

	e.drop("r.jsonl", chatBatch(4, "b"))
	waitFor(t, 60*time.Second, "batch B to end", func() bool {
		o := e.object("r")
		return o != nil && o.ID != a.ID && pipeline.Terminal(o.Status)
	})
	if got := e.lines("r.output.jsonl"); len(got) != 4 || !strings.Contains(got[0], `"b-`) {
		t.Fatalf("outbox after B: %q", got)
	}
	st, after := e.fileContent(*objA.OutputFileID)
	if strings.Contains(after, `"b-`) {
		t.Fatalf("regression: A's output file id %s now returns B's results (it resolved by name): %q", *objA.OutputFileID, after)
	}
	if st != 200 || after != before {
		t.Fatalf("A's output file after B: %d %q, want A's results unchanged", st, after)
	}
	if st, body := e.fileContent(objA.InputFileID); strings.Contains(body, `b-`) {
		t.Fatalf("A's input file id returns B's input: %d %q", st, body)
	}
	var again pipeline.BatchObject
	if st := e.call("GET", "/v1/batches/"+a.ID, "", nil, &again); st != 200 || again.RequestCounts.Total != 3 || *again.OutputFileID != *objA.OutputFileID {
		t.Fatalf("batch A after B: %d %+v", st, again)
	}
}

// Two API batches over one uploaded file: the second reuses the first's
// results and still ends, with its own record, also across a restart.
func TestTwoAPIBatchesOverOneFileBothEnd(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	_, f := e.upload("batch", "same.jsonl", chatBatch(5, "s"))
	first := e.createBatch(f["id"].(string))
	end1 := e.waitBatch(first.ID, func(o *pipeline.BatchObject) bool { return pipeline.Terminal(o.Status) })
	second := e.createBatch(f["id"].(string))
	end2 := e.waitBatch(second.ID, func(o *pipeline.BatchObject) bool { return pipeline.Terminal(o.Status) })
	if !strings.Contains(e.logs.String(), "reusing its results") {
		t.Fatal("the second batch did not reuse the first's results")
	}
	for _, o := range []*pipeline.BatchObject{end1, end2} {
		if o.Status != pipeline.StatusCompleted || o.RequestCounts.Total != 5 || o.RequestCounts.Completed != 5 || o.OutputFileID == nil {
			t.Fatalf("batch %s ended as %s %+v", o.ID, o.Status, o.RequestCounts)
		}
		if st, body := e.fileContent(*o.OutputFileID); st != 200 || strings.Count(body, "\n") != 5 {
			t.Fatalf("output of %s: %d %q", o.ID, st, body)
		}
	}
	if end1.ID != first.ID || end2.ID != second.ID {
		t.Fatalf("ids: %s %s, want %s %s", end1.ID, end2.ID, first.ID, second.ID)
	}
	var list struct {
		Data []pipeline.BatchObject `json:"data"`
	}
	if st := e.call("GET", "/v1/batches?limit=100", "", nil, &list); st != 200 || len(list.Data) != 2 {
		t.Fatalf("list: %d %+v", st, list)
	}
	for _, o := range list.Data {
		if o.Status != pipeline.StatusCompleted {
			t.Fatalf("listed %s as %s", o.ID, o.Status)
		}
	}

	e.restart(apiConfig(e, nil))
	for _, id := range []string{first.ID, second.ID} {
		var o pipeline.BatchObject
		if st := e.call("GET", "/v1/batches/"+id, "", nil, &o); st != 200 || o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 5 {
			t.Fatalf("after restart, %s: %d %s %+v", id, st, o.Status, o.RequestCounts)
		}
	}
}

// A cancelled API batch stays cancelled when a second batch over the same
// file runs the requests it left.
func TestACancelledBatchStaysCancelledWhenItsContentRunsAgain(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{Fault: func(n int64, r *http.Request, body []byte) openaitest.Fault {
		time.Sleep(2 * time.Millisecond) // a slow engine, so the batch is still running when cancelled
		return openaitest.Fault{}
	}}, func(c *daemon.Config) { c.Pipeline.Workers = 2 })
	_, f := e.upload("batch", "long.jsonl", chatBatch(400, "l"))
	first := e.createBatch(f["id"].(string))
	var page struct {
		Data []any `json:"data"`
	}
	waitFor(t, 60*time.Second, "results while running", func() bool {
		e.call("GET", "/v1/batches/"+first.ID+"/results?limit=5", "", nil, &page)
		return len(page.Data) == 5
	})
	if st := e.postJSON("/v1/batches/"+first.ID+"/cancel", nil, nil); st != 200 && st != http.StatusConflict {
		t.Fatalf("cancel: %d", st)
	}
	end1 := e.waitBatch(first.ID, func(o *pipeline.BatchObject) bool { return pipeline.Terminal(o.Status) })
	if end1.Status != pipeline.StatusCancelled || end1.RequestCounts.Failed == 0 {
		t.Skipf("the batch ended before the cancel reached it (%s %+v)", end1.Status, end1.RequestCounts)
	}
	st1, out1 := e.fileContent(*end1.OutputFileID)

	second := e.createBatch(f["id"].(string))
	end2 := e.waitBatch(second.ID, func(o *pipeline.BatchObject) bool { return pipeline.Terminal(o.Status) })
	if end2.Status != pipeline.StatusCompleted || end2.RequestCounts.Completed != 400 {
		t.Fatalf("second ended as %s %+v", end2.Status, end2.RequestCounts)
	}
	check := func(when string) {
		var o pipeline.BatchObject
		if st := e.call("GET", "/v1/batches/"+first.ID, "", nil, &o); st != 200 || o.Status != pipeline.StatusCancelled || o.RequestCounts != end1.RequestCounts {
			t.Fatalf("regression (%s): the cancelled batch reads %d %s %+v, want cancelled %+v", when, st, o.Status, o.RequestCounts, end1.RequestCounts)
		}
		// Its output file is what it left, or gone: never the second's.
		if st, out := e.fileContent(*o.OutputFileID); st != http.StatusNotFound && (st != st1 || out != out1) {
			t.Fatalf("%s: the cancelled batch's output file now returns %d with %d lines, want its own %d lines or 404",
				when, st, strings.Count(out, "\n"), strings.Count(out1, "\n"))
		}
	}
	check("after the second ran")
	e.restart(apiConfig(e, func(c *daemon.Config) { c.Pipeline.Workers = 2 }))
	check("after a restart")
}

// Published outputs are copies: a consumer appending to one name's output
// changes neither another name's nor the results batchd reuses.
func TestAppendingToOneOutputLeavesTheOthers(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	e.open(e.config())
	content := chatBatch(4, "c")
	e.drop("first.jsonl", content)
	e.waitEnded("first", "jsonl")
	e.drop("second.jsonl", content)
	e.waitEnded("second", "jsonl")
	want, err := os.ReadFile(filepath.Join(e.dirs.Outbox, "second.output.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(e.dirs.Outbox, "first.output.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"note":"a consumer's own line"}` + "\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := os.ReadFile(filepath.Join(e.dirs.Outbox, "second.output.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("regression: appending to first.output.jsonl changed second.output.jsonl (they shared one inode)")
	}
	e.check("second", "jsonl")
	// The same content once more reuses results the append did not touch.
	e.drop("third.jsonl", content)
	e.waitEnded("third", "jsonl")
	e.check("third", "jsonl")
	if strings.Contains(e.logs.String(), "changed outside batchd") {
		t.Fatal("the append reached the pipeline's own results")
	}
}
