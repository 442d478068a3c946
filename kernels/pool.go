package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// pool is a fixed set of helper goroutines, started once, that run the
// parallel-for of each kernel call together with the calling goroutine.
//
// A call publishes its job (function, size, grain) and bumps gen; helpers
// that are spinning see it at once, parked ones are woken through their
// channel. Participants take grain-sized ranges from an atomic counter until
// it runs out, so uneven or preempted threads balance themselves. The caller
// returns once every helper has checked out of the job, so a job's arguments
// are never read after run returns. After finishing a job a helper spins for
// a short while (yielding its P) before parking: back-to-back kernel calls, as
// in a decode step, then cost well under a microsecond to hand out.
type pool struct {
	helpers int // goroutines besides the caller

	// The current job; written by run before gen is bumped.
	fn    func(worker, lo, hi int)
	size  int
	grain int
	next  atomic.Int64

	gen    atomic.Uint64
	left   atomic.Int32 // helpers not yet done with the current job
	parked []atomic.Int32
	wake   []chan struct{}
	// waiting is the gen of the job whose caller is parked on done (0:
	// none). Keying it by job keeps a helper still finishing the previous
	// job from waking the caller of the next one before it has run.
	waiting atomic.Uint64
	done    chan struct{}
	quit    atomic.Bool
	wg      sync.WaitGroup
}

// spinFor is how long an idle helper (or a waiting caller) spins before it
// parks.
const spinFor = 200 * time.Microsecond

func newPool(threads int) *pool {
	p := &pool{helpers: threads - 1, done: make(chan struct{}, 1)}
	p.parked = make([]atomic.Int32, p.helpers)
	p.wake = make([]chan struct{}, p.helpers)
	for i := range p.wake {
		p.wake[i] = make(chan struct{}, 1)
	}
	p.wg.Add(p.helpers)
	for i := range p.helpers {
		go p.helper(i)
	}
	return p
}

// run calls fn(worker, lo, hi) over [0, size) in ranges of at most grain,
// spread over the caller (worker 0) and the helpers (workers 1..helpers).
// It returns when all of [0, size) is done.
func (p *pool) run(size, grain int, fn func(worker, lo, hi int)) {
	if size <= 0 {
		return
	}
	grain = max(grain, 1)
	if p.helpers == 0 || size <= grain {
		fn(0, 0, size)
		return
	}
	p.fn, p.size, p.grain = fn, size, grain
	p.next.Store(0)
	p.left.Store(int32(p.helpers))
	g := p.gen.Add(1)
	for i := range p.parked {
		if p.parked[i].CompareAndSwap(1, 0) {
			p.wake[i] <- struct{}{}
		}
	}
	p.work(0)
	if p.left.Load() != 0 {
		p.waitHelpers(g)
	}
	p.fn = nil
}

func (p *pool) work(worker int) {
	size, grain := int64(p.size), int64(p.grain)
	for {
		lo := p.next.Add(grain) - grain
		if lo >= size {
			return
		}
		p.fn(worker, int(lo), int(min(lo+grain, size)))
	}
}

func (p *pool) waitHelpers(g uint64) {
	start := time.Now()
	for i := 0; ; i++ {
		if p.left.Load() == 0 {
			return
		}
		if i&63 == 63 && time.Since(start) > spinFor {
			break
		}
		runtime.Gosched()
	}
	p.waiting.Store(g)
	if p.left.Load() == 0 {
		if p.waiting.CompareAndSwap(g, 0) {
			return
		}
		// The last helper saw us waiting and is sending.
	}
	<-p.done
}

func (p *pool) helper(id int) {
	defer p.wg.Done()
	var seen uint64 // jobs start at gen 1; a helper that starts late still sees the first
	for {
		if !p.await(id, &seen) {
			return
		}
		p.work(id + 1)
		if p.left.Add(-1) == 0 && p.waiting.CompareAndSwap(seen, 0) {
			p.done <- struct{}{}
		}
	}
}

// await blocks until a job newer than *seen is published (true) or the pool
// is closed (false).
func (p *pool) await(id int, seen *uint64) bool {
	start := time.Now()
	for i := 0; ; i++ {
		if g := p.gen.Load(); g != *seen {
			*seen = g
			return true
		}
		if p.quit.Load() {
			return false
		}
		if i&63 == 63 && time.Since(start) > spinFor {
			p.parked[id].Store(1)
			if p.gen.Load() != *seen || p.quit.Load() {
				if !p.parked[id].CompareAndSwap(1, 0) {
					<-p.wake[id] // run or close already claimed us; take its token
				}
			} else {
				<-p.wake[id]
			}
			start, i = time.Now(), 0
			continue
		}
		runtime.Gosched()
	}
}

// close stops the helpers and waits for them to exit.
func (p *pool) close() {
	p.quit.Store(true)
	for i := range p.parked {
		if p.parked[i].CompareAndSwap(1, 0) {
			p.wake[i] <- struct{}{}
		}
	}
	p.wg.Wait()
	p.helpers = 0
}
