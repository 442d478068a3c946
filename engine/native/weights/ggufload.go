package weights

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/batchd/batchd/engine/native/gguf"
	"github.com/batchd/batchd/kernels"
)

// ggufTypes maps the GGUF tensor types the kernels run on. The others
// (the IQ1/IQ2/IQ3 lattice quantizations, the ternary TQ types, Q8_1/Q8_K
// and the integer types) are refused at load, naming the tensor and type.
var ggufTypes = map[gguf.GGMLType]kernels.DType{
	gguf.F32:    kernels.F32,
	gguf.F16:    kernels.F16,
	gguf.BF16:   kernels.BF16,
	gguf.Q8_0:   kernels.Q8_0,
	gguf.Q4_0:   kernels.Q4_0,
	gguf.Q4_1:   kernels.Q4_1,
	gguf.Q5_0:   kernels.Q5_0,
	gguf.Q5_1:   kernels.Q5_1,
	gguf.Q2_K:   kernels.Q2_K,
	gguf.Q3_K:   kernels.Q3_K,
	gguf.Q4_K:   kernels.Q4_K,
	gguf.Q5_K:   kernels.Q5_K,
	gguf.Q6_K:   kernels.Q6_K,
	gguf.IQ4_NL: kernels.IQ4_NL,
	gguf.IQ4_XS: kernels.IQ4_XS,
	gguf.MXFP4:  kernels.MXFP4,
}

// GGUFTypes names the GGUF tensor types batchd loads, in ggml's id order.
func GGUFTypes() []string {
	var ids []gguf.GGMLType
	for id := range ggufTypes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

// ggufArchs are the architectures loaded from GGUF, with their RoPE layout:
// llama.cpp's converter permutes llama Q/K rows for adjacent-pair rotation,
// and leaves qwen2/qwen3 in the HF rotate-half layout.
var ggufArchs = map[string]struct {
	neox, qkvBias, qkNorm, moe bool
	gemma                      int  // 2 or 3: the Gemma generation
	gptOSS                     bool // gpt-oss's sinks, biases, clamped SwiGLU
	phi3                       bool // fused qkv and gate/up, LongRoPE factors
	glm                        bool // GLM-4.5's sigmoid routing, shared expert, dense lead layers, MTP layers
}{
	"llama":    {},
	"qwen2":    {neox: true, qkvBias: true},
	"qwen3":    {neox: true, qkNorm: true},
	"qwen3moe": {neox: true, qkNorm: true, moe: true},
	"gemma2":   {neox: true, gemma: 2},
	"gemma3":   {neox: true, qkNorm: true, gemma: 3},
	"gpt-oss":  {neox: true, qkvBias: true, moe: true, gptOSS: true},
	"phi3":     {neox: true, phi3: true},
	"glm4moe":  {neox: true, qkvBias: true, moe: true, glm: true},
	"qwen2moe": {neox: true, qkvBias: true, moe: true},
}

const noToken = 0xFFFFFFFF // GGUF writers store an absent token id as uint32(-1)

func loadGGUF(path string, log *slog.Logger) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		if errors.Is(err, gguf.ErrUnsupported) {
			return nil, unsupported("%w", err)
		}
		return nil, invalid("%w", err)
	}
	m := &Model{mappings: []mapping{f}}
	if err := m.fromGGUF(f, log); err != nil {
		f.Close()
		return nil, err
	}
	return m, nil
}

// ggufReader reads hyperparameters, remembering the first error.
type ggufReader struct {
	f   *gguf.File
	err error
}

// fail records err about key: accessor errors already name the key.
func (r *ggufReader) fail(key string, err error) {
	if r.err != nil {
		return
	}
	var te *gguf.TypeError
	if errors.As(err, &te) || strings.Contains(err.Error(), strconv.Quote(key)) {
		r.err = invalid("%w", err)
		return
	}
	r.err = invalid("GGUF metadata %s: %w", key, err)
}

// uint reads a required (def < 0) or optional integer key.
func (r *ggufReader) uint(key string, def int) int {
	v, ok, err := r.f.Uint(key)
	switch {
	case err != nil:
		r.fail(key, err)
	case !ok && def < 0:
		r.fail(key, errors.New("missing"))
	case !ok:
		return def
	case v > maxDimension:
		r.fail(key, fmt.Errorf("value %d is larger than %d", v, maxDimension))
	default:
		return int(v)
	}
	return 0
}

func (r *ggufReader) float(key string, def float64, required bool) float32 {
	v, ok, err := r.f.Float(key)
	switch {
	case err != nil:
		r.fail(key, err)
	case !ok && required:
		r.fail(key, errors.New("missing"))
	case !ok:
		return float32(def)
	default:
		return float32(v)
	}
	return 0
}

func (r *ggufReader) str(key string) string {
	v, _, err := r.f.String(key)
	if err != nil {
		r.fail(key, err)
	}
	return v
}

func (r *ggufReader) bool(key string, def bool) bool {
	v, ok, err := r.f.Bool(key)
	if err != nil {
		r.fail(key, err)
	}
	if !ok {
		return def
	}
	return v
}

// tokenID reads an optional token id: -1 when absent or stored as uint32(-1).
func (r *ggufReader) tokenID(key string, vocab int) int {
	v, ok, err := r.f.Int(key)
	switch {
	case err != nil:
		r.fail(key, err)
	case !ok || v == noToken || v == -1:
		return -1
	case v < 0 || (vocab > 0 && v >= int64(vocab)):
		r.fail(key, fmt.Errorf("token id %d is outside the %d-token vocabulary", v, vocab))
	default:
		return int(v)
	}
	return -1
}

func (m *Model) fromGGUF(f *gguf.File, log *slog.Logger) error {
	r := &ggufReader{f: f}
	arch := r.str("general.architecture")
	if r.err != nil {
		return r.err
	}
	traits, ok := ggufArchs[arch]
	if !ok {
		if arch == "" {
			return invalid("GGUF metadata general.architecture is missing")
		}
		return unsupported("architecture %q is not supported yet (want llama, qwen2, qwen3, qwen2moe, qwen3moe, gemma2, gemma3, gpt-oss, phi3 or glm4moe)", arch)
	}
	k := func(s string) string { return arch + "." + s }

	// Tokenizer first: its length is the vocabulary size when the
	// architecture does not state one.
	tok := TokenizerSpec{
		Model: r.str("tokenizer.ggml.model"),
		Pre:   r.str("tokenizer.ggml.pre"),
	}
	var err error
	if tok.Tokens, _, err = f.Strings("tokenizer.ggml.tokens"); err != nil {
		r.fail("tokenizer.ggml.tokens", err)
	}
	if tok.Scores, _, err = f.Float32s("tokenizer.ggml.scores"); err != nil {
		r.fail("tokenizer.ggml.scores", err)
	}
	if tok.Types, _, err = f.Int32s("tokenizer.ggml.token_type"); err != nil {
		r.fail("tokenizer.ggml.token_type", err)
	}
	if tok.Merges, _, err = f.Strings("tokenizer.ggml.merges"); err != nil {
		r.fail("tokenizer.ggml.merges", err)
	}
	if r.err != nil {
		return r.err
	}
	n := len(tok.Tokens)
	if tok.Scores != nil && len(tok.Scores) != n {
		return invalid("tokenizer.ggml.scores has %d entries for %d tokens", len(tok.Scores), n)
	}
	if tok.Types != nil && len(tok.Types) != n {
		return invalid("tokenizer.ggml.token_type has %d entries for %d tokens", len(tok.Types), n)
	}

	c := Config{Arch: arch, RopeNeox: traits.neox, QKVBias: traits.qkvBias, QKNorm: traits.qkNorm}
	phiOrigCtx := 0
	c.VocabSize = r.uint(k("vocab_size"), n)
	if c.VocabSize == 0 {
		if emb, ok := f.Tensor(nameTokenEmbd); ok && len(emb.Dims) >= 2 && emb.Dims[1] <= maxDimension {
			c.VocabSize = int(emb.Dims[1])
		}
	}
	if n > c.VocabSize {
		return invalid("tokenizer has %d tokens, more than the vocabulary size %d", n, c.VocabSize)
	}
	// llama.cpp's pooling types: 1 mean, 2 cls, 3 last.
	switch r.uint(k("pooling_type"), 0) {
	case 1:
		c.Pooling = "mean"
	case 2:
		c.Pooling = "cls"
	case 3:
		c.Pooling = "last"
	}
	c.ContextLength = r.uint(k("context_length"), -1)
	c.Dim = r.uint(k("embedding_length"), -1)
	c.Layers = r.uint(k("block_count"), -1)
	// GLM-4.5's files end with its multi-token-prediction layers, which
	// only draft; llama.cpp's decoder skips them, and so does batchd.
	nextn := r.uint(k("nextn_predict_layers"), 0)
	if nextn > 0 && r.err == nil {
		if !traits.glm || nextn >= c.Layers {
			return unsupported("GGUF metadata %s = %d (multi-token-prediction layers) is not supported for arch %s with %d blocks", k("nextn_predict_layers"), nextn, arch, c.Layers)
		}
		c.Layers -= nextn
	}
	// llama with experts is Mixtral's GGUF (the merged ffn_*_exps tensors;
	// the old per-expert ffn_gate.E tensors are refused as unused).
	if arch == "llama" && r.uint(k("expert_count"), 0) > 0 {
		traits.moe = true
	}
	if traits.moe {
		// llama.cpp's qwen3moe and Mixtral: every layer sparse, softmax
		// gating, the chosen experts' weights renormalized.
		c.Experts = r.uint(k("expert_count"), -1)
		c.ExpertsUsed = r.uint(k("expert_used_count"), -1)
		c.ExpertFFNDim = r.uint(k("expert_feed_forward_length"), r.uint(k("feed_forward_length"), -1)) // Mixtral's files give only the latter
		c.ExpertNormTopK = true
		c.FFNDim = c.ExpertFFNDim // feed_forward_length is a dense FFN's, which qwen3moe has none of
		if traits.glm {
			if err := glmFromGGUF(&c, r, k, f); err != nil {
				return err
			}
		} else if arch == "qwen2moe" {
			// Qwen1.5-MoE and Qwen2-57B-A14B as llama.cpp runs them: the
			// softmax's top-k not renormalized, a shared expert gated by
			// σ(h·ffn_gate_inp_shexp) beside them.
			c.ExpertNormTopK = false
			if sc := r.float(k("expert_weights_scale"), 0, false); sc != 1 {
				c.ExpertScale = sc
			}
			c.SharedFFNDim = r.uint(k("expert_shared_feed_forward_length"), r.uint(k("feed_forward_length"), -1))
			c.SharedGate = true
		} else if n := r.uint(k("expert_shared_count"), 0); n != 0 && r.err == nil {
			return unsupported("GGUF metadata %s = %d: shared experts are not supported for arch %s", k("expert_shared_count"), n, arch)
		}
	} else {
		c.FFNDim = r.uint(k("feed_forward_length"), -1)
	}
	c.Heads = r.uint(k("attention.head_count"), -1)
	if r.err != nil {
		return r.err
	}
	c.KVHeads = r.uint(k("attention.head_count_kv"), c.Heads)
	c.RMSEps = r.float(k("attention.layer_norm_rms_epsilon"), 0, true)
	c.RopeTheta = r.float(k("rope.freq_base"), 10000, false)
	if c.Heads > 0 && c.Dim%c.Heads == 0 {
		c.HeadDim = c.Dim / c.Heads
	}
	c.HeadDim = r.uint(k("attention.key_length"), c.HeadDim)
	if vl := r.uint(k("attention.value_length"), c.HeadDim); vl != c.HeadDim && r.err == nil {
		return unsupported("GGUF metadata %s = %d differs from key length %d: not supported yet", k("attention.value_length"), vl, c.HeadDim)
	}
	c.RopeDim = r.uint(k("rope.dimension_count"), c.HeadDim)
	switch st := r.str(k("rope.scaling.type")); st {
	case "", "none":
	case "linear":
		if fac := r.float(k("rope.scaling.factor"), 1, false); fac != 1 {
			c.RopeLinear = fac
		}
	case "yarn":
		// llama.cpp's YaRN: betas 32 and 1 (no file states others but
		// DeepSeek's and Grok's, which are not loaded), the magnitude
		// (1+0.1·ln factor) times rope.scaling.attn_factor.
		if r.float(k("rope.scaling.yarn_log_multiplier"), 0, false) != 0 {
			return unsupported("GGUF metadata %s: YaRN's log multiplier (DeepSeek's) is not supported yet", k("rope.scaling.yarn_log_multiplier"))
		}
		c.Yarn = &YarnScaling{
			Factor:          r.float(k("rope.scaling.factor"), 0, true),
			OriginalContext: r.uint(k("rope.scaling.original_context_length"), c.ContextLength),
			BetaFast:        32, BetaSlow: 1,
			AttnFactor: r.float(k("rope.scaling.attn_factor"), 1, false),
		}
	default:
		return unsupported("rope scaling type %q is not supported yet", st)
	}
	if c.Yarn == nil {
		// The magnitude RoPE scales q and k by (Phi-3's LongRoPE factor).
		if a := r.float(k("rope.scaling.attn_factor"), 1, false); a != 1 {
			c.RopeAttnFactor = a
		}
	}
	if traits.gptOSS {
		// gpt-oss as llama.cpp reads it: sliding windows on the layers
		// il % pattern < pattern-1 (even ones by default), sinks, biases
		// on q/k/v/o, the router and the experts, the clamped SwiGLU;
		// top-k of the router's logits weighted by their softmax, which is
		// the renormalized softmax qwen3moe routes by.
		c.AttnSinks, c.OutBias, c.RouterBias, c.ExpertBias = true, true, true, true
		c.SwiGLULimit = 7
		c.SlidingWindow = r.uint(k("attention.sliding_window"), -1)
		pattern := r.uint(k("attention.sliding_window_pattern"), 2)
		c.SlidingLayers = slidingPattern(c.Layers, pattern)
		if b := r.float(k("rope.freq_base_swa"), 0, false); b != 0 && b != c.RopeTheta {
			return unsupported("GGUF metadata %s = %g differs from rope.freq_base: not supported yet", k("rope.freq_base_swa"), b)
		}
	} else if traits.gemma > 0 {
		gemmaFromGGUF(&c, r, k, traits.gemma)
	} else if traits.phi3 {
		// llama.cpp turns Phi-3's sliding window off (its files' windows
		// are not what the models were trained with); so does batchd.
		if w := r.uint(k("attention.sliding_window"), 0); w > 0 {
			log.Warn("phi3: the file's sliding window is ignored, as llama.cpp ignores it", "sliding_window", w)
		}
		phiOrigCtx = r.uint(k("rope.scaling.original_context_length"), c.ContextLength)
	} else if w := r.uint(k("attention.sliding_window"), 0); w > 0 {
		c.SlidingWindow = w // Mistral's, on every layer
	}

	tok.BOS = r.tokenID("tokenizer.ggml.bos_token_id", c.VocabSize)
	tok.EOS = r.tokenID("tokenizer.ggml.eos_token_id", c.VocabSize)
	tok.UNK = r.tokenID("tokenizer.ggml.unknown_token_id", c.VocabSize)
	tok.PAD = r.tokenID("tokenizer.ggml.padding_token_id", c.VocabSize)
	eot := r.tokenID("tokenizer.ggml.eot_token_id", c.VocabSize)
	eom := r.tokenID("tokenizer.ggml.eom_token_id", c.VocabSize)
	tok.AddBOS = r.bool("tokenizer.ggml.add_bos_token", tok.Model == "llama")
	tok.AddEOS = r.bool("tokenizer.ggml.add_eos_token", false)
	m.ChatTemplate = r.str("tokenizer.chat_template")
	if r.err != nil {
		return r.err
	}
	c.BOS, c.EOS = tok.BOS, tok.EOS
	for _, id := range []int{tok.EOS, eot, eom} {
		if id >= 0 && !slices.Contains(c.EOSIDs, id) {
			c.EOSIDs = append(c.EOSIDs, id)
		}
	}
	if _, ok := f.Tensor(nameOutput); !ok {
		c.TiedEmbeddings = true
	}
	if err := c.validate(); err != nil {
		return fmt.Errorf("GGUF metadata: %w", err)
	}
	m.Config = c
	m.Tokenizer = tok

	raw := make(map[string]*rawTensor)
	for _, ti := range f.Tensors() {
		rt := &rawTensor{source: ti.Name, typeName: ti.Type.String(), accepts: strings.Join(GGUFTypes(), ", "), data: ti.Data}
		rt.dtype, rt.ok = ggufTypes[ti.Type]
		rt.shape = make([]uint64, len(ti.Dims))
		for i, d := range ti.Dims { // ggml ne is fastest-first; shape is outermost-first
			rt.shape[len(ti.Dims)-1-i] = d
		}
		raw[ti.Name] = rt
	}
	if traits.phi3 {
		if err := phi3Raw(raw, c, phiOrigCtx); err != nil {
			return err
		}
	}
	for name := range raw {
		var l int
		if _, err := fmt.Sscanf(name, blockPrefix+"%d.", &l); err == nil && l >= c.Layers && l < c.Layers+nextn {
			delete(raw, name) // a multi-token-prediction layer's
		}
	}
	if traits.gptOSS || traits.glm {
		// gpt-oss's and GLM's FFN input norm is stored as post_attention_norm.
		for l := range c.Layers {
			if rt, ok := raw[BlockName(l, sufPostAttn)]; ok {
				delete(raw, BlockName(l, sufPostAttn))
				raw[BlockName(l, sufFFNNorm)] = rt
			}
		}
	}
	return m.build(raw, nil, nil)
}

// glmFromGGUF reads GLM-4.5's mixture as llama.cpp does: the first
// leading_dense_block_count layers dense (feed_forward_length), the rest
// routed by expert_gating_func (sigmoid unless it says softmax) with the
// selection bias exp_probs_b, weights renormalized when
// expert_weights_norm and scaled by expert_weights_scale, plus
// expert_shared_count shared experts of the experts' size taken as one; q
// and k normalized when the file has their norms (GLM-4.5, not -Air).
func glmFromGGUF(c *Config, r *ggufReader, k func(string) string, f *gguf.File) error {
	c.DenseLayers = r.uint(k("leading_dense_block_count"), 0)
	c.FFNDim = r.uint(k("feed_forward_length"), c.ExpertFFNDim)
	c.ExpertNormTopK = r.bool(k("expert_weights_norm"), false)
	if sc := r.float(k("expert_weights_scale"), 0, false); sc != 1 {
		c.ExpertScale = sc
	}
	switch g := r.uint(k("expert_gating_func"), 0); g {
	case 0, 2: // none given (glm4moe's default), sigmoid
		c.ExpertSigmoid = true
	case 1: // softmax
	default:
		return unsupported("GGUF metadata %s = %d: only softmax (1) and sigmoid (2) gating are supported", k("expert_gating_func"), g)
	}
	if g := r.uint(k("expert_group_count"), 0); g > 1 {
		return unsupported("GGUF metadata %s = %d: grouped expert routing (DeepSeek V3's) is not supported yet", k("expert_group_count"), g)
	}
	c.SharedFFNDim = c.ExpertFFNDim * r.uint(k("expert_shared_count"), 0)
	c.ExpertSelBias = true
	_, c.QKNorm = f.Tensor(BlockName(0, sufQNorm))
	return r.err
}

// gemmaFromGGUF sets what Gemma 2 and 3 add to the decoder, as llama.cpp
// reads their files: embeddings scaled by √dim, post-norms, GeGLU, queries
// scaled by 1/√head_dim (1/√(dim/heads) for the 27B models, whose files
// say so only by their layer count), sliding-window attention on every
// layer but each pattern's last (pattern 2 for Gemma 2, 6 for Gemma 3);
// Gemma 2 soft-caps scores and logits (50 and 30 unless the file says),
// Gemma 3 rotates its local layers with base 10000 and no scaling.
func gemmaFromGGUF(c *Config, r *ggufReader, k func(string) string, gen int) {
	c.EmbedScale = float32(math.Sqrt(float64(c.Dim)))
	c.PostNorms, c.GELU = true, true
	c.AttnScale = float32(1 / math.Sqrt(float64(c.HeadDim)))
	big, pattern := 46, 2 // Gemma 2 27B
	if gen == 3 {
		big, pattern = 62, 6 // Gemma 3 27B
	}
	if c.Layers == big && c.Heads > 0 {
		c.AttnScale = float32(1 / math.Sqrt(float64(c.Dim/c.Heads)))
	}
	if gen == 2 {
		c.SlidingWindow = r.uint(k("attention.sliding_window"), 4096)
		c.AttnSoftCap = r.float(k("attn_logit_softcapping"), 50, false)
		c.FinalSoftCap = r.float(k("final_logit_softcapping"), 30, false)
	} else {
		c.SlidingWindow = r.uint(k("attention.sliding_window"), -1)
		c.RopeThetaLocal = 10000
	}
	c.SlidingLayers = slidingPattern(c.Layers, pattern)
}

// slidingPattern marks the sliding-window layers of a model that has one
// global layer every pattern layers, the last of each group (llama.cpp's
// set_swa_pattern; transformers' (i+1) % pattern != 0): nil when the
// counts are out of range (validate reports the layer count).
func slidingPattern(layers, pattern int) []bool {
	if layers <= 0 || layers > maxDimension || pattern <= 0 {
		return nil
	}
	out := make([]bool, layers)
	for i := range out {
		out[i] = i%pattern < pattern-1
	}
	return out
}

// phi3Raw splits Phi-3's fused tensors into the canonical ones: attn_qkv
// into q, k and v (its first Heads·HeadDim rows, then KVHeads·HeadDim each)
// and ffn_up into gate and up (its first FFNDim rows the gate), as views
// of the file's rows; and picks its LongRoPE factors as llama.cpp does:
// rope_factors_long when the context is longer than the original one,
// else rope_factors_short, as the rope_freqs divisors.
func phi3Raw(raw map[string]*rawTensor, c Config, origCtx int) error {
	split := func(name string, parts []struct {
		name string
		rows int
	}) error {
		r, ok := raw[name]
		if !ok {
			return nil // stored apart already
		}
		total := 0
		for _, p := range parts {
			total += p.rows
		}
		if len(r.shape) != 2 || r.shape[0] != uint64(total) || r.shape[1] != uint64(c.Dim) {
			return invalid("%s: shape %s, want %s", r.label(name), fmtRaw(r.shape), fmtShape(total, c.Dim))
		}
		rb, err := r.dtype.RowBytes(c.Dim)
		if err != nil || !r.ok {
			return unsupported("%s: type %s is not supported (batchd reads %s)", r.label(name), r.typeName, r.accepts)
		}
		if len(r.data) != total*rb {
			return invalid("%s: %d bytes, want %d", r.label(name), len(r.data), total*rb)
		}
		delete(raw, name)
		off := 0
		for _, p := range parts {
			part := *r
			part.source = fmt.Sprintf("%s rows %d-%d", r.source, off, off+p.rows-1)
			part.shape = []uint64{uint64(p.rows), uint64(c.Dim)}
			part.data = r.data[off*rb : (off+p.rows)*rb : (off+p.rows)*rb]
			raw[p.name] = &part
			off += p.rows
		}
		return nil
	}
	type part = struct {
		name string
		rows int
	}
	for l := range c.Layers {
		q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
		if err := split(BlockName(l, "attn_qkv.weight"), []part{{BlockName(l, sufQ), q}, {BlockName(l, sufK), kv}, {BlockName(l, sufV), kv}}); err != nil {
			return err
		}
		if _, apart := raw[BlockName(l, sufFFNGate)]; !apart {
			if err := split(BlockName(l, sufFFNUp), []part{{BlockName(l, sufFFNGate), c.FFNDim}, {BlockName(l, sufFFNUp), c.FFNDim}}); err != nil {
				return err
			}
		}
	}
	long, short := raw["rope_factors_long.weight"], raw["rope_factors_short.weight"]
	delete(raw, "rope_factors_long.weight")
	delete(raw, "rope_factors_short.weight")
	if _, ok := raw[nameRopeFreqs]; !ok {
		pick := short
		if c.ContextLength > origCtx {
			pick = long
		}
		if pick != nil {
			raw[nameRopeFreqs] = pick
		}
	}
	return nil
}
