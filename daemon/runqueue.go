package daemon

import (
	"slices"
	"sync"

	"github.com/batchd/batchd/engine"
)

// runQueue is the daemon's queue of inputs waiting for a batch runner:
// by priority (delivery.rank, the batch's options), first come first
// served within one, and one run of a name at a time. As the engines do
// with lines, after engine.PriorityShare runs in a row went to a higher
// priority while a lower one waited, the next goes to the earliest of the
// lower ones, so a stream of high-priority batches never starves the
// others; an input put back (requeue) goes first. A name is
// active from the moment it is queued (or claimed for a refusal) until its
// run finished; an input delivered again while its name is active is
// dropped (its source delivers it again after Forget if it is still
// pending), and a refusal waits until that run is over. Once closed (a
// drain or Close) it takes nothing and next returns false.
type runQueue struct {
	mu      sync.Mutex
	cond    *sync.Cond
	queue   []delivery
	active  map[string]bool     // names queued or running
	again   map[string]delivery // refusals waiting for their name's run to finish
	passed  int                 // runs in a row given over a lower priority waiting
	closing bool
}

func newRunQueue() *runQueue {
	q := &runQueue{active: make(map[string]bool), again: make(map[string]delivery)}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// push queues dl, reporting false when the queue is closed or dl's name
// is active already.
func (q *runQueue) push(dl delivery) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closing || q.active[dl.ev.Name] {
		return false
	}
	q.active[dl.ev.Name] = true
	q.queue = append(q.queue, dl)
	q.cond.Signal()
	return true
}

// claim makes refusal dl's name active for the caller to refuse it now,
// reporting true. While the name is active dl waits, to be returned by
// finished when that run is over; a closed queue drops it (the entry is
// refused after the restart).
func (q *runQueue) claim(dl delivery) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.closing:
		return false
	case q.active[dl.ev.Name]:
		q.again[dl.ev.Name] = dl
		return false
	}
	q.active[dl.ev.Name] = true
	return true
}

// next waits for the next input to run (see runQueue); false once the
// queue is closed.
func (q *runQueue) next() (delivery, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.queue) == 0 && !q.closing {
		q.cond.Wait()
	}
	if q.closing {
		return delivery{}, false
	}
	i := q.pick()
	dl := q.queue[i]
	q.queue = slices.Delete(q.queue, i, i+1)
	dl.requeued = false
	return dl, true
}

// pick is the index of the queued input to run next. The caller holds mu.
func (q *runQueue) pick() int {
	if q.queue[0].requeued {
		return 0
	}
	top, lowest := q.queue[0].rank, q.queue[0].rank
	for _, dl := range q.queue {
		top, lowest = max(top, dl.rank), min(lowest, dl.rank)
	}
	take := func(dl delivery) bool { return dl.rank == top }
	if q.passed >= engine.PriorityShare && lowest < top {
		take = func(dl delivery) bool { return dl.rank < top }
	}
	i := slices.IndexFunc(q.queue, take)
	if q.queue[i].rank > lowest {
		q.passed++
	} else {
		q.passed = 0
	}
	return i
}

// requeue puts dl, whose name stays active, back first in the queue.
func (q *runQueue) requeue(dl delivery) {
	q.mu.Lock()
	defer q.mu.Unlock()
	dl.requeued = true
	q.queue = append([]delivery{dl}, q.queue...)
	q.cond.Signal()
}

// finished ends the run of name; it returns the refusal that waited for
// it, if one did.
func (q *runQueue) finished(name string) (delivery, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.active, name)
	again, ok := q.again[name]
	delete(q.again, name)
	return again, ok
}

// busy reports whether a run of name is queued or running.
func (q *runQueue) busy(name string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.active[name]
}

// close stops intake and wakes every runner waiting in next; it returns
// how many runs had started and not finished.
func (q *runQueue) close() (running int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closing = true
	q.cond.Broadcast()
	return len(q.active) - len(q.queue)
}

// snapshot returns the queued inputs in the order they came and the names running
// (active and not queued), sorted.
func (q *runQueue) snapshot() (queued []delivery, running []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	queued = slices.Clone(q.queue)
	waiting := make(map[string]bool, len(q.queue))
	for _, dl := range q.queue {
		waiting[dl.ev.Name] = true
	}
	for name := range q.active {
		if !waiting[name] {
			running = append(running, name)
		}
	}
	slices.Sort(running)
	return queued, running
}
