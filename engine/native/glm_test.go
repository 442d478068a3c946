package native

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// TestGLMConfig: a glm4moe GGUF as llama.cpp reads it — its
// multi-token-prediction layer left out of the decoder, the first layer
// dense, the rest a mixture routed by sigmoid with a selection bias,
// renormalized, scaled, beside a shared expert; half of each head rotated
// — and its Hugging Face twin with the prediction layer's tensors (which
// transformers' decoder does not run either) gives the same logits; grouped
// routing is refused by name.
func TestGLMConfig(t *testing.T) {
	skipMoEDevice(t)
	gp, hp := demoTwins(t, demomodel.Shapes["tiny-glm4moe"], kernels.F32)
	g, err := weights.Load(gp)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	c := g.Config
	if c.Layers != 3 || c.DenseLayers != 1 || c.SharedFFNDim != 96 || !c.ExpertSigmoid || !c.ExpertSelBias || c.ExpertScale != 2.5 ||
		!c.ExpertNormTopK || c.RopeDim != 16 || c.HeadDim != 32 || !c.QKVBias || c.QKNorm || c.FFNDim != 352 {
		t.Fatalf("config %+v", c)
	}
	m, err := NewModel(g, kernels.NewCPU(1))
	if err != nil {
		t.Fatal(err)
	}
	if m.layers[0].router != nil || m.layers[0].wGate == nil || m.layers[1].router == nil || m.layers[2].gateShared == nil || len(m.layers[2].selBias) != 8 {
		t.Fatalf("layer 0 dense, 1 and 2 routed with a shared expert and a selection bias: %+v", m.layers)
	}
	mtp := map[string]weights.SafeTensor{}
	for _, name := range []string{"model.layers.3.eh_proj.weight", "model.layers.3.self_attn.q_proj.weight", "model.layers.3.mlp.experts.0.up_proj.weight"} {
		mtp[name] = weights.SafeTensor{DType: "F32", Shape: []int{2, 4}, Data: make([]byte, 32)}
	}
	addShard(t, hp, mtp)
	h, err := weights.Load(hp)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	checkSameLogits(t, g, h)

	editConfig(t, hp, func(cfg map[string]any) map[string]any {
		cfg["n_group"], cfg["topk_group"] = 4, 2
		return cfg
	})
	if _, err := weights.Load(hp); err == nil || !strings.Contains(err.Error(), "n_group") {
		t.Errorf("n_group 4: %v, want a refusal naming it", err)
	}
	if _, err := weights.Load(filepath.Join(t.TempDir(), "none.gguf")); err == nil {
		t.Error("a missing file loaded")
	}
}

// GLM's mixture keeps batch invariance: 64 mixed requests give each what
// it gets alone (sigmoid routing and the shared expert included).
func TestGLMBatchInvariance(t *testing.T) {
	skipMoEDevice(t)
	checkBatchInvariance64(t, shapePath(t, "tiny-glm4moe", kernels.Q8_0))
}
