package native

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// demoWeights writes a demo model of shape in dt and loads it.
func demoWeights(t *testing.T, shape demomodel.Shape, dt kernels.DType) *weights.Model {
	t.Helper()
	path := filepath.Join(t.TempDir(), shape.Name+".gguf")
	if err := demomodel.WriteFile(path, shape, dt, 3); err != nil {
		t.Fatal(err)
	}
	w, err := weights.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// checkSameLogits fails unless models a and b give the same logits, to
// the bit, for every position of a 40-token sequence.
func checkSameLogits(t *testing.T, a, b *weights.Model) {
	t.Helper()
	checkLogitsWithin(t, a, b, 0)
}

// checkLogitsWithin fails unless models a and b's logits for every
// position of a 40-token sequence differ by at most tol.
func checkLogitsWithin(t *testing.T, a, b *weights.Model, tol float64) {
	t.Helper()
	seq := make([]int32, 40)
	for i := range seq {
		seq[i] = int32((i*131 + 7) % a.Config.VocabSize)
	}
	var logits [2][]float32
	for i, w := range []*weights.Model{a, b} {
		m, err := NewModel(w, kernels.NewCPU(1))
		if err != nil {
			t.Fatal(err)
		}
		logits[i] = allLogits(m, seq)
	}
	worst := 0.0
	for i := range logits[0] {
		worst = max(worst, math.Abs(float64(logits[0][i]-logits[1][i])))
	}
	if worst > tol || len(logits[0]) != len(logits[1]) {
		t.Fatalf("the HF directory's logits differ from the GGUF's by up to %g (tolerance %g)", worst, tol)
	}
}
