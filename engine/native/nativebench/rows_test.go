package nativebench

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/kernels"
)

// RowCosts measures every shape it is asked for and reports what a row
// beyond a decode step adds; bad options are refused by name.
func TestRowCosts(t *testing.T) {
	path := tinyModel(t)
	res, err := RowCosts(path, RowCostOptions{Threads: 1, Context: 40, Seqs: []int{1, 3}, Rows: []int{1, 3}, Passes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Pass) != 2 || len(res.Pass[0]) != 2 || len(res.Pass[1]) != 2 {
		t.Fatalf("shape of the result %v, want 2×2", res.Pass)
	}
	for i := range res.Pass {
		for j, d := range res.Pass[i] {
			if d <= 0 {
				t.Errorf("x%d, %d rows: %v", res.Seqs[i], res.Rows[j], d)
			}
		}
	}
	out := res.String()
	if strings.Count(out, "per extra row") != 2 || !strings.Contains(out, "after 40 positions") {
		t.Errorf("report:\n%s", out)
	}
	for _, bad := range []RowCostOptions{{Seqs: []int{1}, Rows: []int{0}, Context: 4}, {Seqs: []int{1}, Rows: []int{1}}, {Rows: []int{1}, Context: 4}} {
		if _, err := RowCosts(path, bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// tinyModel writes the "tiny" demo model (F32, random weights) and
// returns its path.
func tinyModel(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := demomodel.WriteFile(path, demomodel.Shapes["tiny"], kernels.F32, 1); err != nil {
		t.Fatal(err)
	}
	return path
}
