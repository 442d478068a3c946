package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"

	"github.com/batchd/batchd/engine"
)

// task is one request waiting for a worker.
type task struct {
	ctx  context.Context
	req  *engine.Request
	done func(*engine.Response, error)
}

// queue is one job's waiting requests. Its slots bound how many may wait, so a
// fast reader meets backpressure instead of buffering a whole file.
type queue struct {
	slots chan struct{}
	items []task
}

// dispatcher runs tasks on a fixed pool of workers, taking from the jobs'
// queues in turn so that files running at once share the engine fairly.
type dispatcher struct {
	eng     engine.Engine
	log     *slog.Logger
	mu      sync.Mutex
	cond    *sync.Cond
	queues  []*queue
	next    int
	closed  bool
	wg      sync.WaitGroup
	perJob  int
	workers int
}

func newDispatcher(eng engine.Engine, log *slog.Logger, workers, perJob int) *dispatcher {
	d := &dispatcher{eng: eng, log: log, workers: workers, perJob: perJob}
	d.cond = sync.NewCond(&d.mu)
	return d
}

func (d *dispatcher) start() {
	for range d.workers {
		d.wg.Add(1)
		go d.work()
	}
}

// stop ends the workers once the queues are empty.
func (d *dispatcher) stop() {
	d.mu.Lock()
	d.closed = true
	d.cond.Broadcast()
	d.mu.Unlock()
	d.wg.Wait()
}

func (d *dispatcher) addQueue() *queue {
	q := &queue{slots: make(chan struct{}, d.perJob)}
	d.mu.Lock()
	d.queues = append(d.queues, q)
	d.mu.Unlock()
	return q
}

// removeQueue forgets q; the caller has seen every task of q done.
func (d *dispatcher) removeQueue(q *queue) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, x := range d.queues {
		if x == q {
			d.queues = append(d.queues[:i], d.queues[i+1:]...)
			if d.next > i {
				d.next--
			}
			return
		}
	}
}

// submit queues t on q, waiting for room. It fails only when ctx is done.
func (d *dispatcher) submit(ctx context.Context, q *queue, t task) error {
	select {
	case q.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	d.mu.Lock()
	q.items = append(q.items, t)
	d.cond.Signal()
	d.mu.Unlock()
	return nil
}

// take returns the next task, visiting the queues round robin.
func (d *dispatcher) take() (task, *queue, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		n := len(d.queues)
		for i := range n {
			idx := (d.next + i) % n
			q := d.queues[idx]
			if len(q.items) > 0 {
				t := q.items[0]
				q.items[0] = task{}
				q.items = q.items[1:]
				d.next = (idx + 1) % n
				return t, q, true
			}
		}
		if d.closed {
			return task{}, nil, false
		}
		d.cond.Wait()
	}
}

func (d *dispatcher) work() {
	defer d.wg.Done()
	for {
		t, q, ok := d.take()
		if !ok {
			return
		}
		<-q.slots
		resp, err := d.do(t)
		t.done(resp, err)
	}
}

// do runs t on the engine. An engine that panics fails that request alone
// with a 500 line (engine_error): a request must never take the daemon
// down, nor, by crashing it again at every restart, every batch after it.
func (d *dispatcher) do(t task) (resp *engine.Response, err error) {
	defer func() {
		if v := recover(); v != nil {
			d.log.Error("engine panicked on a request; failing that request", keyCustomID, t.req.CustomID,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			resp, err = engine.Recovered(v), nil
		}
	}()
	return d.eng.Do(t.ctx, t.req)
}
