// Package storetest is the contract suite every pipeline.Store passes
// (store/folder, store/bucket): what a user of the file contract sees in
// the inbox, outbox and done/ after each step, whatever keeps the files.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/batchd/batchd/pipeline"
)

// Harness gives the suite one implementation, over a fresh, empty
// Fixture per call of Run's subtests.
type Harness struct {
	// New returns a fresh fixture.
	New func(t *testing.T) Fixture
	// Checkpoints tells that the store saves Checkpoint lines for Resume
	// (the bucket); a store that does not (the folder) resumes nothing.
	Checkpoints bool
}

// Fixture is one fresh, empty place that keeps batch files (a data
// directory, a bucket prefix) and the store under test over it.
type Fixture struct {
	// Put writes file base into folder dir ("inbox", "outbox", "done").
	Put func(t *testing.T, dir, base string, data []byte)
	// Get reads file base of folder dir; ok is false when it is absent.
	Get func(t *testing.T, dir, base string) (data []byte, ok bool)
	// Open returns the store of batch name, whose input is inbox/NAME.jsonl.
	Open func(t *testing.T, name string) pipeline.Store
	// Stop ends a run of s that returned runErr (a bucket store's Close;
	// nothing for a folder).
	Stop func(t *testing.T, s pipeline.Store, runErr error)
}

const (
	input   = "{\"custom_id\":\"a\"}\n{\"custom_id\":\"b\"}\n"
	options = `{"max_tokens":7}`
	output  = "{\"id\":\"batch_req_1\",\"custom_id\":\"a\"}\n"
	errs    = "{\"id\":\"batch_req_2\",\"custom_id\":\"b\",\"line\":2}\n"
	results = "[\n{\"custom_id\":\"a\"},\n{\"custom_id\":\"b\"}\n]\n"
	running = "{\"status\":\"in_progress\"}\n"
	final   = "{\"status\":\"completed\"}\n"
)

// Run runs the contract suite.
func Run(t *testing.T, h Harness) {
	t.Run("InputAndOptions", func(t *testing.T) { testInput(t, h) })
	t.Run("PublishThenRetire", func(t *testing.T) { testPublish(t, h) })
	t.Run("FailedRemovesStaleResults", func(t *testing.T) { testFailed(t, h) })
	t.Run("NoDocumentRemovesStaleDocument", func(t *testing.T) { testNoDocument(t, h) })
	t.Run("CheckpointThenResume", func(t *testing.T) { testResume(t, h) })
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func readInput(t *testing.T, s pipeline.Store) string {
	t.Helper()
	r, err := s.OpenInput(ctx(t))
	if err != nil {
		t.Fatalf("OpenInput: %v", err)
	}
	defer r.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r); err != nil {
		t.Fatalf("read input: %v", err)
	}
	return buf.String()
}

func want(t *testing.T, fx Fixture, dir, base, content string) {
	t.Helper()
	got, ok := fx.Get(t, dir, base)
	if !ok {
		t.Fatalf("%s/%s is missing", dir, base)
	}
	if string(got) != content {
		t.Fatalf("%s/%s = %q, want %q", dir, base, got, content)
	}
}

func absent(t *testing.T, fx Fixture, dir, base string) {
	t.Helper()
	if got, ok := fx.Get(t, dir, base); ok {
		t.Fatalf("%s/%s is there (%q), want it absent", dir, base, got)
	}
}

// resultFiles writes committed result files as the pipeline holds them:
// the output, the errors and a requests document's results.
func resultFiles(t *testing.T) (out, errsPath, doc string) {
	dir := t.TempDir()
	out, errsPath, doc = filepath.Join(dir, "output.1.jsonl"), filepath.Join(dir, "errors.1.jsonl"), filepath.Join(dir, "results.1.json")
	for path, content := range map[string]string{out: output, errsPath: errs, doc: results} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out, errsPath, doc
}

// The store names the files as the contract does, reads the input as often
// as asked, and gives the options as they are (nil for none).
func testInput(t *testing.T, h Harness) {
	fx := h.New(t)
	fx.Put(t, "inbox", "x.jsonl", []byte(input))
	fx.Put(t, "inbox", "x.options.json", []byte(options))
	fx.Put(t, "inbox", "y.jsonl", []byte(input))
	x := fx.Open(t, "x")
	defer fx.Stop(t, x, nil)
	if f := x.Files(); f != (pipeline.Files{Input: "x.jsonl", Options: "x.options.json", Output: "x.output.jsonl", Errors: "x.errors.jsonl"}) {
		t.Fatalf("Files = %+v", f)
	}
	for range 2 {
		if got := readInput(t, x); got != input {
			t.Fatalf("input = %q, want %q", got, input)
		}
	}
	if got, err := x.Options(ctx(t)); err != nil || string(got) != options {
		t.Fatalf("Options = %q, %v; want %q", got, err, options)
	}
	y := fx.Open(t, "y")
	defer fx.Stop(t, y, nil)
	if got, err := y.Options(ctx(t)); err != nil || got != nil {
		t.Fatalf("Options without a file = %q, %v; want nil", got, err)
	}
}

// Publish places the results and the final object, again harmlessly;
// progress never replaces the final object; Retire moves the input and its
// options to done/ and removes the cancel request, again harmlessly.
func testPublish(t *testing.T, h Harness) {
	fx := h.New(t)
	fx.Put(t, "inbox", "x.jsonl", []byte(input))
	fx.Put(t, "inbox", "x.options.json", []byte(options))
	fx.Put(t, "inbox", "x.cancel", nil)
	s := fx.Open(t, "x")
	c := ctx(t)
	if err := s.Progress(c, []byte(running)); err != nil {
		t.Fatalf("Progress: %v", err)
	}
	out, errsPath, doc := resultFiles(t)
	r := pipeline.Results{Output: out, Errors: errsPath, Document: doc, Object: []byte(final)}
	for range 2 {
		if err := s.Publish(c, r); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	if err := s.Progress(c, []byte(running)); err != nil {
		t.Fatalf("Progress after Publish: %v", err)
	}
	want(t, fx, "outbox", "x.output.jsonl", output)
	want(t, fx, "outbox", "x.errors.jsonl", errs)
	want(t, fx, "outbox", "x.results.json", results)
	want(t, fx, "outbox", "x.batch.json", final)
	want(t, fx, "inbox", "x.jsonl", input) // published, not retired yet
	if _, err := s.RetireRecord(); err != nil {
		t.Fatalf("RetireRecord: %v", err)
	}
	for range 2 {
		if err := s.Retire(c); err != nil {
			t.Fatalf("Retire: %v", err)
		}
	}
	fx.Stop(t, s, nil)
	absent(t, fx, "inbox", "x.jsonl")
	absent(t, fx, "inbox", "x.options.json")
	absent(t, fx, "inbox", "x.cancel")
	want(t, fx, "done", "x.jsonl", input)
	want(t, fx, "done", "x.options.json", options)
	want(t, fx, "outbox", "x.batch.json", final)
}

// A batch that failed before any request ran publishes its object only,
// and results an earlier batch of the same name left are gone.
func testFailed(t *testing.T, h Harness) {
	fx := h.New(t)
	fx.Put(t, "outbox", "x.output.jsonl", []byte(output))
	fx.Put(t, "outbox", "x.errors.jsonl", []byte(errs))
	fx.Put(t, "outbox", "x.results.json", []byte(results))
	fx.Put(t, "inbox", "x.jsonl", []byte(input))
	s := fx.Open(t, "x")
	if err := s.Publish(ctx(t), pipeline.Results{Object: []byte(final)}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if err := s.Retire(ctx(t)); err != nil {
		t.Fatalf("Retire: %v", err)
	}
	fx.Stop(t, s, nil)
	absent(t, fx, "outbox", "x.output.jsonl")
	absent(t, fx, "outbox", "x.errors.jsonl")
	absent(t, fx, "outbox", "x.results.json")
	want(t, fx, "outbox", "x.batch.json", final)
	want(t, fx, "done", "x.jsonl", input)
}

// Results without a document (an input that is not a requests document)
// remove the NAME.results.json an earlier batch of the same name left, so
// it cannot pass for this batch's.
func testNoDocument(t *testing.T, h Harness) {
	fx := h.New(t)
	fx.Put(t, "outbox", "x.results.json", []byte(results))
	fx.Put(t, "inbox", "x.jsonl", []byte(input))
	s := fx.Open(t, "x")
	defer fx.Stop(t, s, nil)
	out, errsPath, _ := resultFiles(t)
	if err := s.Publish(ctx(t), pipeline.Results{Output: out, Errors: errsPath, Object: []byte(final)}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	want(t, fx, "outbox", "x.output.jsonl", output)
	want(t, fx, "outbox", "x.errors.jsonl", errs)
	absent(t, fx, "outbox", "x.results.json")
	want(t, fx, "outbox", "x.batch.json", final)
}

// Lines checkpointed by a run that stopped come back to the next run of
// the same input (where the store checkpoints at all).
func testResume(t *testing.T, h Harness) {
	fx := h.New(t)
	fx.Put(t, "inbox", "x.jsonl", []byte(input))
	lines := []pipeline.Committed{{Line: 1, Data: []byte(`{"custom_id":"a"}`)}, {Line: 2, Errors: true, Data: []byte(`{"custom_id":"b"}`)}}
	s := fx.Open(t, "x")
	if err := s.Resume(ctx(t), func(pipeline.Committed) error { return errors.New("a first run resumed a line") }); err != nil {
		t.Fatalf("Resume on a first run: %v", err)
	}
	for _, l := range lines {
		if err := s.Checkpoint([]pipeline.Committed{l}); err != nil {
			t.Fatalf("Checkpoint: %v", err)
		}
	}
	fx.Stop(t, s, errors.New("stopped"))
	s = fx.Open(t, "x")
	defer fx.Stop(t, s, nil)
	var got []pipeline.Committed
	if err := s.Resume(ctx(t), func(c pipeline.Committed) error {
		got = append(got, c)
		return nil
	}); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if !h.Checkpoints {
		if len(got) != 0 {
			t.Fatalf("Resume gave %d lines from a store that keeps no checkpoints", len(got))
		}
		return
	}
	if !slices.EqualFunc(got, lines, func(a, b pipeline.Committed) bool {
		return a.Line == b.Line && a.Errors == b.Errors && bytes.Equal(a.Data, b.Data)
	}) {
		t.Fatalf("Resume = %+v, want %+v", got, lines)
	}
}
