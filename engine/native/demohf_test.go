package native

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/chat"
	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// familyShapes are the demo shapes of every family the engine loads.
var familyShapes = []string{"tiny", "tiny-qwen3", "tiny-llama", "tiny-moe", "tiny-mixtral", "tiny-gemma2", "tiny-gemma3", "tiny-llama3", "tiny-gpt-oss", "tiny-phi", "tiny-glm4moe", "tiny-glm4.5", "tiny-qwen2moe"}

// demoTwins writes shape's demo model in t as a GGUF and as the Hugging
// Face directory demo-model --format hf writes, from one seed.
func demoTwins(t *testing.T, shape demomodel.Shape, dt kernels.DType) (gguf, hf string) {
	t.Helper()
	return demoTwinsQuant(t, shape, demomodel.HFQuant(shape, dt))
}

// demoTwinsQuant is demoTwins with the weights stored as q says.
func demoTwinsQuant(t *testing.T, shape demomodel.Shape, q demomodel.Quant) (gguf, hf string) {
	t.Helper()
	d := t.TempDir()
	gguf, hf = filepath.Join(d, shape.Name+".gguf"), filepath.Join(d, shape.Name+"-hf")
	if err := demomodel.WriteQuantFile(gguf, shape, q, 3); err != nil {
		t.Fatal(err)
	}
	if err := demomodel.WriteHFQuant(hf, shape, q, 3); err != nil {
		t.Fatal(err)
	}
	return gguf, hf
}

// skipShortFormats skips, under -short (the emulated CPUs' runs in CI),
// a test of what the two file formats hold, which no kernel backend
// changes.
func skipShortFormats(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the GGUF and Hugging Face formats' agreement does not depend on the CPU")
	}
}

// loadBoth loads the models at paths a and b, closed when t ends.
func loadBoth(t *testing.T, a, b string) (*weights.Model, *weights.Model) {
	t.Helper()
	var out [2]*weights.Model
	for i, p := range []string{a, b} {
		m, err := weights.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		out[i] = m
	}
	return out[0], out[1]
}

// TestDemoHFMatchesGGUF: for every family, the Hugging Face directory
// `batchd demo-model --format hf` writes loads to the model of the GGUF
// from the same seed — the same hyperparameters, logits to the bit (the
// llama arch within 1e-5: its Q and K rows are stored rotate-half, which
// sums a head's dims in another order), the same tokenizer and chat
// template — and the engine answers a greedy chat request with the same
// tokens from either.
func TestDemoHFMatchesGGUF(t *testing.T) {
	skipFamilyDevice(t)
	skipShortFormats(t)
	for _, name := range familyShapes {
		t.Run(name, func(t *testing.T) {
			shape := demomodel.Shapes[name]
			gp, hp := demoTwins(t, shape, kernels.F32)
			g, h := loadBoth(t, gp, hp)
			gc, hc := g.Config, h.Config
			// What the two formats spell differently but mean alike.
			if gc.Arch != hc.Arch || gc.Layers != hc.Layers || gc.Experts != hc.Experts || gc.ExpertsUsed != hc.ExpertsUsed || gc.ExpertNormTopK != hc.ExpertNormTopK ||
				gc.ExpertSigmoid != hc.ExpertSigmoid || gc.ExpertSelBias != hc.ExpertSelBias || gc.ExpertScale != hc.ExpertScale ||
				gc.SharedFFNDim != hc.SharedFFNDim || gc.DenseLayers != hc.DenseLayers || gc.RopeDim != hc.RopeDim || gc.QKVBias != hc.QKVBias || gc.QKNorm != hc.QKNorm ||
				!slices.Equal(gc.SlidingLayers, hc.SlidingLayers) || gc.SlidingWindow != hc.SlidingWindow || gc.TiedEmbeddings != hc.TiedEmbeddings ||
				gc.AttnSoftCap != hc.AttnSoftCap || gc.FinalSoftCap != hc.FinalSoftCap || gc.RopeAttnFactor != hc.RopeAttnFactor ||
				gc.VocabSize != hc.VocabSize || (gc.Yarn == nil) != (hc.Yarn == nil) || gc.Yarn != nil && *gc.Yarn != *hc.Yarn ||
				g.ChatTemplate != h.ChatTemplate || h.ChatTemplate != chat.ChatMLTemplate {
				t.Fatalf("HF config\n%+v\nGGUF config\n%+v", hc, gc)
			}
			tol := 0.0
			if gc.Arch == "llama" {
				tol = 1e-5
			}
			checkLogitsWithin(t, g, h, tol)

			gt, err := newTokenizer(g.Tokenizer, nil)
			if err != nil {
				t.Fatal(err)
			}
			ht, err := newTokenizer(h.Tokenizer, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, text := range []string{"Once upon a time, there was a little girl named Lily.", " Hello\n\n  world 2026!? \t<|im_end|>",
				"<|im_start|>user\nSay hello<|im_end|>\n<|im_start|>assistant\n", "Ünïcödé — 日本語 's 'll", ""} {
				a, b := gt.Encode(text, true, true), ht.Encode(text, true, true)
				if !slices.Equal(a, b) {
					t.Errorf("%q: GGUF tokens %v, HF tokens %v", text, a, b)
				}
			}
			if gt.EOS() != ht.EOS() || gt.BOS() != ht.BOS() {
				t.Errorf("GGUF EOS %d BOS %d, HF EOS %d BOS %d", gt.EOS(), gt.BOS(), ht.EOS(), ht.BOS())
			}

			e := openEngine(t, ModelConfig{Name: "gguf", Path: gp}, ModelConfig{Name: "hf", Path: hp})
			var got [2]string
			for i, model := range []string{"gguf", "hf"} {
				m := do(t, e, engine.EndpointChat, fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"Write a story about a cat"}],"max_tokens":12,"logprobs":true}`, model))
				var ids []string
				for _, lp := range m["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)["content"].([]any) {
					ids = append(ids, fmt.Sprint(lp.(map[string]any)["token_id"]))
				}
				got[i] = strings.Join(ids, " ")
			}
			if got[0] != got[1] || got[0] == "" {
				t.Fatalf("greedy tokens: GGUF %s, HF %s", got[0], got[1])
			}
		})
	}
}

// TestDemoHFTypes: the directory in F16 and BF16 holds the weights of the
// GGUF of that type (the same logits to the bit), gpt-oss's experts MXFP4
// (its checkpoints) or unquantized (its fine-tunes' gate_up_proj and
// down_proj, input-major); a type safetensors checkpoints are not written
// in is refused, and an existing directory is never overwritten.
func TestDemoHFTypes(t *testing.T) {
	skipFamilyDevice(t)
	skipShortFormats(t)
	for _, tc := range []struct {
		shape string
		q     demomodel.Quant
	}{
		{"tiny-qwen3", demomodel.Single(kernels.BF16)}, {"tiny-gemma3", demomodel.Single(kernels.F16)},
		{"tiny-gpt-oss", demomodel.HFQuant(demomodel.Shapes["tiny-gpt-oss"], kernels.BF16)},
		{"tiny-gpt-oss", demomodel.Single(kernels.BF16)}, {"tiny-gpt-oss", demomodel.Single(kernels.F32)},
	} {
		t.Run(tc.shape+"-"+tc.q.String(), func(t *testing.T) {
			gp, hp := demoTwinsQuant(t, demomodel.Shapes[tc.shape], tc.q)
			g, h := loadBoth(t, gp, hp)
			if g.WeightTypes() != h.WeightTypes() || !strings.Contains(h.WeightTypes(), tc.q.Base.String()) {
				t.Fatalf("weight types: GGUF %s, HF %s", g.WeightTypes(), h.WeightTypes())
			}
			checkSameLogits(t, g, h)
		})
	}
	dir := filepath.Join(t.TempDir(), "m")
	if err := demomodel.WriteHF(dir, demomodel.Shapes["tiny"], kernels.Q8_0, 1); err == nil || !strings.Contains(err.Error(), "f32, f16 or bf16") {
		t.Errorf("Q8_0: %v, want a refusal naming the types", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := demomodel.WriteHF(dir, demomodel.Shapes["tiny"], kernels.F32, 1); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("an existing directory: %v, want a refusal", err)
	}
	if _, err := os.Stat(dir + ".part"); !os.IsNotExist(err) {
		t.Errorf("a refused write left %s.part: %v", dir, err)
	}
}

// editConfig rewrites dir's config.json through edit.
func editConfig(t *testing.T, dir string, edit func(cfg map[string]any) map[string]any) {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if b, err = json.Marshal(edit(cfg)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// prefixSafetensors renames every tensor of the safetensors file at path
// to prefix + its name (its header rewritten, its data as it was).
func prefixSafetensors(t *testing.T, path, prefix string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var header map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	renamed := map[string]json.RawMessage{}
	for name, v := range header {
		if name != "__metadata__" {
			name = prefix + name
		}
		renamed[name] = v
	}
	h, err := json.Marshal(renamed)
	if err != nil {
		t.Fatal(err)
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	out = append(append(out, h...), b[8+n:]...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// addShard adds tensors to the directory dir of one model.safetensors as
// a second shard, extra.safetensors, with the index that maps both.
func addShard(t *testing.T, dir string, tensors map[string]weights.SafeTensor) {
	t.Helper()
	if err := weights.WriteSafetensors(filepath.Join(dir, "extra.safetensors"), tensors); err != nil {
		t.Fatal(err)
	}
	weightMap := map[string]string{}
	for _, shard := range []string{"model.safetensors", "extra.safetensors"} {
		b, err := os.ReadFile(filepath.Join(dir, shard))
		if err != nil {
			t.Fatal(err)
		}
		var header map[string]json.RawMessage
		if err := json.Unmarshal(b[8:8+binary.LittleEndian.Uint64(b)], &header); err != nil {
			t.Fatal(err)
		}
		for name := range header {
			if name != "__metadata__" {
				weightMap[name] = shard
			}
		}
	}
	ib, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), ib, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGemma3MultimodalHF: Gemma 3's multimodal checkpoints
// (Gemma3ForConditionalGeneration) hold the language model's tensors
// under language_model., its config as text_config, a vision tower and
// projector beside (in another shard): loaded as that language model, the
// same logits as the text-only directory's, to the bit.
func TestGemma3MultimodalHF(t *testing.T) {
	skipFamilyDevice(t)
	_, text := demoTwins(t, demomodel.Shapes["tiny-gemma3"], kernels.F32)
	mm := filepath.Join(t.TempDir(), "mm")
	if err := os.CopyFS(mm, os.DirFS(text)); err != nil {
		t.Fatal(err)
	}
	prefixSafetensors(t, filepath.Join(mm, "model.safetensors"), "language_model.")
	editConfig(t, mm, func(cfg map[string]any) map[string]any {
		return map[string]any{"model_type": "gemma3", "architectures": []string{"Gemma3ForConditionalGeneration"}, "text_config": cfg,
			"eos_token_id": []int{1, 106}, "vision_config": map[string]any{"model_type": "siglip_vision_model"}}
	})
	addShard(t, mm, map[string]weights.SafeTensor{
		"vision_tower.vision_model.post_layernorm.weight": {DType: "F32", Shape: []int{4}, Data: make([]byte, 16)},
		"multi_modal_projector.mm_soft_emb_norm.weight":   {DType: "F32", Shape: []int{4}, Data: make([]byte, 16)},
	})
	a, b := loadBoth(t, text, mm)
	if !slices.Equal(a.Config.SlidingLayers, b.Config.SlidingLayers) || a.Config.RopeThetaLocal != b.Config.RopeThetaLocal {
		t.Fatalf("multimodal config %+v, text-only %+v", b.Config, a.Config)
	}
	checkSameLogits(t, a, b)
}

// TestPhi3HFWindowIgnored: a Phi-3 config.json's sliding_window is left
// off, as llama.cpp leaves it (its GGUFs carry none): the directory with
// one gives the logits of the GGUF, to the bit.
func TestPhi3HFWindowIgnored(t *testing.T) {
	gp, hp := demoTwins(t, demomodel.Shapes["tiny-phi"], kernels.F32)
	editConfig(t, hp, func(cfg map[string]any) map[string]any {
		cfg["sliding_window"] = 7
		return cfg
	})
	g, h := loadBoth(t, gp, hp)
	if h.Config.SlidingWindow != 0 || h.Config.RopeAttnFactor != g.Config.RopeAttnFactor {
		t.Fatalf("HF window %d magnitude %g, GGUF magnitude %g", h.Config.SlidingWindow, h.Config.RopeAttnFactor, g.Config.RopeAttnFactor)
	}
	checkSameLogits(t, g, h)
}
