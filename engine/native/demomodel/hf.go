package demomodel

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/batchd/batchd/engine/native/chat"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// HFTypes are the weight types a demo model's Hugging Face directory can be
// written in (gpt-oss's experts are MXFP4 whatever the type, as its
// checkpoints ship them).
var HFTypes = []kernels.DType{kernels.F32, kernels.F16, kernels.BF16}

// hfDTypes are safetensors' names of HFTypes.
var hfDTypes = map[kernels.DType]string{kernels.F32: "F32", kernels.F16: "F16", kernels.BF16: "BF16"}

// torchDTypes are config.json's torch_dtype of HFTypes.
var torchDTypes = map[kernels.DType]string{kernels.F32: "float32", kernels.F16: "float16", kernels.BF16: "bfloat16"}

// HFQuant is the GGUF twin of the Hugging Face directory WriteHF writes of
// shape in t: the same weights, so the two load to the same model (gpt-oss's
// experts MXFP4, the rest t).
func HFQuant(shape Shape, t kernels.DType) Quant {
	q := Single(t)
	if shape.arch() == "gpt-oss" {
		q.ExpertType = kernels.MXFP4
		q.Name += "+MXFP4 experts"
	}
	return q
}

// WriteHF writes the demo model of shape with seed as a Hugging Face
// checkpoint directory at dir (which must not exist yet): config.json in
// the family's transformers model_type, model.safetensors under its tensor
// names and layouts (Llama's rotate-half Q and K rows, Phi-3's fused qkv and
// gate/up, Gemma's norms less one, gpt-oss's MXFP4 expert blocks and
// interleaved gate/up, per-expert tensors of qwen3_moe and Mixtral), and the
// demo tokenizer as tokenizer.json and tokenizer_config.json with its chat
// template. It holds the weights of the GGUF that WriteQuant writes with
// HFQuant(shape, t) and the same seed: both load to the same model. The
// directory is built beside dir and renamed into place whole.
func WriteHF(dir string, shape Shape, t kernels.DType, seed uint64) error {
	return WriteHFQuant(dir, shape, HFQuant(shape, t), seed)
}

// WriteHFQuant is WriteHF with the weights as q says: one of HFTypes for
// every matrix, the experts MXFP4 (gpt-oss's checkpoints) or in that type
// too (gpt-oss's unquantized fine-tunes: gate_up_proj and down_proj).
func WriteHFQuant(dir string, shape Shape, q Quant, seed uint64) (err error) {
	t := q.Base
	dtype, ok := hfDTypes[t]
	if !ok || q.mix != nil || q.Dequantized || (q.ExpertType != 0 && q.ExpertType != kernels.MXFP4) {
		return fmt.Errorf("weights %v: a Hugging Face demo directory is written in f32, f16 or bf16", q)
	}
	arch := shape.arch()
	if _, ok := hfModelTypes[arch]; !ok {
		return fmt.Errorf("shape %s: no Hugging Face layout for arch %s", shape.Name, arch)
	}
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists", dir)
	}
	tmp := dir + ".part"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	// The weights: the GGUF written, then loaded as the engine loads it
	// (so that the directory holds exactly what the GGUF does), then
	// removed.
	gg := filepath.Join(tmp, "twin.gguf")
	if err := WriteQuantFile(gg, shape, q, seed); err != nil {
		return err
	}
	m, err := weights.Load(gg)
	if err != nil {
		return fmt.Errorf("load the demo GGUF: %w", err)
	}
	tensors, err := hfTensors(m, shape, dtype)
	if err == nil {
		err = weights.WriteSafetensors(filepath.Join(tmp, "model.safetensors"), tensors)
	}
	cfg := hfConfig(m.Config, shape, t)
	m.Close()
	if rerr := os.Remove(gg); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("write model.safetensors: %w", err)
	}
	tok, tokCfg := hfTokenizer(shape)
	for name, v := range map[string]any{"config.json": cfg, "tokenizer.json": tok, "tokenizer_config.json": tokCfg} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(tmp, name), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return os.Rename(tmp, dir)
}

// hfModelTypes are transformers' model_type and architecture class of
// each arch a demo shape writes (Mixtral: a llama with experts).
var hfModelTypes = map[string][2]string{
	"qwen2": {"qwen2", "Qwen2ForCausalLM"}, "qwen3": {"qwen3", "Qwen3ForCausalLM"}, "llama": {"llama", "LlamaForCausalLM"},
	"qwen3moe": {"qwen3_moe", "Qwen3MoeForCausalLM"}, "gemma2": {"gemma2", "Gemma2ForCausalLM"},
	"gemma3": {"gemma3_text", "Gemma3ForCausalLM"}, "gpt-oss": {"gpt_oss", "GptOssForCausalLM"}, "phi3": {"phi3", "Phi3ForCausalLM"},
	"glm4moe": {"glm4_moe", "Glm4MoeForCausalLM"}, "qwen2moe": {"qwen2_moe", "Qwen2MoeForCausalLM"},
}

// hfConfig is config.json for the model c of shape, stored in t.
func hfConfig(c weights.Config, shape Shape, t kernels.DType) map[string]any {
	arch := shape.arch()
	mt := hfModelTypes[arch]
	if arch == "llama" && c.Experts > 0 {
		mt = [2]string{"mixtral", "MixtralForCausalLM"}
	}
	tokens, _, _ := demoVocab(2000)
	cfg := map[string]any{
		"model_type": mt[0], "architectures": []string{mt[1]}, "torch_dtype": torchDTypes[t],
		"hidden_size": c.Dim, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads,
		"head_dim": c.HeadDim, "intermediate_size": cmp.Or(c.FFNDim, c.ExpertFFNDim), "rms_norm_eps": c.RMSEps,
		"rope_theta": c.RopeTheta, "max_position_embeddings": c.ContextLength, "vocab_size": c.VocabSize,
		"tie_word_embeddings": c.TiedEmbeddings, "hidden_act": "silu",
		"bos_token_id": len(tokens) - 3, "eos_token_id": len(tokens) - 1, // <|endoftext|>, <|im_end|>
	}
	switch arch {
	case "qwen2":
		cfg["use_sliding_window"] = false
	case "llama":
		if r := shape.Llama3Rope; r[0] != 0 {
			cfg["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": r[0], "low_freq_factor": r[1],
				"high_freq_factor": r[2], "original_max_position_embeddings": r[3]}
		}
		if c.Experts > 0 {
			cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["sliding_window"] = c.Experts, c.ExpertsUsed, nil
		}
	case "qwen3moe":
		cfg["intermediate_size"] = 3 * c.ExpertFFNDim // the dense FFN of mlp_only_layers: none here
		cfg["moe_intermediate_size"], cfg["num_experts"], cfg["num_experts_per_tok"] = c.ExpertFFNDim, c.Experts, c.ExpertsUsed
		cfg["norm_topk_prob"], cfg["decoder_sparse_step"], cfg["mlp_only_layers"] = c.ExpertNormTopK, 1, []int{}
	case "gemma2", "gemma3":
		delete(cfg, "hidden_act")
		cfg["hidden_activation"], cfg["query_pre_attn_scalar"], cfg["sliding_window"] = "gelu_pytorch_tanh", c.HeadDim, c.SlidingWindow
		if arch == "gemma2" {
			cfg["attn_logit_softcapping"], cfg["final_logit_softcapping"] = c.AttnSoftCap, c.FinalSoftCap
		} else {
			cfg["rope_local_base_freq"], cfg["sliding_window_pattern"] = c.RopeThetaLocal, 6
		}
	case "gpt-oss":
		var types []string
		for i := range c.Layers {
			types = append(types, map[bool]string{true: "sliding_attention", false: "full_attention"}[c.Sliding(i)])
		}
		cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["swiglu_limit"] = c.Experts, c.ExpertsUsed, c.SwiGLULimit
		cfg["sliding_window"], cfg["layer_types"], cfg["attention_bias"] = c.SlidingWindow, types, true
		cfg["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": shape.YarnFactor, "beta_fast": 32, "beta_slow": 1,
			"truncate": false, "original_max_position_embeddings": shape.YarnContext}
		cfg["quantization_config"] = map[string]any{"quant_method": "mxfp4", "modules_to_not_convert": []string{
			"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}
	case "qwen2moe":
		cfg["intermediate_size"] = 3 * c.ExpertFFNDim // the dense FFN of mlp_only_layers: none here
		cfg["moe_intermediate_size"], cfg["num_experts"], cfg["num_experts_per_tok"] = c.ExpertFFNDim, c.Experts, c.ExpertsUsed
		cfg["shared_expert_intermediate_size"], cfg["norm_topk_prob"] = c.SharedFFNDim, c.ExpertNormTopK
		cfg["decoder_sparse_step"], cfg["mlp_only_layers"], cfg["use_sliding_window"] = 1, []int{}, false
	case "glm4moe":
		cfg["moe_intermediate_size"], cfg["n_routed_experts"], cfg["num_experts_per_tok"] = c.ExpertFFNDim, c.Experts, c.ExpertsUsed
		cfg["n_shared_experts"], cfg["first_k_dense_replace"], cfg["num_nextn_predict_layers"] = shape.SharedExperts, c.DenseLayers, shape.NextN
		cfg["norm_topk_prob"], cfg["routed_scaling_factor"], cfg["n_group"], cfg["topk_group"] = c.ExpertNormTopK, c.ExpertScale, 1, 1
		cfg["partial_rotary_factor"] = float64(c.RopeDim) / float64(c.HeadDim)
		cfg["attention_bias"], cfg["use_qk_norm"] = c.QKVBias, c.QKNorm
	case "phi3":
		f64 := func(v []float32) []float64 {
			out := make([]float64, len(v))
			for i, x := range v {
				out[i] = float64(x)
			}
			return out
		}
		cfg["original_max_position_embeddings"] = shape.LongRopeContext
		cfg["rope_scaling"] = map[string]any{"type": "longrope", "long_factor": f64(shape.LongRopeFactors(true)), "short_factor": f64(shape.LongRopeFactors(false))}
	}
	return cfg
}

// hfLayerNames are the Hugging Face names (after "model.layers.N.") of the
// canonical layer tensors every family shares.
var hfLayerNames = map[string]string{
	"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
	"attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
	"attn_k.bias": "self_attn.k_proj.bias", "attn_v.bias": "self_attn.v_proj.bias", "attn_output.bias": "self_attn.o_proj.bias",
	"attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
	"ffn_norm.weight": "post_attention_layernorm.weight", "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
	"ffn_down.weight": "mlp.down_proj.weight", "ffn_gate_inp.weight": "mlp.gate.weight",
}

// hfFamilyNames are the families' own names for some layer tensors.
var hfFamilyNames = map[string]map[string]string{
	"gemma": {"post_attention_norm.weight": "post_attention_layernorm.weight", "ffn_norm.weight": "pre_feedforward_layernorm.weight",
		"post_ffw_norm.weight": "post_feedforward_layernorm.weight"},
	"gpt-oss": {"ffn_gate_inp.weight": "mlp.router.weight", "ffn_gate_inp.bias": "mlp.router.bias", "attn_sinks.weight": "self_attn.sinks"},
	"mixtral": {"ffn_gate_inp.weight": "block_sparse_moe.gate.weight"},
	"qwen2moe": {"ffn_gate_shexp.weight": "mlp.shared_expert.gate_proj.weight", "ffn_up_shexp.weight": "mlp.shared_expert.up_proj.weight",
		"ffn_down_shexp.weight": "mlp.shared_expert.down_proj.weight", "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight"},
	"glm4moe": {"exp_probs_b.bias": "mlp.gate.e_score_correction_bias", "ffn_gate_shexp.weight": "mlp.shared_experts.gate_proj.weight",
		"ffn_up_shexp.weight": "mlp.shared_experts.up_proj.weight", "ffn_down_shexp.weight": "mlp.shared_experts.down_proj.weight"},
}

// hfTensors are m's weights under the Hugging Face names and layouts of
// shape's family, matrices in dtype (which they are stored in), vectors
// in F32.
func hfTensors(m *weights.Model, shape Shape, dtype string) (map[string]weights.SafeTensor, error) {
	c := m.Config
	arch := shape.arch()
	family := arch
	switch {
	case arch == "gemma2" || arch == "gemma3":
		family = "gemma"
	case arch == "llama" && c.Experts > 0:
		family = "mixtral"
	}
	name := func(canon string) (string, error) {
		switch canon {
		case "token_embd.weight":
			return "model.embed_tokens.weight", nil
		case "output.weight":
			return "lm_head.weight", nil
		case "output_norm.weight":
			return "model.norm.weight", nil
		}
		var l int
		var suf string
		if _, err := fmt.Sscanf(strings.Replace(canon, ".", " ", 2), "blk %d %s", &l, &suf); err == nil {
			hf := cmp.Or(hfFamilyNames[family][suf], hfLayerNames[suf])
			if hf != "" {
				return fmt.Sprintf("model.layers.%d.%s", l, hf), nil
			}
		}
		return "", fmt.Errorf("tensor %s: no Hugging Face name in arch %s", canon, arch)
	}
	out := map[string]weights.SafeTensor{}
	matrix := func(hf string, x *kernels.Matrix, data []byte, rows int) {
		dt := dtype
		if x.Type == kernels.F32 { // gpt-oss's router, kept F32 in every type
			dt = "F32"
		}
		out[hf] = weights.SafeTensor{DType: dt, Shape: []int{rows, x.Cols}, Data: data}
	}
	fused := map[string][]string{"self_attn.qkv_proj.weight": {"attn_q.weight", "attn_k.weight", "attn_v.weight"},
		"mlp.gate_up_proj.weight": {"ffn_gate.weight", "ffn_up.weight"}}
	for canon, x := range m.Matrices {
		if arch == "phi3" && slices.ContainsFunc([]string{"attn_q.", "attn_k.", "attn_v.", "ffn_gate.", "ffn_up."}, func(s string) bool {
			return strings.Contains(canon, "."+s)
		}) {
			continue // fused below
		}
		hf, err := name(canon)
		if err != nil {
			return nil, err
		}
		data := x.Data
		if arch == "llama" && (strings.HasSuffix(canon, ".attn_q.weight") || strings.HasSuffix(canon, ".attn_k.weight")) {
			rb, _ := x.Type.RowBytes(x.Cols)
			data = toRotateHalf(data, x.Rows, rb, c.HeadDim)
		}
		matrix(hf, x, data, x.Rows)
	}
	if arch == "phi3" {
		for l := range c.Layers {
			for hf, parts := range fused {
				var data []byte
				rows := 0
				var first *kernels.Matrix
				for _, p := range parts {
					x := m.Matrices[weights.BlockName(l, p)]
					data, rows, first = append(data, x.Data...), rows+x.Rows, cmp.Or(first, x)
				}
				matrix(fmt.Sprintf("model.layers.%d.%s", l, hf), first, data, rows)
			}
		}
	}
	for canon, v := range m.Vectors {
		if canon == "rope_freqs.weight" || strings.Contains(canon, "_exps.bias") {
			continue // llama3's and LongRoPE's factors are in config.json; gpt-oss's expert biases below
		}
		hf, err := name(canon)
		if err != nil {
			return nil, err
		}
		if family == "gemma" && strings.HasSuffix(canon, "norm.weight") {
			v = slices.Clone(v)
			for i := range v {
				v[i]-- // Gemma stores each norm's factor less one
			}
		}
		out[hf] = weights.SafeTensor{DType: "F32", Shape: []int{len(v)}, Data: f32Bytes(v)}
	}
	if c.Experts > 0 {
		if err := hfExperts(out, m, family, dtype); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// hfExperts adds m's experts as the family's checkpoints hold them.
func hfExperts(out map[string]weights.SafeTensor, m *weights.Model, family, dtype string) error {
	c := m.Config
	for l := range c.Layers {
		if !c.MoELayer(l) {
			continue
		}
		exps := func(suf string) []*kernels.Matrix { return m.Experts[weights.BlockName(l, suf)] }
		gate, up, down := exps("ffn_gate_exps.weight"), exps("ffn_up_exps.weight"), exps("ffn_down_exps.weight")
		if len(gate) != c.Experts || len(up) != c.Experts || len(down) != c.Experts {
			return fmt.Errorf("layer %d: want %d experts", l, c.Experts)
		}
		if family != "gpt-oss" {
			proj := [3]string{"gate_proj", "up_proj", "down_proj"}
			p := fmt.Sprintf("model.layers.%d.mlp.experts.", l)
			if family == "mixtral" {
				proj, p = [3]string{"w1", "w3", "w2"}, fmt.Sprintf("model.layers.%d.block_sparse_moe.experts.", l)
			}
			for e := range c.Experts {
				for i, x := range []*kernels.Matrix{gate[e], up[e], down[e]} {
					out[fmt.Sprintf("%s%d.%s.weight", p, e, proj[i])] = weights.SafeTensor{DType: dtype, Shape: []int{x.Rows, x.Cols}, Data: x.Data}
				}
			}
			continue
		}
		// gpt-oss: per layer all experts in one tensor each, gate and up
		// interleaved; MXFP4 as blocks and scales by output row, or
		// unquantized (a fine-tune's) input-major.
		E, ff, dim := c.Experts, c.ExpertFFNDim, c.Dim
		vec := func(suf string) []float32 { return m.Vectors[weights.BlockName(l, suf)] }
		gb, ub, db := vec("ffn_gate_exps.bias"), vec("ffn_up_exps.bias"), vec("ffn_down_exps.bias")
		var gubias []float32
		for e := range E {
			for r := range ff {
				gubias = append(gubias, gb[e*ff+r], ub[e*ff+r])
			}
		}
		p := fmt.Sprintf("model.layers.%d.mlp.experts.", l)
		out[p+"gate_up_proj_bias"] = weights.SafeTensor{DType: "F32", Shape: []int{E, 2 * ff}, Data: f32Bytes(gubias)}
		out[p+"down_proj_bias"] = weights.SafeTensor{DType: "F32", Shape: []int{E, dim}, Data: f32Bytes(db)}
		if gate[0].Type != kernels.MXFP4 {
			esz := len(gate[0].Data) / (ff * dim)
			var gu, dn []byte
			for e := range E {
				gu = append(gu, inputMajor(esz, gate[e], up[e])...)
				dn = append(dn, inputMajor(esz, down[e])...)
			}
			out[p+"gate_up_proj"] = weights.SafeTensor{DType: dtype, Shape: []int{E, dim, 2 * ff}, Data: gu}
			out[p+"down_proj"] = weights.SafeTensor{DType: dtype, Shape: []int{E, ff, dim}, Data: dn}
			continue
		}
		var gub, gus, dnb, dns []byte
		for e := range E {
			for r := range ff {
				for _, x := range []*kernels.Matrix{gate[e], up[e]} {
					gub, gus = mxfp4Row(gub, gus, x, r)
				}
			}
			for r := range dim {
				dnb, dns = mxfp4Row(dnb, dns, down[e], r)
			}
		}
		out[p+"gate_up_proj_blocks"] = weights.SafeTensor{DType: "U8", Shape: []int{E, 2 * ff, dim / 32, 16}, Data: gub}
		out[p+"gate_up_proj_scales"] = weights.SafeTensor{DType: "U8", Shape: []int{E, 2 * ff, dim / 32}, Data: gus}
		out[p+"down_proj_blocks"] = weights.SafeTensor{DType: "U8", Shape: []int{E, dim, ff / 32, 16}, Data: dnb}
		out[p+"down_proj_scales"] = weights.SafeTensor{DType: "U8", Shape: []int{E, dim, ff / 32}, Data: dns}
	}
	return nil
}

// inputMajor lays the matrices ms (rows × cols each, elements of esz
// bytes) out as one cols × (len(ms)·rows) matrix whose column j·len(ms)+k
// is row j of ms[k]: gpt-oss's unquantized experts, gate and up
// interleaved.
func inputMajor(esz int, ms ...*kernels.Matrix) []byte {
	rows, cols, n := ms[0].Rows, ms[0].Cols, len(ms)
	out := make([]byte, rows*cols*n*esz)
	for k, x := range ms {
		for j := range rows {
			for i := range cols {
				copy(out[(i*rows*n+j*n+k)*esz:][:esz], x.Data[(j*cols+i)*esz:][:esz])
			}
		}
	}
	return out
}

// mxfp4Row appends row r of the MXFP4 matrix x as gpt-oss's checkpoints
// store it: each block's exponent to scales, its 32 values to blocks two a
// byte (value 2i low, 2i+1 high), where GGUF's 17-byte block has the
// exponent first and value j low, j+16 high in byte j.
func mxfp4Row(blocks, scales []byte, x *kernels.Matrix, r int) ([]byte, []byte) {
	nb := x.Cols / 32
	for b := range nb {
		blk := x.Data[(r*nb+b)*17:][:17]
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
	return blocks, scales
}

// toRotateHalf reorders the rows of a GGUF llama Q or K weight (adjacent
// dims of a head rotate together) into Hugging Face's layout (dims i and
// i+d/2 rotate together): HF row h·d + k·d/2 + i is GGUF row h·d + 2i + k.
func toRotateHalf(data []byte, rows, rowBytes, headDim int) []byte {
	out := make([]byte, len(data))
	for r := range rows {
		h, j := r/headDim, r%headDim
		dst := h*headDim + (j%2)*headDim/2 + j/2
		copy(out[dst*rowBytes:(dst+1)*rowBytes], data[r*rowBytes:(r+1)*rowBytes])
	}
	return out
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// hfTokenizer is the demo vocabulary (padded to shape.Vocab) as
// tokenizer.json and tokenizer_config.json: byte-level BPE with Qwen2's
// pre-tokenizer, as the GGUF's tokenizer.ggml.pre "qwen2" says, ChatML's
// special tokens and template.
func hfTokenizer(shape Shape) (tok, cfg map[string]any) {
	tokens, merges, types := demoVocab(2000)
	for i := 0; len(tokens) < shape.Vocab; i++ {
		tokens = append(tokens, fmt.Sprintf("<|extra_%d|>", i))
		types = append(types, 5)
	}
	vocab := map[string]int{}
	var added []map[string]any
	for id, t := range tokens {
		if types[id] == 3 { // control: an added special token
			added = append(added, map[string]any{"id": id, "content": t, "special": true, "single_word": false,
				"lstrip": false, "rstrip": false, "normalized": false})
		}
		vocab[t] = id
	}
	tok = map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added, "normalizer": nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwen2Pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": nil,
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "", "end_of_word_suffix": "",
			"fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": merges},
	}
	cfg = map[string]any{
		"add_bos_token": false, "add_eos_token": false, "bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
		"unk_token": nil, "model_max_length": cmp.Or(shape.Context, 2048), "tokenizer_class": "Qwen2Tokenizer",
		"chat_template": chat.ChatMLTemplate,
	}
	return tok, cfg
}

// qwen2Pattern is Qwen2's pre-tokenizer regex (tokenizer.json's Split).
const qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
