package kernels

import (
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestPoolStress hammers one pool with back-to-back jobs of varied sizes and
// grains from one goroutine, the way the kernels use it: one fn reused for
// every job, reading the job's state from a struct the caller sets before run
// and clears after it. Now and then the caller pauses past spinFor so the
// helpers park and must be woken. Every index of every job must run exactly
// once, on a valid worker, and no helper may touch a job after run returned;
// under -race a helper that does is also reported as a data race.
func TestPoolStress(t *testing.T) {
	budget := 600 * time.Millisecond
	if testing.Short() {
		budget = 150 * time.Millisecond
	}
	for _, threads := range []int{2, 3, 4} {
		p := newPool(threads)
		r := rand.New(rand.NewPCG(uint64(threads), 77))
		const maxSize = 4096
		buf := make([]int32, maxSize)
		var (
			hits []int32 // the current job's; nil between jobs
			bad  atomic.Int32
			spin atomic.Int64 // sink for the busy work
		)
		fn := func(w, lo, hi int) {
			if w < 0 || w >= threads || lo < 0 || lo >= hi || hi > len(hits) {
				bad.Add(1)
				return
			}
			for i := lo; i < hi; i++ {
				atomic.AddInt32(&hits[i], 1)
			}
			if hi&7 == 0 { // uneven work, so participants finish out of step
				s := int64(0)
				for i := range 200 * (hi - lo) {
					s += int64(i)
				}
				spin.Add(s)
			}
		}
		jobs := 0
		for start := time.Now(); time.Since(start) < budget || jobs < 200; jobs++ {
			var size, grain int
			switch r.IntN(4) {
			case 0:
				size, grain = 1+r.IntN(8), 1
			case 1:
				size, grain = 1+r.IntN(64), 1+r.IntN(8)
			case 2:
				size, grain = 1+r.IntN(maxSize), 1+r.IntN(64)
			default:
				size, grain = threads*(1+r.IntN(4)), 1 // like BenchmarkPoolOverhead
			}
			hits = buf[:size]
			clear(hits)
			p.run(size, grain, fn)
			for i, h := range hits {
				if h != 1 {
					t.Fatalf("threads=%d job %d size=%d grain=%d: index %d ran %d times", threads, jobs, size, grain, i, h)
				}
			}
			hits = nil
			if n := bad.Load(); n != 0 {
				t.Fatalf("threads=%d job %d size=%d grain=%d: %d calls out of range or after run returned", threads, jobs, size, grain, n)
			}
			switch r.IntN(64) {
			case 0:
				time.Sleep(spinFor + time.Duration(r.IntN(200))*time.Microsecond) // let the helpers park
			case 1:
				runtime.Gosched()
			}
		}
		p.close()
		// After close the pool still works, on the caller alone.
		hits = buf[:100]
		clear(hits)
		p.run(100, 1, func(w, lo, hi int) {
			if w != 0 {
				bad.Add(1)
			}
			fn(w, lo, hi)
		})
		for i, h := range hits {
			if h != 1 || bad.Load() != 0 {
				t.Fatalf("threads=%d after close: index %d ran %d times (bad %d)", threads, i, h, bad.Load())
			}
		}
		t.Logf("threads=%d: %d jobs", threads, jobs)
	}
}

// BenchmarkPoolHandoff is one parallel-for whose items take long enough
// (about 0.25µs each) that the helpers must take part: hand-off and
// check-out latency with every thread working, unlike BenchmarkPoolOverhead
// where the caller can finish the trivial job before a helper arrives.
func BenchmarkPoolHandoff(b *testing.B) {
	cpu := NewCPU(0)
	defer cpu.Close()
	var sink atomic.Int64
	fn := func(_, lo, hi int) {
		s := int64(0)
		for i := range 300 * (hi - lo) {
			s += int64(i) ^ s>>3
		}
		sink.Add(s)
	}
	for range b.N {
		cpu.pool.run(cpu.Threads()*4, 1, fn)
	}
}

// TestPoolPanicReachesCaller: a panic in a helper's range must not end the
// process; run rethrows it on the caller as a *PanicError once the helpers
// have left, and the pool runs the next job normally.
func TestPoolPanicReachesCaller(t *testing.T) {
	p := newPool(2)
	defer p.close()
	var helperPanicked atomic.Bool
	fn := func(w, lo, hi int) {
		if w != 0 {
			helperPanicked.Store(true)
			panic("row 99 of a 10-row matrix")
		}
		// The caller holds its first range until a helper has panicked,
		// so the panic is certainly a helper's.
		for deadline := time.Now().Add(time.Minute); !helperPanicked.Load(); runtime.Gosched() {
			if time.Now().After(deadline) {
				return // no helper joined in a minute: the check below fails
			}
		}
	}
	pe := runPanics(t, func() { p.run(64, 1, fn) })
	if !helperPanicked.Load() {
		t.Fatal("no helper took a range within a minute")
	}
	if pe == nil || pe.Value != "row 99 of a 10-row matrix" || len(pe.Stack) == 0 {
		t.Fatalf("run panicked with %+v, want the helper's panic with its stack", pe)
	}
	// The caller's own panic comes back the same way.
	pe = runPanics(t, func() { p.run(64, 1, func(w, lo, hi int) { panic(lo) }) })
	if pe == nil {
		t.Fatal("a panic on every range did not reach the caller")
	}
	var hits [256]atomic.Int32
	p.run(len(hits), 4, func(w, lo, hi int) {
		for i := lo; i < hi; i++ {
			hits[i].Add(1)
		}
	})
	for i := range hits {
		if n := hits[i].Load(); n != 1 {
			t.Fatalf("after the panics, index %d ran %d times", i, n)
		}
	}
}

func runPanics(t *testing.T, f func()) (pe *PanicError) {
	t.Helper()
	defer func() {
		v := recover()
		if v == nil {
			t.Fatal("run returned without panicking")
		}
		var ok bool
		if pe, ok = v.(*PanicError); !ok {
			t.Fatalf("run panicked with %T %v, want *PanicError", v, v)
		}
	}()
	f()
	return nil
}
