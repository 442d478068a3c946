package kernels

import (
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCPUBasics(t *testing.T) {
	cpu := NewCPU(0)
	if cpu.Threads() != runtime.NumCPU() {
		t.Errorf("Threads() = %d, want %d", cpu.Threads(), runtime.NumCPU())
	}
	if name := cpu.Name(); !strings.HasPrefix(name, "cpu "+best.name+" x") {
		t.Errorf("Name() = %q", name)
	}
	cpu.Close()
	// A closed CPU still computes, on the calling goroutine.
	m := encodeMatrix(t, F32, 3, 16, make([]float32, 48))
	out := []float32{1, 1, 1}
	cpu.MatMul(out, make([]float32, 16), 1, m)
	if out[0] != 0 {
		t.Errorf("MatMul after Close = %v", out)
	}
}

// TestPoolCoversRange: every index of every job runs exactly once.
func TestPoolCoversRange(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		p := newPool(threads)
		for _, size := range []int{1, 2, 7, 100, 1000} {
			for _, grain := range []int{1, 3, 64} {
				hits := make([]int32, size)
				var mu sync.Mutex
				p.run(size, grain, func(w, lo, hi int) {
					if w < 0 || w >= threads {
						t.Errorf("worker %d of %d", w, threads)
					}
					mu.Lock()
					for i := lo; i < hi; i++ {
						hits[i]++
					}
					mu.Unlock()
				})
				for i, h := range hits {
					if h != 1 {
						t.Fatalf("threads=%d size=%d grain=%d: index %d ran %d times", threads, size, grain, i, h)
					}
				}
			}
		}
		p.close()
	}
}

// TestPoolAfterIdle: helpers that parked wake up for the next job, and the
// job they share is done in full. The caller's first range waits until a
// helper has run one, so a job that no parked helper joins never finishes
// (the deadline turns that hang into a failure).
func TestPoolAfterIdle(t *testing.T) {
	const size = 300
	p := newPool(3)
	defer p.close()
	for round := range 3 {
		waitParked(t, p)
		out := make([]int, size)
		helped := make(chan struct{})
		var once sync.Once
		p.run(size, 1, func(w, lo, hi int) {
			if w == 0 && lo == 0 {
				select {
				case <-helped:
				case <-time.After(time.Minute):
					t.Errorf("round %d: no parked helper joined the job", round)
				}
			}
			for i := lo; i < hi; i++ {
				out[i] = round*size + i + 1
			}
			if w != 0 {
				once.Do(func() { close(helped) })
			}
		})
		for i, v := range out {
			if want := round*size + i + 1; v != want {
				t.Fatalf("round %d: out[%d] = %d, want %d", round, i, v, want)
			}
		}
		if t.Failed() {
			return
		}
	}
}

// waitParked waits until every helper of p is parked, failing t if they do
// not all park within a generous deadline.
func waitParked(t *testing.T, p *pool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		parked := 0
		for j := range p.parked {
			parked += int(p.parked[j].Load())
		}
		if parked == len(p.parked) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d helpers parked", parked, len(p.parked))
		}
		runtime.Gosched()
		sleepMicro(500)
	}
}

// TestCPUConcurrentCallers: calls from several goroutines are serialized
// and each gets its own correct result (run with -race).
func TestCPUConcurrentCallers(t *testing.T) {
	cpu := NewCPU(2)
	defer cpu.Close()
	r := rand.New(rand.NewPCG(40, 41))
	m := encodeMatrix(t, Q8_0, 40, 64, randF32(r, 40*64, 1))
	x := randF32(r, 5*64, 1)
	want := make([]float32, 5*40)
	cpu.MatMul(want, x, 5, m)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]float32, 5*40)
			for range 20 {
				cpu.MatMul(out, x, 5, m)
				if i := bitsEqual(out, want); i >= 0 {
					t.Errorf("goroutine %d: result differs at %d", g, i)
					return
				}
				y := make([]float32, 64)
				cpu.RMSNorm(y, x[:64], x[64:128], 64, 1e-5)
			}
		}()
	}
	wg.Wait()
}

// TestNoAllocs: steady-state calls allocate nothing.
func TestNoAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	r := rand.New(rand.NewPCG(42, 43))
	cpu := NewCPU(2)
	defer cpu.Close()
	const rows, cols = 256, 512
	var ms []*Matrix
	for _, dt := range append(allTypes[:3:3], QuantTypes()...) {
		ms = append(ms, encodeMatrix(t, dt, rows, cols, randF32(r, rows*cols, 1)))
	}
	x := randF32(r, 64*cols, 1)
	out := make([]float32, 64*rows)
	q := randF32(r, 8*14*64, 1)
	kv := randF32(r, 100*2*64, 1)
	att := make([]float32, len(q))
	pos := make([]int32, 64)
	inv := []float32{1, 0.1, 0.01}
	gate, up := randF32(r, 70000, 1), randF32(r, 70000, 1)
	cases := map[string]func(){
		"MatMul": func() {
			for _, m := range ms {
				for _, T := range []int{1, 5, 64} {
					cpu.MatMul(out, x, T, m)
				}
			}
		},
		"Attention": func() { cpu.Attention(att, q, kv, kv, 8, 92, 14, 2, 64, 0.1) },
		"RMSNorm":   func() { cpu.RMSNorm(x, x, up[:cols], cols, 1e-5) },
		"RoPE":      func() { cpu.RoPE(x, 64, 4, 128, pos, inv, false); cpu.RoPE(x[:128], 1, 1, 128, pos, inv, true) },
		"SiLUMul":   func() { cpu.SiLUMul(gate, up); cpu.SiLUMul(gate[:100], up) },
		"Package":   func() { Softmax(gate[:1000]); Argmax(gate); Add(gate, up); Dot(gate, up) },
	}
	for name, f := range cases {
		f() // grow scratch
		if n := testing.AllocsPerRun(5, f); n != 0 {
			t.Errorf("%s: %v allocations per run", name, n)
		}
	}
}
