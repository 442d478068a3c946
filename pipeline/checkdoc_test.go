package pipeline_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/pipeline"
)

// batchd check verifies a requests document's NAME.results.json: a good
// batch passes; a cut, tampered, reordered, missing or padded file, and one
// beside a JSONL batch, are each reported naming the file and the entry.
func TestCheckDocumentResults(t *testing.T) {
	e := newEnv(t)
	doc := `{"max_generate_length":5,"requests":[
		{"custom_id":"a","messages":[{"role":"user","content":"one"}]},
		{"messages":[{"role":"user","content":"two"}]},
		{"custom_id":"bad","messages":[{"role":"user","content":"x"}],"temperature":5},
		{"custom_id":"d","messages":[{"role":"user","content":"four"}]}
	]}`
	if o := e.run(e.drop("doc", "json", doc, "")); o.RequestCounts.Completed != 3 || o.RequestCounts.Failed != 1 {
		t.Fatalf("doc: %s %+v", o.Status, o.RequestCounts)
	}
	e.check("doc", "json") // the good batch passes, results.json included
	good, err := os.ReadFile(filepath.Join(e.outbox, "doc.results.json"))
	if err != nil {
		t.Fatal(err)
	}
	entries := strings.Split(strings.TrimSuffix(strings.TrimPrefix(string(good), "[\n"), "\n]\n"), ",\n")
	if len(entries) != 4 {
		t.Fatalf("results.json has %d entries, want 4:\n%s", len(entries), good)
	}
	array := func(es ...string) string { return "[\n" + strings.Join(es, ",\n") + "\n]\n" }
	swap := func(old, new string) func(string) string {
		return func(s string) string {
			if !strings.Contains(s, old) {
				t.Fatalf("results.json lacks %q:\n%s", old, s)
			}
			return strings.Replace(s, old, new, 1)
		}
	}
	in := func(format, results string) pipeline.CheckInput {
		return pipeline.CheckInput{
			Input:   filepath.Join(e.done, "doc."+format),
			Format:  format,
			Output:  filepath.Join(e.outbox, "doc.output.jsonl"),
			Errors:  filepath.Join(e.outbox, "doc.errors.jsonl"),
			Object:  filepath.Join(e.outbox, "doc.batch.json"),
			Results: results,
		}
	}
	dir := t.TempDir()
	results := filepath.Join(dir, "doc.results.json")
	for _, tc := range []struct {
		name    string
		content func() string // nil: no file
		want    []string      // in one problem
	}{
		{"cut short", func() string { return string(good[:len(good)/2]) },
			[]string{results, "cut short"}},
		{"no closing bracket", func() string { return strings.TrimSuffix(string(good), "]\n") },
			[]string{results, "not closed after entry 4"}},
		{"not an array", func() string { return `{"results":[]}` },
			[]string{results, "not a JSON array"}},
		{"output text changed", func() string {
			return array(entries[0], swap(`"output_text":"echo: two"`, `"output_text":"echo: 2"`)(entries[1]), entries[2], entries[3])
		}, []string{results, "entry 2 (custom_id \"request-2\")", "output_text not as", "doc.output.jsonl:"}},
		{"usage changed", func() string {
			return array(swap(`"total_tokens":`, `"total_tokens":1`)(entries[0]), entries[1], entries[2], entries[3])
		}, []string{"entry 1 (custom_id \"a\")", "usage not as"}},
		{"error dropped", func() string {
			i := strings.Index(entries[2], `"error":`)
			return array(entries[0], entries[1], entries[2][:i]+`"error":null}`, entries[3])
		}, []string{"entry 3 (custom_id \"bad\")", "no error, but its result is a failure", "doc.errors.jsonl:1"}},
		{"error added", func() string {
			return array(entries[0], entries[1], entries[2], swap(`"error":null`, `"error":{"code":"x","message":"y"}`)(entries[3]))
		}, []string{"entry 4 (custom_id \"d\")", "an error, but its result is a success"}},
		{"two entries swapped", func() string { return array(entries[1], entries[0], entries[2], entries[3]) },
			[]string{"entry 1: custom_id \"request-2\", but request 1's is \"a\""}},
		{"custom_id changed", func() string {
			return array(swap(`"custom_id":"a"`, `"custom_id":"z"`)(entries[0]), entries[1], entries[2], entries[3])
		},
			[]string{"entry 1: custom_id \"z\", but request 1's is \"a\""}},
		{"an entry missing", func() string { return array(entries[0], entries[1], entries[2]) },
			[]string{"3 entries, but the input has 4 requests"}},
		{"an extra entry", func() string { return array(append(entries, entries[3])...) },
			[]string{"5 entries, but the input has 4 requests", "entries 5 to 5 stand for no request"}},
		{"an unknown key", func() string {
			return array(swap(`"custom_id":"a"`, `"custom_id":"a","note":1`)(entries[0]), entries[1], entries[2], entries[3])
		},
			[]string{"entry 1: unknown keys note"}},
		{"missing", nil, []string{results + " is missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(results)
			if tc.content != nil {
				if err := os.WriteFile(results, []byte(tc.content()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := pipeline.Check(in("json", results))
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() {
				t.Fatalf("check passed a results.json that is %s", tc.name)
			}
			found := false
			for _, p := range rep.Problems {
				ok := true
				for _, w := range tc.want {
					ok = ok && strings.Contains(p, w)
				}
				found = found || ok
			}
			if !found {
				t.Fatalf("no problem says all of %q:\n%s", tc.want, strings.Join(rep.Problems, "\n"))
			}
		})
	}

	// The same bytes back in place pass again (the cases above did not
	// pass for a reason outside the file).
	if err := os.WriteFile(results, good, 0o644); err != nil {
		t.Fatal(err)
	}
	if rep, err := pipeline.Check(in("json", results)); err != nil || !rep.OK() {
		t.Fatalf("a copy of the good results.json: %v %v", err, rep.Problems)
	}

	// A JSONL batch has none: one there is reported.
	if o := e.run(e.drop("lines", "jsonl", chatLines(2, "l"), "")); o.Status != pipeline.StatusCompleted {
		t.Fatalf("lines: %s", o.Status)
	}
	e.check("lines", "jsonl")
	stray := filepath.Join(e.outbox, "lines.results.json")
	if err := os.WriteFile(stray, []byte("[]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := pipeline.Check(pipeline.CheckInput{
		Input: filepath.Join(e.done, "lines.jsonl"), Format: "jsonl",
		Output:  filepath.Join(e.outbox, "lines.output.jsonl"),
		Errors:  filepath.Join(e.outbox, "lines.errors.jsonl"),
		Object:  filepath.Join(e.outbox, "lines.batch.json"),
		Results: stray,
	})
	if err != nil || rep.OK() || !strings.Contains(strings.Join(rep.Problems, "\n"), "not a requests document") {
		t.Fatalf("a results.json beside a JSONL batch: %v %v", err, rep.Problems)
	}

	// A document refused whole has no results: one there is reported.
	if o := e.run(e.drop("refused", "json", `{"requests":[],"colour":1}`, "")); o.Status != pipeline.StatusFailed {
		t.Fatalf("refused: %s", o.Status)
	}
	e.check("refused", "json")
	stray = filepath.Join(e.outbox, "refused.results.json")
	if err := os.WriteFile(stray, []byte("[]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err = pipeline.Check(pipeline.CheckInput{
		Input: filepath.Join(e.done, "refused.json"), Format: "json",
		Output:  filepath.Join(e.outbox, "refused.output.jsonl"),
		Errors:  filepath.Join(e.outbox, "refused.errors.jsonl"),
		Object:  filepath.Join(e.outbox, "refused.batch.json"),
		Results: stray,
	})
	if err != nil || rep.OK() || !strings.Contains(strings.Join(rep.Problems, "\n"), "batch failed validation but "+stray+" exists") {
		t.Fatalf("a results.json beside a refused document: %v %v", err, rep.Problems)
	}
}
