package weights

import (
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// checkWeights compares every tensor of c with what writeHF stored.
func checkWeights(t *testing.T, m *Model, c tiny, mat string) {
	t.Helper()
	enc := map[string]func([]float32) []byte{"F32": encF32, "F16": encF16, "BF16": encBF16}
	shapes := c.tensorShapes()
	if len(m.Matrices)+len(m.Vectors) != len(shapes) {
		t.Errorf("%d matrices + %d vectors, want %d", len(m.Matrices), len(m.Vectors), len(shapes))
	}
	for name, shape := range shapes {
		want := values(product(shape), seedOf(name))
		if len(shape) == 1 {
			if !slices.Equal(m.Vectors[name], want) {
				t.Errorf("%s = %v, want %v", name, m.Vectors[name], want)
			}
			continue
		}
		x := m.Matrices[name]
		if x == nil {
			t.Errorf("%s missing", name)
			continue
		}
		if x.Rows != shape[0] || x.Cols != shape[1] || x.Type.String() != mat {
			t.Errorf("%s: %s %dx%d, want %s %v", name, x.Type, x.Rows, x.Cols, mat, shape)
		}
		if !m.IsMapped(name) {
			t.Errorf("%s is not memory-mapped", name)
		}
		if !slices.Equal(x.Data, enc[mat](want)) {
			t.Errorf("%s: data differs", name)
		}
	}
}

func TestHFLlama(t *testing.T) {
	c := tiny{arch: "llama", vocab: 48, dim: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 64}
	dir := writeHF(t, c, map[string]any{"eos_token_id": 2}, hfTensors(c, "BF16", "F32"))
	writeJSONFile(t, filepath.Join(dir, "generation_config.json"), map[string]any{"bos_token_id": 1, "eos_token_id": []int{5, 2, 7}})
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want := Config{Arch: "llama", VocabSize: 48, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8, FFNDim: 64,
		ContextLength: 4096, RMSEps: 1e-5, RopeTheta: 500000, RopeDim: 8, RopeNeox: true, BOS: 1, EOS: 5, EOSIDs: []int{5, 2, 7}}
	if !reflect.DeepEqual(m.Config, want) {
		t.Fatalf("config\n got %+v\nwant %+v", m.Config, want)
	}
	checkWeights(t, m, c, "BF16")
	tok := m.Tokenizer
	if string(tok.TokenizerJSON) != tokenizerStub || tok.TokenizerConfigJSON == nil || tok.Model != "" ||
		tok.BOS != 1 || tok.EOS != 5 || tok.UNK != -1 || tok.PAD != -1 || !tok.AddBOS || tok.AddEOS {
		t.Errorf("tokenizer %+v", tok)
	}
	if m.ChatTemplate != "{% for m in messages %}{{ m.content }}{% endfor %}" {
		t.Errorf("template %q", m.ChatTemplate)
	}
	if m.Source != dir {
		t.Errorf("source %q", m.Source)
	}
}

func TestHFQwen(t *testing.T) {
	t.Run("qwen2 tied with biases", func(t *testing.T) {
		c := tiny{arch: "qwen2", vocab: 40, dim: 32, layers: 1, heads: 4, kvHeads: 2, headDim: 8, ffn: 48, tied: true}
		dir := writeHF(t, c, map[string]any{"sliding_window": 1024, "use_sliding_window": false, "pad_token_id": 3}, hfTensors(c, "F16", "BF16"))
		m, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if !m.Config.QKVBias || m.Config.QKNorm || !m.Config.TiedEmbeddings || !m.Config.RopeNeox || m.Config.ContextLength != 4096 {
			t.Errorf("config %+v", m.Config)
		}
		if _, ok := m.Matrices["output.weight"]; ok {
			t.Error("tied model has output.weight")
		}
		if m.Tokenizer.PAD != 3 {
			t.Errorf("pad %d", m.Tokenizer.PAD)
		}
		checkWeights(t, m, c, "F16")
	})
	t.Run("qwen3 head_dim and q/k norm", func(t *testing.T) {
		c := tiny{arch: "qwen3", vocab: 40, dim: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 16, ffn: 48}
		ts := hfTensors(c, "F32", "F32")
		// A tied checkpoint that still stores lm_head, and an old-style
		// inv_freq buffer: both ignored.
		ts["model.layers.0.self_attn.rotary_emb.inv_freq"] = SafeTensor{DType: "F32", Shape: []int{8}, Data: encF32(values(8, 1))}
		dir := writeHF(t, c, map[string]any{"attention_bias": false, "rope_scaling": nil, "tie_word_embeddings": true}, ts)
		m, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		want := Config{Arch: "qwen3", VocabSize: 40, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, FFNDim: 48,
			ContextLength: 4096, RMSEps: 1e-5, RopeTheta: 500000, RopeDim: 16, RopeNeox: true, QKNorm: true, TiedEmbeddings: true,
			BOS: 1, EOS: 2, EOSIDs: []int{2}}
		if !reflect.DeepEqual(m.Config, want) {
			t.Fatalf("config\n got %+v\nwant %+v", m.Config, want)
		}
		c.tied = true
		checkWeights(t, m, c, "F32")
	})
}

func TestHFMistralSlidingWindow(t *testing.T) {
	c := tiny{arch: "llama", vocab: 16, dim: 16, layers: 1, heads: 2, kvHeads: 1, headDim: 8, ffn: 32}
	dir := writeHF(t, c, map[string]any{"model_type": "mistral", "sliding_window": 1024, "max_position_embeddings": 32768}, hfTensors(c, "F32", "F32"))
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if c := m.Config; c.Arch != "llama" || c.ContextLength != 32768 || c.SlidingWindow != 1024 || !c.Sliding(0) {
		t.Errorf("arch %s context %d window %d on layer 0 %v", c.Arch, c.ContextLength, c.SlidingWindow, c.Sliding(0))
	}
}

// TestHFSlidingLayers: which layers a config's window applies to, as
// transformers reads it: layer_types, else use_sliding_window with
// max_window_layers, else (Mistral) all; refused when it cannot be told.
func TestHFSlidingLayers(t *testing.T) {
	c := tiny{arch: "qwen2", vocab: 16, dim: 16, layers: 3, heads: 2, kvHeads: 1, headDim: 8, ffn: 32}
	for _, tc := range []struct {
		name  string
		extra map[string]any
		want  []bool // nil: no window
		err   string
	}{
		{"off", map[string]any{"sliding_window": 64, "use_sliding_window": false}, nil, ""},
		{"max_window_layers", map[string]any{"sliding_window": 64, "use_sliding_window": true, "max_window_layers": 1}, []bool{false, true, true}, ""},
		{"layer_types", map[string]any{"sliding_window": 64, "layer_types": []string{"sliding_attention", "full_attention", "sliding_attention"}}, []bool{true, false, true}, ""},
		{"window beyond context", map[string]any{"sliding_window": 1 << 20, "use_sliding_window": true, "max_window_layers": 0}, nil, ""},
		{"no max_window_layers", map[string]any{"sliding_window": 64, "use_sliding_window": true}, nil, "max_window_layers"},
		{"odd layer type", map[string]any{"sliding_window": 64, "layer_types": []string{"sliding_attention", "chunked_attention", "full_attention"}}, nil, "chunked_attention"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.extra["max_position_embeddings"] = 4096
			m, err := Load(writeHF(t, c, tc.extra, hfTensors(c, "F32", "F32")))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			got := m.Config.SlidingLayers
			if !slices.Equal(got, tc.want) || (tc.want != nil) != (m.Config.SlidingWindow == 64) {
				t.Fatalf("sliding layers %v window %d, want %v", got, m.Config.SlidingWindow, tc.want)
			}
		})
	}
}

func TestHFLlama3RopeScaling(t *testing.T) {
	c := tiny{arch: "llama", vocab: 16, dim: 128, layers: 1, heads: 2, kvHeads: 2, headDim: 64, ffn: 32}
	scaling := map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
		"original_max_position_embeddings": 8192}
	dir := writeHF(t, c, map[string]any{"rope_scaling": scaling, "max_position_embeddings": 131072}, hfTensors(c, "BF16", "BF16"))
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want := &RopeScaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192}
	if !reflect.DeepEqual(m.Config.RopeScaling, want) || m.Config.ContextLength != 131072 {
		t.Fatalf("rope scaling %+v, context %d", m.Config.RopeScaling, m.Config.ContextLength)
	}
	// Frequencies: the high ones untouched, the low ones divided by 8, the
	// band between blended (values from the transformers formula).
	f := m.RopeFrequencies()
	if len(f) != 32 {
		t.Fatalf("%d frequencies", len(f))
	}
	base := func(i int) float64 { return math.Pow(500000, -float64(2*i)/64) }
	if f[0] != base(0) || f[1] != base(1) {
		t.Errorf("high frequencies changed: %g %g", f[0], f[1])
	}
	if got, want := f[31], base(31)/8; math.Abs(got-want) > 1e-15 {
		t.Errorf("lowest frequency %g, want %g", got, want)
	}
	for i := range f {
		wavelen := 2 * math.Pi / base(i)
		if wavelen >= 8192/4.0 && wavelen <= 8192 {
			smooth := (8192/wavelen - 1) / 3
			want := (1-smooth)*base(i)/8 + smooth*base(i)
			if math.Abs(f[i]-want) > 1e-12*want {
				t.Errorf("blended frequency %d = %g, want %g", i, f[i], want)
			}
		}
	}

	// The older "type" spelling and transformers v5 rope_parameters.
	dir = writeHF(t, c, map[string]any{"rope_theta": nil, "rope_parameters": map[string]any{"rope_type": "llama3", "rope_theta": 1e4,
		"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}, hfTensors(c, "BF16", "BF16"))
	m2, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if m2.Config.RopeTheta != 1e4 || m2.Config.RopeScaling == nil || m2.Config.RopeScaling.Factor != 32 {
		t.Errorf("rope_parameters: theta %g scaling %+v", m2.Config.RopeTheta, m2.Config.RopeScaling)
	}
}

func TestHFSharded(t *testing.T) {
	c := tiny{arch: "llama", vocab: 24, dim: 16, layers: 3, heads: 2, kvHeads: 2, headDim: 8, ffn: 32}
	all := hfTensors(c, "F16", "F32")
	dir := writeHF(t, c, nil, map[string]SafeTensor{})
	os.Remove(filepath.Join(dir, "model.safetensors"))
	shards := []map[string]SafeTensor{{}, {}, {}}
	weightMap := map[string]string{}
	names := []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}
	for i, name := range sortedKeys(all) {
		shards[i%3][name] = all[name]
		weightMap[name] = names[i%3]
	}
	for i, s := range shards {
		if err := WriteSafetensors(filepath.Join(dir, names[i]), s); err != nil {
			t.Fatal(err)
		}
	}
	writeJSONFile(t, filepath.Join(dir, "model.safetensors.index.json"), map[string]any{"metadata": map[string]any{"total_size": 1}, "weight_map": weightMap})
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkWeights(t, m, c, "F16")
	if len(m.mappings) != 3 {
		t.Errorf("%d mappings", len(m.mappings))
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	// The index is the manifest: a tensor it does not list, a tensor it
	// lists but the shard lacks, and a shard path outside the directory
	// are all refused.
	bad := func(edit func(map[string]string), parts ...string) {
		t.Helper()
		wm := maps.Clone(weightMap)
		edit(wm)
		writeJSONFile(t, filepath.Join(dir, "model.safetensors.index.json"), map[string]any{"weight_map": wm})
		m, err := Load(dir)
		if err == nil {
			m.Close()
		}
		wantErr(t, err, parts...)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%v is not ErrInvalid", err)
		}
	}
	bad(func(wm map[string]string) { delete(wm, "model.norm.weight") }, `tensor "model.norm.weight" is not mapped to this shard by the index`)
	bad(func(wm map[string]string) { wm["model.extra.weight"] = names[0] }, `tensor "model.extra.weight" should be in model-00001-of-00003.safetensors but is not`)
	bad(func(wm map[string]string) { wm["model.norm.weight"] = "../x.safetensors" }, `shard "../x.safetensors" is not a .safetensors file name`)
	bad(func(wm map[string]string) { wm["model.norm.weight"] = names[1] }, `"model.norm.weight" is not mapped to this shard`)
	bad(func(wm map[string]string) { clear(wm) }, "empty weight_map")
}

func TestHFRejects(t *testing.T) {
	c := tiny{arch: "llama", vocab: 24, dim: 16, layers: 1, heads: 2, kvHeads: 2, headDim: 8, ffn: 32}
	good := func() map[string]SafeTensor { return hfTensors(c, "F32", "F32") }
	without := func(name string) map[string]SafeTensor { ts := good(); delete(ts, name); return ts }
	with := func(name string, st SafeTensor) map[string]SafeTensor { ts := good(); ts[name] = st; return ts }
	cases := []struct {
		name    string
		extra   map[string]any
		tensors map[string]SafeTensor
		is      error
		parts   []string
	}{
		{"model type", map[string]any{"model_type": "gemma"}, good(), ErrUnsupported, []string{`model_type "gemma" is not supported yet`}},
		{"no model type", map[string]any{"model_type": nil}, good(), ErrInvalid, []string{"model_type is missing"}},
		{"hidden act", map[string]any{"hidden_act": "gelu"}, good(), ErrUnsupported, []string{`hidden_act "gelu"`}},
		{"attention bias", map[string]any{"attention_bias": true}, good(), ErrUnsupported, []string{"attention_bias=true for model_type llama"}},
		{"mlp bias", map[string]any{"mlp_bias": true}, good(), ErrUnsupported, []string{"mlp_bias=true"}},
		{"no hidden", map[string]any{"hidden_size": nil}, good(), ErrInvalid, []string{"hidden_size is missing or not positive"}},
		{"rope dynamic", map[string]any{"rope_scaling": map[string]any{"type": "dynamic", "factor": 4.0}}, good(), ErrUnsupported, []string{`rope_scaling: rope_type "dynamic" is not supported yet`}},
		{"rope yarn without original context", map[string]any{"rope_scaling": map[string]any{"type": "yarn", "factor": 4.0}}, good(), ErrInvalid, []string{"yarn needs a positive factor and original_max_position_embeddings"}},
		{"llama3 partial", map[string]any{"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0}}, good(), ErrInvalid, []string{"llama3 needs factor, low_freq_factor"}},
		{"llama3 bad", map[string]any{"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}}, good(), ErrInvalid, []string{"rope scaling"}},
		{"eos type", map[string]any{"eos_token_id": "x"}, good(), ErrInvalid, []string{"eos_token_id: want an integer or a list of integers"}},
		{"eos range", map[string]any{"eos_token_id": []int{2, 99}}, good(), ErrInvalid, []string{"special token id 99 is outside the 24-token vocabulary"}},
		{"kv heads", map[string]any{"num_key_value_heads": 3}, good(), ErrInvalid, []string{"heads 2 is not a multiple of kv heads 3"}},
		{"missing tensor", nil, without("model.layers.0.mlp.up_proj.weight"), ErrInvalid, []string{`tensor "blk.0.ffn_up.weight" (model.layers.0.mlp.up_proj.weight) is missing (want shape [32 16] (rows × cols)`}},
		{"no lm_head", nil, without("lm_head.weight"), ErrInvalid, []string{"lm_head.weight is missing and tie_word_embeddings is false"}},
		{"shape", nil, with("model.layers.0.self_attn.k_proj.weight", SafeTensor{DType: "F32", Shape: []int{16, 8}, Data: encF32(values(128, 1))}),
			ErrInvalid, []string{`tensor "blk.0.attn_k.weight" (model.layers.0.self_attn.k_proj.weight): shape [16 8] (rows × cols), want [16 16] (rows × cols)`}},
		{"dtype", nil, with("model.norm.weight", SafeTensor{DType: "F64", Shape: []int{16}, Data: make([]byte, 128)}),
			ErrUnsupported, []string{`tensor "output_norm.weight" (model.norm.weight): type F64 is not supported (batchd reads F32, F16, BF16, and F8_E4M3 with block scales`}},
		{"o_proj bias", nil, with("model.layers.0.self_attn.o_proj.bias", SafeTensor{DType: "F32", Shape: []int{16}, Data: encF32(values(16, 1))}),
			ErrUnsupported, []string{`tensor "blk.0.attn_output.bias" (model.layers.0.self_attn.o_proj.bias) is not used by arch llama`}},
		{"unknown tensor", nil, with("model.vision.weight", SafeTensor{DType: "F32", Shape: []int{1}, Data: encF32(values(1, 1))}),
			ErrUnsupported, []string{`tensor "model.vision.weight" is not used`}},
		{"qkv bias for llama", nil, with("model.layers.0.self_attn.q_proj.bias", SafeTensor{DType: "F32", Shape: []int{16}, Data: encF32(values(16, 1))}),
			ErrUnsupported, []string{`"blk.0.attn_q.bias"`, "is not used by arch llama"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeHF(t, c, tc.extra, tc.tensors)
			m, err := Load(dir)
			if err == nil {
				m.Close()
			}
			t.Log(err)
			wantErr(t, err, tc.parts...)
			if !errors.Is(err, tc.is) {
				t.Errorf("%v is not %v", err, tc.is)
			}
		})
	}

	t.Run("files", func(t *testing.T) {
		dir := writeHF(t, c, nil, good())
		os.Remove(filepath.Join(dir, "tokenizer.json"))
		_, err := Load(dir)
		wantErr(t, err, "no tokenizer.json")

		dir = writeHF(t, c, nil, good())
		os.Remove(filepath.Join(dir, "config.json"))
		_, err = Load(dir)
		wantErr(t, err, "no config.json")

		dir = writeHF(t, c, nil, good())
		os.WriteFile(filepath.Join(dir, "config.json"), []byte("{"), 0o644)
		_, err = Load(dir)
		wantErr(t, err, "config.json: unexpected end of JSON input")

		dir = writeHF(t, c, nil, good())
		os.Remove(filepath.Join(dir, "model.safetensors"))
		_, err = Load(dir)
		wantErr(t, err, "no model.safetensors or model.safetensors.index.json")

		dir = writeHF(t, c, nil, good())
		os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("\xff\xff\xff\xff\xff\xff\xff\x00{}"), 0o644)
		_, err = Load(dir)
		wantErr(t, err, "model.safetensors", "header length", "exceeds")
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%v is not ErrInvalid", err)
		}
	})

	t.Run("chat template files", func(t *testing.T) {
		dir := writeHF(t, c, nil, good())
		writeJSONFile(t, filepath.Join(dir, "tokenizer_config.json"), map[string]any{
			"chat_template": []map[string]string{{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}}})
		m, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if m.ChatTemplate != "D" || m.Tokenizer.AddBOS {
			t.Errorf("template %q addBOS %v", m.ChatTemplate, m.Tokenizer.AddBOS)
		}
		m.Close()
		os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("J"), 0o644)
		if m, err = Load(dir); err != nil || m.ChatTemplate != "J" {
			t.Fatalf("jinja: %v %q", err, m.ChatTemplate)
		}
		m.Close()
	})
}

// qwen3_moe configs batchd does not run are refused naming the field.
func TestHFMoERejects(t *testing.T) {
	c := tiny{arch: "qwen3_moe", vocab: 48, dim: 32, layers: 1, heads: 4, kvHeads: 2, headDim: 8, ffn: 64}
	moe := map[string]any{"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16}
	with := func(kv ...any) map[string]any {
		out := map[string]any{}
		for k, v := range moe {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	for _, tc := range []struct {
		extra map[string]any
		want  string
	}{
		{with("num_experts", nil), "num_experts is missing"},
		{with("moe_intermediate_size", 0), "moe_intermediate_size is missing or not positive"},
		{with("decoder_sparse_step", 2), "decoder_sparse_step 2"},
		{with("mlp_only_layers", []int{0}), "mlp_only_layers [0]"},
		{with("shared_expert_intermediate_size", 64), "has no shared expert"},
		{with("num_experts_per_tok", 5), "used per token = 5"},
	} {
		_, err := Load(writeHF(t, c, tc.extra, hfTensors(c, "F32", "F32")))
		wantErr(t, err, tc.want)
	}
}

// TestHFGemma3MultimodalConfig: a multimodal Gemma 3's config.json states
// only what differs from transformers' Gemma3TextConfig (Gemma 3 4B's does
// so); the rest takes those defaults, and the outer special ids apply.
func TestHFGemma3MultimodalConfig(t *testing.T) {
	outer := hfConfig{ModelType: "gemma3", EOSTokenID: json.RawMessage(`[1, 106]`),
		TextConfig: json.RawMessage(`{"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
			"rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}`)}
	text, err := gemma3TextConfig(&outer)
	if err != nil {
		t.Fatal(err)
	}
	c, err := configFromHF(text, &hfGenerationConfig{}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if c.Arch != "gemma3" || c.Heads != 8 || c.KVHeads != 4 || c.HeadDim != 256 || c.VocabSize != 262208 || c.AttnScale != 1.0/16 ||
		c.RopeTheta != 1e6 || c.RopeThetaLocal != 10000 || c.RopeLinear != 8 || c.SlidingWindow != 1024 || !c.Sliding(4) || c.Sliding(5) ||
		!c.TiedEmbeddings || c.ContextLength != 131072 || !slices.Equal(c.EOSIDs, []int{1, 106}) {
		t.Fatalf("config %+v", c)
	}
	outer.TextConfig = json.RawMessage(`{"model_type": "llama"}`)
	if _, err := gemma3TextConfig(&outer); err == nil || !strings.Contains(err.Error(), "text_config.model_type") {
		t.Errorf("a text_config of another kind: err = %v", err)
	}
}
