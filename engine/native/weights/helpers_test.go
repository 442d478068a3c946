package weights

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native/gguf"
	"github.com/batchd/batchd/kernels"
)

// tiny describes a small synthetic model for tests.
type tiny struct {
	arch                                             string
	vocab, dim, layers, heads, kvHeads, headDim, ffn int
	tied                                             bool
}

func (c tiny) qDim() int  { return c.heads * c.headDim }
func (c tiny) kvDim() int { return c.kvHeads * c.headDim }

// tensorShapes lists canonical tensors with their shape (outermost first).
func (c tiny) tensorShapes() map[string][]int {
	s := map[string][]int{
		nameTokenEmbd:  {c.vocab, c.dim},
		nameOutputNorm: {c.dim},
	}
	if !c.tied {
		s[nameOutput] = []int{c.vocab, c.dim}
	}
	for l := 0; l < c.layers; l++ {
		b := func(suf string, shape ...int) { s[BlockName(l, suf)] = shape }
		b(sufAttnNorm, c.dim)
		b(sufQ, c.qDim(), c.dim)
		b(sufK, c.kvDim(), c.dim)
		b(sufV, c.kvDim(), c.dim)
		b(sufO, c.dim, c.qDim())
		if c.arch == "qwen2" {
			b(sufQBias, c.qDim())
			b(sufKBias, c.kvDim())
			b(sufVBias, c.kvDim())
		}
		if c.arch == "qwen3" {
			b(sufQNorm, c.headDim)
			b(sufKNorm, c.headDim)
		}
		b(sufFFNNorm, c.dim)
		b(sufFFNGate, c.ffn, c.dim)
		b(sufFFNUp, c.ffn, c.dim)
		b(sufFFNDown, c.dim, c.ffn)
	}
	return s
}

// values are deterministic, exactly representable in F16 and BF16 (k/8 for
// small k), and differ per tensor through seed.
func values(n int, seed int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32((i*7+seed*13)%33-16) / 8
	}
	return out
}

func seedOf(name string) int {
	h := 0
	for _, r := range name {
		h = h*31 + int(r)
	}
	if h < 0 {
		h = -h
	}
	return h % 1000
}

func encF32(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func encBF16(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(x)>>16))
	}
	return b
}

func encF16(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], kernels.F32ToF16(x))
	}
	return b
}

// encQ80 quantizes with scale 1/8 (exact for values).
func encQ80(v []float32) []byte {
	b := make([]byte, 0, len(v)/32*34)
	for i := 0; i < len(v); i += 32 {
		b = binary.LittleEndian.AppendUint16(b, kernels.F32ToF16(1.0/8))
		for _, x := range v[i : i+32] {
			b = append(b, byte(int8(x*8)))
		}
	}
	return b
}

func product(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// ggufOpts tweak a synthetic GGUF model.
type ggufOpts struct {
	matType   gguf.GGMLType                             // type of 2-D weights (F32 default)
	vecType   gguf.GGMLType                             // type of 1-D weights (F32 default)
	editMeta  func(meta []gguf.KV) []gguf.KV            // change metadata
	editTens  func([]gguf.TensorData) []gguf.TensorData // change tensors
	extraMeta []gguf.KV
}

func ggufEncode(typ gguf.GGMLType, v []float32) []byte {
	switch typ {
	case gguf.F16:
		return encF16(v)
	case gguf.BF16:
		return encBF16(v)
	case gguf.Q8_0:
		return encQ80(v)
	case gguf.IQ2_XXS:
		return make([]byte, len(v)/256*66)
	}
	if dt, ok := ggufTypes[typ]; ok && dt.BlockSize() > 1 {
		rb, err := dt.RowBytes(len(v))
		if err != nil {
			panic(err)
		}
		b := make([]byte, rb)
		if err := kernels.Quantize(dt, b, v); err != nil {
			panic(err)
		}
		return b
	}
	return encF32(v)
}

func tokens(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("tok%d", i)
	}
	out[0], out[1], out[2] = "<unk>", "<s>", "</s>"
	return out
}

// writeGGUF writes a synthetic model and returns its path.
func writeGGUF(t *testing.T, c tiny, o ggufOpts) string {
	t.Helper()
	a := c.arch
	meta := []gguf.KV{
		{Key: "general.architecture", Value: gguf.MustValue(a)},
		{Key: a + ".context_length", Value: gguf.MustValue(uint32(256))},
		{Key: a + ".embedding_length", Value: gguf.MustValue(uint32(c.dim))},
		{Key: a + ".block_count", Value: gguf.MustValue(uint32(c.layers))},
		{Key: a + ".feed_forward_length", Value: gguf.MustValue(uint32(c.ffn))},
		{Key: a + ".attention.head_count", Value: gguf.MustValue(uint32(c.heads))},
		{Key: a + ".attention.head_count_kv", Value: gguf.MustValue(uint32(c.kvHeads))},
		{Key: a + ".attention.layer_norm_rms_epsilon", Value: gguf.MustValue(float32(1e-6))},
		{Key: a + ".rope.freq_base", Value: gguf.MustValue(float32(1e6))},
		{Key: "tokenizer.ggml.model", Value: gguf.MustValue("gpt2")},
		{Key: "tokenizer.ggml.pre", Value: gguf.MustValue("qwen2")},
		{Key: "tokenizer.ggml.tokens", Value: gguf.MustValue(tokens(c.vocab))},
		{Key: "tokenizer.ggml.token_type", Value: gguf.MustValue(make([]int32, c.vocab))},
		{Key: "tokenizer.ggml.merges", Value: gguf.MustValue([]string{"t o", "to k"})},
		{Key: "tokenizer.ggml.bos_token_id", Value: gguf.MustValue(uint32(1))},
		{Key: "tokenizer.ggml.eos_token_id", Value: gguf.MustValue(uint32(2))},
		{Key: "tokenizer.ggml.padding_token_id", Value: gguf.MustValue(uint32(0xFFFFFFFF))},
		{Key: "tokenizer.chat_template", Value: gguf.MustValue("{{ messages }}")},
	}
	if c.headDim*c.heads != c.dim {
		meta = append(meta, gguf.KV{Key: a + ".attention.key_length", Value: gguf.MustValue(uint32(c.headDim))},
			gguf.KV{Key: a + ".attention.value_length", Value: gguf.MustValue(uint32(c.headDim))})
	}
	meta = append(meta, o.extraMeta...)
	if o.editMeta != nil {
		meta = o.editMeta(meta)
	}
	var tensors []gguf.TensorData
	shapes := c.tensorShapes()
	for _, name := range sortedKeys(shapes) {
		shape := shapes[name]
		typ := o.matType
		if len(shape) == 1 {
			typ = o.vecType
		}
		dims := make([]uint64, len(shape))
		for i, d := range shape {
			dims[len(shape)-1-i] = uint64(d)
		}
		tensors = append(tensors, gguf.TensorData{Name: name, Type: typ, Dims: dims,
			Data: ggufEncode(typ, values(product(shape), seedOf(name)))})
	}
	if o.editTens != nil {
		tensors = o.editTens(tensors)
	}
	p := filepath.Join(t.TempDir(), "tiny.gguf")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := gguf.Write(f, meta, tensors); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// hfTensors builds the model's tensors under HF names, 2-D in mat dtype and
// 1-D in vec dtype.
func hfTensors(c tiny, mat, vec string) map[string]SafeTensor {
	out := map[string]SafeTensor{}
	enc := map[string]func([]float32) []byte{"F32": encF32, "F16": encF16, "BF16": encBF16}
	for canon, shape := range c.tensorShapes() {
		dt := mat
		if len(shape) == 1 {
			dt = vec
		}
		out[hfNameOf(canon)] = SafeTensor{DType: dt, Shape: shape, Data: enc[dt](values(product(shape), seedOf(canon)))}
	}
	return out
}

func hfConfigJSON(c tiny, extra map[string]any) map[string]any {
	cfg := map[string]any{
		"model_type":              c.arch,
		"architectures":           []string{"X"},
		"hidden_size":             c.dim,
		"num_hidden_layers":       c.layers,
		"num_attention_heads":     c.heads,
		"num_key_value_heads":     c.kvHeads,
		"intermediate_size":       c.ffn,
		"rms_norm_eps":            1e-5,
		"rope_theta":              500000.0,
		"max_position_embeddings": 4096,
		"vocab_size":              c.vocab,
		"tie_word_embeddings":     c.tied,
		"bos_token_id":            1,
		"eos_token_id":            2,
		"hidden_act":              "silu",
		"torch_dtype":             "bfloat16",
	}
	if c.headDim*c.heads != c.dim {
		cfg["head_dim"] = c.headDim
	}
	for k, v := range extra {
		if v == nil {
			delete(cfg, k)
		} else {
			cfg[k] = v
		}
	}
	return cfg
}

func writeJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

const tokenizerStub = `{"version":"1.0","model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`

// writeHF writes an HF directory: config.json (with extra overrides; a nil
// value deletes a key), model.safetensors, tokenizer.json and
// tokenizer_config.json.
func writeHF(t *testing.T, c tiny, extra map[string]any, tensors map[string]SafeTensor) string {
	t.Helper()
	dir := t.TempDir()
	writeJSONFile(t, filepath.Join(dir, "config.json"), hfConfigJSON(c, extra))
	if err := WriteSafetensors(filepath.Join(dir, "model.safetensors"), tensors); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(tokenizerStub), 0o644); err != nil {
		t.Fatal(err)
	}
	writeJSONFile(t, filepath.Join(dir, "tokenizer_config.json"), map[string]any{
		"add_bos_token": true, "add_eos_token": false, "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}",
	})
	return dir
}

// wantErr fails unless err contains every part.
func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q\ndoes not contain %q", err, p)
		}
	}
}
