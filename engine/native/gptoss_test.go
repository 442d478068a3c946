package native

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// TestGptOSSConfig: a gpt-oss GGUF as llama.cpp reads it: sinks, the
// q/k/v/o, router and expert biases, the clamped SwiGLU, windows on the
// even layers, YaRN (its scores scaled by the magnitude squared), its FFN
// norm under post_attention_norm's name; a device without the families'
// operations refuses it by name.
func TestGptOSSConfig(t *testing.T) {
	w, err := weights.Load(shapePath(t, "tiny-gpt-oss", kernels.F32))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c := w.Config
	if !c.AttnSinks || !c.OutBias || !c.QKVBias || !c.RouterBias || !c.ExpertBias || c.SwiGLULimit != 7 || c.Experts != 8 || c.ExpertsUsed != 2 ||
		!c.ExpertNormTopK || c.SlidingWindow != 6 || !slices.Equal(c.SlidingLayers, []bool{true, false, true, false}) || c.TiedEmbeddings {
		t.Fatalf("config %+v", c)
	}
	if y := c.Yarn; y == nil || y.Factor != 32 || y.OriginalContext != 256 || y.BetaFast != 32 || y.BetaSlow != 1 || y.AttnFactor != 1 {
		t.Fatalf("yarn %+v", c.Yarn)
	}
	if _, ok := w.Vectors["blk.1.ffn_norm.weight"]; !ok {
		t.Fatal("post_attention_norm was not read as the FFN's norm")
	}
	if n := len(w.Vectors["blk.3.ffn_down_exps.bias"]); n != 8*128 {
		t.Fatalf("down experts' biases: %d values", n)
	}
	m, err := NewModelOn(w, kernels.NewCPUDevice(kernels.NewCPU(1)))
	if err != nil {
		t.Fatal(err)
	}
	mag := 1 + 0.1*math.Log(32)
	if want := float32(1 / math.Sqrt(32) * mag * mag); m.attnScale != want {
		t.Errorf("attention scale %g, want %g (1/√32 · YaRN's magnitude²)", m.attnScale, want)
	}
	_, err = NewModelOn(w, plainDevice{kernels.NewCPUDevice(kernels.NewCPU(1))})
	if err == nil || !strings.Contains(err.Error(), "attention sinks") || !strings.Contains(err.Error(), "clamped SwiGLU") {
		t.Errorf("on a device without FamilyDevice: err = %v", err)
	}
}

// TestGptOSSBatchInvariance: gpt-oss's sinks, windows and biased experts
// keep batch invariance: 64 mixed requests give each what it gets alone,
// in F32 and with every matrix MXFP4 (gpt-oss's experts' own type).
func TestGptOSSBatchInvariance(t *testing.T) {
	skipMoEDevice(t)
	for _, dt := range []kernels.DType{kernels.F32, kernels.MXFP4} {
		t.Run(dt.String(), func(t *testing.T) {
			checkBatchInvariance64(t, shapePath(t, "tiny-gpt-oss", dt))
		})
	}
}
