package native

import (
	"github.com/batchd/batchd/engine/native/demomodel"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// forEachBackend runs f on a CPU of each kernel backend this machine can
// run; the others skip, naming what they need.
func forEachBackend(t *testing.T, f func(t *testing.T, cpu *kernels.CPU)) {
	for _, b := range kernels.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			if !b.Built {
				t.Skipf("backend %s is not built into this test binary (it needs %s)", b.Name, b.BuildNeeds)
			}
			if len(b.Missing) > 0 {
				t.Skipf("backend %s needs CPU features this machine lacks: %s", b.Name, strings.Join(b.Missing, " "))
			}
			cpu, err := kernels.NewCPUBackend(2, b.Name)
			if err != nil {
				t.Fatal(err)
			}
			defer cpu.Close()
			if cpu.Backend() != b.Name {
				t.Fatalf("NewCPUBackend(%q) runs %q", b.Name, cpu.Backend())
			}
			f(t, cpu)
		})
	}
}

func loadOn(t *testing.T, path string, cpu *kernels.CPU) *Model {
	t.Helper()
	w, err := weights.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	m, err := NewModel(w, cpu)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkPrefillMatchesDecode runs seq as one prefill with logits for every
// position, then token by token, and requires equal logits bit for bit.
func checkPrefillMatchesDecode(t *testing.T, m *Model, seq []int32) {
	t.Helper()
	var s scratch
	vocab := m.cfg.VocabSize
	prefill := allLogits(m, seq)
	kv2, table2 := m.scratchKV(len(seq))
	for i, tok := range seq {
		one := batch{kv: kv2, tokens: []int32{tok}, pos: []int32{int32(i)}, segs: []segment{{blocks: table2, n: 1, start: i}}, logitRows: []int{0}}
		row := m.forward(&one, &s)[:vocab]
		for j, v := range row {
			if v != prefill[i*vocab+j] {
				t.Fatalf("position %d logit %d: %g decoded alone, %g in the prefill", i, j, v, prefill[i*vocab+j])
			}
		}
	}
}

// TestStoriesGoldenOnEveryBackend runs the real stories260K model's greedy
// golden on each kernel backend, not only the fastest, and checks batch
// invariance there: a prompt's prefill and its token-by-token decode agree
// bit for bit.
func TestStoriesGoldenOnEveryBackend(t *testing.T) {
	path := storiesPath(t)
	forEachBackend(t, func(t *testing.T, cpu *kernels.CPU) {
		m := loadOn(t, path, cpu)
		want := goldenIDs(t)
		got := greedy(m, []int32{1}, len(want))
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("token %d: got %d, want %d\ngot  %v\nwant %v", i, got[i], want[i], got, want)
			}
		}
		checkPrefillMatchesDecode(t, m, append([]int32{1}, got[:19]...))
	})
}

// TestQuantizedModelsOnEveryBackend: prefill and decode agree bit for bit
// for F16, BF16 and every block quantization on each backend (demo models
// whose shapes run the backends' assembly kernels).
func TestQuantizedModelsOnEveryBackend(t *testing.T) {
	dir := t.TempDir()
	for _, dt := range append([]kernels.DType{kernels.F16, kernels.BF16}, kernels.QuantTypes()...) {
		path := filepath.Join(dir, dt.String()+".gguf")
		// tiny-k's rows are whole 256-value blocks: every K-quant runs as
		// itself, no fallback type. Two layers: 15 types × 4 backends
		// under the race detector must stay within a minute or two.
		shape := demomodel.Shapes["tiny-k"]
		shape.Layers = 2
		if err := demomodel.WriteFile(path, shape, dt, 7); err != nil {
			t.Fatal(err)
		}
		t.Run(dt.String(), func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, cpu *kernels.CPU) {
				m := loadOn(t, path, cpu)
				// F16/BF16: avx2's 12-, 8- and 4-token groups; the block
				// types: three 4-token tiles and a one-token tail.
				n := 23
				if dt.BlockSize() > 1 {
					n = 13
				}
				seq := make([]int32, n)
				for i := range seq {
					seq[i] = int32((i*7919 + 13) % m.cfg.VocabSize)
				}
				checkPrefillMatchesDecode(t, m, seq)
			})
		})
	}
}

// TestPackedWeights: a model whose block-quantized matrices the CPU device
// packed at load gives bit for bit the logits of the same weights kept as
// the file maps them (native.keep_weights_mapped), on every backend, for
// a prompt long enough for the AMX tiles; and the backends with a packed
// layout (avx2; avx512 and amx for the 32-value formats) do pack.
func TestPackedWeights(t *testing.T) {
	dir := t.TempDir()
	for _, dt := range []kernels.DType{kernels.Q4_0, kernels.Q8_0, kernels.Q5_1, kernels.Q4_K, kernels.Q6_K} {
		path := filepath.Join(dir, dt.String()+".gguf")
		shape := demomodel.Shapes["tiny-k"]
		shape.Layers = 2
		if err := demomodel.WriteFile(path, shape, dt, 11); err != nil {
			t.Fatal(err)
		}
		t.Run(dt.String(), func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, cpu *kernels.CPU) {
				w, err := weights.Load(path)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				packed, err := NewModelOn(w, kernels.NewCPUDevice(cpu))
				if err != nil {
					t.Fatal(err)
				}
				mapped, err := newModelOn(w, kernels.NewCPUDevice(cpu), false)
				if err != nil {
					t.Fatal(err)
				}
				// avx2 packs every type here; avx512 and amx all but the K formats.
				be := cpu.Backend()
				wantPacked := be == kernels.BackendAVX2 ||
					(be == kernels.BackendAMX || be == kernels.BackendAVX512) && dt.BlockSize() == 32
				if (packed.packed > 0) != wantPacked || mapped.packed != 0 {
					t.Fatalf("%s: %d bytes packed, %d kept mapped (packing wanted: %v)", cpu.Backend(), packed.packed, mapped.packed, wantPacked)
				}
				seq := make([]int32, 37)
				for i := range seq {
					seq[i] = int32((i*7919 + 13) % packed.cfg.VocabSize)
				}
				a, b := allLogits(packed, seq), allLogits(mapped, seq)
				for i := range a {
					if a[i] != b[i] {
						t.Fatalf("logit %d: %g packed, %g mapped", i, a[i], b[i])
					}
				}
			})
		})
	}
}

// allLogits runs seq as one prefill and returns the logits of every
// position.
func allLogits(m *Model, seq []int32) []float32 {
	kv, table := m.scratchKV(len(seq))
	var s scratch
	b := batch{kv: kv, tokens: seq, segs: []segment{{blocks: table, n: len(seq)}}}
	for i := range seq {
		b.pos = append(b.pos, int32(i))
		b.logitRows = append(b.logitRows, i)
	}
	return append([]float32(nil), m.forward(&b, &s)[:len(seq)*m.cfg.VocabSize]...)
}
