package native

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// demoWeights writes a demo model of shape in dt and loads it.
func demoWeights(t *testing.T, shape demomodel.Shape, dt kernels.DType) *weights.Model {
	t.Helper()
	path := filepath.Join(t.TempDir(), shape.Name+".gguf")
	if err := demomodel.WriteFile(path, shape, dt, 3); err != nil {
		t.Fatal(err)
	}
	w, err := weights.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// hfLayerNames maps the canonical block tensor suffixes every family
// shares to their Hugging Face names, plus the family's own in more.
func hfLayerNames(more map[string]string) map[string]string {
	m := map[string]string{
		"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
		"attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
		"attn_output.weight": "self_attn.o_proj.weight", "attn_q_norm.weight": "self_attn.q_norm.weight",
		"attn_k_norm.weight": "self_attn.k_norm.weight",
	}
	maps.Copy(m, more)
	return m
}

// hfDirFrom writes g's F32 weights as a Hugging Face directory: each
// block tensor under "model.layers.N." + layer[its canonical suffix]
// (every one must have a name there), the vectors less normShift (Gemma
// stores its norms' weights as the factor minus one), extra tensors
// beside them, config.json from cfg and a stub tokenizer.json.
func hfDirFrom(t *testing.T, g *weights.Model, layer map[string]string, normShift float32, cfg map[string]any, extra map[string]weights.SafeTensor) string {
	t.Helper()
	return hfDirFromPrefixed(t, "", g, layer, normShift, cfg, extra)
}

// hfDirFromPrefixed is hfDirFrom with each of g's tensors named under
// prefix ("language_model." for a multimodal checkpoint's language model).
func hfDirFromPrefixed(t *testing.T, prefix string, g *weights.Model, layer map[string]string, normShift float32, cfg map[string]any, extra map[string]weights.SafeTensor) string {
	t.Helper()
	hfName := func(canon string) string {
		switch canon {
		case "token_embd.weight":
			return "model.embed_tokens.weight"
		case "output.weight":
			return "lm_head.weight"
		case "output_norm.weight":
			return "model.norm.weight"
		}
		var l int
		var suf string
		if _, err := fmt.Sscanf(strings.Replace(canon, ".", " ", 2), "blk %d %s", &l, &suf); err != nil || layer[suf] == "" {
			t.Fatalf("no HF name for %s", canon)
		}
		return fmt.Sprintf("model.layers.%d.%s", l, layer[suf])
	}
	tensors := map[string]weights.SafeTensor{}
	for name, x := range g.Matrices {
		if x.Type != kernels.F32 {
			t.Fatalf("%s is %v", name, x.Type)
		}
		tensors[prefix+hfName(name)] = weights.SafeTensor{DType: "F32", Shape: []int{x.Rows, x.Cols}, Data: x.Data}
	}
	for name, v := range g.Vectors {
		b := make([]byte, 4*len(v))
		for i, f := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f-normShift))
		}
		tensors[prefix+hfName(name)] = weights.SafeTensor{DType: "F32", Shape: []int{len(v)}, Data: b}
	}
	for name, x := range extra {
		tensors[name] = x
	}
	dir := t.TempDir()
	if err := weights.WriteSafetensors(filepath.Join(dir, "model.safetensors"), tensors); err != nil {
		t.Fatal(err)
	}
	cj, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{"config.json": cj, "tokenizer.json": []byte(`{"version":"1.0","model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`)} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// checkSameLogits fails unless models a and b give the same logits, to
// the bit, for every position of a 40-token sequence.
func checkSameLogits(t *testing.T, a, b *weights.Model) {
	t.Helper()
	checkLogitsWithin(t, a, b, 0)
}

// checkLogitsWithin fails unless models a and b's logits for every
// position of a 40-token sequence differ by at most tol.
func checkLogitsWithin(t *testing.T, a, b *weights.Model, tol float64) {
	t.Helper()
	seq := make([]int32, 40)
	for i := range seq {
		seq[i] = int32((i*131 + 7) % a.Config.VocabSize)
	}
	var logits [2][]float32
	for i, w := range []*weights.Model{a, b} {
		m, err := NewModel(w, kernels.NewCPU(1))
		if err != nil {
			t.Fatal(err)
		}
		logits[i] = allLogits(m, seq)
	}
	worst := 0.0
	for i := range logits[0] {
		worst = max(worst, math.Abs(float64(logits[0][i]-logits[1][i])))
	}
	if worst > tol || len(logits[0]) != len(logits[1]) {
		t.Fatalf("the HF directory's logits differ from the GGUF's by up to %g (tolerance %g)", worst, tol)
	}
}
