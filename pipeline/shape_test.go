package pipeline_test

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// dwLines reads a NAME.output.jsonl that must be in Doubleword's shape:
// each line exactly {id, custom_id, response_body}. It returns the
// response bodies by custom_id.
func dwLines(t *testing.T, path string) map[string]string {
	t.Helper()
	bodies := map[string]string{}
	for _, l := range readLines(t, path) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%s: %v: %s", path, err, l)
		}
		keys := slices.Sorted(maps.Keys(m))
		if strings.Join(keys, ",") != "custom_id,id,response_body" {
			t.Fatalf("%s: line has keys %v, want custom_id, id, response_body: %s", path, keys, l)
		}
		var cid string
		json.Unmarshal(m["custom_id"], &cid)
		bodies[cid] = string(m["response_body"])
	}
	return bodies
}

// oaBodies reads a NAME.output.jsonl in OpenAI's shape: the response
// bodies by custom_id.
func oaBodies(t *testing.T, path string) map[string]string {
	t.Helper()
	bodies := map[string]string{}
	for _, l := range parseLines(t, path) {
		if l.Response == nil || l.CustomID == nil {
			t.Fatalf("%s: a line without a response or custom_id", path)
		}
		bodies[*l.CustomID] = string(l.Response.Body)
	}
	return bodies
}

// result_shape doubleword publishes the output lines in Doubleword's shape
// ({id, custom_id, response_body}); the errors file keeps OpenAI's, and
// batchd check reads both. The shape is no part of the batch's identity: a
// re-drop in either shape reuses the results and publishes its own shape.
func TestResultShapeDoubleword(t *testing.T) {
	e := newEnv(t)
	content := chatLines(3, "d") + "not json\n"
	o := e.run(e.drop("dw", "jsonl", content, `{"result_shape":"doubleword"}`))
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 3 || o.RequestCounts.Failed != 1 {
		t.Fatalf("status %s counts %+v", o.Status, o.RequestCounts)
	}
	dw := dwLines(t, filepath.Join(e.outbox, "dw.output.jsonl"))
	if len(dw) != 3 || !strings.Contains(dw["d1"], `"object":"chat.completion"`) {
		t.Fatalf("doubleword output: %v", dw)
	}
	if errs := parseLines(t, filepath.Join(e.outbox, "dw.errors.jsonl")); len(errs) != 1 || errs[0].Error == nil {
		t.Fatalf("errors file: %+v", errs)
	}
	e.check("dw", "jsonl")
	dwRaw, err := os.ReadFile(filepath.Join(e.outbox, "dw.output.jsonl"))
	if err != nil {
		t.Fatal(err)
	}

	ran := e.srv.Requests()
	e.run(e.drop("oa", "jsonl", content, ""))
	if !maps.Equal(oaBodies(t, filepath.Join(e.outbox, "oa.output.jsonl")), dw) {
		t.Fatal("the OpenAI-shaped re-drop has other bodies than the Doubleword-shaped run")
	}
	e.check("oa", "jsonl")
	e.run(e.drop("dw2", "jsonl", content, `{"result_shape":"doubleword"}`))
	if raw, err := os.ReadFile(filepath.Join(e.outbox, "dw2.output.jsonl")); err != nil || string(raw) != string(dwRaw) {
		t.Fatalf("a Doubleword-shaped re-drop published other output (%v):\n%s\nwant\n%s", err, raw, dwRaw)
	}
	e.check("dw2", "jsonl")
	if got := e.srv.Requests(); got != ran {
		t.Fatalf("re-drops in another shape called the engine %d more times", got-ran)
	}
}

// The config's default result_shape applies to every batch; a batch's
// options file overrides it.
func TestResultShapeDefault(t *testing.T) {
	e := newEnv(t, func(c *pipeline.Config, _ *openaitest.Options) {
		c.Defaults.ResultShape = pipeline.ResultShapeDoubleword
	})
	e.run(e.drop("def", "jsonl", chatLines(2, "a"), ""))
	if got := dwLines(t, filepath.Join(e.outbox, "def.output.jsonl")); len(got) != 2 {
		t.Fatalf("default shape: %v", got)
	}
	e.check("def", "jsonl")
	e.run(e.drop("own", "jsonl", chatLines(2, "b"), `{"result_shape":"openai"}`))
	oa := oaBodies(t, filepath.Join(e.outbox, "own.output.jsonl"))
	if len(oa) != 2 {
		t.Fatalf("options' shape: %v", oa)
	}
	// The same content again in the default shape: its results, reused,
	// written in Doubleword's shape for the first time.
	ran := e.srv.Requests()
	e.run(e.drop("again", "jsonl", chatLines(2, "b"), ""))
	if got := dwLines(t, filepath.Join(e.outbox, "again.output.jsonl")); !maps.Equal(got, oa) || e.srv.Requests() != ran {
		t.Fatalf("re-drop in the default shape: %v (engine called %d more times), want %v", got, e.srv.Requests()-ran, oa)
	}
	e.check("again", "jsonl")
}

// An unknown result_shape fails the batch's options.
func TestResultShapeUnknown(t *testing.T) {
	err := pipeline.Options{ResultShape: "xml"}.Validate()
	if err == nil || !strings.Contains(err.Error(), "result_shape") {
		t.Fatalf("result_shape xml: %v", err)
	}
	for _, s := range []string{"", pipeline.ResultShapeOpenAI, pipeline.ResultShapeDoubleword} {
		if err := (pipeline.Options{ResultShape: s}).Validate(); err != nil {
			t.Errorf("result_shape %q: %v", s, err)
		}
	}
}
