package openai

import (
	"context"
	"slices"
	"sync"

	"github.com/batchd/batchd/engine"
)

// window is the in-flight window: at most its size of requests are sent
// at once. A caller that finds it full waits; a freed slot goes to the
// highest priority waiting (engine.Request.Priority), the earliest of
// them first, except that after engine.PriorityShare slots in a row went
// to a priority above the lowest waiting, the next goes to the earliest
// caller below the highest priority, so batches are never starved by a
// stream of online requests.
type window struct {
	mu      sync.Mutex
	free    int
	waiting []*waiter // in arrival order
	passed  int       // slots in a row given above the lowest priority waiting
}

// waiter is a caller waiting for a slot; ready is closed when it got one.
type waiter struct {
	prio    engine.Priority
	ready   chan struct{}
	granted bool
}

func newWindow(size int) *window { return &window{free: size} }

// acquire takes a slot, waiting for one when none is free; it returns
// ctx.Err() or errClosed (once closed is) without one.
func (w *window) acquire(ctx context.Context, closed <-chan struct{}, prio engine.Priority) error {
	wt := w.enqueue(prio)
	if wt == nil {
		return nil
	}
	return w.wait(ctx, closed, wt)
}

// enqueue takes a free slot (nil) when none waits before the caller, or
// queues the caller.
func (w *window) enqueue(prio engine.Priority) *waiter {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.free > 0 && len(w.waiting) == 0 {
		w.free--
		return nil
	}
	wt := &waiter{prio: prio, ready: make(chan struct{})}
	w.waiting = append(w.waiting, wt)
	return wt
}

// wait waits for wt's slot; a caller that gives up leaves the queue, or
// passes on the slot it was given meanwhile.
func (w *window) wait(ctx context.Context, closed <-chan struct{}, wt *waiter) error {
	var err error
	select {
	case <-wt.ready:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-closed:
		err = errClosed
	}
	w.mu.Lock()
	granted := wt.granted
	if !granted {
		w.waiting = slices.DeleteFunc(w.waiting, func(x *waiter) bool { return x == wt })
	}
	w.mu.Unlock()
	if granted {
		w.release()
	}
	return err
}

// release frees a slot: it goes to the next waiting caller, if one waits.
func (w *window) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.waiting) == 0 {
		w.free++
		return
	}
	top, lowest := w.waiting[0].prio, w.waiting[0].prio
	for _, x := range w.waiting {
		top, lowest = max(top, x.prio), min(lowest, x.prio)
	}
	next := func(x *waiter) bool { return x.prio == top }
	if w.passed >= engine.PriorityShare && lowest < top { // the earliest below top
		next = func(x *waiter) bool { return x.prio < top }
	}
	i := slices.IndexFunc(w.waiting, next)
	wt := w.waiting[i]
	w.waiting = slices.Delete(w.waiting, i, i+1)
	if wt.prio > lowest {
		w.passed++
	} else {
		w.passed = 0
	}
	wt.granted = true
	close(wt.ready)
}
