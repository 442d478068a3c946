package pipeline_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/pipeline"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// TestGolden runs each case under testdata/golden (input.jsonl or input.json,
// and optionally options.json) through the pipeline on the stand-in server and
// compares the outputs with the case's expected files. Result lines are
// compared sorted (they are written in completion order); the batch object
// with its timestamps and rate zeroed; a requests document's results.json
// as it is. Run with -update to rewrite them.
func TestGolden(t *testing.T) {
	cases, err := os.ReadDir("testdata/golden")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name(), func(t *testing.T) {
			dir := filepath.Join("testdata/golden", c.Name())
			format := "jsonl"
			input, err := os.ReadFile(filepath.Join(dir, "input.jsonl"))
			if os.IsNotExist(err) {
				format = "json"
				input, err = os.ReadFile(filepath.Join(dir, "input.json"))
			}
			if err != nil {
				t.Fatal(err)
			}
			options, _ := os.ReadFile(filepath.Join(dir, "options.json"))
			e := newEnv(t)
			obj := e.run(e.drop("case", format, string(input), string(options)))
			if obj.Status != pipeline.StatusFailed {
				e.check("case", format)
			}
			got := map[string]string{"batch.json": normalizeObject(t, obj)}
			for _, f := range []string{"output.jsonl", "errors.jsonl"} {
				p := filepath.Join(e.outbox, "case."+f)
				if _, err := os.Stat(p); err == nil {
					got[f] = strings.Join(sortedLines(t, p), "\n") + "\n"
				}
			}
			// A document's own results are in request order: compared as
			// they are.
			if raw, err := os.ReadFile(filepath.Join(e.outbox, "case.results.json")); err == nil {
				got["results.json"] = string(raw)
			}
			for _, f := range []string{"batch.json", "output.jsonl", "errors.jsonl", "results.json"} {
				want, err := os.ReadFile(filepath.Join(dir, "want."+f))
				g, has := got[f]
				if *update {
					if has {
						if err := os.WriteFile(filepath.Join(dir, "want."+f), []byte(g), 0o644); err != nil {
							t.Fatal(err)
						}
					} else {
						os.Remove(filepath.Join(dir, "want."+f))
					}
					continue
				}
				switch {
				case os.IsNotExist(err) && !has:
				case os.IsNotExist(err):
					t.Errorf("%s: produced but no want.%s (run with -update)", f, f)
				case err != nil:
					t.Fatal(err)
				case !has:
					t.Errorf("%s: expected but not produced", f)
				case string(want) != g:
					t.Errorf("%s differs from want.%s:\n--- got\n%s\n--- want\n%s", f, f, g, want)
				}
			}
		})
	}
}

func normalizeObject(t *testing.T, o *pipeline.BatchObject) string {
	t.Helper()
	zero := func(p **int64) {
		if *p != nil {
			v := int64(1)
			*p = &v
		}
	}
	o.CreatedAt = 1
	for _, p := range []**int64{&o.InProgressAt, &o.ExpiresAt, &o.FinalizingAt, &o.CompletedAt, &o.FailedAt, &o.ExpiredAt, &o.CancellingAt, &o.CancelledAt} {
		zero(p)
	}
	o.Batchd.UpdatedAt, o.Batchd.Rate = 1, 0
	b, err := json.MarshalIndent(o, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}
