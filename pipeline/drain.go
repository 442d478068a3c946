package pipeline

import "errors"

// errDrained ends a run's read when the pipeline drains: the lines not
// read yet are left for the next run.
var errDrained = errors.New("pipeline draining")

// Drain stops intake for a graceful shutdown: no running batch reads or
// submits another line, and the requests waiting in the pipeline for room
// at the engine are dropped (left undone, as at shutdown). The requests
// the engine holds go on: their answers are written and committed as
// usual, and each run then returns an error wrapping ErrShutdown, its
// batch to resume on the next start. Batches that finished every line
// before finalize as usual. Drain returns what it left to finish: the
// requests in flight at the engine and those it dropped. Close (or
// cancelling the runs' context) still stops what does not finish.
func (p *Pipeline) Drain() DispatchStats {
	p.draining.Store(true)
	if p.disp == nil {
		return DispatchStats{}
	}
	return p.disp.drain()
}

// drain drops every waiting task (answering it as not to be written, so
// that its run's count of open tasks falls) and makes the queues drop any
// submitted later. It returns the stats as they were before.
func (d *dispatcher) drain() DispatchStats {
	st := d.stats()
	d.mu.Lock()
	d.draining = true
	var touched []*queue
	for _, q := range d.queues {
		if len(q.items) == 0 {
			continue
		}
		for i, t := range q.items {
			d.answerLocked(q, dropped(t), false)
			q.items[i] = task{}
			<-q.slots
		}
		q.items = q.items[:0]
		touched = append(touched, q)
	}
	d.cond.Broadcast()
	d.mu.Unlock()
	for _, q := range touched {
		notify(q)
	}
	return st
}

// dropped is the outcome of a task drain took back before the engine saw
// it: nothing to write, the line stays undone.
func dropped(t task) outcome {
	return outcome{line: t.line, cid: t.req.CustomID, err: errDrained}
}
