package weights

import (
	"fmt"

	"github.com/batchd/batchd/kernels"
)

// gpt-oss from Hugging Face (model_type gpt_oss): its experts ship in
// MXFP4 as the checkpoint's own layout: per layer, gate_up_proj_blocks
// (uint8, experts × 2·ffn × dim/32 × 16: two 4-bit values a byte, the
// even-indexed one low), gate_up_proj_scales (uint8 E8M0 exponents, one a
// block of 32), gate_up_proj_bias, and the same for down_proj; gate and up
// interleave by output row (even rows gate, odd rows up). They are repacked
// at load into GGUF's MXFP4 blocks (the exponent byte, then value j low and
// j+16 high in byte j), one matrix per expert: a heap copy the size of the
// experts, as llama.cpp's converter makes a file of it.

// gptOSSFromHF sets gpt-oss's traits from config.json.
func gptOSSFromHF(h *hfConfig, c *Config) error {
	experts, used := h.NumLocalExperts, h.NumExpertsPerTok
	if used == nil {
		used = h.ExpertsPerToken
	}
	if experts == nil || *experts <= 0 || used == nil || *used <= 0 {
		return invalid("num_local_experts and num_experts_per_tok (or experts_per_token) are missing or not positive")
	}
	c.Experts, c.ExpertsUsed, c.ExpertFFNDim = *experts, *used, c.FFNDim
	c.ExpertNormTopK = true // top-k of the logits, softmax over them
	c.AttnSinks, c.OutBias, c.QKVBias, c.RouterBias, c.ExpertBias = true, true, true, true, true
	c.SwiGLULimit = 7
	if l := h.SwiGLULimit; l != nil {
		if !(*l > 0) {
			return invalid("swiglu_limit = %g: want a positive number", *l)
		}
		c.SwiGLULimit = float32(*l)
	}
	if h.AttentionBias != nil && !*h.AttentionBias {
		return unsupported("attention_bias=false for gpt_oss is not supported (its checkpoints have q/k/v/o biases)")
	}
	return nil
}

// gptOSSExperts repacks layer by layer the MXFP4 experts (and splits the
// interleaved gate/up biases) into canonical raw tensors: per expert
// blk.N.ffn_{gate,up,down}_exps.weight#E, the biases as flat
// blk.N.ffn_{gate,up,down}_exps.bias.
func gptOSSExperts(raw map[string]*rawTensor, c *Config) error {
	E, ff, dim := c.Experts, c.ExpertFFNDim, c.Dim
	for l := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.mlp.experts.", l)
		if _, dense := raw[p+"gate_up_proj"]; dense {
			if err := denseExperts(raw, p, l, E, ff, dim); err != nil {
				return err
			}
		} else {
			gateUp, err := mxfp4Experts(raw, p+"gate_up_proj", E, 2*ff, dim)
			if err != nil {
				return err
			}
			down, err := mxfp4Experts(raw, p+"down_proj", E, dim, ff)
			if err != nil {
				return err
			}
			rb := (dim / 32) * 17
			for e := range E {
				gate, up := make([]byte, 0, ff*rb), make([]byte, 0, ff*rb)
				for r := range 2 * ff {
					row := gateUp[e][r*rb : (r+1)*rb]
					if r%2 == 0 {
						gate = append(gate, row...)
					} else {
						up = append(up, row...)
					}
				}
				for suf, data := range map[string][]byte{sufGateExps: gate, sufUpExps: up} {
					raw[fmt.Sprintf("%s#%d", BlockName(l, suf), e)] = mxfp4Raw(p+"gate_up_proj_blocks", ff, dim, data)
				}
				raw[fmt.Sprintf("%s#%d", BlockName(l, sufDownExps), e)] = mxfp4Raw(p+"down_proj_blocks", dim, ff, down[e])
			}
		}
		gub, err := vectorOf(raw, p+"gate_up_proj_bias", E*2*ff)
		if err != nil {
			return err
		}
		gateB, upB := make([]float32, 0, E*ff), make([]float32, 0, E*ff)
		for i, v := range gub {
			if i%2 == 0 {
				gateB = append(gateB, v)
			} else {
				upB = append(upB, v)
			}
		}
		db, err := vectorOf(raw, p+"down_proj_bias", E*dim)
		if err != nil {
			return err
		}
		for suf, v := range map[string][]float32{sufGateExpsB: gateB, sufUpExpsB: upB, sufDownExpsB: db} {
			raw[BlockName(l, suf)] = &rawTensor{source: p + "bias", dtype: kernels.F32, ok: true, typeName: "F32",
				shape: []uint64{uint64(E), uint64(len(v) / E)}, data: f32Bytes(v)}
		}
	}
	renameHFLayers(raw, map[string]string{"mlp.router.weight": sufRouter, "mlp.router.bias": sufRouterB, "self_attn.sinks": sufSinks})
	return nil
}

// denseExperts splits layer l's unquantized gpt-oss experts (F32, F16 or
// BF16, as fine-tunes are saved: gate_up_proj [E][dim][2·ff] and down_proj
// [E][ff][dim], each expert's matrix input-major, gate and up interleaved
// by output column) into per-expert matrices output-major, in their type:
// a heap copy the size of the experts.
func denseExperts(raw map[string]*rawTensor, p string, l, E, ff, dim int) error {
	var gu, dn *rawTensor
	for _, t := range []struct {
		name string
		r    **rawTensor
		dims []int
	}{{p + "gate_up_proj", &gu, []int{E, dim, 2 * ff}}, {p + "down_proj", &dn, []int{E, ff, dim}}} {
		r, ok := raw[t.name]
		if !ok {
			return invalid("tensor %q is missing", t.name)
		}
		if !r.ok || (r.dtype != kernels.F32 && r.dtype != kernels.F16 && r.dtype != kernels.BF16) {
			return unsupported("tensor %q: type %s (gpt-oss's unquantized experts are read in F32, F16 or BF16)", t.name, r.typeName)
		}
		if !shapeEq(r.shape, t.dims...) {
			return invalid("tensor %q: shape %v, want %v", t.name, r.shape, t.dims)
		}
		r.used = true
		delete(raw, t.name)
		*t.r = r
	}
	if gu.dtype != dn.dtype {
		return invalid("tensors %q and %q: types %s and %s differ", p+"gate_up_proj", p+"down_proj", gu.typeName, dn.typeName)
	}
	esz := map[kernels.DType]int{kernels.F32: 4, kernels.F16: 2, kernels.BF16: 2}[gu.dtype]
	// column col of the in × out matrix at src (expert e's) as row r of out.
	transpose := func(src []byte, in, out, col0, colStep int) []byte {
		rows := out / colStep
		dst := make([]byte, rows*in*esz)
		for r := range rows {
			c := col0 + r*colStep
			for i := range in {
				copy(dst[(r*in+i)*esz:][:esz], src[(i*out+c)*esz:][:esz])
			}
		}
		return dst
	}
	dense := func(src string, rows, cols int, data []byte) *rawTensor {
		return &rawTensor{source: src, dtype: gu.dtype, ok: true, typeName: gu.typeName, shape: []uint64{uint64(rows), uint64(cols)}, data: data}
	}
	guSize, dnSize := dim*2*ff*esz, ff*dim*esz
	if len(gu.data) != E*guSize || len(dn.data) != E*dnSize {
		return invalid("tensors %q and %q: %d and %d bytes for their shapes", p+"gate_up_proj", p+"down_proj", len(gu.data), len(dn.data))
	}
	for e := range E {
		g := gu.data[e*guSize : (e+1)*guSize]
		raw[fmt.Sprintf("%s#%d", BlockName(l, sufGateExps), e)] = dense(p+"gate_up_proj", ff, dim, transpose(g, dim, 2*ff, 0, 2))
		raw[fmt.Sprintf("%s#%d", BlockName(l, sufUpExps), e)] = dense(p+"gate_up_proj", ff, dim, transpose(g, dim, 2*ff, 1, 2))
		raw[fmt.Sprintf("%s#%d", BlockName(l, sufDownExps), e)] = dense(p+"down_proj", dim, ff, transpose(dn.data[e*dnSize:(e+1)*dnSize], ff, dim, 0, 1))
	}
	return nil
}

// mxfp4Experts reads name_blocks and name_scales (E × rows × cols/32 × 16
// and E × rows × cols/32 bytes) and returns each expert's rows in GGUF's
// MXFP4 layout.
func mxfp4Experts(raw map[string]*rawTensor, name string, E, rows, cols int) ([][]byte, error) {
	blocks, ok1 := raw[name+"_blocks"]
	scales, ok2 := raw[name+"_scales"]
	if !ok1 || !ok2 {
		return nil, invalid("tensors %q and %q are missing (gpt-oss's MXFP4 experts)", name+"_blocks", name+"_scales")
	}
	nb := cols / 32
	if cols%32 != 0 || blocks.typeName != "U8" || scales.typeName != "U8" ||
		!shapeEq(blocks.shape, E, rows, nb, 16) || !shapeEq(scales.shape, E, rows, nb) ||
		len(blocks.data) != E*rows*nb*16 || len(scales.data) != E*rows*nb {
		return nil, invalid("%s_blocks %s %v, _scales %s %v: want U8 [%d %d %d 16] and [%d %d %d]",
			name, blocks.typeName, blocks.shape, scales.typeName, scales.shape, E, rows, nb, E, rows, nb)
	}
	blocks.used, scales.used = true, true
	delete(raw, name+"_blocks")
	delete(raw, name+"_scales")
	out := make([][]byte, E)
	for e := range E {
		dst := make([]byte, rows*nb*17)
		for b := range rows * nb {
			i := e*rows*nb + b
			q, d := blocks.data[16*i:16*i+16], dst[17*b:17*b+17]
			d[0] = scales.data[i]
			for j := range 16 { // value k is byte k/2's low nibble when k is even
				lo, hi := nibble(q, j), nibble(q, j+16)
				d[1+j] = lo | hi<<4
			}
		}
		out[e] = dst
	}
	return out, nil
}

// nibble is value k of a checkpoint block (two a byte, the even one low).
func nibble(q []byte, k int) byte {
	if k%2 == 0 {
		return q[k/2] & 0x0F
	}
	return q[k/2] >> 4
}

func shapeEq(shape []uint64, dims ...int) bool {
	if len(shape) != len(dims) {
		return false
	}
	for i, d := range dims {
		if shape[i] != uint64(d) {
			return false
		}
	}
	return true
}

// mxfp4Raw is one expert's repacked matrix as a raw tensor.
func mxfp4Raw(source string, rows, cols int, data []byte) *rawTensor {
	return &rawTensor{source: source, dtype: kernels.MXFP4, ok: true, typeName: "MXFP4", shape: []uint64{uint64(rows), uint64(cols)}, data: data}
}

// vectorOf reads tensor name (any float type) as n float32s and removes it.
func vectorOf(raw map[string]*rawTensor, name string, n int) ([]float32, error) {
	r, ok := raw[name]
	if !ok {
		return nil, invalid("tensor %q is missing", name)
	}
	if !r.ok {
		return nil, unsupported("%s: type %s is not supported", r.label(name), r.typeName)
	}
	v, err := toFloat32(r.dtype, r.data, n)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.label(name), err)
	}
	delete(raw, name)
	return v, nil
}
