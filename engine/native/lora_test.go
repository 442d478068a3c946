package native

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// testLoRA is an adapter written by a test: its tensors by PEFT module and
// layer, kept to merge into the weights.
type testLoRA struct {
	rank  int
	scale float32
	a, b  map[string][]float32 // canonical matrix name → A (rank×in), B (out×rank)
}

// makeLoRA draws an adapter of rank r on modules for every layer of w
// (bScale 0: B = 0, the adapter changes nothing).
func makeLoRA(w *weights.Model, modules []string, r int, seed uint64, bScale float32) *testLoRA {
	l := &testLoRA{rank: r, a: map[string][]float32{}, b: map[string][]float32{}}
	rng := demomodel.Rand(seed)
	for li := range w.Config.Layers {
		for _, t := range weights.LoRATargets {
			if !slices.Contains(modules, t.Module) {
				continue
			}
			name := weights.BlockName(li, t.Suffix)
			m := w.Matrices[name]
			a, b := make([]float32, r*m.Cols), make([]float32, m.Rows*r)
			for i := range a {
				a[i] = 0.05 * rng.Normal()
			}
			for i := range b {
				b[i] = bScale * rng.Normal()
			}
			l.a[name], l.b[name] = a, b
		}
	}
	return l
}

// peftName is the PEFT tensor name of canonical matrix name's A or B.
func peftName(canon, ab string) string {
	var layer int
	var suf string
	fmt.Sscanf(canon, "blk.%d.", &layer)
	suf = canon[strings.Index(canon[4:], ".")+5:]
	for _, t := range weights.LoRATargets {
		if t.Suffix == suf {
			block := "self_attn"
			if strings.HasPrefix(suf, "ffn_") {
				block = "mlp"
			}
			return fmt.Sprintf("base_model.model.model.layers.%d.%s.%s.lora_%s.weight", layer, block, t.Module, ab)
		}
	}
	panic("no target " + suf)
}

// tensors returns l's safetensors tensors; edit may change them.
func (l *testLoRA) tensors(w *weights.Model) map[string]weights.SafeTensor {
	ts := map[string]weights.SafeTensor{}
	for name, a := range l.a {
		m := w.Matrices[name]
		ts[peftName(name, "A")] = weights.SafeTensor{DType: "F32", Shape: []int{l.rank, m.Cols}, Data: f32Bytes(a)}
		ts[peftName(name, "B")] = weights.SafeTensor{DType: "F32", Shape: []int{m.Rows, l.rank}, Data: f32Bytes(l.b[name])}
	}
	return ts
}

// writePEFT writes l as a PEFT directory with lora_alpha alpha.
func (l *testLoRA) writePEFT(t *testing.T, w *weights.Model, alpha float64) string {
	t.Helper()
	dir := t.TempDir()
	var mods []string
	for _, tg := range weights.LoRATargets {
		mods = append(mods, tg.Module)
	}
	cfg, _ := json.Marshal(map[string]any{"peft_type": "LORA", "r": l.rank, "lora_alpha": alpha, "target_modules": mods, "bias": "none"})
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := weights.WriteSafetensors(filepath.Join(dir, "adapter_model.safetensors"), l.tensors(w)); err != nil {
		t.Fatal(err)
	}
	l.scale = float32(alpha / float64(l.rank))
	return dir
}

// merged returns w with l merged into its matrices: W + scale·B·A.
func (l *testLoRA) merged(w *weights.Model) *weights.Model {
	mw := *w
	mw.Matrices = map[string]*kernels.Matrix{}
	for name, m := range w.Matrices {
		mw.Matrices[name] = m
		a, ok := l.a[name]
		if !ok {
			continue
		}
		if m.Type != kernels.F32 {
			panic("the demo model is F32")
		}
		b := l.b[name]
		data := slices.Clone(m.Data)
		for r := range m.Rows {
			for c := range m.Cols {
				var d float64
				for k := range l.rank {
					d += float64(b[r*l.rank+k]) * float64(a[k*m.Cols+c])
				}
				i := 4 * (r*m.Cols + c)
				v := math.Float32frombits(binary.LittleEndian.Uint32(data[i:])) + l.scale*float32(d)
				binary.LittleEndian.PutUint32(data[i:], math.Float32bits(v))
			}
		}
		nm, err := kernels.NewMatrix(kernels.F32, m.Rows, m.Cols, data)
		if err != nil {
			panic(err)
		}
		mw.Matrices[name] = nm
	}
	return &mw
}

// promptLogits runs prompts in one batch, prompt i with adapters[i], and
// returns each prompt's logits at every position.
func promptLogits(m *Model, prompts [][]int32, adapters []*adapter) [][]float32 {
	var b batch
	blocks := 0
	for _, p := range prompts {
		blocks += blocksFor(len(p), kvBlockSize)
	}
	kv, _ := m.scratchKV(blocks * kvBlockSize)
	defer kv.free()
	b.kv = kv
	block := 0
	for i, p := range prompts {
		nb := blocksFor(len(p), kvBlockSize)
		table := make([]int32, nb)
		for j := range table {
			table[j] = int32(block + j)
		}
		block += nb
		first := len(b.tokens)
		b.tokens = append(b.tokens, p...)
		for j := range p {
			b.pos = append(b.pos, int32(j))
			b.logitRows = append(b.logitRows, first+j)
		}
		b.segs = append(b.segs, segment{blocks: table, first: first, n: len(p), adapter: adapters[i]})
		b.lora = b.lora || adapters[i] != nil
	}
	var s scratch
	all := m.forward(&b, &s)
	vocab := m.cfg.VocabSize
	var out [][]float32
	row := 0
	for _, p := range prompts {
		out = append(out, slices.Clone(all[row*vocab:(row+len(p))*vocab]))
		row += len(p)
	}
	return out
}

func loadDemo(t *testing.T) (*weights.Model, *Model) {
	t.Helper()
	w, m, _ := loadModel(t, demoPath(t))
	return w, m
}

var allModules = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

var loraPrompt = []int32{1, 17, 300, 42, 9, 100, 5, 77, 123, 64, 8, 250, 3, 99, 360, 11, 12, 13, 14, 15}

// A zero adapter (B = 0) gives the base model's logits exactly.
func TestLoRAZeroAdapterIsBase(t *testing.T) {
	w, m := loadDemo(t)
	l := makeLoRA(w, allModules, 4, 1, 0)
	a, err := m.loadAdapter("zero", l.writePEFT(t, w, 8))
	if err != nil {
		t.Fatal(err)
	}
	base := promptLogits(m, [][]int32{loraPrompt}, []*adapter{nil})[0]
	got := promptLogits(m, [][]int32{loraPrompt}, []*adapter{a})[0]
	for i := range base {
		if got[i] != base[i] {
			t.Fatalf("logit %d: %g with a zero adapter, %g without", i, got[i], base[i])
		}
	}
}

// A non-zero adapter matches the model whose weights have it merged in,
// W' = W + scale·B·A (computed here in float64, rounded once), within
// float32 rounding: |Δ| ≤ 1e-4·(1 + max|logit|) per row.
func TestLoRAMatchesMergedWeights(t *testing.T) {
	w, m := loadDemo(t)
	l := makeLoRA(w, allModules, 4, 2, 0.05)
	a, err := m.loadAdapter("ft", l.writePEFT(t, w, 16)) // scale 4
	if err != nil {
		t.Fatal(err)
	}
	checkMerged(t, w, m, l, a)
}

// checkMerged compares m's logits with adapter a (made from l) to those of
// w with l merged in.
func checkMerged(t *testing.T, w *weights.Model, m *Model, l *testLoRA, a *adapter) {
	t.Helper()
	if ts := w.WeightTypes(); !strings.HasPrefix(ts, "F32×") || strings.Contains(ts, " ") {
		// Merging needs float weights; a quantized base multiplies
		// quantized activations, which the merged F32 model does not.
		t.Skipf("the merge comparison needs an F32 base model; the demo model holds %s (BATCHD_TEST_WEIGHTS)", ts)
	}
	merged, err := NewModelOn(l.merged(w), m.dev)
	if err != nil {
		t.Fatal(err)
	}
	got := promptLogits(m, [][]int32{loraPrompt}, []*adapter{a})[0]
	want := promptLogits(merged, [][]int32{loraPrompt}, []*adapter{nil})[0]
	base := promptLogits(m, [][]int32{loraPrompt}, []*adapter{nil})[0]
	vocab := m.cfg.VocabSize
	changed := 0.0
	for r := 0; r < len(want)/vocab; r++ {
		row := want[r*vocab : (r+1)*vocab]
		big := 0.0
		for _, v := range row {
			big = max(big, math.Abs(float64(v)))
		}
		tol := 1e-4 * (1 + big)
		for j := range row {
			i := r*vocab + j
			if d := math.Abs(float64(got[i] - want[i])); d > tol {
				t.Fatalf("position %d logit %d: %g with the adapter, %g merged (tolerance %g)", r, j, got[i], want[i], tol)
			}
			changed = max(changed, math.Abs(float64(want[i]-base[i])))
		}
	}
	// The adapter must matter, or the comparison proves nothing.
	if changed < 1e-2 {
		t.Fatalf("the adapter changes the logits by at most %g: too little to test", changed)
	}
}

// Sequences of two adapters and of none in one forward pass each get
// exactly the logits of their own run.
func TestLoRAMixedBatchMatchesSingleRuns(t *testing.T) {
	w, m := loadDemo(t)
	a1, err := m.loadAdapter("a1", makeLoRA(w, allModules, 4, 3, 0.05).writePEFT(t, w, 8))
	if err != nil {
		t.Fatal(err)
	}
	a2, err := m.loadAdapter("a2", makeLoRA(w, []string{"q_proj", "v_proj", "down_proj"}, 2, 4, 0.05).writePEFT(t, w, 2))
	if err != nil {
		t.Fatal(err)
	}
	prompts := [][]int32{loraPrompt[:7], loraPrompt[3:15], loraPrompt[:20], loraPrompt[5:9], loraPrompt[2:11]}
	ads := []*adapter{a1, nil, a2, a2, a1}
	batched := promptLogits(m, prompts, ads)
	for i, p := range prompts {
		alone := promptLogits(m, [][]int32{p}, []*adapter{ads[i]})[0]
		if !slices.Equal(alone, batched[i]) {
			t.Errorf("prompt %d (adapter %v): batched logits differ from its own run", i, ads[i] != nil)
		}
	}
	if slices.Equal(batched[0], promptLogits(m, [][]int32{prompts[0]}, []*adapter{nil})[0]) {
		t.Fatal("adapter a1 does not change the logits: the test proves nothing")
	}
}

// A single .safetensors file: rank from the tensors, alpha from the
// metadata's lora_alpha, else the rank.
func TestLoRASingleFileAlpha(t *testing.T) {
	w, m := loadDemo(t)
	l := makeLoRA(w, []string{"o_proj", "up_proj"}, 3, 5, 0.05)
	for _, c := range []struct {
		meta  map[string]string
		scale float32
	}{{nil, 1}, {map[string]string{"lora_alpha": "6"}, 2}} {
		path := filepath.Join(t.TempDir(), "ft.safetensors")
		if err := weights.WriteSafetensorsMeta(path, l.tensors(w), c.meta); err != nil {
			t.Fatal(err)
		}
		a, err := m.loadAdapter("ft", path)
		if err != nil {
			t.Fatal(err)
		}
		l.scale = c.scale
		checkMerged(t, w, m, l, a)
	}
}

// Bad adapter files are refused at load with the file and tensor named.
func TestLoRALoadErrors(t *testing.T) {
	w, m := loadDemo(t)
	l := makeLoRA(w, []string{"q_proj"}, 2, 6, 0.05)
	write := func(edit func(ts map[string]weights.SafeTensor)) string {
		ts := l.tensors(w)
		edit(ts)
		path := filepath.Join(t.TempDir(), "bad.safetensors")
		if err := weights.WriteSafetensors(path, ts); err != nil {
			t.Fatal(err)
		}
		return path
	}
	qA := "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"
	qB := "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight"
	dim := w.Config.Dim // q_proj is dim × dim in the demo models
	for _, c := range []struct {
		name string
		path string
		want []string
	}{
		{"missing B", write(func(ts map[string]weights.SafeTensor) { delete(ts, qB) }), []string{"missing tensor", qB}},
		{"wrong shape", write(func(ts map[string]weights.SafeTensor) {
			ts[qA] = weights.SafeTensor{DType: "F32", Shape: []int{2, 64}, Data: make([]byte, 4*2*64)}
		}), []string{qA, "[2, 64]", fmt.Sprintf("want [r, %d]", dim)}},
		{"rank mismatch", write(func(ts map[string]weights.SafeTensor) {
			ts[qB] = weights.SafeTensor{DType: "F32", Shape: []int{dim, 3}, Data: make([]byte, 4*dim*3)}
		}), []string{qB, fmt.Sprintf("want [%d, 2]", dim)}},
		{"unsupported target", write(func(ts map[string]weights.SafeTensor) {
			ts["base_model.model.lm_head.lora_A.weight"] = weights.SafeTensor{DType: "F32", Shape: []int{2, 128}, Data: make([]byte, 4*2*128)}
		}), []string{"lm_head.lora_A.weight", "supported targets: q_proj"}},
		{"unsupported module", write(func(ts map[string]weights.SafeTensor) {
			ts["base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight"] = weights.SafeTensor{DType: "F32", Shape: []int{2, 128}, Data: make([]byte, 4*2*128)}
		}), []string{`target "qkv_proj" is not supported`}},
		{"layer out of range", write(func(ts map[string]weights.SafeTensor) {
			ts["base_model.model.model.layers.9.self_attn.q_proj.lora_A.weight"] = ts[qA]
		}), []string{"layers.9", "the model has 4 layers"}},
	} {
		t.Run(c.name, func(t *testing.T) { wantLoadError(t, m, c.path, c.want...) })
	}
	t.Run("target_modules embed_tokens", func(t *testing.T) {
		dir := l.writePEFT(t, w, 4)
		cfg := `{"peft_type":"LORA","r":2,"lora_alpha":4,"target_modules":["q_proj","embed_tokens"]}`
		os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(cfg), 0o644)
		_, err := m.loadAdapter("bad", dir)
		if err == nil || !strings.Contains(err.Error(), `target_modules: "embed_tokens" is not supported`) || !strings.Contains(err.Error(), "adapter_config.json") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("config rank differs", func(t *testing.T) {
		dir := l.writePEFT(t, w, 4)
		os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(`{"r":8,"lora_alpha":4,"target_modules":["q_proj"]}`), 0o644)
		_, err := m.loadAdapter("bad", dir)
		if err == nil || !strings.Contains(err.Error(), "r = 8 but the tensors have rank 2") {
			t.Fatalf("error %v", err)
		}
	})
}

// wantLoadError checks that loading path on m fails with an error that
// names the path and holds each of want.
func wantLoadError(t *testing.T, m *Model, path string, want ...string) {
	t.Helper()
	_, err := m.loadAdapter("bad", path)
	if err == nil {
		t.Fatal("loaded")
	}
	for _, s := range append(want, path) {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

// Through the engine: model naming an adapter and lora_name choose it, an
// unknown one is a 400 naming the field and the adapters, and the prefix
// cache keeps the base model's blocks apart from the adapter's.
func TestLoRAEngineRequests(t *testing.T) {
	w, _ := loadDemo(t)
	dir := makeLoRA(w, allModules, 4, 7, 0.05).writePEFT(t, w, 16)
	mc := ModelConfig{Path: demoPath(t), Adapters: map[string]string{"ft": dir}}
	const msgs = `"messages":[{"role":"user","content":"Tell me a story about a cat and a dog who live by the sea"}]`
	ask := func(e *Engine, extra string) []any {
		m := do(t, e, engine.EndpointChat, `{`+msgs+`,"max_tokens":4,"temperature":0,"logprobs":true`+extra+`}`)
		if want := map[bool]string{true: "ft", false: "demo-tiny"}[strings.Contains(extra, "ft")]; m["model"] != want {
			t.Errorf("%s: response model %v, want %s", extra, m["model"], want)
		}
		return m["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)["content"].([]any)
	}
	e := openEngine(t, mc)
	base := ask(e, "")
	byModel := ask(e, `,"model":"ft"`)
	byName := ask(e, `,"lora_name":"ft"`)
	fresh := ask(openEngine(t, mc), `,"lora_name":"ft"`)
	if fmt.Sprint(byModel) != fmt.Sprint(byName) || fmt.Sprint(byName) != fmt.Sprint(fresh) {
		t.Fatalf("adapter runs differ:\nmodel:     %v\nlora_name: %v\nfresh:     %v", byModel, byName, fresh)
	}
	if fmt.Sprint(base) == fmt.Sprint(byName) {
		t.Fatalf("the adapter changed nothing: %v", base)
	}
	if again := ask(e, ""); fmt.Sprint(again) != fmt.Sprint(base) {
		t.Fatalf("base after adapter runs: %v, first %v", again, base)
	}

	for _, c := range []struct{ body, want string }{
		{`{` + msgs + `,"lora_name":"nope"}`, `lora_name: the LoRA adapter \"nope\" is not loaded for model \"demo-tiny\"; its adapters: ft`},
		{`{` + msgs + `,"model":"ft","lora_name":"other"}`, `\"other\" is not loaded`},
		{`{"input":"hi","model":"ft"}`, `embeddings run on base models only`},
	} {
		ep := engine.EndpointChat
		if strings.Contains(c.body, `"input"`) {
			ep = engine.EndpointEmbeddings
		}
		resp, err := e.Do(context.Background(), &engine.Request{CustomID: "x", Endpoint: ep, Body: json.RawMessage(c.body)})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 400 || !strings.Contains(string(resp.Body), c.want) {
			t.Errorf("%s: %d %s, want a 400 with %s", c.body, resp.StatusCode, resp.Body, c.want)
		}
	}
}

// A bad adapter stops the engine at start, naming the config field; the
// config refuses adapter names that collide.
func TestLoRAConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Models = []ModelConfig{{Path: demoPath(t), Adapters: map[string]string{"ft": filepath.Join(t.TempDir(), "none")}}}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Open(context.Background()); err == nil || !strings.Contains(err.Error(), "native.models[demo-tiny].adapters.ft") {
		t.Fatalf("open: %v", err)
	}
	for _, c := range []struct {
		models []ModelConfig
		want   string
	}{
		{[]ModelConfig{{Path: "a.gguf", Adapters: map[string]string{"a": "x"}}}, "native.models[0].adapters.a: the name is already"},
		{[]ModelConfig{{Path: "a.gguf", Adapters: map[string]string{"ft": "x"}}, {Path: "b.gguf", Adapters: map[string]string{"ft": "y"}}}, "native.models[1].adapters.ft"},
		{[]ModelConfig{{Path: "a.gguf", Adapters: map[string]string{"ft": ""}}}, "native.models[0].adapters.ft: path required"},
	} {
		cfg.Models = c.models
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.models, err, c.want)
		}
	}
}
