package weights

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/batchd/batchd/kernels"
)

// Size limits for the JSON files of a model directory: generous for real
// models (a 256k-token tokenizer.json is ~35 MB), small enough that a hostile
// directory cannot exhaust memory.
const (
	maxConfigJSON    = 16 << 20
	maxTokenizerJSON = 256 << 20
)

// hfArchs maps config.json model_type to our arch and its fixed traits.
var hfArchs = map[string]string{
	"llama":   "llama",
	"mistral": "llama", // same graph; its window on every layer (slidingFromHF)
	"qwen2":   "qwen2",
	"qwen3":   "qwen3",
	// qwen3_moe: every layer a mixture of experts (moe.go in the runner).
	"qwen3_moe": "qwen3moe",
	// qwen2_moe (Qwen1.5-MoE, Qwen2-57B-A14B): that, plus a gated shared
	// expert.
	"qwen2_moe": "qwen2moe",
	// Gemma 2, and Gemma 3's text-only checkpoints (Gemma3ForCausalLM):
	// GeGLU, post-norms, norms stored as weight-1 (gemmaFromHF).
	"gemma2":      "gemma2",
	"gemma3_text": "gemma3",
	// Phi-3, 3.5 and 4-mini: fused qkv_proj and gate_up_proj, LongRoPE.
	"phi3": "phi3",
	// gpt-oss: MXFP4 experts with biases, sinks, YaRN (gptoss.go).
	"gpt_oss": "gpt-oss",
	// Mixtral: Llama with block_sparse_moe experts (w1 gate, w3 up, w2
	// down), softmax routing renormalized over the chosen.
	"mixtral": "llama",
	// GLM-4.5, 4.6 and 4.7 (Glm4MoeForCausalLM): sigmoid routing with a
	// selection bias, a shared expert, dense first layers (glmFromHF).
	"glm4_moe": "glm4moe",
}

// hfConfig is the part of config.json we read. Pointers tell absent from zero.
type hfConfig struct {
	ModelType             string          `json:"model_type"`
	HiddenSize            int             `json:"hidden_size"`
	NumHiddenLayers       int             `json:"num_hidden_layers"`
	NumAttentionHeads     int             `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	IntermediateSize      int             `json:"intermediate_size"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RopeParameters        json.RawMessage `json:"rope_parameters"` // transformers v5 home of rope_theta and scaling
	PartialRotaryFactor   *float64        `json:"partial_rotary_factor"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	VocabSize             int             `json:"vocab_size"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	HeadDim               *int            `json:"head_dim"`
	BOSTokenID            json.RawMessage `json:"bos_token_id"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"`
	PadTokenID            json.RawMessage `json:"pad_token_id"`
	AttentionBias         *bool           `json:"attention_bias"`
	MLPBias               *bool           `json:"mlp_bias"`
	HiddenAct             string          `json:"hidden_act"`
	SlidingWindow         *int            `json:"sliding_window"`
	UseSlidingWindow      *bool           `json:"use_sliding_window"`
	MaxWindowLayers       *int            `json:"max_window_layers"`
	LayerTypes            []string        `json:"layer_types"`
	// gemma2, gemma3_text
	HiddenActivation      string   `json:"hidden_activation"`
	QueryPreAttnScalar    *float64 `json:"query_pre_attn_scalar"`
	AttnLogitSoftcapping  *float64 `json:"attn_logit_softcapping"`
	FinalLogitSoftcapping *float64 `json:"final_logit_softcapping"`
	RopeLocalBaseFreq     *float64 `json:"rope_local_base_freq"`
	SlidingWindowPattern  *int     `json:"sliding_window_pattern"`
	// phi3
	OriginalMaxPositionEmbeddings *int `json:"original_max_position_embeddings"`
	// gemma3 (Gemma3ForConditionalGeneration): the language model's config
	TextConfig json.RawMessage `json:"text_config"`
	// gpt_oss
	NumLocalExperts    *int            `json:"num_local_experts"`
	ExpertsPerToken    *int            `json:"experts_per_token"`
	SwiGLULimit        *float64        `json:"swiglu_limit"`
	QuantizationConfig json.RawMessage `json:"quantization_config"`
	// qwen3_moe
	NumExperts          *int  `json:"num_experts"`
	NumExpertsPerTok    *int  `json:"num_experts_per_tok"`
	MoeIntermediateSize *int  `json:"moe_intermediate_size"`
	NormTopkProb        *bool `json:"norm_topk_prob"`
	DecoderSparseStep   *int  `json:"decoder_sparse_step"`
	MlpOnlyLayers       []int `json:"mlp_only_layers"`
	SharedExpertSize    *int  `json:"shared_expert_intermediate_size"`
	// glm4_moe
	NRoutedExperts        *int     `json:"n_routed_experts"`
	NSharedExperts        *int     `json:"n_shared_experts"`
	FirstKDenseReplace    *int     `json:"first_k_dense_replace"`
	RoutedScalingFactor   *float64 `json:"routed_scaling_factor"`
	NGroup                *int     `json:"n_group"`
	TopkGroup             *int     `json:"topk_group"`
	UseQKNorm             *bool    `json:"use_qk_norm"`
	NumNextnPredictLayers *int     `json:"num_nextn_predict_layers"`
}

// hfRope is rope_scaling (or rope_parameters).
type hfRope struct {
	RopeType                      string   `json:"rope_type"`
	Type                          string   `json:"type"` // older spelling of rope_type
	Factor                        *float64 `json:"factor"`
	LowFreqFactor                 *float64 `json:"low_freq_factor"`
	HighFreqFactor                *float64 `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings *int     `json:"original_max_position_embeddings"`
	RopeTheta                     *float64 `json:"rope_theta"`
	PartialRotaryFactor           *float64 `json:"partial_rotary_factor"`
	// yarn
	BetaFast *float64 `json:"beta_fast"`
	BetaSlow *float64 `json:"beta_slow"`
	// longrope (Phi-3)
	LongFactor      []float64 `json:"long_factor"`
	ShortFactor     []float64 `json:"short_factor"`
	AttentionFactor *float64  `json:"attention_factor"`
}

type hfGenerationConfig struct {
	BOSTokenID json.RawMessage `json:"bos_token_id"`
	EOSTokenID json.RawMessage `json:"eos_token_id"`
}

type hfTokenizerConfig struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	AddBOSToken  *bool           `json:"add_bos_token"`
	AddEOSToken  *bool           `json:"add_eos_token"`
}

type hfIndex struct {
	WeightMap map[string]string `json:"weight_map"`
}

func loadHF(dir string, log *slog.Logger) (*Model, error) {
	var cfg hfConfig
	if err := readJSON(dir, "config.json", maxConfigJSON, true, &cfg); err != nil {
		return nil, err
	}
	var gen hfGenerationConfig
	if err := readJSON(dir, "generation_config.json", maxConfigJSON, false, &gen); err != nil {
		return nil, err
	}
	multimodal := cfg.ModelType == "gemma3" && len(cfg.TextConfig) > 0
	if multimodal {
		text, err := gemma3TextConfig(&cfg)
		if err != nil {
			return nil, fmt.Errorf("config.json: %w", err)
		}
		cfg = *text
	}
	c, err := configFromHF(&cfg, &gen, log)
	if err == nil {
		// sentence-transformers models say how they pool in 1_Pooling/config.json.
		var pool struct {
			Mean bool `json:"pooling_mode_mean_tokens"`
			Last bool `json:"pooling_mode_lasttoken"`
			CLS  bool `json:"pooling_mode_cls_token"`
		}
		if perr := readJSON(filepath.Join(dir, "1_Pooling"), "config.json", maxConfigJSON, false, &pool); perr == nil {
			switch {
			case pool.Last:
				c.Pooling = "last"
			case pool.CLS:
				c.Pooling = "cls"
			case pool.Mean:
				c.Pooling = "mean"
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	var fp8 *[2]int
	if cfg.ModelType != "gpt_oss" || quantMethod(cfg.QuantizationConfig) != "mxfp4" { // gpt-oss's MXFP4 experts: gptoss.go
		if fp8, err = fp8Blocks(cfg.QuantizationConfig); err != nil {
			return nil, fmt.Errorf("config.json: %w", err)
		}
	}
	tok, template, err := tokenizerFromHF(dir, c)
	if err != nil {
		return nil, err
	}
	m := &Model{Tokenizer: tok, ChatTemplate: template}
	ok := false
	defer func() {
		if !ok {
			m.Close()
		}
	}()
	raw, err := m.openShards(dir)
	if err != nil {
		return nil, err
	}
	if c.Arch == "glm4moe" {
		glmHFNames(raw, &cfg, c)
	}
	if c.Arch == "qwen2moe" {
		renameHFLayers(raw, map[string]string{
			"mlp.shared_expert.gate_proj.weight": sufGateShexp, "mlp.shared_expert.up_proj.weight": sufUpShexp,
			"mlp.shared_expert.down_proj.weight": sufDownShexp, "mlp.shared_expert_gate.weight": sufGateInpSh,
		})
	}
	if c.Experts > 0 {
		hfExperts(raw, c)
	}
	if c.PostNorms {
		gemmaHFNames(raw)
	}
	if c.Arch == "phi3" {
		if err := phi3FromHF(raw, &cfg, c); err != nil {
			return nil, err
		}
	}
	if c.Arch == "gpt-oss" {
		if err := gptOSSExperts(raw, c); err != nil {
			return nil, err
		}
	}
	if fp8 != nil {
		if err := dequantFP8(raw, *fp8); err != nil {
			return nil, err
		}
		log.Info("FP8 weights dequantized to BF16 at load", "path", dir, "weight_block_size", fmt.Sprint(fp8[:]))
	}
	if c.VocabSize == 0 {
		if emb, ok := raw[nameTokenEmbd]; ok && len(emb.shape) == 2 && emb.shape[0] <= maxDimension {
			c.VocabSize = int(emb.shape[0])
		}
	}
	if _, has := raw[nameOutput]; !has && !c.TiedEmbeddings {
		return nil, invalid("lm_head.weight is missing and tie_word_embeddings is false")
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	pad, err := parseIDs(cfg.PadTokenID)
	if err != nil {
		return nil, fmt.Errorf("config.json: pad_token_id: %w", err)
	}
	if len(pad) > 0 {
		if pad[0] < c.VocabSize {
			m.Tokenizer.PAD = pad[0]
		} else {
			log.Warn("pad_token_id is outside the vocabulary; ignoring it", "pad_token_id", pad[0], "vocab_size", c.VocabSize)
		}
	}
	m.Config = *c
	err = m.build(raw, func(name string) bool {
		// A tied checkpoint may still carry lm_head (a copy of the
		// embedding; transformers ignores it), and old Llama checkpoints
		// store the RoPE inverse frequencies, which we compute.
		// A multimodal Gemma 3's vision tower and projector serve image
		// inputs, which its chat requests are refused (text only).
		vision := multimodal && (strings.HasPrefix(name, "vision_tower.") || strings.HasPrefix(name, "multi_modal_projector.") ||
			strings.HasPrefix(name, "model.vision_tower.") || strings.HasPrefix(name, "model.multi_modal_projector."))
		return vision || (name == nameOutput && c.TiedEmbeddings) || strings.HasSuffix(name, ".rotary_emb.inv_freq")
	}, hfNameOf)
	if err != nil {
		return nil, err
	}
	if c.PostNorms {
		// Gemma's RMSNorm multiplies by 1+weight (in float32): store the
		// factor, as llama.cpp's converter does.
		for name, v := range m.Vectors {
			if strings.HasSuffix(name, "norm.weight") {
				for i := range v {
					v[i]++
				}
			}
		}
	}
	ok = true
	return m, nil
}

// configFromHF maps config.json (and generation_config.json) to Config.
func configFromHF(h *hfConfig, gen *hfGenerationConfig, log *slog.Logger) (*Config, error) {
	arch, ok := hfArchs[h.ModelType]
	if !ok {
		if h.ModelType == "" {
			return nil, invalid("model_type is missing")
		}
		if h.ModelType == "gemma3" {
			return nil, invalid("model_type gemma3 without a text_config")
		}
		return nil, unsupported("model_type %q is not supported yet (want llama, mistral, mixtral, qwen2, qwen3, qwen2_moe, qwen3_moe, gemma2, gemma3_text, phi3, gpt_oss or glm4_moe)", h.ModelType)
	}
	gemma := arch == "gemma2" || arch == "gemma3"
	if act := cmp.Or(h.HiddenActivation, h.HiddenAct); gemma && act != "" && act != "gelu_pytorch_tanh" {
		return nil, unsupported("hidden_activation %q is not supported yet (want gelu_pytorch_tanh)", act)
	} else if !gemma && h.HiddenAct != "" && h.HiddenAct != "silu" {
		return nil, unsupported("hidden_act %q is not supported yet (want silu)", h.HiddenAct)
	}
	if h.MLPBias != nil && *h.MLPBias {
		return nil, unsupported("mlp_bias=true is not supported yet")
	}
	c := &Config{
		Arch:          arch,
		VocabSize:     h.VocabSize,
		Dim:           h.HiddenSize,
		Layers:        h.NumHiddenLayers,
		Heads:         h.NumAttentionHeads,
		KVHeads:       h.NumAttentionHeads,
		FFNDim:        h.IntermediateSize,
		ContextLength: h.MaxPositionEmbeddings,
		RMSEps:        1e-6,
		RopeTheta:     10000,
		RopeNeox:      true, // HF stores Q/K for rotate-half, whatever the arch
		QKVBias:       arch == "qwen2" || arch == "qwen2moe",
		QKNorm:        arch == "qwen3" || arch == "qwen3moe" || arch == "gemma3",
	}
	if arch == "qwen3moe" || arch == "qwen2moe" {
		if err := moeFromHF(h, c); err != nil {
			return nil, err
		}
	}
	if arch == "gpt-oss" {
		if err := gptOSSFromHF(h, c); err != nil {
			return nil, err
		}
	}
	if arch == "glm4moe" {
		if err := glmFromHF(h, c); err != nil {
			return nil, err
		}
	}
	if h.ModelType == "mixtral" {
		experts, used := h.NumLocalExperts, h.NumExpertsPerTok
		if experts == nil || *experts <= 0 || used == nil || *used <= 0 || *used > *experts {
			return nil, invalid("num_local_experts and num_experts_per_tok are missing or out of range")
		}
		c.Experts, c.ExpertsUsed, c.ExpertFFNDim, c.ExpertNormTopK = *experts, *used, c.FFNDim, true
	}
	// qwen2 always has q/k/v biases (and no o_proj bias) whatever
	// attention_bias says; llama and qwen3 put a bias on o_proj too when
	// attention_bias is set, which the runner has no place for.
	if arch != "qwen2" && arch != "qwen2moe" && arch != "gpt-oss" && arch != "glm4moe" && h.AttentionBias != nil && *h.AttentionBias {
		return nil, unsupported("attention_bias=true for model_type %s (a bias on o_proj) is not supported yet", h.ModelType)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"hidden_size", h.HiddenSize}, {"num_hidden_layers", h.NumHiddenLayers}, {"num_attention_heads", h.NumAttentionHeads}, {"intermediate_size", h.IntermediateSize}} {
		if f.v <= 0 {
			return nil, invalid("%s is missing or not positive (%d)", f.name, f.v)
		}
	}
	if h.NumKeyValueHeads != nil {
		c.KVHeads = *h.NumKeyValueHeads
	}
	if h.HeadDim != nil {
		c.HeadDim = *h.HeadDim
	} else if c.Dim%c.Heads == 0 {
		c.HeadDim = c.Dim / c.Heads
	} else {
		return nil, invalid("hidden_size %d is not a multiple of num_attention_heads %d and head_dim is not given", c.Dim, c.Heads)
	}
	if c.ContextLength == 0 {
		c.ContextLength = 2048 // transformers' LlamaConfig default
	}
	if h.RMSNormEps != nil {
		c.RMSEps = float32(*h.RMSNormEps)
	}
	if h.RopeTheta != nil {
		c.RopeTheta = float32(*h.RopeTheta)
	}
	partial := h.PartialRotaryFactor
	for _, src := range []struct {
		key string
		raw json.RawMessage
	}{{"rope_parameters", h.RopeParameters}, {"rope_scaling", h.RopeScaling}} {
		if len(src.raw) == 0 || string(src.raw) == "null" {
			continue
		}
		var r hfRope
		if err := json.Unmarshal(src.raw, &r); err != nil {
			return nil, invalid("%s: %v", src.key, err)
		}
		if r.RopeTheta != nil {
			c.RopeTheta = float32(*r.RopeTheta)
		}
		if r.PartialRotaryFactor != nil {
			partial = r.PartialRotaryFactor
		}
		kind := r.RopeType
		if kind == "" {
			kind = r.Type
		}
		switch kind {
		case "", "default":
		case "linear":
			if r.Factor == nil || !(*r.Factor > 0) {
				return nil, invalid("%s: linear scaling needs a positive factor", src.key)
			}
			if *r.Factor != 1 {
				c.RopeLinear = float32(*r.Factor)
			}
		case "yarn":
			// As llama.cpp computes it (its corrected dimensions floored
			// and ceiled, as transformers does unless truncate is false),
			// so a GGUF and its checkpoint run the same.
			orig := h.OriginalMaxPositionEmbeddings
			if r.OriginalMaxPositionEmbeddings != nil {
				orig = r.OriginalMaxPositionEmbeddings
			}
			if r.Factor == nil || !(*r.Factor > 0) || orig == nil || *orig <= 0 {
				return nil, invalid("%s: yarn needs a positive factor and original_max_position_embeddings", src.key)
			}
			y := &YarnScaling{Factor: float32(*r.Factor), OriginalContext: *orig, BetaFast: 32, BetaSlow: 1, AttnFactor: 1}
			if r.BetaFast != nil {
				y.BetaFast = float32(*r.BetaFast)
			}
			if r.BetaSlow != nil {
				y.BetaSlow = float32(*r.BetaSlow)
			}
			if a := r.AttentionFactor; a != nil { // transformers' whole magnitude
				y.AttnFactor = float32(*a / (1 + 0.1*math.Log(*r.Factor)))
			}
			c.Yarn = y
		case "longrope", "su":
			// Phi-3's: the factors are applied in loadHF (phi3RopeFromHF);
			// here the magnitude, as llama.cpp's converter computes it.
			if arch != "phi3" {
				return nil, unsupported("%s: rope_type %q is not supported yet for model_type %s", src.key, kind, h.ModelType)
			}
			orig := h.OriginalMaxPositionEmbeddings
			if r.OriginalMaxPositionEmbeddings != nil {
				orig = r.OriginalMaxPositionEmbeddings
			}
			if orig == nil || *orig <= 1 || len(r.LongFactor) == 0 || len(r.ShortFactor) == 0 {
				return nil, invalid("%s: longrope needs long_factor, short_factor and original_max_position_embeddings > 1", src.key)
			}
			if a := r.AttentionFactor; a != nil {
				c.RopeAttnFactor = float32(*a)
			} else if scale := float64(c.ContextLength) / float64(*orig); scale > 1 {
				c.RopeAttnFactor = float32(math.Sqrt(1 + math.Log(scale)/math.Log(float64(*orig))))
			}
		case "llama3":
			if r.Factor == nil || r.LowFreqFactor == nil || r.HighFreqFactor == nil || r.OriginalMaxPositionEmbeddings == nil {
				return nil, invalid("%s: llama3 needs factor, low_freq_factor, high_freq_factor and original_max_position_embeddings", src.key)
			}
			c.RopeScaling = &RopeScaling{
				Factor:          float32(*r.Factor),
				LowFreqFactor:   float32(*r.LowFreqFactor),
				HighFreqFactor:  float32(*r.HighFreqFactor),
				OriginalContext: *r.OriginalMaxPositionEmbeddings,
			}
		default:
			return nil, unsupported("%s: rope_type %q is not supported yet (only llama3 scaling is)", src.key, kind)
		}
	}
	c.RopeDim = c.HeadDim
	if partial != nil {
		c.RopeDim = int(float64(c.HeadDim) * *partial)
	}
	if gemma {
		gemmaFromHF(h, c)
	}
	if arch == "phi3" {
		// As for GGUF files, Phi-3's window is left off, as llama.cpp
		// leaves it; its biases are refused like Llama's.
		h.SlidingWindow = nil
	}
	if err := slidingFromHF(h, c); err != nil {
		return nil, err
	}

	if tie := h.TieWordEmbeddings; tie != nil {
		c.TiedEmbeddings = *tie
	}
	bos, err := parseIDs(h.BOSTokenID)
	if err != nil {
		return nil, fmt.Errorf("bos_token_id: %w", err)
	}
	eos, err := parseIDs(h.EOSTokenID)
	if err != nil {
		return nil, fmt.Errorf("eos_token_id: %w", err)
	}
	genBOS, err := parseIDs(gen.BOSTokenID)
	if err != nil {
		return nil, fmt.Errorf("generation_config.json: bos_token_id: %w", err)
	}
	genEOS, err := parseIDs(gen.EOSTokenID)
	if err != nil {
		return nil, fmt.Errorf("generation_config.json: eos_token_id: %w", err)
	}
	c.BOS, c.EOS = -1, -1
	if len(bos) == 0 {
		bos = genBOS
	}
	if len(bos) > 0 {
		c.BOS = bos[0]
	}
	// generation_config.json is what generate() uses: its ids come first.
	for _, id := range slices.Concat(genEOS, eos) {
		if !slices.Contains(c.EOSIDs, id) {
			c.EOSIDs = append(c.EOSIDs, id)
		}
	}
	if len(c.EOSIDs) > 0 {
		c.EOS = c.EOSIDs[0]
	}
	return c, nil
}

// moeFromHF reads qwen3_moe's mixture of experts: every layer sparse
// (decoder_sparse_step 1, no mlp_only_layers), no shared expert.
func moeFromHF(h *hfConfig, c *Config) error {
	need := func(name string, v *int) (int, error) {
		if v == nil || *v <= 0 {
			return 0, invalid("%s is missing or not positive", name)
		}
		return *v, nil
	}
	var err error
	if c.Experts, err = need("num_experts", h.NumExperts); err != nil {
		return err
	}
	if c.ExpertsUsed, err = need("num_experts_per_tok", h.NumExpertsPerTok); err != nil {
		return err
	}
	if c.ExpertFFNDim, err = need("moe_intermediate_size", h.MoeIntermediateSize); err != nil {
		return err
	}
	// norm_topk_prob's default: true in Qwen3MoeConfig, false in
	// Qwen2MoeConfig.
	c.ExpertNormTopK = h.NormTopkProb == nil && c.Arch == "qwen3moe" || h.NormTopkProb != nil && *h.NormTopkProb
	if h.DecoderSparseStep != nil && *h.DecoderSparseStep != 1 {
		return unsupported("decoder_sparse_step %d (dense layers between sparse ones) is not supported yet", *h.DecoderSparseStep)
	}
	if len(h.MlpOnlyLayers) > 0 {
		return unsupported("mlp_only_layers %v (dense layers among sparse ones) is not supported yet", h.MlpOnlyLayers)
	}
	if h.SharedExpertSize != nil && *h.SharedExpertSize > 0 {
		if c.Arch != "qwen2moe" {
			return unsupported("shared_expert_intermediate_size %d: model_type %s has no shared expert", *h.SharedExpertSize, h.ModelType)
		}
		c.SharedFFNDim, c.SharedGate = *h.SharedExpertSize, true
	} else if c.Arch == "qwen2moe" {
		return invalid("shared_expert_intermediate_size is missing or not positive")
	}
	c.FFNDim = c.ExpertFFNDim // intermediate_size is a dense FFN's, which it has none of
	return nil
}

// glmFromHF reads a glm4_moe config as transformers runs it: the first
// first_k_dense_replace layers dense (intermediate_size), the rest routed
// by sigmoid with e_score_correction_bias choosing (n_group 1: no group
// stage), top-k weights renormalized when norm_topk_prob and scaled by
// routed_scaling_factor, n_shared_experts shared experts of
// moe_intermediate_size taken as one FFN; q/k/v biases when
// attention_bias, q/k norms when use_qk_norm. Its multi-token-prediction
// layers (model.layers.N for N ≥ num_hidden_layers) are left unread.
func glmFromHF(h *hfConfig, c *Config) error {
	need := func(name string, v *int) (int, error) {
		if v == nil || *v <= 0 {
			return 0, invalid("%s is missing or not positive", name)
		}
		return *v, nil
	}
	var err error
	if c.Experts, err = need("n_routed_experts", h.NRoutedExperts); err != nil {
		return err
	}
	if c.ExpertsUsed, err = need("num_experts_per_tok", h.NumExpertsPerTok); err != nil {
		return err
	}
	if c.ExpertFFNDim, err = need("moe_intermediate_size", h.MoeIntermediateSize); err != nil {
		return err
	}
	for _, g := range []struct {
		name string
		v    *int
	}{{"n_group", h.NGroup}, {"topk_group", h.TopkGroup}} {
		if g.v != nil && *g.v > 1 {
			return unsupported("%s = %d: grouped expert routing (DeepSeek V3's) is not supported yet", g.name, *g.v)
		}
	}
	c.ExpertSigmoid, c.ExpertSelBias = true, true
	c.ExpertNormTopK = h.NormTopkProb != nil && *h.NormTopkProb
	if f := h.RoutedScalingFactor; f != nil && *f != 1 {
		c.ExpertScale = float32(*f)
	}
	if n := h.NSharedExperts; n != nil {
		c.SharedFFNDim = *n * c.ExpertFFNDim
	}
	if d := h.FirstKDenseReplace; d != nil {
		c.DenseLayers = *d
	}
	c.QKVBias = h.AttentionBias != nil && *h.AttentionBias
	c.QKNorm = h.UseQKNorm != nil && *h.UseQKNorm
	return nil
}

// glmHFNames gives GLM's MoE tensors their canonical names and drops its
// num_nextn_predict_layers multi-token-prediction layers (those past the
// decoder's).
func glmHFNames(raw map[string]*rawTensor, h *hfConfig, c *Config) {
	nextn := 0
	if h.NumNextnPredictLayers != nil {
		nextn = *h.NumNextnPredictLayers
	}
	for name := range raw {
		var l int
		if m := hfLayerName.FindStringSubmatch(textModelName(name)); m != nil {
			l, _ = strconv.Atoi(m[1])
		} else if _, err := fmt.Sscanf(name, blockPrefix+"%d.", &l); err != nil {
			continue
		}
		if l >= c.Layers && l < c.Layers+nextn {
			delete(raw, name) // already canonical, or not
		}
	}
	renameHFLayers(raw, map[string]string{
		"mlp.gate.e_score_correction_bias": sufSelBias, "mlp.shared_experts.gate_proj.weight": sufGateShexp,
		"mlp.shared_experts.up_proj.weight": sufUpShexp, "mlp.shared_experts.down_proj.weight": sufDownShexp,
	})
}

// hfExperts gathers qwen3_moe's per-expert tensors
// (model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight; Mixtral's
// block_sparse_moe.experts.E.{w1,w3,w2}.weight and its router) into the
// canonical expert tensors blk.N.ffn_{gate,up,down}_exps.weight, one raw
// tensor per expert in raw under the canonical name + "#E" (build's
// buildExperts takes them).
func hfExperts(raw map[string]*rawTensor, c *Config) {
	for l := range c.Layers {
		for hf, suf := range map[string]string{
			"mlp.experts.%d.gate_proj": sufGateExps, "mlp.experts.%d.up_proj": sufUpExps, "mlp.experts.%d.down_proj": sufDownExps,
			"block_sparse_moe.experts.%d.w1": sufGateExps, "block_sparse_moe.experts.%d.w3": sufUpExps, "block_sparse_moe.experts.%d.w2": sufDownExps, // Mixtral's
		} {
			for e := range c.Experts {
				name := fmt.Sprintf("model.layers.%d."+hf+".weight", l, e)
				if r, ok := raw[name]; ok {
					delete(raw, name)
					raw[fmt.Sprintf("%s#%d", BlockName(l, suf), e)] = r
				}
			}
		}
	}
	renameHFLayers(raw, map[string]string{"block_sparse_moe.gate.weight": sufRouter})
}

// parseIDs reads a token id field that may be null, an integer or a list.
func parseIDs(raw json.RawMessage) ([]int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		if one < 0 {
			return nil, invalid("token id %d is negative", one)
		}
		return []int{one}, nil
	}
	var list []int
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalid("want an integer or a list of integers, got %.40s", raw)
	}
	for _, id := range list {
		if id < 0 {
			return nil, invalid("token id %d is negative", id)
		}
	}
	return list, nil
}

func tokenizerFromHF(dir string, c *Config) (TokenizerSpec, string, error) {
	tok := TokenizerSpec{BOS: c.BOS, EOS: c.EOS, UNK: -1, PAD: -1}
	var err error
	if tok.TokenizerJSON, err = readLimited(filepath.Join(dir, "tokenizer.json"), maxTokenizerJSON); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return tok, "", invalid("no tokenizer.json in %s (only the HF fast-tokenizer file is read)", dir)
		}
		return tok, "", err
	}
	if !json.Valid(tok.TokenizerJSON) {
		return tok, "", invalid("tokenizer.json is not valid JSON")
	}
	tok.TokenizerConfigJSON, err = readLimited(filepath.Join(dir, "tokenizer_config.json"), maxTokenizerJSON)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return tok, "", err
	}
	var template string
	if tok.TokenizerConfigJSON != nil {
		var tc hfTokenizerConfig
		if err := json.Unmarshal(tok.TokenizerConfigJSON, &tc); err != nil {
			return tok, "", invalid("tokenizer_config.json: %v", err)
		}
		if tc.AddBOSToken != nil {
			tok.AddBOS = *tc.AddBOSToken
		}
		if tc.AddEOSToken != nil {
			tok.AddEOS = *tc.AddEOSToken
		}
		if template, err = chatTemplate(tc.ChatTemplate); err != nil {
			return tok, "", fmt.Errorf("tokenizer_config.json: chat_template: %w", err)
		}
	}
	// transformers ≥ 4.43 saves the template beside tokenizer_config.json;
	// that file wins when both exist, as it does there.
	if b, err := readLimited(filepath.Join(dir, "chat_template.jinja"), maxConfigJSON); err == nil {
		template = string(b)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return tok, "", err
	} else if template == "" {
		var ct struct {
			ChatTemplate json.RawMessage `json:"chat_template"`
		}
		if err := readJSON(dir, "chat_template.json", maxConfigJSON, false, &ct); err != nil {
			return tok, "", err
		}
		if template, err = chatTemplate(ct.ChatTemplate); err != nil {
			return tok, "", fmt.Errorf("chat_template.json: %w", err)
		}
	}
	return tok, template, nil
}

// chatTemplate reads a chat_template value: a string, or a list of {name,
// template} of which "default" is taken.
func chatTemplate(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", invalid("want a string or a list of {name, template}")
	}
	for _, t := range named {
		if t.Name == "default" {
			return t.Template, nil
		}
	}
	if len(named) > 0 {
		return named[0].Template, nil
	}
	return "", nil
}

// hfNames maps per-layer HF tensor names to canonical suffixes.
var hfNames = map[string]string{
	"input_layernorm.weight":          sufAttnNorm,
	"self_attn.q_proj.weight":         sufQ,
	"self_attn.k_proj.weight":         sufK,
	"self_attn.v_proj.weight":         sufV,
	"self_attn.o_proj.weight":         sufO,
	"self_attn.q_proj.bias":           sufQBias,
	"self_attn.k_proj.bias":           sufKBias,
	"self_attn.v_proj.bias":           sufVBias,
	"self_attn.o_proj.bias":           "attn_output.bias",
	"self_attn.q_norm.weight":         sufQNorm,
	"self_attn.k_norm.weight":         sufKNorm,
	"post_attention_layernorm.weight": sufFFNNorm,
	"mlp.gate_proj.weight":            sufFFNGate,
	"mlp.up_proj.weight":              sufFFNUp,
	"mlp.down_proj.weight":            sufFFNDown,
	"mlp.gate.weight":                 sufRouter,
}

// hfNameOf is the inverse of CanonicalName, for messages.
func hfNameOf(canonical string) string {
	switch canonical {
	case nameTokenEmbd:
		return "model.embed_tokens.weight"
	case nameOutputNorm:
		return "model.norm.weight"
	case nameOutput:
		return "lm_head.weight"
	}
	rest, ok := strings.CutPrefix(canonical, blockPrefix)
	if !ok {
		return canonical
	}
	layer, suf, ok := strings.Cut(rest, ".")
	if !ok {
		return canonical
	}
	for hf, s := range hfNames {
		if s == suf {
			return "model.layers." + layer + "." + hf
		}
	}
	return canonical
}

var hfLayerName = regexp.MustCompile(`^model\.layers\.(0|[1-9][0-9]{0,6})\.(.+)$`)

// CanonicalName maps a Hugging Face tensor name to its canonical (GGUF)
// name; ok is false for names with no canonical counterpart.
func CanonicalName(hf string) (string, bool) {
	hf = textModelName(hf)
	switch hf {
	case "model.embed_tokens.weight":
		return nameTokenEmbd, true
	case "model.norm.weight":
		return nameOutputNorm, true
	case "lm_head.weight":
		return nameOutput, true
	}
	if m := hfLayerName.FindStringSubmatch(hf); m != nil {
		if suf, ok := hfNames[m[2]]; ok {
			layer, _ := strconv.Atoi(m[1])
			return BlockName(layer, suf), true
		}
	}
	return "", false
}

// textModelName is the name of a multimodal checkpoint's language-model
// tensor (Gemma 3's, in transformers' older and newer spellings) as a
// text-only checkpoint names it; other names as they are.
func textModelName(hf string) string {
	for _, p := range []string{"language_model.model.", "model.language_model."} {
		if rest, ok := strings.CutPrefix(hf, p); ok {
			return "model." + rest
		}
	}
	if hf == "language_model.lm_head.weight" {
		return "lm_head.weight"
	}
	return hf
}

// openShards maps the directory's safetensors files (model.safetensors, or
// the shards a model.safetensors.index.json names) and returns their
// tensors by canonical name (unknown names are kept as they are).
func (m *Model) openShards(dir string) (map[string]*rawTensor, error) {
	var shards []string
	var index hfIndex
	indexPath := filepath.Join(dir, "model.safetensors.index.json")
	if err := readJSON(dir, "model.safetensors.index.json", maxConfigJSON, false, &index); err != nil {
		return nil, err
	}
	switch {
	case index.WeightMap != nil:
		seen := map[string]bool{}
		for tensor, shard := range index.WeightMap {
			if !isSafetensorsName(shard) {
				return nil, invalid("%s: tensor %q: shard %q is not a .safetensors file name in the directory", indexPath, tensor, shard)
			}
			if !seen[shard] {
				seen[shard] = true
				shards = append(shards, shard)
			}
		}
		sort.Strings(shards)
		if len(shards) == 0 {
			return nil, invalid("%s: empty weight_map", indexPath)
		}
	default:
		if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err == nil {
			shards = []string{"model.safetensors"}
			break
		}
		found, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
		switch len(found) {
		case 1:
			shards = []string{filepath.Base(found[0])}
		case 0:
			return nil, invalid("no model.safetensors or model.safetensors.index.json in %s (only safetensors weights are read)", dir)
		default:
			return nil, invalid("%d .safetensors files in %s but no model.safetensors.index.json", len(found), dir)
		}
	}

	raw := make(map[string]*rawTensor)
	for _, shard := range shards {
		sf, err := openSafetensors(filepath.Join(dir, shard))
		if err != nil {
			return nil, err
		}
		m.mappings = append(m.mappings, sf)
		for name, e := range sf.tensors {
			if index.WeightMap != nil {
				if want, ok := index.WeightMap[name]; !ok || want != shard {
					// Stray copies would be loaded from the wrong place;
					// the index is the manifest.
					return nil, invalid("%s: tensor %q is not mapped to this shard by the index (index says %q)", shard, name, want)
				}
			}
			canon, ok := CanonicalName(name)
			if !ok {
				canon = textModelName(name)
			}
			if prev, dup := raw[canon]; dup {
				return nil, invalid("tensor %q appears twice (%s and %s in %s)", canon, prev.source, name, shard)
			}
			rt := &rawTensor{source: name, typeName: e.DType, accepts: "F32, F16, BF16, and F8_E4M3 with block scales (quantization_config fp8)", shape: e.Shape, data: e.Data}
			rt.dtype, rt.ok = safeDTypes[e.DType]
			raw[canon] = rt
		}
	}
	if index.WeightMap != nil {
		for tensor, shard := range index.WeightMap {
			canon, ok := CanonicalName(tensor)
			if !ok {
				canon = textModelName(tensor)
			}
			if r, ok := raw[canon]; !ok || r.source != tensor {
				return nil, invalid("%s: tensor %q should be in %s but is not", indexPath, tensor, shard)
			}
		}
	}
	return raw, nil
}

// readLimited reads a whole file of at most limit bytes.
func readLimited(path string, limit int64) ([]byte, error) {
	f, _, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, invalid("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}

// readJSON decodes dir/name into v; a missing optional file leaves v alone.
func readJSON(dir, name string, limit int64, required bool, v any) error {
	b, err := readLimited(filepath.Join(dir, name), limit)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if required {
				return invalid("no %s in %s", name, dir)
			}
			return nil
		}
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return invalid("%s: %v", name, err)
	}
	return nil
}

// slidingFromHF sets the sliding window as transformers applies it: on
// the layers layer_types calls "sliding_attention" when the config lists
// them; else, when use_sliding_window is true (Qwen2/Qwen3), on the layers
// from max_window_layers on; else (Mistral, whose config has no switch) on
// every layer. A window no shorter than the context changes nothing and
// is dropped.
func slidingFromHF(h *hfConfig, c *Config) error {
	if h.SlidingWindow == nil || *h.SlidingWindow <= 0 || *h.SlidingWindow >= c.ContextLength {
		return nil
	}
	if h.UseSlidingWindow != nil && !*h.UseSlidingWindow {
		return nil
	}
	layers := make([]bool, c.Layers)
	switch {
	case h.LayerTypes != nil:
		if len(h.LayerTypes) != c.Layers {
			return invalid("layer_types has %d entries for %d layers", len(h.LayerTypes), c.Layers)
		}
		for i, t := range h.LayerTypes {
			switch t {
			case "sliding_attention":
				layers[i] = true
			case "full_attention":
			default:
				return unsupported("layer_types[%d] = %q is not supported yet (want sliding_attention or full_attention)", i, t)
			}
		}
	case h.UseSlidingWindow != nil:
		if h.MaxWindowLayers == nil {
			return invalid("use_sliding_window is true but max_window_layers is missing")
		}
		for i := range layers {
			layers[i] = i >= *h.MaxWindowLayers
		}
	default:
		for i := range layers {
			layers[i] = true
		}
	}
	if slices.Contains(layers, true) {
		c.SlidingWindow, c.SlidingLayers = *h.SlidingWindow, layers
	}
	return nil
}

// gemmaFromHF sets Gemma 2's and 3's traits as transformers computes
// them: embeddings scaled by √hidden_size (in float32: transformers rounds
// the factor to the weights' dtype, llama.cpp does not), scores scaled by
// query_pre_attn_scalar^-½, GeGLU, post-norms, the soft caps when set,
// Gemma 3's local RoPE base (rope_local_base_freq, unscaled); sliding
// layers from layer_types, else every sliding_window_pattern-th layer
// global (2 for Gemma 2, 6 for Gemma 3); embeddings tied unless the config
// says otherwise.
func gemmaFromHF(h *hfConfig, c *Config) {
	c.EmbedScale = float32(math.Sqrt(float64(c.Dim)))
	c.PostNorms, c.GELU = true, true
	c.AttnScale = float32(1 / math.Sqrt(float64(c.HeadDim)))
	if q := h.QueryPreAttnScalar; q != nil && *q > 0 {
		c.AttnScale = float32(1 / math.Sqrt(*q))
	}
	if v := h.AttnLogitSoftcapping; v != nil && *v > 0 {
		c.AttnSoftCap = float32(*v)
	}
	if v := h.FinalLogitSoftcapping; v != nil && *v > 0 {
		c.FinalSoftCap = float32(*v)
	}
	pattern := 2
	if c.Arch == "gemma3" {
		pattern = 6
		c.RopeThetaLocal = 10000
		if b := h.RopeLocalBaseFreq; b != nil && *b > 0 {
			c.RopeThetaLocal = float32(*b)
		}
	}
	if p := h.SlidingWindowPattern; p != nil && *p > 0 {
		pattern = *p
	}
	if h.LayerTypes == nil && h.SlidingWindow != nil {
		for _, sliding := range slidingPattern(c.Layers, pattern) {
			h.LayerTypes = append(h.LayerTypes, map[bool]string{true: "sliding_attention", false: "full_attention"}[sliding])
		}
	}
	if h.TieWordEmbeddings == nil {
		c.TiedEmbeddings = true
	}
}

// gemmaHFNames gives Gemma's norms their canonical names: its
// post_attention_layernorm is the attention output's norm (Llama's name
// for the FFN's input norm), pre_feedforward_layernorm the FFN's input
// norm, post_feedforward_layernorm the FFN output's.
func gemmaHFNames(raw map[string]*rawTensor) {
	for name, r := range raw {
		if l, ok := strings.CutSuffix(name, "."+sufFFNNorm); ok && strings.HasPrefix(name, blockPrefix) {
			delete(raw, name)
			raw[l+"."+sufPostAttn] = r
		}
	}
	renameHFLayers(raw, map[string]string{"pre_feedforward_layernorm.weight": sufFFNNorm, "post_feedforward_layernorm.weight": sufPostFFN})
}

// renameHFLayers gives the layer tensors CanonicalName does not know a
// family's canonical names: model.layers.N.<hf> becomes blk.N.<names[hf]>.
func renameHFLayers(raw map[string]*rawTensor, names map[string]string) {
	for name, r := range raw {
		m := hfLayerName.FindStringSubmatch(name)
		if m == nil || names[m[2]] == "" {
			continue
		}
		layer, _ := strconv.Atoi(m[1])
		delete(raw, name)
		raw[BlockName(layer, names[m[2]])] = r
	}
}

// phi3FromHF splits Phi-3's fused qkv_proj and gate_up_proj as the GGUF's
// are split (phi3Raw) and gives its LongRoPE factors as the rope_freqs
// divisors, long when the context is longer than the original one
// (llama.cpp's choice, once per model, where transformers chooses per
// sequence length).
func phi3FromHF(raw map[string]*rawTensor, h *hfConfig, c *Config) error {
	renameHFLayers(raw, map[string]string{"self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": sufFFNUp})
	if err := phi3Raw(raw, *c, 0); err != nil {
		return err
	}
	for _, src := range []json.RawMessage{h.RopeParameters, h.RopeScaling} {
		var r hfRope
		if len(src) == 0 || string(src) == "null" || json.Unmarshal(src, &r) != nil || len(r.LongFactor) == 0 {
			continue
		}
		orig := h.OriginalMaxPositionEmbeddings
		if r.OriginalMaxPositionEmbeddings != nil {
			orig = r.OriginalMaxPositionEmbeddings
		}
		f := r.ShortFactor
		if c.ContextLength > *orig {
			f = r.LongFactor
		}
		if len(f) != c.RopeDim/2 {
			return invalid("rope_scaling: %d LongRoPE factors for %d rotated pairs", len(f), c.RopeDim/2)
		}
		div := make([]float32, len(f))
		for i, x := range f {
			if div[i] = float32(x); !(div[i] > 0) || math.IsInf(float64(div[i]), 0) {
				return invalid("rope_scaling: factor %d is %g, want a positive divisor", i, x)
			}
		}
		raw[nameRopeFreqs] = &rawTensor{source: "config.json rope_scaling", dtype: kernels.F32, ok: true, typeName: "F32",
			shape: []uint64{uint64(len(div))}, data: f32Bytes(div)}
		return nil
	}
	return nil
}

// f32Bytes is v as little-endian float32 bytes.
func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// gemma3TextConfig is a multimodal Gemma 3's language model config:
// text_config, with transformers' Gemma3TextConfig defaults for what the
// checkpoints leave out (Gemma 3 4B's states only its sizes and window),
// and the special token ids from the outer config when it has them.
func gemma3TextConfig(outer *hfConfig) (*hfConfig, error) {
	defaults := map[string]any{
		"model_type": "gemma3_text", "vocab_size": 262208, "num_attention_heads": 8, "num_key_value_heads": 4,
		"head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131072,
		"rms_norm_eps": 1e-6, "rope_theta": 1e6, "query_pre_attn_scalar": 256, "sliding_window": 4096,
		"rope_local_base_freq": 10000.0, "sliding_window_pattern": 6, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
	}
	var stated map[string]json.RawMessage
	if err := json.Unmarshal(outer.TextConfig, &stated); err != nil {
		return nil, invalid("text_config: %v", err)
	}
	merged := map[string]any{}
	for k, v := range defaults {
		merged[k] = v
	}
	for k, v := range stated {
		merged[k] = v
	}
	for k, v := range map[string]json.RawMessage{"bos_token_id": outer.BOSTokenID, "eos_token_id": outer.EOSTokenID, "pad_token_id": outer.PadTokenID} {
		if len(v) > 0 && string(v) != "null" {
			if _, ok := stated[k]; !ok {
				merged[k] = v
			}
		}
	}
	if t, ok := stated["model_type"]; ok && string(t) != `"gemma3_text"` {
		return nil, unsupported("text_config.model_type %s is not supported (want gemma3_text)", t)
	}
	b, err := json.Marshal(merged)
	if err != nil {
		return nil, invalid("text_config: %v", err)
	}
	var text hfConfig
	if err := json.Unmarshal(b, &text); err != nil {
		return nil, invalid("text_config: %v", err)
	}
	text.QuantizationConfig = outer.QuantizationConfig
	return &text, nil
}
