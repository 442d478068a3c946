package weights

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native/gguf"
	"github.com/batchd/batchd/kernels"
)

func stories260K(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("BATCHD_STORIES260K")
	if dir == "" {
		t.Skip("BATCHD_STORIES260K is unset: set it to the directory holding stories260K.gguf to run this test")
	}
	return filepath.Join(dir, "stories260K.gguf")
}

func TestStories260K(t *testing.T) {
	path := stories260K(t)
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want := Config{
		Arch: "llama", VocabSize: 512, Dim: 64, Layers: 5, Heads: 8, KVHeads: 4, HeadDim: 8, FFNDim: 172,
		ContextLength: 2048, RMSEps: 1e-5, RopeTheta: 10000, RopeDim: 8, RopeNeox: false,
		TiedEmbeddings: false, BOS: 1, EOS: 2, EOSIDs: []int{2},
	}
	if !reflect.DeepEqual(m.Config, want) {
		t.Fatalf("config\n got %+v\nwant %+v", m.Config, want)
	}
	tok := m.Tokenizer
	if tok.Model != "llama" || len(tok.Tokens) != 512 || len(tok.Scores) != 512 || len(tok.Types) != 512 {
		t.Fatalf("tokenizer: model %q, %d tokens, %d scores, %d types", tok.Model, len(tok.Tokens), len(tok.Scores), len(tok.Types))
	}
	if tok.BOS != 1 || tok.EOS != 2 || tok.UNK != 0 || tok.PAD != -1 || !tok.AddBOS || tok.AddEOS {
		t.Fatalf("tokenizer ids: %+v", struct {
			BOS, EOS, UNK, PAD int
			AddBOS, AddEOS     bool
		}{tok.BOS, tok.EOS, tok.UNK, tok.PAD, tok.AddBOS, tok.AddEOS})
	}
	if tok.Tokens[1] != "<s>" || tok.Tokens[3] != "<0x00>" || tok.Tokens[403] != "▁Once" {
		t.Errorf("tokens: %q %q %q", tok.Tokens[1], tok.Tokens[3], tok.Tokens[403])
	}
	if len(m.Matrices)+len(m.Vectors) != 48 || len(m.Matrices) != 2+5*7 {
		t.Errorf("%d matrices, %d vectors", len(m.Matrices), len(m.Vectors))
	}
	for _, name := range m.Config.Names() {
		if mat, ok := m.Matrices[name]; ok {
			if !m.IsMapped(name) {
				t.Errorf("%s is not memory-mapped", name)
			}
			if mat.Type != kernels.F32 {
				t.Errorf("%s: %v", name, mat.Type)
			}
		} else if _, ok := m.Vectors[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}
	if e := m.Matrices["token_embd.weight"]; e.Rows != 512 || e.Cols != 64 {
		t.Errorf("token_embd %dx%d", e.Rows, e.Cols)
	}
	if q := m.Matrices["blk.4.ffn_down.weight"]; q.Rows != 64 || q.Cols != 172 {
		t.Errorf("ffn_down %dx%d", q.Rows, q.Cols)
	}
	// The mapping really is the file: compare with an independent open.
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ti, _ := f.Tensor("blk.2.attn_v.weight")
	if !slices.Equal(ti.Data, m.Matrices["blk.2.attn_v.weight"].Data) {
		t.Error("attn_v differs from the file")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if m.Matrices != nil || m.IsMapped("token_embd.weight") {
		t.Error("matrices survive Close")
	}
}

func TestGGUFArchs(t *testing.T) {
	cases := []struct {
		name string
		c    tiny
		o    ggufOpts
		want Config
	}{
		{
			name: "llama mixed types tied",
			c:    tiny{arch: "llama", vocab: 40, dim: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, ffn: 96, tied: true},
			o:    ggufOpts{matType: gguf.Q8_0, vecType: gguf.F16},
			want: Config{Arch: "llama", VocabSize: 40, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, FFNDim: 96,
				ContextLength: 256, RMSEps: 1e-6, RopeTheta: 1e6, RopeDim: 16, TiedEmbeddings: true, BOS: 1, EOS: 2, EOSIDs: []int{2}},
		},
		{
			name: "llama q8_0 vectors",
			c:    tiny{arch: "llama", vocab: 10, dim: 64, layers: 1, heads: 2, kvHeads: 2, headDim: 32, ffn: 32},
			o:    ggufOpts{vecType: gguf.Q8_0},
			want: Config{Arch: "llama", VocabSize: 10, Dim: 64, Layers: 1, Heads: 2, KVHeads: 2, HeadDim: 32, FFNDim: 32,
				ContextLength: 256, RMSEps: 1e-6, RopeTheta: 1e6, RopeDim: 32, BOS: 1, EOS: 2, EOSIDs: []int{2}},
		},
		{
			name: "qwen2 bias bf16",
			c:    tiny{arch: "qwen2", vocab: 50, dim: 32, layers: 1, heads: 4, kvHeads: 1, headDim: 8, ffn: 48},
			o:    ggufOpts{matType: gguf.BF16, vecType: gguf.BF16},
			want: Config{Arch: "qwen2", VocabSize: 50, Dim: 32, Layers: 1, Heads: 4, KVHeads: 1, HeadDim: 8, FFNDim: 48,
				ContextLength: 256, RMSEps: 1e-6, RopeTheta: 1e6, RopeDim: 8, RopeNeox: true, QKVBias: true, BOS: 1, EOS: 2, EOSIDs: []int{2}},
		},
		{
			name: "qwen3 head dim override f16",
			c:    tiny{arch: "qwen3", vocab: 30, dim: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 16, ffn: 40},
			o:    ggufOpts{matType: gguf.F16},
			want: Config{Arch: "qwen3", VocabSize: 30, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, FFNDim: 40,
				ContextLength: 256, RMSEps: 1e-6, RopeTheta: 1e6, RopeDim: 16, RopeNeox: true, QKNorm: true, BOS: 1, EOS: 2, EOSIDs: []int{2}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Load(writeGGUF(t, tc.c, tc.o))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if !reflect.DeepEqual(m.Config, tc.want) {
				t.Fatalf("config\n got %+v\nwant %+v", m.Config, tc.want)
			}
			if m.ChatTemplate != "{{ messages }}" || m.Tokenizer.Model != "gpt2" || m.Tokenizer.Pre != "qwen2" ||
				len(m.Tokenizer.Merges) != 2 || m.Tokenizer.AddBOS || m.Tokenizer.PAD != -1 {
				t.Errorf("tokenizer %+v, template %q", m.Tokenizer, m.ChatTemplate)
			}
			shapes := tc.c.tensorShapes()
			if len(m.Matrices)+len(m.Vectors) != len(shapes) {
				t.Errorf("%d+%d weights, want %d", len(m.Matrices), len(m.Vectors), len(shapes))
			}
			for name, shape := range shapes {
				want := values(product(shape), seedOf(name))
				if len(shape) == 1 {
					if !slices.Equal(m.Vectors[name], want) {
						t.Errorf("%s = %v, want %v", name, m.Vectors[name], want)
					}
					continue
				}
				mat := m.Matrices[name]
				if mat == nil || mat.Rows != shape[0] || mat.Cols != shape[1] || !m.IsMapped(name) {
					t.Errorf("%s: %+v, mapped %v", name, mat, m.IsMapped(name))
					continue
				}
				if !slices.Equal(mat.Data, ggufEncode(tc.o.matType, want)) {
					t.Errorf("%s: data differs", name)
				}
			}
		})
	}
}

func TestGGUFRopeFreqs(t *testing.T) {
	c := tiny{arch: "llama", vocab: 16, dim: 32, layers: 1, heads: 2, kvHeads: 2, headDim: 16, ffn: 32}
	div := []float32{1, 1, 2, 4, 8, 8, 8, 8}
	p := writeGGUF(t, c, ggufOpts{editTens: func(ts []gguf.TensorData) []gguf.TensorData {
		return append(ts, gguf.TensorData{Name: "rope_freqs.weight", Type: gguf.F32, Dims: []uint64{8}, Data: encF32(div)})
	}})
	m, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !slices.Equal(m.Vectors["rope_freqs.weight"], div) {
		t.Fatalf("rope_freqs = %v", m.Vectors["rope_freqs.weight"])
	}
	got := m.RopeFrequencies()
	for i, f := range got {
		want := math.Pow(1e6, -float64(2*i)/16) / float64(div[i])
		if math.Abs(f-want) > 1e-12*want {
			t.Errorf("freq %d = %g, want %g", i, f, want)
		}
	}
}

func TestGGUFRejects(t *testing.T) {
	base := tiny{arch: "llama", vocab: 40, dim: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 64}
	setMeta := func(key string, v any) ggufOpts {
		return ggufOpts{editMeta: func(meta []gguf.KV) []gguf.KV {
			for i := range meta {
				if meta[i].Key == key {
					if v == nil {
						return slices.Delete(meta, i, i+1)
					}
					meta[i].Value = gguf.MustValue(v)
					return meta
				}
			}
			return append(meta, gguf.KV{Key: key, Value: gguf.MustValue(v)})
		}}
	}
	editTensor := func(name string, edit func(*gguf.TensorData) bool) ggufOpts {
		return ggufOpts{editTens: func(ts []gguf.TensorData) []gguf.TensorData {
			for i := range ts {
				if ts[i].Name == name {
					if !edit(&ts[i]) {
						return slices.Delete(ts, i, i+1)
					}
				}
			}
			return ts
		}}
	}
	cases := []struct {
		name  string
		c     tiny
		o     ggufOpts
		is    error
		parts []string
	}{
		{"arch", base, setMeta("general.architecture", "gemma"), ErrUnsupported, []string{`architecture "gemma"`, "not supported yet"}},
		{"no arch", base, setMeta("general.architecture", nil), ErrInvalid, []string{"general.architecture is missing"}},
		{"arch type", base, setMeta("general.architecture", uint32(1)), ErrInvalid, []string{"general.architecture", "is uint32, want string"}},
		{"missing key", base, setMeta("llama.block_count", nil), ErrInvalid, []string{"llama.block_count: missing"}},
		{"key type", base, setMeta("llama.embedding_length", "64"), ErrInvalid, []string{`"llama.embedding_length" is string, want integer`}},
		{"huge dim", base, setMeta("llama.embedding_length", uint64(1)<<40), ErrInvalid, []string{"llama.embedding_length", "larger than"}},
		{"negative", base, setMeta("llama.block_count", int32(-1)), ErrInvalid, []string{"llama.block_count", "negative"}},
		{"kv heads", base, setMeta("llama.attention.head_count_kv", uint32(3)), ErrInvalid, []string{"heads 4 is not a multiple of kv heads 3"}},
		{"eps", base, setMeta("llama.attention.layer_norm_rms_epsilon", float32(0)), ErrInvalid, []string{"rms eps = 0"}},
		{"rope dim", base, setMeta("llama.rope.dimension_count", uint32(9)), ErrInvalid, []string{"rope dim 9"}},
		{"rope scaling", base, setMeta("llama.rope.scaling.type", "longrope"), ErrUnsupported, []string{`rope scaling type "longrope"`}},
		{"yarn without factor", base, setMeta("llama.rope.scaling.type", "yarn"), ErrInvalid, []string{"llama.rope.scaling.factor: missing"}},
		{"value length", base, setMeta("llama.attention.value_length", uint32(16)), ErrUnsupported, []string{"value_length = 16 differs from key length 8"}},
		{"eos range", base, setMeta("tokenizer.ggml.eos_token_id", uint32(40)), ErrInvalid, []string{"eos_token_id", "token id 40 is outside the 40-token vocabulary"}},
		{"scores", base, setMeta("tokenizer.ggml.scores", []float32{1}), ErrInvalid, []string{"scores has 1 entries for 40 tokens"}},
		{"vocab", base, setMeta("llama.vocab_size", uint32(39)), ErrInvalid, []string{"tokenizer has 40 tokens, more than the vocabulary size 39"}},
		{"missing tensor", base, editTensor("blk.1.ffn_up.weight", func(*gguf.TensorData) bool { return false }), ErrInvalid,
			[]string{`tensor "blk.1.ffn_up.weight" is missing`, "[64 32] (rows × cols)"}},
		{"missing norm", base, editTensor("output_norm.weight", func(*gguf.TensorData) bool { return false }), ErrInvalid,
			[]string{`tensor "output_norm.weight" is missing`, "[32]"}},
		{"shape", base, editTensor("blk.0.attn_k.weight", func(td *gguf.TensorData) bool {
			td.Dims = []uint64{32, 32}
			td.Data = encF32(values(1024, 1))
			return true
		}), ErrInvalid, []string{`tensor "blk.0.attn_k.weight": shape [32 32] (rows × cols), want [16 32] (rows × cols)`}},
		{"vector shape", base, editTensor("blk.0.attn_norm.weight", func(td *gguf.TensorData) bool {
			td.Dims = []uint64{16, 2}
			return true
		}), ErrInvalid, []string{`tensor "blk.0.attn_norm.weight": shape [2 16] (rows × cols), want [32]`}},
		{"iq2_xxs", tiny{arch: "llama", vocab: 8, dim: 256, layers: 1, heads: 4, kvHeads: 4, headDim: 64, ffn: 256},
			ggufOpts{matType: gguf.IQ2_XXS}, ErrUnsupported, []string{`tensor "`, ": type IQ2_XXS is not supported (batchd reads F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, BF16, MXFP4)"}},
		{"unused tensor", base, ggufOpts{editTens: func(ts []gguf.TensorData) []gguf.TensorData {
			return append(ts, gguf.TensorData{Name: "blk.0.attn_output.bias", Type: gguf.F32, Dims: []uint64{32}, Data: encF32(values(32, 1))})
		}}, ErrUnsupported, []string{`tensor "blk.0.attn_output.bias" is not used by arch llama`}},
		{"extra layer", base, ggufOpts{editTens: func(ts []gguf.TensorData) []gguf.TensorData {
			return append(ts, gguf.TensorData{Name: "blk.2.attn_norm.weight", Type: gguf.F32, Dims: []uint64{32}, Data: encF32(values(32, 1))})
		}}, ErrUnsupported, []string{`"blk.2.attn_norm.weight" is not used`}},
		{"rope freqs shape", base, ggufOpts{editTens: func(ts []gguf.TensorData) []gguf.TensorData {
			return append(ts, gguf.TensorData{Name: "rope_freqs.weight", Type: gguf.F32, Dims: []uint64{3}, Data: encF32(values(3, 1))})
		}}, ErrInvalid, []string{`tensor "rope_freqs.weight": shape [3], want [4]`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Load(writeGGUF(t, tc.c, tc.o))
			if err == nil {
				m.Close()
			}
			t.Log(err)
			wantErr(t, err, append(tc.parts, "tiny.gguf")...)
			if !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
		})
	}
	// A corrupt file reports the gguf package's error, as ErrInvalid.
	p := filepath.Join(t.TempDir(), "bad.gguf")
	os.WriteFile(p, []byte("GGUF\x03\x00\x00\x00garbage-garbage-garbage"), 0o644)
	_, err := Load(p)
	wantErr(t, err, "malformed GGUF", "bad.gguf")
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, gguf.ErrFormat) {
		t.Errorf("corrupt file error %v: want ErrInvalid and gguf.ErrFormat", err)
	}
	_, err = Load(filepath.Join(t.TempDir(), "nope.gguf"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	// A GGUF file without the extension is recognized by its magic.
	noExt := filepath.Join(t.TempDir(), "model")
	b, _ := os.ReadFile(writeGGUF(t, tiny{arch: "llama", vocab: 8, dim: 8, layers: 1, heads: 2, kvHeads: 2, headDim: 4, ffn: 8}, ggufOpts{}))
	os.WriteFile(noExt, b, 0o644)
	if m, err := Load(noExt); err != nil {
		t.Errorf("GGUF without extension: %v", err)
	} else {
		m.Close()
	}
	other := filepath.Join(t.TempDir(), "model.bin")
	os.WriteFile(other, []byte("x"), 0o644)
	if _, err := Load(other); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "want a .gguf file or a Hugging Face model directory") {
		t.Errorf("model.bin: %v", err)
	}
}

// TestGGUFBlockTypes loads a model whose matrices and vectors are in each
// block quantization: matrices stay as stored (memory-mapped, no
// dequantized copy), vectors are dequantized exactly, and the model-loaded
// summary names the type.
func TestGGUFBlockTypes(t *testing.T) {
	c := tiny{arch: "llama", vocab: 8, dim: 256, layers: 1, heads: 4, kvHeads: 4, headDim: 64, ffn: 256}
	for gt, dt := range ggufTypes {
		if dt.BlockSize() <= 1 {
			continue
		}
		t.Run(dt.String(), func(t *testing.T) {
			m, err := Load(writeGGUF(t, c, ggufOpts{matType: gt, vecType: gt}))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if got, want := m.WeightTypes(), fmt.Sprintf("%v×%d", dt, len(m.Matrices)); got != want {
				t.Errorf("WeightTypes() = %q, want %q", got, want)
			}
			for name, shape := range c.tensorShapes() {
				want := values(product(shape), seedOf(name))
				enc := ggufEncode(gt, want)
				if len(shape) == 1 {
					dq := make([]float32, len(want))
					if err := kernels.Dequantize(dt, dq, enc); err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(m.Vectors[name], dq) {
						t.Errorf("%s: vector differs from its exact dequantization", name)
					}
					continue
				}
				mat := m.Matrices[name]
				if mat == nil || mat.Type != dt || !m.IsMapped(name) || !slices.Equal(mat.Data, enc) {
					t.Errorf("%s: %v matrix, mapped %v, data as written %v", name, mat.Type, m.IsMapped(name), slices.Equal(mat.Data, enc))
				}
			}
		})
	}
}
