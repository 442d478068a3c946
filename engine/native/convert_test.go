package native

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/batchd/batchd/engine/native/demomodel"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// logitsAt runs tokens through m in one pass and returns every position's
// logits, [len(tokens)][vocab].
func logitsAt(m *Model, tokens []int32) []float32 {
	kv, table := m.scratchKV(len(tokens))
	b := batch{kv: kv, tokens: tokens, segs: []segment{{blocks: table, n: len(tokens)}}}
	for i := range tokens {
		b.pos = append(b.pos, int32(i))
		b.logitRows = append(b.logitRows, i)
	}
	var s scratch
	return append([]float32(nil), m.forward(&b, &s)...)
}

var storiesPrompt = []int32{1, 403, 407, 261, 378, 432, 383, 286, 261, 376}

// hfName maps a canonical tensor name to Hugging Face's.
func hfName(name string) string {
	switch name {
	case "token_embd.weight":
		return "model.embed_tokens.weight"
	case "output_norm.weight":
		return "model.norm.weight"
	case "output.weight":
		return "lm_head.weight"
	}
	var l int
	var rest string
	fmt.Sscanf(name, "blk.%d.%s", &l, &rest)
	hf := map[string]string{
		"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
		"attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
		"attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
		"ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight",
	}[rest]
	return fmt.Sprintf("model.layers.%d.%s", l, hf)
}

// toRotateHalf reorders the rows of a GGUF llama Q or K weight (adjacent
// pairs rotate together) into Hugging Face's layout (dims i and i+d/2 of
// each head rotate together): HF row k*d/2+i of a head is GGUF row 2i+k.
func toRotateHalf(data []byte, rows, cols, headDim int) []byte {
	out := make([]byte, len(data))
	rb := cols * 4
	for r := range rows {
		h, j := r/headDim, r%headDim
		i, k := j/2, j%2
		dst := h*headDim + k*headDim/2 + i
		copy(out[dst*rb:(dst+1)*rb], data[r*rb:(r+1)*rb])
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

// The stories260K GGUF, rewritten by this test as a Hugging Face
// safetensors directory (Q/K permuted for rotate-half RoPE), gives the same
// logits within 1e-5.
func TestStoriesAsHFDirectoryMatchesGGUF(t *testing.T) {
	g, cpu := loadStories(t)
	src := g.src
	c := src.Config
	dir := t.TempDir()
	tensors := map[string]weights.SafeTensor{}
	for name, m := range src.Matrices {
		data := m.Data
		if strings.HasSuffix(name, "attn_q.weight") || strings.HasSuffix(name, "attn_k.weight") {
			data = toRotateHalf(data, m.Rows, m.Cols, c.HeadDim)
		}
		tensors[hfName(name)] = weights.SafeTensor{DType: "F32", Shape: []int{m.Rows, m.Cols}, Data: data}
	}
	for name, v := range src.Vectors {
		tensors[hfName(name)] = weights.SafeTensor{DType: "F32", Shape: []int{len(v)}, Data: f32Bytes(v)}
	}
	if err := weights.WriteSafetensors(filepath.Join(dir, "model.safetensors"), tensors); err != nil {
		t.Fatal(err)
	}
	cfgJSON, _ := json.Marshal(map[string]any{
		"model_type": "llama", "hidden_size": c.Dim, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads, "intermediate_size": c.FFNDim, "rms_norm_eps": c.RMSEps, "rope_theta": c.RopeTheta,
		"max_position_embeddings": c.ContextLength, "vocab_size": c.VocabSize, "tie_word_embeddings": false,
		"bos_token_id": 1, "eos_token_id": 2,
	})
	os.WriteFile(filepath.Join(dir, "config.json"), cfgJSON, 0o644)
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model":{"type":"BPE","vocab":{},"merges":[]}}`), 0o644)

	hw, err := weights.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer hw.Close()
	if !hw.Config.RopeNeox {
		t.Fatal("an HF directory must use rotate-half RoPE")
	}
	h, err := NewModel(hw, cpu)
	if err != nil {
		t.Fatal(err)
	}
	want, got := logitsAt(g, storiesPrompt), logitsAt(h, storiesPrompt)
	worst := 0.0
	for i := range want {
		worst = math.Max(worst, math.Abs(float64(want[i]-got[i])))
	}
	t.Logf("max |Δlogit| GGUF vs HF over %d positions: %.3g", len(storiesPrompt), worst)
	// The HF layout permutes each head's dimensions: a device whose
	// attention reduces a head in a tree (the CUDA kernels) then adds in
	// another order than for the GGUF, a few float32 roundings apart.
	tol := 1e-5
	if _, ok := h.dev.(*kernels.CPUDevice); !ok {
		tol = 5e-5
	}
	if worst > tol {
		t.Fatalf("HF directory logits differ from the GGUF's by %.3g > %g", worst, tol)
	}
}

// convertModel returns a copy of src with every matrix stored as t.
func convertModel(t *testing.T, src *weights.Model, dt kernels.DType) *weights.Model {
	t.Helper()
	out := *src
	out.Matrices = map[string]*kernels.Matrix{}
	for name, m := range src.Matrices {
		if dt == kernels.Q8_0 && m.Cols%32 != 0 {
			// Rows that do not split into 32-value blocks stay as they are,
			// as llama.cpp's quantizer also leaves them.
			out.Matrices[name] = m
			continue
		}
		row := make([]float32, m.Cols)
		rb, err := dt.RowBytes(m.Cols)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, 0, rb*m.Rows)
		for r := range m.Rows {
			m.Row(r, row)
			enc, _, err := demomodel.Encode(row, dt)
			if err != nil {
				t.Fatal(err)
			}
			data = append(data, enc...)
		}
		nm, err := kernels.NewMatrix(dt, m.Rows, m.Cols, data)
		if err != nil {
			t.Fatal(err)
		}
		out.Matrices[name] = nm
	}
	return &out
}

// The same model converted to F16, BF16 and Q8_0 gives logits close to
// F32's. The tolerances are on the largest |Δlogit| over a 10-token
// prompt, where logits span about ±15: F16 keeps 11 significant bits, BF16 8,
// and Q8_0 quantizes weights and activations to 8 bits per 32-value block
// (measured: F16 0.011, BF16 0.068, Q8_0 0.28).
func TestStoriesConvertedTypesStayClose(t *testing.T) {
	g, cpu := loadStories(t)
	want := logitsAt(g, storiesPrompt)
	for _, tc := range []struct {
		dt  kernels.DType
		tol float64
	}{{kernels.F16, 0.02}, {kernels.BF16, 0.15}, {kernels.Q8_0, 0.4}} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			m, err := NewModel(convertModel(t, g.src, tc.dt), cpu)
			if err != nil {
				t.Fatal(err)
			}
			got := logitsAt(m, storiesPrompt)
			worst := 0.0
			for i := range want {
				worst = math.Max(worst, math.Abs(float64(want[i]-got[i])))
			}
			t.Logf("%s: max |Δlogit| vs F32 = %.4g (tolerance %g)", tc.dt, worst, tc.tol)
			if worst > tc.tol {
				t.Fatalf("%s logits differ from F32 by %.4g > %g", tc.dt, worst, tc.tol)
			}
			// Greedy choices at each position agree.
			v := g.cfg.VocabSize
			for p := range storiesPrompt {
				if argmax(want[p*v:(p+1)*v]) != argmax(got[p*v:(p+1)*v]) {
					t.Errorf("position %d: greedy token differs from F32's", p)
				}
			}
		})
	}
}
