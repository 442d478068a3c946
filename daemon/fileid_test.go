package daemon_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// A result file id names one immutable content: once retention forgot the
// record that made it, running the same content again makes a new record
// whose results take a new id, and the old id is gone (404) rather than
// returning the new run's results.
func TestAResultFileIDIsNotReusedAfterRetention(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	_, f := e.upload("batch", "same.jsonl", chatBatch(3, "same"))
	run := func() *pipeline.BatchObject {
		var o pipeline.BatchObject
		if st := e.postJSON("/v1/batches", map[string]any{"input_file_id": f["id"], "endpoint": "/v1/chat/completions"}, &o); st != 200 {
			t.Fatalf("create: %d", st)
		}
		end := e.waitBatch(o.ID, func(o *pipeline.BatchObject) bool { return pipeline.Terminal(o.Status) })
		if end.Status != pipeline.StatusCompleted || end.OutputFileID == nil || end.ErrorFileID == nil {
			t.Fatalf("batch ended as %s with output file %v", end.Status, end.OutputFileID)
		}
		return end
	}
	content := func(id string) (int, string) {
		req, _ := http.NewRequest("GET", e.base+"/v1/files/"+id+"/content", nil)
		req.Header.Set("Authorization", "Bearer "+e.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	first := run()
	if st, _ := content(*first.OutputFileID); st != 200 {
		t.Fatalf("first output %s: %d", *first.OutputFileID, st)
	}
	// The record is gone once its input file id (named by the content) is.
	hexID, _, _ := strings.Cut(strings.TrimPrefix(*first.OutputFileID, "file-o"), "-")
	waitFor(t, 10*time.Second, "retention to forget the first run's record", func() bool {
		e.d.Expire(time.Now().Add(time.Hour))
		st, _ := content("file-i" + hexID)
		return st == http.StatusNotFound
	})
	second := run()
	for _, ids := range [][2]string{{*first.OutputFileID, *second.OutputFileID}, {*first.ErrorFileID, *second.ErrorFileID}} {
		if ids[0] == ids[1] {
			t.Fatalf("the second run's results took the first run's id %s", ids[0])
		}
		if st, body := content(ids[0]); st != http.StatusNotFound {
			t.Fatalf("old id %s after retention: %d %q; want 404", ids[0], st, body)
		}
	}
	if st, body := content(*second.OutputFileID); st != 200 || body == "" {
		t.Fatalf("second output %s: %d %q", *second.OutputFileID, st, body)
	}
}
