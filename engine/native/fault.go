package native

import (
	"fmt"
	"runtime/debug"
	"slices"
	"sync/atomic"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/wire"
)

// A panic while the engine runs a request is a bug in batchd or a request
// it should have refused; either way it must fail that request, not the
// daemon, and not the requests that happened to share its forward pass.
//
// The scheduler recovers a panicking step and finds the culprit by
// isolation: when the step held one job, that job fails with a 500
// (engine_error); when it held several, every running sequence is put back
// in the queue (their KV recomputed later: batch invariance makes the
// result the same) and each job of the step becomes a suspect that runs
// alone, one at a time, until it ends. A suspect that panics alone fails;
// the others finish as if nothing had happened. Kernel panics on the
// kernels' helper goroutines reach the scheduler too (kernels.PanicError).

// safeStep runs one step, recovering a panic in it.
func (r *runner) safeStep() {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		r.recoverStep(panicDetails(v))
	}()
	r.step()
}

// panicDetails is a recovered panic's value and the stack that raised it
// (a kernel helper's, when it came through kernels.PanicError).
func panicDetails(v any) (any, []byte) {
	if pe, ok := v.(*kernels.PanicError); ok {
		return pe.Value, pe.Stack
	}
	return v, debug.Stack()
}

// faultHook, when set (by tests only), sees the tokens of every forward
// pass and embedding before the model does, and may panic to stand for a
// bug in the model code.
var faultHook atomic.Pointer[func(tokens []int32)]

// isolated is the suspect job that runs alone in this step, or nil: the
// first suspect still running, else the first one waiting.
func (sc *scheduler) isolated() *job {
	if !sc.quarantine {
		return nil
	}
	for _, s := range sc.running {
		if s.job.suspect && !s.finished() {
			return s.job
		}
	}
	for _, s := range sc.waiting {
		if s.job.suspect {
			return s.job
		}
	}
	sc.quarantine = false
	return nil
}

// recoverStep handles the panic v of the step whose sequences are
// r.inStep (nil when it came before the forward pass: then every running
// job is a suspect).
func (r *runner) recoverStep(v any, stack []byte) {
	step := r.inStep
	r.inStep = nil
	if step == nil {
		step = slices.Clone(r.sched.running)
	}
	var jobs []*job
	for _, s := range step {
		s.chunk, s.draft = 0, nil
		if !slices.Contains(jobs, s.job) {
			jobs = append(jobs, s.job)
		}
	}
	if len(jobs) == 1 {
		j := jobs[0]
		r.e.log.Error("engine failed a request: panic in its forward pass", "model", r.name, "panic", fmt.Sprint(v), "stack", string(stack))
		r.failJob(j, engine.Recovered(v))
		return
	}
	r.e.log.Warn("engine step panicked; its requests are rerun one at a time to find the one that fails",
		"model", r.name, "requests", len(jobs), "panic", fmt.Sprint(v), "stack", string(stack))
	for _, j := range jobs {
		j.suspect = true
	}
	r.sched.quarantine = true
	// Every running sequence goes back to the queue: its KV may be half
	// written, and the suspects must find the cache free to run alone.
	for _, s := range slices.Clone(r.sched.running) {
		if !s.finished() {
			r.sched.preempt(s)
		}
	}
}

// failJob ends every unfinished sequence of j and answers its request with
// resp (a 500, engine_error).
func (r *runner) failJob(j *job, resp *engine.Response) {
	r.sched.fail(j)
	j.failed = resp
	if j.remaining > 0 {
		j.remaining = 0
		if j.complete != nil {
			j.complete(j)
		}
	}
}

// fail ends every unfinished sequence of j, running or waiting, with
// finish reason "error".
func (sc *scheduler) fail(j *job) {
	for _, s := range j.seqs {
		switch s.status {
		case seqRunning:
			sc.releaseDraft(s)
			sc.bm.deallocate(s)
			sc.running = slices.DeleteFunc(sc.running, func(x *seq) bool { return x == s })
		case seqWaiting, seqPreempted:
			sc.waiting = slices.DeleteFunc(sc.waiting, func(x *seq) bool { return x == s })
		default:
			continue // finished and retired before
		}
		sc.drop(s, "error")
	}
}

// CodeNumericError is the error code of a request whose logits held NaN
// or an infinity (a model or LoRA adapter whose weights overflow): there is
// no token to sample from them, so the request fails with a 500, alone.
const CodeNumericError = "engine_numeric_error"

// nonFiniteLogits is the answer to a request whose sequence s got logits
// that are not finite, and the name of the adapter s ran with ("" for
// none).
func nonFiniteLogits(s *seq) (*engine.Response, string) {
	with, name := "", ""
	if s.adapter != nil {
		name = s.adapter.name
		with = fmt.Sprintf(" with the LoRA adapter %q", name)
	}
	msg := fmt.Sprintf("The model computed NaN or infinite logits for this request%s, so no token could be sampled; it was not retried. The weights overflow float32 on this input: check the model's and the adapter's weights.", with)
	return &engine.Response{StatusCode: 500, Body: wire.NewError(wire.TypeServerError, msg, "", CodeNumericError).JSON()}, name
}
