package native

import (
	"math"
	"testing"

	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// TestPhi3LongRope: a Phi-3 GGUF's fused qkv and gate/up load as views
// split at the right rows, and its LongRoPE factors are chosen as llama.cpp
// chooses them: the long ones when the context is longer than the
// original one (TestFamiliesMatchLlamaCpp runs those beside llama.cpp),
// the short ones otherwise; the magnitude is the file's attention factor.
func TestPhi3LongRope(t *testing.T) {
	for _, tc := range []struct {
		context int
		long    bool
	}{{2048, true}, {16, false}} {
		shape := demomodel.Shapes["tiny-phi"]
		shape.Context = tc.context
		w := demoWeights(t, shape, kernels.F32)
		c := w.Config
		if q, v, g := w.Matrices["blk.0.attn_q.weight"], w.Matrices["blk.2.attn_v.weight"], w.Matrices["blk.1.ffn_gate.weight"]; q.Rows != 128 || v.Rows != 64 || g.Rows != 352 || g.Cols != 128 {
			t.Fatalf("split shapes: q %dx%d, v %dx%d, gate %dx%d", q.Rows, q.Cols, v.Rows, v.Cols, g.Rows, g.Cols)
		}
		wantMag := math.Sqrt(1 + math.Log(float64(tc.context)/16)/math.Log(16))
		if got := c.RopeMagnitude(); math.Abs(got-wantMag) > 1e-6 {
			t.Errorf("context %d: magnitude %g, want %g", tc.context, got, wantMag)
		}
		plain := (&weights.Model{Config: c}).RopeFrequencies()
		got := w.RopeFrequencies()
		for i, div := range demomodel.Shapes["tiny-phi"].LongRopeFactors(tc.long) {
			if want := plain[i] / float64(div); math.Abs(got[i]-want) > 1e-9*want {
				t.Fatalf("context %d (long %v): pair %d frequency %g, want %g", tc.context, tc.long, i, got[i], want)
			}
		}
	}
}
