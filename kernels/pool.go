package kernels

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// pool is a fixed set of helper goroutines, started once, that run the
// parallel-for of each kernel call together with the calling goroutine.
//
// A call fills in the pool's one job descriptor and opens it under a new
// generation number in state; helpers that are spinning see it at once,
// parked ones are woken through their channel. A helper joins the job by
// adding itself to the job's reference count in the same atomic word, and
// participants take grain-sized ranges from the job's counter until it runs
// out, so uneven or preempted threads balance themselves. When the caller
// runs out of ranges it closes the job (no more joins) and waits for the
// helpers that joined to leave; helpers that did not get to it in time are
// not waited for, and can no longer join.
//
// That is the whole synchronization, and it makes the pool race-free by
// construction: the descriptor is written only while the job is closed and
// nobody holds it, and read only by a helper between its join (an acquiring
// CAS of the word that opened the job) and its leave (a releasing decrement
// that the caller observes before run returns). The generation in the word
// keeps a slow helper from joining a later job with an earlier job's
// snapshot, and the caller's wake-up token is tied to the job it waits for,
// so no signal outlives its job. Nothing is allocated per call.
//
// After finishing a job a helper spins for a short while (yielding its P)
// before parking: back-to-back kernel calls, as in a decode step, then cost
// well under a microsecond to hand out.
//
// A panic in fn on a helper would end the process, whatever the caller
// does; instead the helper keeps the first one (with its stack), leaves
// the job as usual, and run panics with it on the calling goroutine once
// every helper has left, so a caller that recovers (the engine, at its
// request boundary) sees a kernel bug as an ordinary panic and the pool
// stays usable.
type pool struct {
	helpers int // goroutines besides the caller

	// job is the current job; see state for who may touch it when.
	job job

	_ [64]byte // keep the hot word off the descriptor's cache line

	// state is gen<<genShift | waitingBit | closedBit | refs.
	state atomic.Uint64

	_ [56]byte

	parked []atomic.Int32 // 1 while helper i is (about to be) blocked on wake[i]
	wake   []chan struct{}
	done   chan struct{} // the last helper to leave a job the caller waits on
	quit   atomic.Bool
	wg     sync.WaitGroup
}

// job is one parallel-for. run writes fn, size and grain and resets next
// while the job is closed with no references; a helper reads them only while
// it holds a reference.
type job struct {
	fn    func(worker, lo, hi int)
	size  int64
	grain int64
	next  atomic.Int64 // the start of the next range to hand out
	// panicked is the first panic of a participant, rethrown by run.
	panicked atomic.Pointer[PanicError]
}

// PanicError is a panic raised inside a kernel's parallel section: run
// panics with it on the calling goroutine. Stack is the goroutine that
// panicked first, which may be a helper's.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("kernels: panic: %v", e.Value) }

// Unwrap gives the panic's value when it was an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// The pool's state word.
const (
	refsMask   = 1<<24 - 1 // helpers holding the job
	closedBit  = 1 << 24   // set: the job takes no more helpers
	waitingBit = 1 << 25   // set: the caller is parked on done until refs is 0
	genShift   = 26        // the rest: the job's generation (wraps after 2^38 jobs)
)

// spinFor is how long an idle helper (or a waiting caller) spins before it
// parks.
const spinFor = 200 * time.Microsecond

func newPool(threads int) *pool {
	p := &pool{helpers: max(threads-1, 0), done: make(chan struct{}, 1)}
	p.state.Store(closedBit) // generation 0, closed: jobs start at 1
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
// It returns when all of [0, size) is done and no helper touches the job
// any more. Calls must not overlap, nor overlap close.
func (p *pool) run(size, grain int, fn func(worker, lo, hi int)) {
	if size <= 0 {
		return
	}
	grain = max(grain, 1)
	if p.helpers == 0 || size <= grain {
		fn(0, 0, size)
		return
	}
	// The job is closed and nobody holds it (the previous run saw to that),
	// so the descriptor is ours until we open it.
	j := &p.job
	j.fn, j.size, j.grain = fn, int64(size), int64(grain)
	j.next.Store(0)
	gen := p.state.Load() >> genShift
	p.state.Store((gen + 1) << genShift) // open, no references: publishes the job
	for i := range p.parked {
		if p.parked[i].Load() == 1 && p.parked[i].CompareAndSwap(1, 0) {
			p.wake[i] <- struct{}{}
		}
	}
	j.safeWork(0)
	p.finish()
	j.fn = nil
	if pe := j.panicked.Swap(nil); pe != nil {
		panic(pe)
	}
}

// finish closes the current job and waits until every helper that joined it
// has left.
func (p *pool) finish() {
	if p.state.Or(closedBit)&refsMask == 0 {
		return
	}
	start := time.Now()
	for i := 0; ; i++ {
		if p.state.Load()&refsMask == 0 {
			return
		}
		if i&63 == 63 && time.Since(start) > spinFor {
			break
		}
		runtime.Gosched()
	}
	for {
		s := p.state.Load()
		if s&refsMask == 0 {
			return
		}
		// The job is closed, so refs only falls; the helper that takes it
		// to 0 sees waitingBit and sends the one token.
		if p.state.CompareAndSwap(s, s|waitingBit) {
			<-p.done
			return
		}
	}
}

func (j *job) work(worker int) {
	fn, size, grain := j.fn, j.size, j.grain
	for {
		lo := j.next.Add(grain) - grain
		if lo >= size {
			return
		}
		fn(worker, int(lo), int(min(lo+grain, size)))
	}
}

// safeWork is work that keeps a panic for run to rethrow: the participant
// stops taking ranges, the others finish the job.
func (j *job) safeWork(worker int) {
	defer func() {
		if v := recover(); v != nil {
			pe, ok := v.(*PanicError)
			if !ok {
				pe = &PanicError{Value: v, Stack: debug.Stack()}
			}
			j.panicked.CompareAndSwap(nil, pe)
		}
	}()
	j.work(worker)
}

func (p *pool) helper(id int) {
	defer p.wg.Done()
	var seen uint64 // the generation of the last job joined
	for p.join(id, &seen) {
		p.job.safeWork(id + 1)
		if s := p.state.Add(^uint64(0)); s&refsMask == 0 && s&waitingBit != 0 {
			p.done <- struct{}{}
		}
	}
}

// join blocks until the helper holds a reference to an open job newer than
// *seen (true) or the pool is closed (false).
func (p *pool) join(id int, seen *uint64) bool {
	start := time.Now()
	for i := 0; ; i++ {
		s := p.state.Load()
		if s&closedBit == 0 && s>>genShift != *seen {
			if p.state.CompareAndSwap(s, s+1) {
				*seen = s >> genShift
				return true
			}
			continue // another helper joined or the caller closed it: look again
		}
		if p.quit.Load() {
			return false
		}
		if i&63 == 63 && time.Since(start) > spinFor {
			p.parked[id].Store(1)
			if s := p.state.Load(); s&closedBit == 0 && s>>genShift != *seen || p.quit.Load() {
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

// close stops the helpers and waits for them to exit; later runs use the
// caller alone. It must not overlap run.
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
