package native

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native/demomodel"
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

// TestGptOSSHFMatchesGGUF: the same gpt-oss weights as a Hugging Face
// gpt_oss checkpoint (its experts MXFP4 in the checkpoint's layout: gate
// and up interleaved by row, two values a byte, scales apart; router,
// sinks and biases under its names; YaRN and the windows in config.json)
// give the logits of the GGUF with those MXFP4 experts, to the bit.
func TestGptOSSHFMatchesGGUF(t *testing.T) {
	skipMoEDevice(t)
	g := demoWeights(t, demomodel.Shapes["tiny-gpt-oss"], kernels.F32)
	c := g.Config
	E, ff, dim := c.Experts, c.ExpertFFNDim, c.Dim
	// The reference: g with every expert quantized to MXFP4 (GGUF blocks).
	q := &weights.Model{Config: c, Matrices: g.Matrices, Vectors: map[string][]float32{}, Experts: map[string][]*kernels.Matrix{}}
	for name, exps := range g.Experts {
		for _, x := range exps {
			src := make([]float32, x.Rows*x.Cols)
			for i := range src {
				src[i] = math.Float32frombits(binary.LittleEndian.Uint32(x.Data[4*i:]))
			}
			rb, _ := kernels.MXFP4.RowBytes(x.Cols)
			data := make([]byte, x.Rows*rb)
			if err := kernels.Quantize(kernels.MXFP4, data, src); err != nil {
				t.Fatal(err)
			}
			m, err := kernels.NewMatrix(kernels.MXFP4, x.Rows, x.Cols, data)
			if err != nil {
				t.Fatal(err)
			}
			q.Experts[name] = append(q.Experts[name], m)
		}
	}
	// GGUF's MXFP4 block (exponent, then value j low and j+16 high in
	// byte j) as the checkpoint stores it: exponent apart, values 2i and
	// 2i+1 in byte i.
	hfBlocks := func(m *kernels.Matrix, rows []int) (blocks, scales []byte) {
		nb := m.Cols / 32
		for _, r := range rows {
			for b := range nb {
				blk := m.Data[(r*nb+b)*17:][:17]
				scales = append(scales, blk[0])
				val := func(k int) byte {
					if k < 16 {
						return blk[1+k] & 0x0F
					}
					return blk[1+k-16] >> 4
				}
				for i := range 16 {
					blocks = append(blocks, val(2*i)|val(2*i+1)<<4)
				}
			}
		}
		return blocks, scales
	}
	seq := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	extra := map[string]weights.SafeTensor{}
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.mlp.experts.", l)
		var gub, gus, db, ds []byte
		var gubias, dbias []float32
		gb, ub, dnb := g.Vectors[weights.BlockName(l, "ffn_gate_exps.bias")], g.Vectors[weights.BlockName(l, "ffn_up_exps.bias")], g.Vectors[weights.BlockName(l, "ffn_down_exps.bias")]
		for e := range E {
			gate, up := q.Experts[weights.BlockName(l, "ffn_gate_exps.weight")][e], q.Experts[weights.BlockName(l, "ffn_up_exps.weight")][e]
			for r := range ff { // interleaved: gate row r is 2r, up row r is 2r+1
				for _, m := range []*kernels.Matrix{gate, up} {
					b, s := hfBlocks(m, []int{r})
					gub, gus = append(gub, b...), append(gus, s...)
				}
				gubias = append(gubias, gb[e*ff+r], ub[e*ff+r])
			}
			b, s := hfBlocks(q.Experts[weights.BlockName(l, "ffn_down_exps.weight")][e], seq(dim))
			db, ds = append(db, b...), append(ds, s...)
			dbias = append(dbias, dnb[e*dim:(e+1)*dim]...)
		}
		extra[p+"gate_up_proj_blocks"] = weights.SafeTensor{DType: "U8", Shape: []int{E, 2 * ff, dim / 32, 16}, Data: gub}
		extra[p+"gate_up_proj_scales"] = weights.SafeTensor{DType: "U8", Shape: []int{E, 2 * ff, dim / 32}, Data: gus}
		extra[p+"gate_up_proj_bias"] = weights.SafeTensor{DType: "F32", Shape: []int{E, 2 * ff}, Data: f32Bytes(gubias)}
		extra[p+"down_proj_blocks"] = weights.SafeTensor{DType: "U8", Shape: []int{E, dim, ff / 32, 16}, Data: db}
		extra[p+"down_proj_scales"] = weights.SafeTensor{DType: "U8", Shape: []int{E, dim, ff / 32}, Data: ds}
		extra[p+"down_proj_bias"] = weights.SafeTensor{DType: "F32", Shape: []int{E, dim}, Data: f32Bytes(dbias)}
	}
	// The rest under the checkpoint's names.
	rest := &weights.Model{Config: c, Matrices: g.Matrices, Vectors: map[string][]float32{}}
	for name, v := range g.Vectors {
		if !strings.Contains(name, "_exps.bias") {
			rest.Vectors[name] = v
		}
	}
	q.Vectors = g.Vectors
	layerTypes := []string{}
	for i := range c.Layers {
		layerTypes = append(layerTypes, map[bool]string{true: "sliding_attention", false: "full_attention"}[c.Sliding(i)])
	}
	dir := hfDirFrom(t, rest, hfLayerNames(map[string]string{
		"ffn_norm.weight": "post_attention_layernorm.weight", "ffn_gate_inp.weight": "mlp.router.weight", "ffn_gate_inp.bias": "mlp.router.bias",
		"attn_sinks.weight": "self_attn.sinks", "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
		"attn_v.bias": "self_attn.v_proj.bias", "attn_output.bias": "self_attn.o_proj.bias",
	}), 0, map[string]any{
		"model_type": "gpt_oss", "hidden_size": dim, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim, "intermediate_size": ff, "num_local_experts": E,
		"num_experts_per_tok": c.ExpertsUsed, "rms_norm_eps": c.RMSEps, "rope_theta": c.RopeTheta,
		"rope_scaling":            map[string]any{"rope_type": "yarn", "factor": 32, "beta_fast": 32, "beta_slow": 1, "truncate": false, "original_max_position_embeddings": 256},
		"max_position_embeddings": c.ContextLength, "sliding_window": c.SlidingWindow, "layer_types": layerTypes,
		"attention_bias": true, "swiglu_limit": 7, "vocab_size": c.VocabSize, "tie_word_embeddings": false, "hidden_act": "silu",
		"quantization_config": map[string]any{"quant_method": "mxfp4", "modules_to_not_convert": []string{"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
	}, extra)
	h, err := weights.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Config.Arch != "gpt-oss" || !slices.Equal(h.Config.SlidingLayers, c.SlidingLayers) || *h.Config.Yarn != *c.Yarn || !strings.Contains(h.WeightTypes(), "MXFP4") {
		t.Fatalf("HF config %+v (yarn %+v), weight types %s", h.Config, h.Config.Yarn, h.WeightTypes())
	}
	checkSameLogits(t, q, h)
}
