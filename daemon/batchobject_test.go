package daemon_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// A dropped file's input_file_id is the same in NAME.batch.json and over
// the API, and it names the input as a file the API serves.
func TestDroppedInputFileIDIsTheSameOnDiskAndOverTheAPI(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	e.drop("same-id.jsonl", chatBatch(2, "s"))
	disk := e.waitEnded("same-id", "jsonl")
	var api pipeline.BatchObject
	if st := e.call("GET", "/v1/batches/"+disk.ID, "", nil, &api); st != 200 {
		t.Fatalf("GET batch %s: %d", disk.ID, st)
	}
	if disk.InputFileID != api.InputFileID {
		t.Fatalf("input_file_id on disk %q, over the API %q", disk.InputFileID, api.InputFileID)
	}
	var fo map[string]any
	if st := e.call("GET", "/v1/files/"+disk.InputFileID, "", nil, &fo); st != 200 || fo["filename"] != "same-id.jsonl" {
		t.Fatalf("input file %s: %d %v", disk.InputFileID, st, fo)
	}
}

// A 400 the native engine gives (here an unknown model with strict_model)
// is a response line with a request_id, as every other response line.
func TestNativeEngineRefusalLineHasARequestID(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	cfg := e.config()
	cfg.Engine = "native"
	cfg.Native.Models = []native.ModelConfig{{Path: demoModel(t)}}
	cfg.Native.StrictModel = true
	e.open(cfg)
	e.drop("strict.jsonl", `{"custom_id":"x","method":"POST","url":"/v1/completions","body":{"model":"no-such-model","prompt":"hi","max_tokens":2}}
`)
	o := e.waitEnded("strict", "jsonl")
	if o.RequestCounts.Failed != 1 {
		t.Fatalf("%s %+v", o.Status, o.RequestCounts)
	}
	lines := e.lines("strict.errors.jsonl")
	var l struct {
		ID       string `json:"id"`
		Response *struct {
			StatusCode int             `json:"status_code"`
			RequestID  string          `json:"request_id"`
			Body       json.RawMessage `json:"body"`
		} `json:"response"`
	}
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &l) != nil || l.Response == nil {
		t.Fatalf("errors file: %q", lines)
	}
	if l.Response.StatusCode != 400 || !strings.Contains(string(l.Response.Body), "model_not_found") {
		t.Fatalf("line %s, want a 400 model_not_found", lines[0])
	}
	if l.Response.RequestID == "" {
		t.Fatalf("the engine's 400 line has no request_id: %s", lines[0])
	}
}

// An API batch created without a completion_window has OpenAI's 24h, and
// its expires_at says when that window ends.
func TestAPIBatchWindowSetsExpiresAt(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	_, f := e.upload("batch", "win.jsonl", chatBatch(2, "w"))
	o := e.createBatch(f["id"].(string))
	end := e.waitBatch(o.ID, func(o *pipeline.BatchObject) bool { return pipeline.Terminal(o.Status) })
	if end.CompletionWindow != "24h" || end.ExpiresAt == nil {
		t.Fatalf("completion_window %q expires_at %v, want 24h and a time", end.CompletionWindow, end.ExpiresAt)
	}
	if d := *end.ExpiresAt - *end.InProgressAt; d < 24*3600-60 || d > 24*3600+60 {
		t.Fatalf("expires_at is %ds after in_progress_at, want about 24h", d)
	}
}

// Two dropped files with the same content under different names are two
// batches: distinct ids (the second reusing the first's results), both
// listed by GET /v1/batches and each found by its id.
func TestSameContentUnderTwoNamesIsTwoBatches(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	e.drop("first.jsonl", chatBatch(2, "t"))
	a := e.waitEnded("first", "jsonl")
	e.drop("second.jsonl", chatBatch(2, "t"))
	b := e.waitEnded("second", "jsonl")
	if a.ID == b.ID {
		t.Fatalf("both names have batch id %s", a.ID)
	}
	var list struct {
		Data []pipeline.BatchObject `json:"data"`
	}
	if st := e.call("GET", "/v1/batches", "", nil, &list); st != 200 {
		t.Fatalf("list: %d", st)
	}
	ids := map[string]string{}
	for _, o := range list.Data {
		ids[o.Batchd.Name] = o.ID
	}
	if ids["first"] != a.ID || ids["second"] != b.ID || len(list.Data) != 2 {
		t.Fatalf("GET /v1/batches lists %v, want first %s and second %s", ids, a.ID, b.ID)
	}
	for name, id := range map[string]string{"first": a.ID, "second": b.ID} {
		var o pipeline.BatchObject
		if st := e.call("GET", "/v1/batches/"+id, "", nil, &o); st != 200 || o.ID != id || o.Batchd.Name != name ||
			o.Status != pipeline.StatusCompleted {
			t.Fatalf("GET /v1/batches/%s: %d %s %s %s", id, st, o.ID, o.Batchd.Name, o.Status)
		}
	}
}
