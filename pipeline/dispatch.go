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
	// batch and line name the request in the in-flight table ("": not
	// recorded).
	batch string
	line  int
	// alone: a suspect (in flight at an unclean stop) runs with nothing
	// else in flight, so that a second stop names it alone.
	alone bool
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
	eng   engine.Engine
	log   *slog.Logger
	table *inflight // nil: not recorded
	// gate: tasks hold it shared, a suspect exclusively.
	gate     sync.RWMutex
	tableErr sync.Once // logs a table write error once
	mu       sync.Mutex
	cond     *sync.Cond
	queues   []*queue
	next     int
	closed   bool
	wg       sync.WaitGroup
	perJob   int
	workers  int
}

func newDispatcher(eng engine.Engine, log *slog.Logger, table *inflight, workers, perJob int) *dispatcher {
	d := &dispatcher{eng: eng, log: log, table: table, workers: workers, perJob: perJob}
	d.cond = sync.NewCond(&d.mu)
	return d
}

func (d *dispatcher) start() {
	for i := range d.workers {
		d.wg.Add(1)
		go d.work(i)
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

func (d *dispatcher) work(slot int) {
	defer d.wg.Done()
	for {
		t, q, ok := d.take()
		if !ok {
			return
		}
		<-q.slots
		if t.alone {
			d.gate.Lock()
		} else {
			d.gate.RLock()
		}
		d.record(slot, t)
		resp, err := d.do(t)
		d.record(slot, task{})
		if t.alone {
			d.gate.Unlock()
		} else {
			d.gate.RUnlock()
		}
		t.done(resp, err)
	}
}

// record writes what worker slot runs into the in-flight table. A table
// that cannot be written costs only the crash-loop guard: it is logged
// once, and the work goes on.
func (d *dispatcher) record(slot int, t task) {
	if d.table == nil {
		return
	}
	var err error
	if t.batch == "" {
		err = d.table.clear(slot)
	} else {
		err = d.table.set(slot, t.batch, t.line)
	}
	if err != nil {
		d.tableErr.Do(func() {
			d.log.Warn("cannot write the in-flight table; a request that crashes the daemon may crash it again after a restart", "error", err)
		})
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
