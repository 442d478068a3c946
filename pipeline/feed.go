package pipeline

import (
	"sync"
	"sync/atomic"

	"github.com/batchd/batchd/engine"
)

// feedState is the feeder's part of the dispatcher (under d.mu).
type feedState struct {
	// free are in-flight table slots not in use; slots is how many were
	// ever handed out (the table grows to the deepest window seen).
	free  []int
	slots int
	// freed are slots of answered requests, to clear in the table before
	// they are used again.
	freed []int
	// aloneOut: a suspect is at the engine, and nothing else goes.
	aloneOut bool
	// held is a suspect taken from its queue, waiting for the engine to
	// have nothing else in flight.
	held  *task
	heldQ *queue
}

// feedLoop hands an engine.Queue as many tasks as its Window asks for,
// from this one goroutine: the engine answers through a callback, so no
// goroutine waits for a request. It keeps the worker pool's rules: the
// queues are taken in turn, every request handed over is in the in-flight
// table until it is answered, and a suspect goes alone.
//
// Window is read without d.mu held: an engine may hold its own lock while
// it calls done, which takes d.mu.
func (d *dispatcher) feedLoop(eng engine.Queue) {
	defer d.wg.Done()
	f := &d.feed
	d.mu.Lock()
	for {
		if len(f.freed) > 0 {
			freed := f.freed
			f.freed = nil
			d.mu.Unlock()
			for _, slot := range freed {
				d.record(slot, task{})
			}
			d.mu.Lock()
			f.free = append(f.free, freed...)
			continue
		}
		if !f.aloneOut && (f.held != nil || d.waiting() > 0) {
			d.mu.Unlock()
			window := max(1, eng.Window())
			d.mu.Lock()
			if d.outstanding < window && d.feedOne(eng) {
				continue
			}
		}
		if d.closed && d.waiting() == 0 && f.held == nil && d.outstanding == 0 {
			d.mu.Unlock()
			return
		}
		d.cond.Wait()
	}
}

// feedOne hands the next task to the engine, or answers it at once when
// its batch is done with it. It reports false when there is nothing it may
// hand over now. Called with d.mu held, it releases it while it works.
func (d *dispatcher) feedOne(eng engine.Queue) bool {
	f := &d.feed
	t, q, ok := task{}, f.heldQ, f.held != nil
	if ok {
		t = *f.held
	} else if t, q, ok = d.pick(); !ok {
		return false
	}
	if t.alone && d.outstanding > 0 {
		f.held, f.heldQ = &t, q // the engine empties first
		return false
	}
	f.held, f.heldQ = nil, nil
	if err := t.ctx.Err(); err != nil {
		d.mu.Unlock()
		d.answer(q, t, false, nil, err) // a cancelled batch's requests end here
		d.mu.Lock()
		return true
	}
	slot := f.slots
	if n := len(f.free); n > 0 {
		slot = f.free[n-1]
		f.free = f.free[:n-1]
	} else {
		f.slots++
	}
	d.outstanding++
	f.aloneOut = t.alone
	d.mu.Unlock()
	d.hand(eng, q, t, slot)
	d.mu.Lock()
	return true
}

// hand records t in slot of the in-flight table and submits it. A panic
// in Submit answers t with engine.Recovered; the engine's answer, whenever
// it comes, is taken once.
//
// The table lists t while Submit runs (its own work: parsing, tokenizing)
// and again once the engine starts computing it (Request.Started), but not
// while it only waits in the engine's queue: a request that never ran
// cannot have crashed the engine, and after a crash each suspect runs
// alone, so a deep queue must not make hundreds of them.
func (d *dispatcher) hand(eng engine.Queue, q *queue, t task, slot int) {
	d.record(slot, t)
	var answered atomic.Bool
	st := &startState{}
	req := *t.req
	req.Started = func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.state == handWaiting {
			d.record(slot, t)
		}
		if st.state != handAnswered {
			st.state = handStarted
		}
	}
	t.req = &req
	done := func(resp *engine.Response, err error) {
		if !answered.CompareAndSwap(false, true) {
			d.log.Error("the engine answered a request twice; the second answer is dropped", keyCustomID, t.req.CustomID)
			return
		}
		st.mu.Lock()
		st.state = handAnswered
		st.mu.Unlock()
		o := makeOutcome(q, t, resp, err)
		d.mu.Lock()
		d.feed.freed = append(d.feed.freed, slot)
		if t.alone {
			d.feed.aloneOut = false
		}
		d.answerLocked(q, o, true)
		d.mu.Unlock()
		notify(q)
	}
	defer d.contain(t, func(r *engine.Response) bool {
		if answered.Load() {
			return false
		}
		done(r, nil)
		return true
	})
	eng.Submit(t.ctx, t.req, done)
	// Submit has returned: until the engine starts it, the request only
	// waits. The slot cannot be reused before this: freed slots are taken
	// by this goroutine, after hand returns.
	st.mu.Lock()
	if st.state == handSubmitting {
		st.state = handWaiting
		d.record(slot, task{})
	}
	st.mu.Unlock()
}

// startState is where a request handed to an engine.Queue stands, for the
// in-flight table.
type startState struct {
	mu    sync.Mutex
	state int
}

const (
	handSubmitting = iota // in Submit: listed
	handWaiting           // queued in the engine: not listed
	handStarted           // computing: listed
	handAnswered          // answered: the feeder clears the slot
)
