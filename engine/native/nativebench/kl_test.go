package nativebench

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// A model compared with itself is at KL 0 everywhere and always agrees.
func TestKLSelf(t *testing.T) {
	path := tinyModel(t)
	ref, err := NewKLRef(path, KLOptions{Threads: 1, MaxTokens: 150})
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.Tokens) != 150 {
		t.Fatalf("%d tokens, want 150", len(ref.Tokens))
	}
	res, err := ref.Compare(path)
	if err != nil {
		t.Fatal(err)
	}
	if res.Positions != 150 || res.Mean != 0 || res.Max != 0 || res.P99 != 0 || res.Top1 != 1 {
		t.Errorf("self: %+v", res)
	}
	if res.BitsPerWeight != 32 {
		t.Errorf("an F32 model: %.2f bits per weight", res.BitsPerWeight)
	}
	tab := &KLTable{Ref: path, Rows: []*KLResult{res}}
	if s := tab.String(); !strings.Contains(s, "over 150 positions") || !strings.Contains(s, "tiny.gguf") || !strings.Contains(s, "100.00%") {
		t.Errorf("table:\n%s", s)
	}
}

// writeKL writes the tiny-k demo model with seed 1 in q to dir.
func writeKL(t *testing.T, dir string, q demomodel.Quant) string {
	t.Helper()
	plan, err := demomodel.Plan(demomodel.Shapes["tiny-k"], q)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plan {
		if p.Type.BlockSize() == 0 {
			t.Skipf("kernels has no %v quantizer registered yet", p.Type)
		}
	}
	name := strings.ToLower(q.Name)
	if q.Dequantized {
		name += "-dequantized"
	}
	path := filepath.Join(dir, name+".gguf")
	if err := demomodel.WriteQuantFile(path, demomodel.Shapes["tiny-k"], q, 1); err != nil {
		t.Fatal(err)
	}
	return path
}

// klOrder measures Q8_0 and Q4_K against F32 on the same weights and
// wants Q8_0 much closer.
func klOrder(t *testing.T, dequantized bool) {
	dir := t.TempDir()
	ref, err := NewKLRef(writeKL(t, dir, demomodel.Single(kernels.F32)), KLOptions{Threads: 1, MaxTokens: 200})
	if err != nil {
		t.Fatal(err)
	}
	var res [2]*KLResult
	for i, dt := range []kernels.DType{kernels.Q8_0, kernels.Q4_K} {
		q := demomodel.Single(dt)
		q.Dequantized = dequantized
		path := writeKL(t, dir, q)
		r, err := ref.Compare(path)
		if errors.Is(err, weights.ErrUnsupported) {
			t.Skipf("the weights loader (engine/native/weights) does not load %v yet: %v", dt, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		res[i] = r
	}
	t.Logf("Q8_0: %+v\nQ4_K: %+v", res[0], res[1])
	if !(res[0].Mean > 0 && res[0].Mean < res[1].Mean/4) || res[0].P99 >= res[1].P99 || res[0].Top1 < res[1].Top1 {
		t.Errorf("Q8_0 %+v is not closer to F32 than Q4_K %+v", res[0], res[1])
	}
}

// The ordering holds through the engine's quantized kernels (once the
// loader accepts the types) and for the weights' rounding alone.
func TestKLOrder(t *testing.T)            { klOrder(t, false) }
func TestKLOrderDequantized(t *testing.T) { klOrder(t, true) }
