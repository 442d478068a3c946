package native

import (
	"math"
	"testing"

	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// TestLlama3RopeBothWays: Llama 3's RoPE scaling as a GGUF carries it (the
// rope_freqs.weight divisors llama.cpp's converter writes, which
// TestFamiliesMatchLlamaCpp runs beside llama.cpp) and as a Hugging Face
// config states it (rope_scaling llama3) give the same frequencies within
// float32 rounding, and differ from unscaled RoPE in every band: the
// shape's tied, scaled Llama 3.2 kind runs the same whichever file it came
// from.
func TestLlama3RopeBothWays(t *testing.T) {
	g := demoWeights(t, demomodel.Shapes["tiny-llama3"], kernels.F32)
	if !g.Config.TiedEmbeddings || g.Config.RopeTheta != 500000 {
		t.Fatalf("config %+v", g.Config)
	}
	fromGGUF := g.RopeFrequencies()
	hf := &weights.Model{Config: g.Config}
	hf.Config.RopeScaling = &weights.RopeScaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 32}
	fromHF := hf.RopeFrequencies()
	plain := (&weights.Model{Config: g.Config}).RopeFrequencies()
	bands := map[string]bool{}
	for i := range fromGGUF {
		if math.Abs(fromGGUF[i]-fromHF[i]) > 1e-6*fromHF[i] {
			t.Errorf("pair %d: %g from rope_freqs, %g from rope_scaling", i, fromGGUF[i], fromHF[i])
		}
		switch r := plain[i] / fromHF[i]; {
		case r == 1:
			bands["high"] = true
		case math.Abs(r-8) < 1e-9:
			bands["low"] = true
		default:
			bands["smoothed"] = true
		}
	}
	if len(bands) != 3 {
		t.Errorf("the shape's pairs reach the bands %v, want high, low and smoothed", bands)
	}
}
