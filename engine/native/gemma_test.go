package native

import (
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// shapePath writes the demo model of shape name in dt and returns its path.
func shapePath(t *testing.T, name string, dt kernels.DType) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".gguf")
	if err := demomodel.WriteFile(path, demomodel.Shapes[name], dt, 7); err != nil {
		t.Fatal(err)
	}
	return path
}

// skipFamilyDevice skips on devices that do not run the Gemma families'
// operations yet (the CUDA device).
func skipFamilyDevice(t *testing.T) {
	if strings.HasPrefix(defaultDevice, DeviceCUDA) {
		t.Skipf("the %s device does not run Gemma's operations or sliding windows yet", defaultDevice)
	}
}

// TestGemmaConfig: the GGUF's Gemma hyperparameters as llama.cpp reads
// them: embedding scale √dim, the sliding-window pattern (Gemma 2 every
// other layer, Gemma 3 five of six), the soft caps, Gemma 3's local RoPE
// base; and a device without their operations refuses them by name.
func TestGemmaConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sliding []bool
		attnCap float32
		local   float32
	}{
		{"tiny-gemma2", []bool{true, false, true, false}, 0.02, 0},
		{"tiny-gemma3", []bool{true, true, true, true, true, false, true}, 0, 10000},
	} {
		w, err := weights.Load(shapePath(t, tc.name, kernels.F32))
		if err != nil {
			t.Fatal(err)
		}
		c := w.Config
		if c.EmbedScale != float32(math.Sqrt(128)) || !c.PostNorms || !c.GELU || c.SlidingWindow != 6 ||
			c.AttnSoftCap != tc.attnCap || c.RopeThetaLocal != tc.local || c.AttnScale != float32(1/5.656854249492381) {
			t.Errorf("%s: config %+v", tc.name, c)
		}
		for i, want := range tc.sliding {
			if c.Sliding(i) != want {
				t.Errorf("%s: layer %d sliding %v, want %v", tc.name, i, c.Sliding(i), want)
			}
		}
		// A device without the families' operations refuses the model,
		// naming what it lacks.
		_, err = NewModelOn(w, plainDevice{kernels.NewCPUDevice(kernels.NewCPU(1))})
		if err == nil || !strings.Contains(err.Error(), "sliding-window attention") || !strings.Contains(err.Error(), "GeGLU") {
			t.Errorf("%s on a device without FamilyDevice: err = %v", tc.name, err)
		}
		w.Close()
	}
}

// plainDevice is a Device with only the interface's own methods: what a
// device that lacks kernels.FamilyDevice (the CUDA device, so far) offers.
type plainDevice struct{ kernels.Device }

// TestGemmaBatchInvariance: Gemma's sliding windows, soft caps and norms
// keep batch invariance: 64 mixed requests, most longer than the window
// and than a KV block, give each what it gets alone: Gemma 2 in F32,
// Gemma 3 on the int8 kernels.
func TestGemmaBatchInvariance(t *testing.T) {
	skipFamilyDevice(t)
	for _, tc := range []struct {
		name string
		dt   kernels.DType
	}{{"tiny-gemma2", kernels.F32}, {"tiny-gemma3", kernels.Q8_0}} {
		t.Run(tc.name+"/"+tc.dt.String(), func(t *testing.T) {
			checkBatchInvariance64(t, shapePath(t, tc.name, tc.dt))
		})
	}
}

// TestGemmaChunkedPrefill: a prompt's logits are the same to the bit
// whether it is run in one pass or a token at a time, the window sliding
// across block boundaries.
func TestGemmaChunkedPrefill(t *testing.T) {
	skipFamilyDevice(t)
	for _, name := range []string{"tiny-gemma2", "tiny-gemma3"} {
		w, err := weights.Load(shapePath(t, name, kernels.F32))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		m, err := NewModel(w, kernels.NewCPU(1))
		if err != nil {
			t.Fatal(err)
		}
		seq := make([]int32, 40)
		for i := range seq {
			seq[i] = int32((i*7919 + 13) % m.cfg.VocabSize)
		}
		whole := allLogits(m, seq)
		kv, table := m.scratchKV(len(seq))
		var s scratch
		V := m.cfg.VocabSize
		for i := range seq {
			b := batch{kv: kv, tokens: seq[i : i+1], pos: []int32{int32(i)}, logitRows: []int{0},
				segs: []segment{{blocks: table, n: 1, start: i}}}
			got := m.forward(&b, &s)[:V]
			for j, v := range got {
				if v != whole[i*V+j] {
					t.Fatalf("%s: position %d logit %d: %g token by token, %g in one pass", name, i, j, v, whole[i*V+j])
				}
			}
		}
		kv.free()
	}
}

// TestAutoDeviceFallsBackToCPU: with device "auto", a model the chosen
// device does not run (here a device without the families' operations,
// standing in for the GPU) runs on the CPU, with a warning naming why; a
// device named outright keeps its refusal.
func TestAutoDeviceFallsBackToCPU(t *testing.T) {
	w, err := weights.Load(shapePath(t, "tiny-gemma3", kernels.F32))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var logs strings.Builder
	cpu := kernels.NewCPU(1)
	e := &Engine{cfg: Config{Device: DeviceAuto}, cpu: cpu, log: slog.New(slog.NewTextHandler(&logs, nil))}
	m, err := e.modelOn(w, plainDevice{kernels.NewCPUDevice(cpu)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.dev.(*kernels.CPUDevice); !ok || !strings.Contains(logs.String(), "running it on the CPU") || !strings.Contains(logs.String(), "sliding-window attention") {
		t.Fatalf("device %s, log %q", m.dev.Name(), logs.String())
	}
	e.cfg.Device = DeviceCPU
	if _, err := e.modelOn(w, plainDevice{kernels.NewCPUDevice(cpu)}); err == nil || !strings.Contains(err.Error(), "GeGLU") {
		t.Fatalf("a device named outright: err = %v", err)
	}
}
