package native

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// storiesPath returns the stories260K model file, or skips: the model lives
// in the shared test data, whose directory CI exports as BATCHD_STORIES260K.
func storiesPath(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("BATCHD_STORIES260K")
	if dir == "" {
		t.Skip("BATCHD_STORIES260K is unset: set it to the directory holding stories260K.gguf (../shared/models/stories260K) to run the real-model tests")
	}
	return filepath.Join(dir, "stories260K.gguf")
}

func loadStories(t testing.TB) (*Model, *kernels.CPU) {
	t.Helper()
	_, m, cpu := loadModel(t, storiesPath(t))
	return m, cpu
}

// loadModel loads the model at path on two threads of the default device;
// the test's cleanup closes both.
func loadModel(t testing.TB, path string) (*weights.Model, *Model, *kernels.CPU) {
	t.Helper()
	w, err := weights.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	cpu := kernels.NewCPU(2)
	t.Cleanup(cpu.Close)
	m, err := NewModel(w, cpu)
	if err != nil {
		t.Fatal(err)
	}
	return w, m, cpu
}

func goldenIDs(t *testing.T) []int32 {
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(storiesPath(t)), "greedy_ids_from_bos_64.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []int32
	for _, f := range strings.Fields(string(raw)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("golden ids: %v", err)
		}
		ids = append(ids, int32(n))
	}
	return ids
}

// greedy runs one sequence token by token from prompt, n steps.
func greedy(m *Model, prompt []int32, n int) []int32 {
	kv, table := m.scratchKV(len(prompt) + n)
	var s scratch
	toks := append([]int32(nil), prompt...)
	// Prefill the whole prompt in one pass.
	b := batch{kv: kv, tokens: toks, segs: []segment{{blocks: table, n: len(toks)}}, logitRows: []int{len(toks) - 1}}
	pos := len(toks)
	for i := range toks {
		b.pos = append(b.pos, int32(i))
	}
	var out []int32
	for range n {
		logits := m.forward(&b, &s)
		next := int32(argmax(logits[:m.cfg.VocabSize]))
		out = append(out, next)
		b = batch{kv: kv, tokens: []int32{next}, pos: []int32{int32(pos)}, segs: []segment{{blocks: table, n: 1, start: pos}}, logitRows: []int{0}}
		pos++
	}
	return out
}

func TestStoriesGreedyFromBOSMatchesGolden(t *testing.T) {
	m, _ := loadStories(t)
	want := goldenIDs(t)
	got := greedy(m, []int32{1}, len(want))
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("token %d: got %d, want %d\ngot  %v\nwant %v", i, got[i], want[i], got, want)
		}
	}
}

func TestStoriesLogitsAtPositionZero(t *testing.T) {
	m, _ := loadStories(t)
	want := []float64{-6.222911, 8.404342, -6.223737, -6.222542, -6.221951, -6.222875, -6.221880, -6.223416}
	kv, table := m.scratchKV(1)
	var s scratch
	b := batch{kv: kv, tokens: []int32{1}, pos: []int32{0}, segs: []segment{{blocks: table, n: 1}}, logitRows: []int{0}}
	logits := m.forward(&b, &s)
	for i, w := range want {
		if d := math.Abs(float64(logits[i]) - w); d > 1e-4 {
			t.Errorf("logit %d = %.6f, want %.6f (|Δ| %.2g > 1e-4)", i, logits[i], w, d)
		}
	}
}
