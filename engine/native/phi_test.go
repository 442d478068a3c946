package native

import (
	"fmt"
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

// TestPhi3HFMatchesGGUF: the same Phi-3 weights as a Hugging Face phi3
// directory (qkv_proj and gate_up_proj fused, LongRoPE's factors and the
// original context in config.json, the magnitude computed from them as
// llama.cpp's converter does) give the GGUF's logits to the bit.
func TestPhi3HFMatchesGGUF(t *testing.T) {
	shape := demomodel.Shapes["tiny-phi"]
	g := demoWeights(t, shape, kernels.F32)
	c := g.Config
	// The fused tensors, as the checkpoint stores them, from the split ones.
	fused := &weights.Model{Config: c, Matrices: map[string]*kernels.Matrix{}, Vectors: map[string][]float32{}}
	extra := map[string]weights.SafeTensor{}
	for name, x := range g.Matrices {
		fused.Matrices[name] = x
	}
	for name, v := range g.Vectors {
		if name != "rope_freqs.weight" {
			fused.Vectors[name] = v
		}
	}
	for l := range c.Layers {
		cat := func(hf string, parts ...string) {
			var data []byte
			rows := 0
			for _, p := range parts {
				name := weights.BlockName(l, p)
				x := fused.Matrices[name]
				data, rows = append(data, x.Data...), rows+x.Rows
				delete(fused.Matrices, name)
			}
			extra[fmt.Sprintf("model.layers.%d.%s", l, hf)] = weights.SafeTensor{DType: "F32", Shape: []int{rows, c.Dim}, Data: data}
		}
		cat("self_attn.qkv_proj.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight")
		cat("mlp.gate_up_proj.weight", "ffn_gate.weight", "ffn_up.weight")
	}
	f32s := func(v []float32) []float64 {
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}
	dir := hfDirFrom(t, fused, hfLayerNames(map[string]string{"ffn_norm.weight": "post_attention_layernorm.weight", "ffn_down.weight": "mlp.down_proj.weight"}), 0, map[string]any{
		"model_type": "phi3", "hidden_size": c.Dim, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads, "intermediate_size": c.FFNDim, "rms_norm_eps": c.RMSEps, "rope_theta": c.RopeTheta,
		"max_position_embeddings": c.ContextLength, "original_max_position_embeddings": 16, "vocab_size": c.VocabSize,
		"tie_word_embeddings": false, "hidden_act": "silu", "sliding_window": 7,
		"rope_scaling": map[string]any{"type": "longrope", "long_factor": f32s(shape.LongRopeFactors(true)), "short_factor": f32s(shape.LongRopeFactors(false))},
	}, extra)
	h, err := weights.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Config.RopeAttnFactor != c.RopeAttnFactor || h.Config.SlidingWindow != 0 {
		t.Fatalf("HF magnitude %g window %d, GGUF %g", h.Config.RopeAttnFactor, h.Config.SlidingWindow, c.RopeAttnFactor)
	}
	checkSameLogits(t, g, h)
}
