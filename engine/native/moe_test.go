package native

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// moePath writes the tiny-moe demo model in dt once per test.
func moePath(t *testing.T, dt kernels.DType) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiny-moe.gguf")
	if err := demomodel.WriteFile(path, demomodel.Shapes["tiny-moe"], dt, 3); err != nil {
		t.Fatal(err)
	}
	return path
}

// route: the most probable experts per row, the lower index first on a
// tie, their weights the softmax renormalized over the chosen (or not);
// each expert's rows in row order; an expert no row chose gets none.
func TestMoERoute(t *testing.T) {
	logits := []float32{
		0, 2, 1, -9, // row 0: experts 1, 2
		5, 5, 0, -9, // row 1: a tie, 0 before 1
		1, 0, 3, -9, // row 2: experts 2, 0
	}
	var r routes
	r.route(logits, 3, 4, gating{used: 2, norm: true})
	wantRows := [][]int32{{1, 2}, {0, 1}, {0, 2}, {}}
	for e, want := range wantRows {
		if !slices.Equal(r.rows[e], want) {
			t.Errorf("expert %d: rows %v, want %v", e, r.rows[e], want)
		}
	}
	weightOf := func(e int, row int32) float64 {
		i := slices.Index(r.rows[e], row)
		return float64(r.weight[e][i])
	}
	// Row 0: softmax over 0, 2, 1 (and -9), renormalized over e^2 and e^1.
	if w, want := weightOf(1, 0), math.E/(math.E+1); math.Abs(w-want) > 1e-6 {
		t.Errorf("row 0 expert 1: weight %g, want %g", w, want)
	}
	for row := range int32(3) {
		sum := 0.0
		for e := range 4 {
			if slices.Contains(r.rows[e], row) {
				sum += weightOf(e, row)
			}
		}
		if math.Abs(sum-1) > 1e-6 {
			t.Errorf("row %d: weights sum to %g, want 1", row, sum)
		}
	}
	// Without renormalization the weights are the softmax probabilities.
	r.route(logits, 3, 4, gating{used: 2})
	p := math.Exp(2) / (1 + math.Exp(2) + math.E + math.Exp(-9))
	if w := weightOf(1, 0); math.Abs(w-p) > 1e-6 {
		t.Errorf("unnormalized row 0 expert 1: weight %g, want %g", w, p)
	}
	// Reused for a smaller batch, nothing of the last one is left.
	r.route(logits[:4], 1, 4, gating{used: 1, norm: true})
	if len(r.rows[0])+len(r.rows[2])+len(r.rows[3]) != 0 || !slices.Equal(r.rows[1], []int32{0}) || r.weight[1][0] != 1 {
		t.Errorf("one row, one expert: %v %v", r.rows, r.weight)
	}
}

// route with GLM-4.5's gating: each expert's sigmoid, the experts chosen
// by sigmoid plus selection bias but weighted by the sigmoid alone,
// renormalized or not, then scaled.
func TestMoERouteSigmoid(t *testing.T) {
	logits := []float32{0, 2, 1, -1} // sigmoids .5, .88, .73, .27
	sig := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	var r routes
	// The bias lifts expert 3 over expert 2 (and 0): chosen 1 and 3.
	bias := []float32{0, 0, 0, 0.5}
	r.route(logits, 1, 4, gating{used: 2, sigmoid: true, selBias: bias, scale: 2.5})
	if !slices.Equal(r.rows[1], []int32{0}) || !slices.Equal(r.rows[3], []int32{0}) || len(r.rows[0])+len(r.rows[2]) != 0 {
		t.Fatalf("rows %v, want experts 1 and 3", r.rows)
	}
	if w, want := float64(r.weight[3][0]), 2.5*sig(-1); math.Abs(w-want) > 1e-6 {
		t.Errorf("unnormalized expert 3: weight %g, want 2.5·σ(-1) = %g (the bias chooses, it does not weigh)", w, want)
	}
	r.route(logits, 1, 4, gating{used: 2, sigmoid: true, selBias: bias, norm: true, scale: 2.5})
	if w, want := float64(r.weight[1][0]), 2.5*sig(2)/(sig(2)+sig(-1)); math.Abs(w-want) > 1e-6 {
		t.Errorf("normalized expert 1: weight %g, want %g", w, want)
	}
	// Without the bias the two most probable: 1 and 2.
	r.route(logits, 1, 4, gating{used: 2, sigmoid: true})
	if len(r.rows[1]) != 1 || len(r.rows[2]) != 1 {
		t.Errorf("no bias: rows %v, want experts 1 and 2", r.rows)
	}
}

// A qwen3moe file loads with its experts as one matrix each and the
// router, and a batch of 64 tokens sends rows to every expert over the
// layers, ExpertsUsed per token in each (the grouping runs with experts
// busy and, where a layer's router skips one, idle).
func TestMoEModel(t *testing.T) {
	w, err := weights.Load(moePath(t, kernels.F32))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c := w.Config
	if c.Arch != "qwen3moe" || c.Experts != 8 || c.ExpertsUsed != 2 || c.ExpertFFNDim != 96 || !c.ExpertNormTopK {
		t.Fatalf("config %+v", c)
	}
	if n := len(w.Experts["blk.2.ffn_down_exps.weight"]); n != 8 {
		t.Fatalf("%d down experts, want 8", n)
	}
	if x := w.Experts["blk.0.ffn_gate_exps.weight"][7]; x.Rows != 96 || x.Cols != 128 {
		t.Fatalf("expert 7's gate is %dx%d", x.Rows, x.Cols)
	}
	if !strings.Contains(w.WeightTypes(), "F32×") {
		t.Errorf("weight types %q", w.WeightTypes())
	}
	m, err := NewModelOn(w, kernels.NewCPUDevice(kernels.NewCPU(1)))
	if err != nil {
		t.Fatal(err)
	}
	seq := make([]int32, 64)
	for i := range seq {
		seq[i] = int32((i*7919 + 13) % c.VocabSize)
	}
	kv, table := m.scratchKV(len(seq))
	var s scratch
	b := batch{kv: kv, tokens: seq, segs: []segment{{blocks: table, n: len(seq)}}, logitRows: []int{63}}
	for i := range seq {
		b.pos = append(b.pos, int32(i))
	}
	m.forward(&b, &s)
	hits := make([]int, c.Experts)
	for l, rows := range s.moe.rows {
		sum := 0
		for e, n := range rows {
			hits[e] += n
			sum += n
		}
		if sum != 64*c.ExpertsUsed {
			t.Errorf("layer %d routed %d rows, want 64 × %d", l, sum, c.ExpertsUsed)
		}
	}
	for e, n := range hits {
		if n == 0 {
			t.Errorf("expert %d got no row of 64 tokens in any layer", e)
		}
	}
	// A file choosing more experts per token than it has is refused, naming both.
	bad := demomodel.Shapes["tiny-moe"]
	bad.ExpertsUsed = 9
	badPath := filepath.Join(t.TempDir(), "bad-moe.gguf")
	if err := demomodel.WriteFile(badPath, bad, kernels.F32, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := weights.Load(badPath); err == nil || !strings.Contains(err.Error(), "experts = 8, used per token = 9") {
		t.Errorf("9 of 8 experts per token: %v", err)
	}
	// A device that runs a pass as one graph (the CUDA device) refuses it.
	if _, err := NewModelOn(w, graphDevice{kernels.NewCPUDevice(kernels.NewCPU(1))}); err == nil || !strings.Contains(err.Error(), "mixture of experts") {
		t.Errorf("a graph-capturing device: %v, want a refusal naming the mixture of experts", err)
	}
}

// graphDevice is the CPU device claiming to capture passes as graphs, as
// the CUDA device does.
type graphDevice struct{ kernels.Device }

func (graphDevice) BeginPass() {}

// skipMoEDevice skips t on the devices that refuse mixtures of experts.
func skipMoEDevice(t *testing.T) {
	if strings.HasPrefix(defaultDevice, DeviceCUDA) {
		t.Skipf("the %s device does not run mixtures of experts yet", defaultDevice)
	}
}

// MoE keeps batch invariance: 64 mixed requests give each what it gets
// alone, in F32 and on the int8 kernels (where an expert's row count
// picks the kernels' paths).
func TestMoEBatchInvariance(t *testing.T) {
	skipMoEDevice(t)
	for _, dt := range []kernels.DType{kernels.F32, kernels.Q4_0} {
		t.Run(dt.String(), func(t *testing.T) {
			checkBatchInvariance64(t, moePath(t, dt))
		})
	}
}
