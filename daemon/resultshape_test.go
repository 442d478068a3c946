package daemon_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// An API batch created with result_shape doubleword publishes its output
// in Doubleword's shape in the outbox, while GET /v1/files/{id}/content
// keeps serving OpenAI's batch output lines (what OpenAI's SDKs parse); an
// unknown shape is refused at creation.
func TestAPIBatchResultShape(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	st, f := e.upload("batch", "in.jsonl", chatBatch(3, "dw"))
	if st != 200 {
		t.Fatalf("upload: %d %v", st, f)
	}
	fileID := f["id"].(string)
	var refused apiErr
	if st := e.postJSON("/v1/batches", map[string]any{"input_file_id": fileID, "endpoint": "/v1/chat/completions", "result_shape": "xml"}, &refused); st != 400 || !strings.Contains(refused.Error.Message, "result_shape") {
		t.Fatalf("result_shape xml: %d %+v", st, refused)
	}
	var created pipeline.BatchObject
	if st := e.postJSON("/v1/batches", map[string]any{"input_file_id": fileID, "endpoint": "/v1/chat/completions", "result_shape": "doubleword"}, &created); st != 200 {
		t.Fatalf("create: %d", st)
	}
	o := e.waitBatch(created.ID, func(o *pipeline.BatchObject) bool { return pipeline.Terminal(o.Status) })
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 3 || o.OutputFileID == nil {
		t.Fatalf("ended as %+v", o)
	}
	for _, l := range e.lines(created.ID + ".output.jsonl") {
		var dw struct {
			ID           string          `json:"id"`
			CustomID     string          `json:"custom_id"`
			ResponseBody json.RawMessage `json:"response_body"`
			Response     json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal([]byte(l), &dw); err != nil || dw.ID == "" || !strings.HasPrefix(dw.CustomID, "dw-") ||
			!strings.Contains(string(dw.ResponseBody), `"chat.completion"`) || dw.Response != nil {
			t.Fatalf("outbox line in Doubleword's shape: %v %s", err, l)
		}
	}
	st, out := e.fileContent(*o.OutputFileID)
	if st != 200 {
		t.Fatalf("output file content: %d %s", st, out)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var line struct {
			CustomID *string                `json:"custom_id"`
			Response *pipeline.LineResponse `json:"response"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil || line.CustomID == nil || line.Response == nil || line.Response.StatusCode != 200 {
			t.Fatalf("output file line in OpenAI's shape: %v %s", err, l)
		}
	}
}
