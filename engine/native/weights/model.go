package weights

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"unsafe"

	"github.com/batchd/batchd/engine/native/gguf"
	"github.com/batchd/batchd/kernels"
)

// ErrUnsupported is matched by errors for models that are valid but use
// something this package does not load yet: an architecture, a weight type,
// a RoPE scaling kind.
var ErrUnsupported = errors.New("not supported yet")

// ErrInvalid is matched by errors for models whose files contradict each
// other or themselves: missing tensors, shapes that do not fit the config,
// missing or malformed hyperparameters.
var ErrInvalid = errors.New("invalid model")

// kindError carries a sentinel (ErrInvalid, ErrUnsupported) for errors.Is
// without repeating its text in the message.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

func invalid(format string, args ...any) error {
	return &kindError{ErrInvalid, fmt.Errorf(format, args...)}
}

func unsupported(format string, args ...any) error {
	return &kindError{ErrUnsupported, fmt.Errorf(format, args...)}
}

// Config is the architecture of a loaded model, the same for both formats.
type Config struct {
	Arch          string // "llama", "qwen2" or "qwen3"
	VocabSize     int
	Dim           int // hidden size
	Layers        int
	Heads         int
	KVHeads       int
	HeadDim       int
	FFNDim        int
	ContextLength int
	RMSEps        float32
	RopeTheta     float32
	// RopeDim is the number of dimensions rotated per head (usually HeadDim).
	RopeDim int
	// RopeNeox selects rotate-half pairs (i, i+RopeDim/2) (HF layout for
	// every arch, GGUF qwen2/qwen3); false means adjacent pairs (2i, 2i+1)
	// (GGUF llama, whose converter permutes Q and K rows).
	RopeNeox bool
	// RopeScaling is Llama-3 style frequency scaling, nil if none. GGUF files
	// carry that scaling as the rope_freqs.weight vector instead; use
	// Model.RopeFrequencies to get the frequencies either way.
	RopeScaling *RopeScaling
	// TiedEmbeddings: there is no output.weight; logits use token_embd.weight.
	TiedEmbeddings bool
	QKVBias        bool // attn_q/k/v biases (qwen2)
	QKNorm         bool // per-head RMSNorm of q and k with HeadDim weights (qwen3)
	BOS, EOS       int  // -1 when unknown
	// Pooling is how an embedding model pools its token states, as the
	// file says: "mean", "last", "cls", or "" when it does not say.
	Pooling string
	// EOSIDs are all the ids that end generation, EOS first (HF
	// generation_config eos_token_id lists; GGUF eos plus eot/eom ids).
	EOSIDs []int
	// Experts > 0 makes every layer's FFN a mixture of experts (qwen3moe):
	// a router (ffn_gate_inp) picks ExpertsUsed of Experts experts per
	// token by softmax probability, each a SwiGLU FFN of ExpertFFNDim, and
	// their outputs are summed weighted by those probabilities (renormalized
	// over the chosen ones when ExpertNormTopK). FFNDim is then unused.
	Experts, ExpertsUsed, ExpertFFNDim int
	ExpertNormTopK                     bool
	// GLM-4.5's kind of mixture (glm4moe; DeepSeek V3 routes alike) adds
	// the fields below; their zero values are qwen3moe's.
	//
	// ExpertSigmoid gates by each expert's sigmoid (not the softmax over
	// all); ExpertSelBias adds a per-expert bias (exp_probs_b.bias, HF's
	// e_score_correction_bias) to those probabilities to choose the
	// experts by, not to weight them; ExpertScale > 0 multiplies the
	// chosen experts' weights (after any renormalization).
	ExpertSigmoid, ExpertSelBias bool
	ExpertScale                  float32
	// SharedFFNDim > 0: each mixture layer also has a shared expert, a
	// SwiGLU FFN of that size every token takes (ffn_{gate,up,down}_shexp),
	// added to the routed experts' sum.
	SharedFFNDim int
	// SharedGate: the shared expert's output is scaled per token by
	// σ(h·g), g its gate vector (ffn_gate_inp_shexp; Qwen2-MoE's).
	SharedGate bool
	// DenseLayers: the first DenseLayers layers have a dense FFN of FFNDim
	// instead of a mixture (GLM-4.5's first_k_dense_replace).
	DenseLayers int

	// The Gemma families (gemma2, gemma3) differ from Llama's decoder in
	// the fields below; their zero values are Llama's.
	//
	// EmbedScale > 0 multiplies the looked-up token embeddings (Gemma: √Dim).
	EmbedScale float32
	// PostNorms: each block RMS-normalizes its attention output and its
	// FFN output (post_attention_norm, post_ffw_norm) before adding them
	// to the residual.
	PostNorms bool
	// GELU: the FFN's gate goes through GELU (tanh approximation), not SiLU.
	GELU bool
	// AttnScale > 0 is the attention score scale; 0 means 1/√HeadDim.
	AttnScale float32
	// AttnSoftCap > 0 soft-caps attention scores, FinalSoftCap > 0 the
	// logits: x → cap·tanh(x/cap) (Gemma 2).
	AttnSoftCap, FinalSoftCap float32
	// SlidingWindow > 0 limits the attention of the layers SlidingLayers
	// marks (every layer when it is nil) to each token's last
	// SlidingWindow positions, itself included.
	SlidingWindow int
	SlidingLayers []bool
	// RopeThetaLocal > 0 is the RoPE base of the sliding-window layers,
	// which then take no RoPE scaling (Gemma 3's local layers); the other
	// layers use RopeTheta and the scaling. See LocalRopeFrequencies.
	RopeThetaLocal float32
	// RopeLinear > 0 is linear RoPE scaling: every frequency divided by it
	// (GGUF rope.scaling.type linear, HF rope_scaling type "linear").
	RopeLinear float32

	// gpt-oss adds the fields below; their zero values are Llama's.
	//
	// AttnSinks: each layer has a sink logit per query head
	// (attn_sinks.weight), one more score in the softmax.
	AttnSinks bool
	// OutBias: attn_output has a bias (attn_output.bias).
	OutBias bool
	// RouterBias and ExpertBias: the router (ffn_gate_inp.bias, Experts)
	// and each expert's three matrices (ffn_{gate,up,down}_exps.bias,
	// Experts × rows) have biases.
	RouterBias, ExpertBias bool
	// SwiGLULimit > 0 makes the experts' activation gpt-oss's clamped
	// SwiGLU (kernels.SwiGLUOAI, alpha 1.702) with this limit.
	SwiGLULimit float32
	// Yarn is YaRN RoPE scaling, nil if none (RopeFrequencies and
	// RopeMagnitude apply it).
	Yarn *YarnScaling
	// RopeAttnFactor > 0 scales q and k as RoPE rotates them (Phi-3's
	// LongRoPE magnitude, GGUF rope.scaling.attn_factor), YaRN aside.
	RopeAttnFactor float32
}

// YarnScaling is YaRN RoPE scaling as llama.cpp computes it: the pairs
// below the corrected dimension of BetaFast keep their frequency, those
// above that of BetaSlow are divided by Factor, a linear ramp mixes the
// two between; and q and k are scaled by AttnFactor·(1+0.1·ln Factor).
type YarnScaling struct {
	Factor             float32
	OriginalContext    int
	BetaFast, BetaSlow float32
	AttnFactor         float32
}

// MoELayer reports whether layer's FFN is a mixture of experts.
func (c *Config) MoELayer(layer int) bool { return c.Experts > 0 && layer >= c.DenseLayers }

// Sliding reports whether layer attends through the sliding window.
func (c *Config) Sliding(layer int) bool {
	return c.SlidingWindow > 0 && (c.SlidingLayers == nil || c.SlidingLayers[layer])
}

// RopeScaling is Llama-3 ("llama3" rope_type) frequency scaling.
type RopeScaling struct {
	Factor          float32
	LowFreqFactor   float32
	HighFreqFactor  float32
	OriginalContext int
}

// TokenizerSpec is what a tokenizer needs, as stored by the model: the GGUF
// vocabulary arrays, or the raw Hugging Face tokenizer files.
type TokenizerSpec struct {
	// Model is GGUF tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2"
	// (byte-level BPE); "" for HF directories, where TokenizerJSON is set.
	Model  string
	Pre    string // GGUF tokenizer.ggml.pre
	Tokens []string
	Scores []float32
	Types  []int32
	Merges []string
	// Special ids, -1 when absent.
	BOS, EOS, UNK, PAD int
	// AddBOS and AddEOS: whether encoding a prompt adds BOS / EOS. GGUF:
	// tokenizer.ggml.add_bos_token (default true for "llama", false
	// otherwise) and add_eos_token (default false). HF: tokenizer_config.json
	// add_bos_token/add_eos_token when given; tokenizer.json's post_processor
	// is authoritative there.
	AddBOS, AddEOS bool
	// TokenizerJSON is the HF tokenizer.json, nil for GGUF.
	TokenizerJSON []byte
	// TokenizerConfigJSON is the HF tokenizer_config.json, nil if absent.
	TokenizerConfigJSON []byte
}

// Model is a loaded model. Matrices may point into memory-mapped files: they
// are valid until Close and must never be written to (the mapping is
// read-only; a write faults).
type Model struct {
	Config Config
	// Matrices are the 2-D weights by canonical GGUF name (see Names), Rows =
	// output dim, Cols = input dim: "token_embd.weight" (Vocab × Dim),
	// "output.weight" (absent when tied), "blk.N.attn_q.weight" (Heads·HeadDim
	// × Dim), "blk.N.attn_k.weight"/"attn_v.weight" (KVHeads·HeadDim × Dim),
	// "blk.N.attn_output.weight" (Dim × Heads·HeadDim), "blk.N.ffn_gate.weight"
	// and "ffn_up.weight" (FFNDim × Dim), "blk.N.ffn_down.weight" (Dim × FFNDim).
	Matrices map[string]*kernels.Matrix
	// Vectors are the 1-D weights converted to float32: "output_norm.weight",
	// "blk.N.attn_norm.weight", "blk.N.ffn_norm.weight" (Dim);
	// "blk.N.attn_q.bias" (Heads·HeadDim), "attn_k.bias"/"attn_v.bias"
	// (KVHeads·HeadDim) when QKVBias; "blk.N.attn_q_norm.weight" and
	// "attn_k_norm.weight" (HeadDim) when QKNorm; and, from GGUF files of
	// Llama-3.1-style models, "rope_freqs.weight" (RopeDim/2 divisors of the
	// RoPE frequencies).
	Vectors map[string][]float32
	// Experts are the mixture-of-experts weights, one matrix per expert in
	// expert order, by canonical name: "blk.N.ffn_gate_exps.weight" and
	// "ffn_up_exps.weight" (ExpertFFNDim × Dim each), "ffn_down_exps.weight"
	// (Dim × ExpertFFNDim); the router "blk.N.ffn_gate_inp.weight"
	// (Experts × Dim) is in Matrices.
	Experts      map[string][]*kernels.Matrix
	Tokenizer    TokenizerSpec
	ChatTemplate string // "" if none
	Source       string // the path given to Load

	mappings []mapping
}

// mapping is one memory-mapped file the model's matrices may point into.
type mapping interface {
	io.Closer
	Contains(b []byte) bool
}

// Load loads a model from a .gguf file or a Hugging Face directory.
func Load(path string) (*Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("weights: load: %w", err)
	}
	log := slog.Default().With("component", "weights")
	var m *Model
	switch {
	case st.IsDir():
		m, err = loadHF(path, log)
	case strings.HasSuffix(strings.ToLower(path), ".gguf") || hasGGUFMagic(path):
		m, err = loadGGUF(path, log)
	default:
		return nil, unsupported("weights: load %s: want a .gguf file or a Hugging Face model directory", path)
	}
	if err != nil {
		return nil, fmt.Errorf("weights: load %s: %w", path, err)
	}
	m.Source = path
	c := m.Config
	log.Info("model loaded", "path", path, "arch", c.Arch, "layers", c.Layers, "dim", c.Dim,
		"heads", c.Heads, "kv_heads", c.KVHeads, "vocab", c.VocabSize, "matrices", len(m.Matrices),
		"weight_types", m.WeightTypes())
	return m, nil
}

// WeightTypes names the types of the model's matrices with how many hold
// each, most common first: "Q4_K×98 Q6_K×25 Q5_0×12".
func (m *Model) WeightTypes() string {
	count := map[kernels.DType]int{}
	for _, mat := range m.Matrices {
		count[mat.Type]++
	}
	for _, exps := range m.Experts { // a tensor of all the experts counts once, as in the file
		count[exps[0].Type]++
	}
	types := make([]kernels.DType, 0, len(count))
	for t := range count {
		types = append(types, t)
	}
	slices.SortFunc(types, func(a, b kernels.DType) int {
		if count[a] != count[b] {
			return count[b] - count[a]
		}
		return int(a) - int(b)
	})
	parts := make([]string, len(types))
	for i, t := range types {
		parts[i] = fmt.Sprintf("%v×%d", t, count[t])
	}
	return strings.Join(parts, " ")
}

// hasGGUFMagic reports whether the file at path starts with "GGUF", for
// GGUF files named without the extension.
func hasGGUFMagic(path string) bool {
	f, _, err := openRegular(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && string(magic[:]) == gguf.Magic
}

// Close unmaps the model's files. Matrices must not be used afterwards. It
// is safe to call more than once.
func (m *Model) Close() error {
	var first error
	for _, mp := range m.mappings {
		if err := mp.Close(); err != nil && first == nil {
			first = err
		}
	}
	m.mappings = nil
	m.Matrices = nil
	return first
}

// IsMapped reports whether matrix name's data lies inside one of the model's
// memory-mapped files, i.e. it was loaded without a copy.
func (m *Model) IsMapped(name string) bool {
	mat, ok := m.Matrices[name]
	if !ok || len(mat.Data) == 0 {
		return false
	}
	for _, mp := range m.mappings {
		if mp.Contains(mat.Data) {
			return true
		}
	}
	return false
}

// RopeFrequencies returns the RoPE angular frequency (radians per position)
// of each of the RopeDim/2 rotated pairs: RopeTheta^(-2i/RopeDim), then
// Llama-3 scaling (Config.RopeScaling) or the GGUF rope_freqs.weight divisors
// applied, so a runner needs no other rope setting than RopeNeox.
func (m *Model) RopeFrequencies() []float64 {
	c := m.Config
	n := c.RopeDim / 2
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Pow(float64(c.RopeTheta), -float64(2*i)/float64(c.RopeDim))
	}
	if s := c.RopeScaling; s != nil {
		lowWavelen := float64(s.OriginalContext) / float64(s.LowFreqFactor)
		highWavelen := float64(s.OriginalContext) / float64(s.HighFreqFactor)
		for i, f := range out {
			wavelen := 2 * math.Pi / f
			switch {
			case wavelen < highWavelen:
			case wavelen > lowWavelen:
				out[i] = f / float64(s.Factor)
			default:
				smooth := (float64(s.OriginalContext)/wavelen - float64(s.LowFreqFactor)) /
					float64(s.HighFreqFactor-s.LowFreqFactor)
				out[i] = (1-smooth)*f/float64(s.Factor) + smooth*f
			}
		}
	}
	if div, ok := m.Vectors[nameRopeFreqs]; ok && len(div) == n {
		for i := range out {
			out[i] /= float64(div[i])
		}
	}
	if f := c.RopeLinear; f > 0 {
		for i := range out {
			out[i] /= float64(f)
		}
	}
	if y := c.Yarn; y != nil {
		// θ = θ_interp·(1-mix) + θ_extrap·mix with θ_interp = θ_extrap/
		// Factor: each pair's frequency scaled by (1-mix)/Factor + mix.
		low, high := yarnCorrDims(c.RopeDim, y.OriginalContext, float64(c.RopeTheta), float64(y.BetaFast), float64(y.BetaSlow))
		for i := range out {
			mix := 1 - min(1, max(0, (float64(i)-low)/max(0.001, high-low)))
			out[i] *= (1-mix)/float64(y.Factor) + mix
		}
	}
	return out
}

// yarnCorrDims are llama.cpp's ggml_rope_yarn_corr_dims: the pair
// indices, floored and ceiled, where a dimension turns beta rotations
// over the original context.
func yarnCorrDims(nDims, origCtx int, base, betaFast, betaSlow float64) (low, high float64) {
	dim := func(beta float64) float64 {
		return float64(nDims) * math.Log(float64(origCtx)/(beta*2*math.Pi)) / (2 * math.Log(base))
	}
	return max(0, math.Floor(dim(betaFast))), min(float64(nDims-1), math.Ceil(dim(betaSlow)))
}

// RopeMagnitude is the factor RoPE scales q and k by (YaRN's
// AttnFactor·(1+0.1·ln Factor); 1 without YaRN): the attention scores
// take its square.
func (c *Config) RopeMagnitude() float64 {
	if y := c.Yarn; y != nil {
		return float64(y.AttnFactor) * (1 + 0.1*math.Log(float64(y.Factor)))
	}
	if c.RopeAttnFactor > 0 {
		return float64(c.RopeAttnFactor)
	}
	return 1
}

// LocalRopeFrequencies returns the RoPE frequencies of the sliding-window
// layers: RopeThetaLocal^(-2i/RopeDim), unscaled, when RopeThetaLocal is
// set; RopeFrequencies otherwise.
func (m *Model) LocalRopeFrequencies() []float64 {
	c := m.Config
	if !(c.RopeThetaLocal > 0) {
		return m.RopeFrequencies()
	}
	out := make([]float64, c.RopeDim/2)
	for i := range out {
		out[i] = math.Pow(float64(c.RopeThetaLocal), -float64(2*i)/float64(c.RopeDim))
	}
	return out
}

// Canonical tensor names.
const (
	nameTokenEmbd  = "token_embd.weight"
	nameOutputNorm = "output_norm.weight"
	nameOutput     = "output.weight"
	nameRopeFreqs  = "rope_freqs.weight"
)

// Block tensor suffixes, after "blk.N.".
const (
	sufAttnNorm  = "attn_norm.weight"
	sufQ         = "attn_q.weight"
	sufK         = "attn_k.weight"
	sufV         = "attn_v.weight"
	sufO         = "attn_output.weight"
	sufQBias     = "attn_q.bias"
	sufKBias     = "attn_k.bias"
	sufVBias     = "attn_v.bias"
	sufQNorm     = "attn_q_norm.weight"
	sufKNorm     = "attn_k_norm.weight"
	sufFFNNorm   = "ffn_norm.weight"
	sufPostAttn  = "post_attention_norm.weight"
	sufSinks     = "attn_sinks.weight"
	sufOBias     = "attn_output.bias"
	sufRouterB   = "ffn_gate_inp.bias"
	sufGateExpsB = "ffn_gate_exps.bias"
	sufUpExpsB   = "ffn_up_exps.bias"
	sufDownExpsB = "ffn_down_exps.bias"
	sufSelBias   = "exp_probs_b.bias"
	sufGateShexp = "ffn_gate_shexp.weight"
	sufUpShexp   = "ffn_up_shexp.weight"
	sufDownShexp = "ffn_down_shexp.weight"
	sufGateInpSh = "ffn_gate_inp_shexp.weight"
	sufPostFFN   = "post_ffw_norm.weight"
	sufFFNGate   = "ffn_gate.weight"
	sufFFNUp     = "ffn_up.weight"
	sufFFNDown   = "ffn_down.weight"
	sufRouter    = "ffn_gate_inp.weight"
	sufGateExps  = "ffn_gate_exps.weight"
	sufUpExps    = "ffn_up_exps.weight"
	sufDownExps  = "ffn_down_exps.weight"
	maxExperts   = 1 << 12
	blockPrefix  = "blk."
	maxDimension = 1 << 24 // bound on any single hyperparameter, to keep products in range
)

// BlockName is the canonical name of layer's tensor suffix, e.g.
// BlockName(3, "attn_q.weight") = "blk.3.attn_q.weight".
func BlockName(layer int, suffix string) string {
	return fmt.Sprintf("%s%d.%s", blockPrefix, layer, suffix)
}

// tensorSpec is one tensor the config calls for.
type tensorSpec struct {
	name       string
	rows, cols int  // cols == 0: a vector of rows elements
	experts    int  // > 0: experts matrices of rows × cols, outermost
	flat       bool // a rows × cols tensor read as a vector (experts' biases)
}

// Names lists the canonical tensor names the config calls for, matrices and
// vectors together (rope_freqs.weight, which is optional, is not listed).
func (c Config) Names() []string {
	specs := c.specs()
	out := make([]string, 0, len(specs))
	for _, s := range specs {
		out = append(out, s.name)
	}
	return out
}

func (c Config) specs() []tensorSpec {
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	s := []tensorSpec{
		{name: nameTokenEmbd, rows: c.VocabSize, cols: c.Dim},
		{name: nameOutputNorm, rows: c.Dim},
	}
	if !c.TiedEmbeddings {
		s = append(s, tensorSpec{name: nameOutput, rows: c.VocabSize, cols: c.Dim})
	}
	for l := 0; l < c.Layers; l++ {
		b := func(suf string, rows, cols int) {
			s = append(s, tensorSpec{name: BlockName(l, suf), rows: rows, cols: cols})
		}
		b(sufAttnNorm, c.Dim, 0)
		b(sufQ, q, c.Dim)
		b(sufK, kv, c.Dim)
		b(sufV, kv, c.Dim)
		b(sufO, c.Dim, q)
		if c.OutBias {
			b(sufOBias, c.Dim, 0)
		}
		if c.AttnSinks {
			b(sufSinks, c.Heads, 0)
		}
		if c.QKVBias {
			b(sufQBias, q, 0)
			b(sufKBias, kv, 0)
			b(sufVBias, kv, 0)
		}
		if c.QKNorm {
			b(sufQNorm, c.HeadDim, 0)
			b(sufKNorm, c.HeadDim, 0)
		}
		b(sufFFNNorm, c.Dim, 0)
		if c.PostNorms {
			b(sufPostAttn, c.Dim, 0)
			b(sufPostFFN, c.Dim, 0)
		}
		if c.MoELayer(l) {
			b(sufRouter, c.Experts, c.Dim)
			if c.RouterBias {
				b(sufRouterB, c.Experts, 0)
			}
			if c.ExpertSelBias {
				b(sufSelBias, c.Experts, 0)
			}
			if c.SharedFFNDim > 0 {
				b(sufGateShexp, c.SharedFFNDim, c.Dim)
				b(sufUpShexp, c.SharedFFNDim, c.Dim)
				b(sufDownShexp, c.Dim, c.SharedFFNDim)
				if c.SharedGate {
					b(sufGateInpSh, c.Dim, 0)
				}
			}
			e := func(suf string, rows, cols int) {
				s = append(s, tensorSpec{name: BlockName(l, suf), rows: rows, cols: cols, experts: c.Experts})
			}
			e(sufGateExps, c.ExpertFFNDim, c.Dim)
			e(sufUpExps, c.ExpertFFNDim, c.Dim)
			e(sufDownExps, c.Dim, c.ExpertFFNDim)
			if c.ExpertBias {
				for _, x := range []struct {
					suf string
					n   int
				}{{sufGateExpsB, c.ExpertFFNDim}, {sufUpExpsB, c.ExpertFFNDim}, {sufDownExpsB, c.Dim}} {
					s = append(s, tensorSpec{name: BlockName(l, x.suf), rows: c.Experts, cols: x.n, flat: true})
				}
			}
			continue
		}
		b(sufFFNGate, c.FFNDim, c.Dim)
		b(sufFFNUp, c.FFNDim, c.Dim)
		b(sufFFNDown, c.Dim, c.FFNDim)
	}
	return s
}

// validate checks the hyperparameters for consistency and range before any
// tensor is looked at.
func (c *Config) validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"vocab size", c.VocabSize}, {"dim", c.Dim}, {"layers", c.Layers}, {"heads", c.Heads},
		{"kv heads", c.KVHeads}, {"head dim", c.HeadDim}, {"ffn dim", c.FFNDim}, {"rope dim", c.RopeDim},
	} {
		if f.v <= 0 || f.v > maxDimension {
			return invalid("%s = %d: want 1 to %d", f.name, f.v, maxDimension)
		}
	}
	if c.Experts != 0 {
		if c.Experts < 0 || c.Experts > maxExperts || c.ExpertsUsed < 1 || c.ExpertsUsed > c.Experts {
			return invalid("experts = %d, used per token = %d: want 1 ≤ used ≤ experts ≤ %d", c.Experts, c.ExpertsUsed, maxExperts)
		}
		if c.ExpertFFNDim <= 0 || c.ExpertFFNDim > maxDimension {
			return invalid("expert ffn dim = %d: want 1 to %d", c.ExpertFFNDim, maxDimension)
		}
		if c.SharedFFNDim < 0 || c.SharedFFNDim > maxDimension {
			return invalid("shared expert ffn dim = %d: want 0 (none) to %d", c.SharedFFNDim, maxDimension)
		}
		if c.DenseLayers < 0 || c.DenseLayers > c.Layers {
			return invalid("%d leading dense layers of %d layers", c.DenseLayers, c.Layers)
		}
		if !(c.ExpertScale >= 0) || math.IsInf(float64(c.ExpertScale), 0) {
			return invalid("expert weights scale = %g: want a positive number (or none)", c.ExpertScale)
		}
	}
	if c.ContextLength <= 0 || c.ContextLength > 1<<30 {
		return invalid("context length = %d: want 1 to %d", c.ContextLength, 1<<30)
	}
	if c.Heads%c.KVHeads != 0 {
		return invalid("heads %d is not a multiple of kv heads %d", c.Heads, c.KVHeads)
	}
	if c.RopeDim > c.HeadDim || c.RopeDim%2 != 0 {
		return invalid("rope dim %d: want an even number no larger than head dim %d", c.RopeDim, c.HeadDim)
	}
	if !(c.RMSEps > 0) || math.IsInf(float64(c.RMSEps), 0) {
		return invalid("rms eps = %g: want a positive number", c.RMSEps)
	}
	if !(c.RopeTheta > 0) || math.IsInf(float64(c.RopeTheta), 0) {
		return invalid("rope theta = %g: want a positive number", c.RopeTheta)
	}
	for _, f := range []struct {
		name string
		v    float32
	}{
		{"embedding scale", c.EmbedScale}, {"attention scale", c.AttnScale}, {"attention soft cap", c.AttnSoftCap},
		{"final logit soft cap", c.FinalSoftCap}, {"local rope theta", c.RopeThetaLocal}, {"linear rope scaling factor", c.RopeLinear},
		{"rope attention factor", c.RopeAttnFactor},
	} {
		if f.v < 0 || f.v != f.v || math.IsInf(float64(f.v), 0) {
			return invalid("%s = %g: want a positive number (or none)", f.name, f.v)
		}
	}
	if c.SlidingWindow < 0 || c.SlidingWindow > 1<<30 {
		return invalid("sliding window = %d: want 0 (none) to %d", c.SlidingWindow, 1<<30)
	}
	if c.SlidingLayers != nil && len(c.SlidingLayers) != c.Layers {
		return invalid("sliding-window layer pattern has %d entries for %d layers", len(c.SlidingLayers), c.Layers)
	}
	if y := c.Yarn; y != nil {
		if !(y.Factor > 0) || y.OriginalContext <= 0 || !(y.BetaFast > 0) || !(y.BetaSlow > 0) || !(y.AttnFactor > 0) {
			return invalid("yarn rope scaling %+v: want positive factor, original context, betas and attention factor", *y)
		}
	}
	if !(c.SwiGLULimit >= 0) {
		return invalid("swiglu limit = %g: want a positive number (or none)", c.SwiGLULimit)
	}
	if s := c.RopeScaling; s != nil {
		if !(s.Factor > 0) || !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) || s.OriginalContext <= 0 {
			return invalid("rope scaling %+v: want factor > 0, 0 < low_freq_factor < high_freq_factor, original context > 0", *s)
		}
	}
	for _, id := range append([]int{c.BOS, c.EOS}, c.EOSIDs...) {
		if id < -1 || id >= c.VocabSize {
			return invalid("special token id %d is outside the %d-token vocabulary", id, c.VocabSize)
		}
	}
	return nil
}

// rawTensor is one stored tensor before checking, from either format.
type rawTensor struct {
	source string // the name in the file, for messages
	// dtype is the stored type; ok false when it is one the kernels do not
	// run on (typeName says which).
	dtype    kernels.DType
	ok       bool
	typeName string
	accepts  string // the types its format may hold that batchd reads, for messages
	// shape is outermost first (PyTorch order): a matrix is {rows, cols}.
	shape []uint64
	data  []byte
	used  bool
}

func (r *rawTensor) label(canonical string) string {
	if r.source == canonical {
		return fmt.Sprintf("tensor %q", canonical)
	}
	return fmt.Sprintf("tensor %q (%s)", canonical, r.source)
}

func fmtShape(rows, cols int) string {
	if cols == 0 {
		return fmt.Sprintf("[%d]", rows)
	}
	return fmt.Sprintf("[%d %d] (rows × cols)", rows, cols)
}

func fmtRaw(shape []uint64) string {
	if len(shape) == 2 {
		return fmt.Sprintf("[%d %d] (rows × cols)", shape[0], shape[1])
	}
	return fmt.Sprint(shape)
}

// shapeIs reports whether shape is {rows, cols} (or {rows} when cols is 0),
// allowing leading dimensions of 1 (GGUF writers sometimes keep them).
func shapeIs(shape []uint64, rows, cols int) bool {
	want := []uint64{uint64(rows)}
	if cols != 0 {
		want = append(want, uint64(cols))
	}
	if len(shape) < len(want) {
		return false
	}
	lead := len(shape) - len(want)
	for _, d := range shape[:lead] {
		if d != 1 {
			return false
		}
	}
	for i, d := range want {
		if shape[lead+i] != d {
			return false
		}
	}
	return true
}

// build checks every tensor the config calls for against raw (keyed by
// canonical name) and fills m.Matrices and m.Vectors. Tensors left over are
// an error unless ignorable says otherwise: an unknown tensor usually means a
// feature (a bias, a norm) the runner would silently skip.
// sourceName, when set, gives the file's name for a canonical one, for
// messages about missing tensors.
func (m *Model) build(raw map[string]*rawTensor, ignorable func(canonical string) bool, sourceName func(canonical string) string) error {
	c := m.Config
	m.Matrices = make(map[string]*kernels.Matrix)
	m.Vectors = make(map[string][]float32)
	for _, s := range c.specs() {
		if s.experts > 0 {
			if err := m.buildExperts(raw, s, sourceName); err != nil {
				return err
			}
			continue
		}
		r, ok := raw[s.name]
		if !ok {
			label := fmt.Sprintf("tensor %q", s.name)
			if sourceName != nil {
				label = (&rawTensor{source: sourceName(s.name)}).label(s.name)
			}
			return invalid("%s is missing (want shape %s for arch %s)", label, fmtShape(s.rows, s.cols), c.Arch)
		}
		r.used = true
		if !shapeIs(r.shape, s.rows, s.cols) {
			return invalid("%s: shape %s, want %s", r.label(s.name), fmtRaw(r.shape), fmtShape(s.rows, s.cols))
		}
		if !r.ok {
			return unsupported("%s: type %s is not supported (batchd reads %s)", r.label(s.name), r.typeName, r.accepts)
		}
		if s.cols == 0 || s.flat {
			v, err := toFloat32(r.dtype, r.data, s.rows*max(s.cols, 1))
			if err != nil {
				return fmt.Errorf("%s: %w", r.label(s.name), err)
			}
			m.Vectors[s.name] = v
			continue
		}
		mat, err := kernels.NewMatrix(r.dtype, s.rows, s.cols, alignedFor(r.dtype, r.data))
		if err != nil {
			return fmt.Errorf("%s: %w", r.label(s.name), err)
		}
		m.Matrices[s.name] = mat
	}
	if r, ok := raw[nameRopeFreqs]; ok {
		r.used = true
		n := c.RopeDim / 2
		if !shapeIs(r.shape, n, 0) {
			return invalid("%s: shape %s, want %s", r.label(nameRopeFreqs), fmtRaw(r.shape), fmtShape(n, 0))
		}
		if !r.ok {
			return unsupported("%s: type %s is not supported yet", r.label(nameRopeFreqs), r.typeName)
		}
		v, err := toFloat32(r.dtype, r.data, n)
		if err != nil {
			return fmt.Errorf("%s: %w", r.label(nameRopeFreqs), err)
		}
		for i, x := range v {
			if !(x > 0) || math.IsInf(float64(x), 0) {
				return invalid("%s: element %d is %g, want a positive divisor", r.label(nameRopeFreqs), i, x)
			}
		}
		m.Vectors[nameRopeFreqs] = v
	}
	for name, r := range raw {
		if !r.used && (ignorable == nil || !ignorable(name)) {
			return unsupported("%s is not used by arch %s (qkv bias %v, qk norm %v, tied %v); refusing to load a model whose weights would be ignored", r.label(name), c.Arch, c.QKVBias, c.QKNorm, c.TiedEmbeddings)
		}
	}
	return nil
}

// buildExperts checks a tensor of s.experts matrices (GGUF) or s.experts
// tensors of one matrix each, under s.name + "#E" (Hugging Face, hfExperts),
// and fills m.Experts[s.name] with one matrix per expert.
func (m *Model) buildExperts(raw map[string]*rawTensor, s tensorSpec, sourceName func(string) string) error {
	if _, split := raw[s.name+"#0"]; split {
		exps := make([]*kernels.Matrix, s.experts)
		for e := range exps {
			name := fmt.Sprintf("%s#%d", s.name, e)
			r, ok := raw[name]
			if !ok {
				return invalid("expert %d of %q is missing (want shape %s)", e, s.name, fmtShape(s.rows, s.cols))
			}
			r.used = true
			if !shapeIs(r.shape, s.rows, s.cols) {
				return invalid("%s: shape %s, want %s", r.label(name), fmtRaw(r.shape), fmtShape(s.rows, s.cols))
			}
			if !r.ok {
				return unsupported("%s: type %s is not supported (batchd reads %s)", r.label(name), r.typeName, r.accepts)
			}
			x, err := kernels.NewMatrix(r.dtype, s.rows, s.cols, alignedFor(r.dtype, r.data))
			if err != nil {
				return fmt.Errorf("%s: %w", r.label(name), err)
			}
			exps[e] = x
		}
		if m.Experts == nil {
			m.Experts = make(map[string][]*kernels.Matrix)
		}
		m.Experts[s.name] = exps
		return nil
	}
	r, ok := raw[s.name]
	want := fmt.Sprintf("[%d %d %d] (experts × rows × cols)", s.experts, s.rows, s.cols)
	if !ok {
		label := fmt.Sprintf("tensor %q", s.name)
		if sourceName != nil {
			label = (&rawTensor{source: sourceName(s.name)}).label(s.name)
		}
		return invalid("%s is missing (want shape %s for arch %s)", label, want, m.Config.Arch)
	}
	r.used = true
	if len(r.shape) != 3 || r.shape[0] != uint64(s.experts) || r.shape[1] != uint64(s.rows) || r.shape[2] != uint64(s.cols) {
		return invalid("%s: shape %v, want %s", r.label(s.name), r.shape, want)
	}
	if !r.ok {
		return unsupported("%s: type %s is not supported (batchd reads %s)", r.label(s.name), r.typeName, r.accepts)
	}
	rb, err := r.dtype.RowBytes(s.cols)
	if err != nil {
		return invalid("%s: %v", r.label(s.name), err)
	}
	per := rb * s.rows
	if len(r.data) != per*s.experts {
		return invalid("%s: %d bytes, want %d", r.label(s.name), len(r.data), per*s.experts)
	}
	data := alignedFor(r.dtype, r.data)
	exps := make([]*kernels.Matrix, s.experts)
	for e := range exps {
		if exps[e], err = kernels.NewMatrix(r.dtype, s.rows, s.cols, data[e*per:(e+1)*per:(e+1)*per]); err != nil {
			return fmt.Errorf("%s: expert %d: %w", r.label(s.name), e, err)
		}
	}
	if m.Experts == nil {
		m.Experts = make(map[string][]*kernels.Matrix)
	}
	m.Experts[s.name] = exps
	return nil
}

// elemAlign is the alignment a kernel may assume for dtype's data.
func elemAlign(t kernels.DType) uintptr {
	switch t {
	case kernels.F32:
		return 4
	case kernels.F16, kernels.BF16, kernels.Q8_0:
		return 2
	}
	return 1 // the other block types are read byte by byte or with unaligned loads
}

// alignedFor returns data itself when it is aligned for t (always so for
// GGUF with its 32-byte alignment), or an aligned copy: kernels may view
// F32 data as []float32.
func alignedFor(t kernels.DType, data []byte) []byte {
	if len(data) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(data)))%elemAlign(t) == 0 {
		return data
	}
	return append(make([]byte, 0, len(data)), data...) // heap []byte of ≥8 bytes is 8-aligned
}

// toFloat32 converts n stored elements to float32.
func toFloat32(t kernels.DType, data []byte, n int) ([]float32, error) {
	out := make([]float32, n)
	switch t {
	case kernels.F32:
		if len(data) != 4*n {
			return nil, invalid("%d bytes for %d F32 values", len(data), n)
		}
		for i := range out {
			out[i] = math.Float32frombits(le32(data[4*i:]))
		}
	case kernels.F16, kernels.BF16:
		if len(data) != 2*n {
			return nil, invalid("%d bytes for %d %s values", len(data), n, t)
		}
		conv := kernels.F16ToF32
		if t == kernels.BF16 {
			conv = kernels.BF16ToF32
		}
		for i := range out {
			out[i] = conv(le16(data[2*i:]))
		}
	default:
		if t.BlockSize() <= 1 {
			return nil, unsupported("type %s is not supported yet", t)
		}
		rb, err := t.RowBytes(n)
		if err != nil || len(data) != rb {
			return nil, invalid("%d bytes for %d %s values", len(data), n, t)
		}
		if err := kernels.Dequantize(t, out, data); err != nil {
			return nil, invalid("%w", err)
		}
	}
	return out, nil
}

func le16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }
func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
