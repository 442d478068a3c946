package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"

	"github.com/batchd/batchd/engine"
)

// task is one request waiting for the engine.
type task struct {
	ctx context.Context
	req *engine.Request
	// batch and line name the request in the in-flight table ("": not
	// recorded) and in its outcome.
	batch string
	line  int
	// alone: a suspect (in flight at an unclean stop) runs with nothing
	// else in flight, so that a second stop names it alone.
	alone bool
	// lineURL is the line's url when req runs it translated (see
	// validate.Request.LineURL): the answer is translated back.
	lineURL string
}

// outcome is the engine's answer to one task, waiting for its batch's
// writer to collect it: as the engine gave it, or (when the queue has a
// convert func) as the result line to write.
type outcome struct {
	line    int
	cid     string
	lineURL string // task.lineURL
	resp    *engine.Response
	err     error
	// res is the line to write when write is set (convert fills them).
	res   result
	write bool
}

// maxAnswered bounds the answers one batch may leave uncollected before the
// dispatcher stops handing its requests to the engine: a writer held up
// (a slow fsync) slows its own batch, and memory stays bounded.
const maxAnswered = 1024

// queue is one batch's channel to the engine and back. Its slots bound how
// many requests may wait, so a fast reader meets backpressure instead of
// buffering a whole file; answered holds the engine's answers until the
// batch's writer collects them, and ready tells it that some arrived.
type queue struct {
	slots    chan struct{}
	items    []task    // waiting (d.mu)
	answered []outcome // answered, not collected (d.mu)
	ready    chan struct{}
	// convert, when set, turns an answer into its result line on the
	// answering goroutine (a worker, or the engine's through done), so
	// that the encoding runs in parallel rather than in the writer.
	convert func(*outcome)
}

// dispatcher hands tasks to the engine, taking from the batches' queues in
// turn so that batches running at once share the engine fairly. An engine
// that implements engine.Queue gets as many requests as its Window asks
// for, from one feeder goroutine (feed.go); any other engine runs them on
// a fixed pool of workers, each calling Do.
type dispatcher struct {
	eng   engine.Engine
	log   *slog.Logger
	table *inflight // nil: not recorded
	// gate (worker pool): tasks hold it shared, a suspect exclusively.
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
	// outstanding counts the tasks handed to the engine and not answered.
	outstanding int
	// draining: tasks submitted are dropped at once (drain.go).
	draining bool
	feed     feedState // engine.Queue only
}

func newDispatcher(eng engine.Engine, log *slog.Logger, table *inflight, workers, perJob int) *dispatcher {
	d := &dispatcher{eng: eng, log: log, table: table, workers: workers, perJob: perJob}
	d.cond = sync.NewCond(&d.mu)
	return d
}

func (d *dispatcher) start() {
	if q, ok := d.eng.(engine.Queue); ok {
		d.wg.Add(1)
		go d.feedLoop(q)
		return
	}
	for i := range d.workers {
		d.wg.Add(1)
		go d.work(i)
	}
}

// stop ends the workers (or the feeder) once the queues are empty and
// every task handed to the engine is answered.
func (d *dispatcher) stop() {
	d.mu.Lock()
	d.closed = true
	d.cond.Broadcast()
	d.mu.Unlock()
	d.wg.Wait()
}

func (d *dispatcher) addQueue(convert func(*outcome)) *queue {
	q := &queue{slots: make(chan struct{}, d.perJob), ready: make(chan struct{}, 1), convert: convert}
	d.mu.Lock()
	d.queues = append(d.queues, q)
	d.mu.Unlock()
	return q
}

// removeQueue forgets q; the caller has collected every answer of q.
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
	if d.draining {
		<-q.slots
		d.answerLocked(q, dropped(t), false)
		d.mu.Unlock()
		notify(q)
		return nil
	}
	q.items = append(q.items, t)
	d.cond.Broadcast()
	d.mu.Unlock()
	return nil
}

// pick takes the next task, visiting the queues round robin and passing
// over those whose writer has maxAnswered answers to collect. The caller
// holds d.mu.
func (d *dispatcher) pick() (task, *queue, bool) {
	n := len(d.queues)
	for i := range n {
		idx := (d.next + i) % n
		q := d.queues[idx]
		if len(q.items) > 0 && len(q.answered) < maxAnswered {
			t := q.items[0]
			q.items[0] = task{}
			q.items = q.items[1:]
			d.next = (idx + 1) % n
			<-q.slots
			return t, q, true
		}
	}
	return task{}, nil, false
}

// waiting counts the tasks in the queues. The caller holds d.mu.
func (d *dispatcher) waiting() int {
	n := 0
	for _, q := range d.queues {
		n += len(q.items)
	}
	return n
}

// answer hands t's outcome to its batch's writer; with handed, t was
// handed to the engine and is no longer outstanding. It never blocks.
func (d *dispatcher) answer(q *queue, t task, handed bool, resp *engine.Response, err error) {
	o := makeOutcome(q, t, resp, err)
	d.mu.Lock()
	d.answerLocked(q, o, handed)
	d.mu.Unlock()
	notify(q)
}

// makeOutcome is the outcome of t, converted when q converts.
func makeOutcome(q *queue, t task, resp *engine.Response, err error) outcome {
	if resp == nil && err == nil {
		// An engine bug: the writer would have nothing to write.
		resp = engine.Recovered("the engine answered with neither a response nor an error")
	}
	o := outcome{line: t.line, cid: t.req.CustomID, lineURL: t.lineURL, resp: resp, err: err}
	if q.convert != nil {
		q.convert(&o)
	}
	return o
}

// answerLocked is answer with d.mu held; call notify(q) once it is released.
func (d *dispatcher) answerLocked(q *queue, o outcome, handed bool) {
	if handed {
		d.outstanding--
		d.cond.Broadcast() // room in the window; a suspect may be waiting for none
	}
	q.answered = append(q.answered, o)
}

// notify tells q's writer that answers wait.
func notify(q *queue) {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// collect returns q's answers, reusing buf for the next ones.
func (d *dispatcher) collect(q *queue, buf []outcome) []outcome {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := q.answered
	q.answered = buf[:0]
	if len(out) >= maxAnswered {
		d.cond.Broadcast() // q may be picked again
	}
	return out
}

// take returns the next task for a worker, waiting for one.
func (d *dispatcher) take() (task, *queue, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		if t, q, ok := d.pick(); ok {
			d.outstanding++
			return t, q, true
		}
		if d.closed && d.waiting() == 0 {
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
		var resp *engine.Response
		err := t.ctx.Err() // a cancelled batch's requests end here
		if err == nil {
			if t.alone {
				d.gate.Lock()
			} else {
				d.gate.RLock()
			}
			d.record(slot, t)
			resp, err = d.do(t)
			d.record(slot, task{})
			if t.alone {
				d.gate.Unlock()
			} else {
				d.gate.RUnlock()
			}
		}
		d.answer(q, t, true, resp, err)
	}
}

// record writes what slot runs into the in-flight table. A table that
// cannot be written costs only the crash-loop guard: it is logged once,
// and the work goes on.
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
	defer d.contain(t, func(r *engine.Response) bool {
		resp, err = r, nil
		return true
	})
	return d.eng.Do(t.ctx, t.req)
}

// contain recovers a panic of the engine on t and answers t with
// engine.Recovered through answer, which reports false when the engine
// had answered t before it panicked (that answer stands). Call it
// deferred.
func (d *dispatcher) contain(t task, answer func(*engine.Response) bool) {
	v := recover()
	if v == nil {
		return
	}
	msg := "engine panicked on a request; failing that request"
	if !answer(engine.Recovered(v)) {
		msg = "engine panicked on a request after answering it; its answer stands"
	}
	d.log.Error(msg, keyCustomID, t.req.CustomID, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
}

// DispatchStats is what the dispatcher holds now.
type DispatchStats struct {
	// InFlight is how many requests are handed to the engine and not yet
	// answered (running, or waiting inside the engine).
	InFlight int
	// Waiting is how many validated requests wait in the pipeline for room
	// in the engine's window.
	Waiting int
	// Answered is how many answers wait for their batch's writer.
	Answered int
	// Window is how many requests the engine takes at once: its
	// engine.Queue Window, or the workers of the pool.
	Window int
}

func (d *dispatcher) stats() DispatchStats {
	d.mu.Lock()
	s := DispatchStats{InFlight: d.outstanding, Waiting: d.waiting(), Window: d.workers}
	for _, q := range d.queues {
		s.Answered += len(q.answered)
	}
	d.mu.Unlock()
	if q, ok := d.eng.(engine.Queue); ok {
		s.Window = max(1, q.Window())
	}
	return s
}
