package native

import (
	"math"
	"path/filepath"
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
	shape := demomodel.Shapes["tiny-llama3"]
	path := filepath.Join(t.TempDir(), "tiny-llama3.gguf")
	if err := demomodel.WriteFile(path, shape, kernels.F32, 3); err != nil {
		t.Fatal(err)
	}
	g, err := weights.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
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
