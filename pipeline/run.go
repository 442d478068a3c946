package pipeline

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/internal/failpoint"
	"github.com/batchd/batchd/pipeline/ledger"
	"github.com/batchd/batchd/pipeline/validate"
)

// A batch's life. Run identifies the input and decides what its batch
// does: a new one starts, an unfinished one resumes, a finished one
// reuses its results or runs again what did not finish (rerun.go), one
// that cannot run ends failed (retire.go). execute then runs it: the
// reader (reader.go) feeds the dispatcher, a single writer (writer.go)
// commits the answers as result lines (lines.go), and finalize publishes
// the results and retires the input.

// samplingNotice is logged once per batch run whose options set sampling defaults.
const samplingNotice = "Batch-level sampling params serve as defaults; per-request values in JSONL body take priority."

// run is one execution of one batch.
type run struct {
	p    *Pipeline
	job  Job
	log  *slog.Logger
	b    *ledger.Batch // owned by the writer once it starts
	vcfg validate.Config
	// man is the input as identify read it: every read is checked against it.
	man *manifest
	// shape is the shape NAME.output.jsonl is published in (result_shape).
	shape string
	// prio is the engine priority of the batch's requests (Options.Rank).
	prio engine.Priority

	prior *ledger.Bitmap // lines done before this run: the reader's view
	done  *ledger.Bitmap // the writer's view

	outF, errF       *os.File
	outW, errW       *bufio.Writer
	outDirty, errDir bool

	runCtx    context.Context
	stopRun   context.CancelCauseFunc
	reqCtx    context.Context
	cancelReq context.CancelCauseFunc

	results chan result
	// q carries the batch's requests to the engine and its answers back
	// to the writer; tasks counts the requests whose answers are not yet
	// written.
	q     *queue
	tasks sync.WaitGroup
	// endpoint is the url of the first valid line the reader saw: the batch's
	// endpoint in its object.
	endpoint atomic.Pointer[string]

	started atomic.Int64 // unix ns when the run began (read by Rate)

	// committing collects the lines appended since the last commit, for
	// job.OnCommit (nil when it is not set).
	committing []Committed
	track      bool
	// ran counts the lines this run wrote (for rate, read by other goroutines).
	ran atomic.Int64
	// dropped: Drain took back a request of this run before the engine saw it.
	dropped atomic.Bool
}

func (r *run) cancel(cause error) { r.cancelReq(cause) }

// stopCause is why the batch's requests stopped: errCancelled or
// errExpired, whose lines are written as such; nil while they run, and
// when the run as a whole is shutting down (its context's cause, not the
// batch's): those lines are left for the next run, never written as
// cancelled.
func (r *run) stopCause() error {
	cause := context.Cause(r.reqCtx)
	if errors.Is(cause, errCancelled) || errors.Is(cause, errExpired) {
		return cause
	}
	return nil
}

// Run runs job to its end and returns its batch record. It returns an error
// (and leaves the batch to resume later) when the input cannot be read, a
// result file cannot be made durable, or ctx is done.
//
// A write that fails because the disk is full (ENOSPC) pauses intake
// (diskfull.go): the run stops at its last durable commit, as do the other
// running batches, and Run returns an error wrapping ErrDiskFull; while
// the pause lasts Run starts nothing and returns ErrDiskFull at once.
func (p *Pipeline) Run(ctx context.Context, job Job) (*ledger.Batch, error) {
	if p.disk.state().Full {
		return nil, fmt.Errorf("run %s: %w", job.Name, ErrDiskFull)
	}
	b, err := p.run(ctx, job)
	if isENOSPC(err) || errors.Is(err, ErrDiskFull) {
		if isENOSPC(err) {
			p.diskFull(err)
		}
		if !errors.Is(err, ErrDiskFull) {
			err = fmt.Errorf("%w: %w", ErrDiskFull, err)
		}
	}
	return b, err
}

func (p *Pipeline) run(ctx context.Context, job Job) (*ledger.Batch, error) {
	log := p.log.With(keyName, job.Name)
	opts, optErr := p.readOptions(ctx, job)
	eff := p.cfg.Defaults.Merge(opts)
	if optErr == nil {
		optErr = eff.Validate()
	}
	vcfg := eff.CheckerConfig()
	if optErr == nil {
		if err := vcfg.Validate(); err != nil {
			optErr = fmt.Errorf("options: %w", err)
		}
	}
	id, total, man, fileErr, err := p.identify(ctx, job, eff)
	if err != nil {
		return nil, err
	}
	log = log.With(keyBatch, id)

	lock := p.batchLock(id)
	lock.Lock()
	defer lock.Unlock()
	if err := p.failStale(job, id); err != nil {
		return nil, err
	}

	now := p.cfg.Now().Unix()
	b, err := p.ledger.Get(id)
	if err == nil {
		b, err = p.reviveChanged(b)
	}
	if err == nil && Terminal(b.Status) && b.Status != StatusFailed && !p.resultsIntact(b) {
		log.Warn("the results of an earlier run of this content were changed outside batchd; running it again")
		if err := p.forget(b.ID); err != nil {
			return nil, err
		}
		b, err = nil, ledger.ErrNotFound
	}
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		b = &ledger.Batch{
			ID: id, Name: job.Name, Origin: job.Name, Format: job.Format, Total: total, Gen: 1, Nonce: ledger.NewNonce(), CreatedAt: now,
			CompletionWindow: eff.CompletionWindow, Metadata: eff.Metadata,
		}
		if w, _ := eff.Window(); w > 0 {
			b.ExpiresAt = p.cfg.Now().Add(w).Unix()
		}
		switch {
		case optErr != nil:
			return p.fail(ctx, job, b, "invalid_options", optErr.Error())
		case fileErr != nil:
			return p.fail(ctx, job, b, "invalid_file", fileErr.Error())
		}
		start := StatusInProgress
		if eff.OnInvalid == OnInvalidReject {
			start = StatusValidating
		}
		if err := ledger.Transition(b, start, now); err != nil {
			return nil, err
		}
		if err := p.ledger.Put(b); err != nil {
			return nil, err
		}
		log.Info("batch started", "total", total)
	case err != nil:
		return nil, err
	default:
		// The name points at the record it runs or reuses, also when it
		// only publishes that record's results.
		b.Name = job.Name
		if err := p.ledger.Put(b); err != nil {
			return nil, err
		}
		if b.Status == StatusFailed {
			return b, p.publishFailed(ctx, job, b)
		}
		if Terminal(b.Status) {
			again, err := p.reopen(b, eff, job.RetryFailed)
			if err != nil {
				return nil, err
			}
			if !again {
				log.Info("same content ran before; reusing its results", "status", b.Status)
				return b, p.finishPublished(ctx, job, b, eff.ResultShape)
			}
			log.Info("same content ran before; rerunning its unfinished requests", "done", b.Completed+b.Failed, "total", b.Total)
		} else {
			log.Info("resuming batch", "status", b.Status, "done", b.Completed+b.Failed, "total", b.Total)
		}
	}
	return p.execute(ctx, job, b, man, eff, vcfg, log)
}

// readOptions reads and parses the job's options file (none gives zero
// Options).
func (p *Pipeline) readOptions(ctx context.Context, job Job) (Options, error) {
	raw, err := job.Store.Options(ctx)
	if err != nil {
		return Options{}, fmt.Errorf("read options: %w", err)
	}
	if raw == nil {
		return Options{}, nil
	}
	return ParseOptions(raw, job.Store.Files().Options)
}

// execute runs a batch that has work left (or is validating) to its end.
func (p *Pipeline) execute(ctx context.Context, job Job, b *ledger.Batch, man *manifest, eff Options, vcfg validate.Config, log *slog.Logger) (*ledger.Batch, error) {
	prio, _ := eff.Rank() // validated
	r := &run{p: p, job: job, log: log, b: b, vcfg: vcfg, man: man, shape: eff.ResultShape, prio: prio, results: make(chan result, 1024)}
	r.runCtx, r.stopRun = context.WithCancelCause(ctx)
	defer r.stopRun(nil)
	r.reqCtx, r.cancelReq = context.WithCancelCause(r.runCtx)
	defer r.cancelReq(nil)

	if b.Status == StatusValidating {
		ok, err := r.validateAll()
		if errors.Is(err, ErrInputChanged) {
			return b, r.failChanged(ctx, err)
		}
		if err != nil {
			return nil, err
		}
		if !ok {
			return b, p.publishFailed(ctx, job, b)
		}
	}
	if err := r.openResults(); err != nil {
		return nil, err
	}
	defer r.closeFiles()
	var err error
	if r.prior, err = p.ledger.Done(b.ID); err != nil {
		return nil, err
	}
	if r.done, err = p.ledger.Done(b.ID); err != nil {
		return nil, err
	}
	if err := r.seed(); err != nil {
		return nil, err
	}
	r.track = true

	p.mu.Lock()
	if p.running[job.Name] != nil {
		p.mu.Unlock()
		return nil, fmt.Errorf("batch %s is already running", job.Name)
	}
	p.running[job.Name] = r
	cancelAsked := p.cancels[job.Name]
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.running, job.Name)
		p.mu.Unlock()
	}()
	if cancelAsked || b.Status == StatusCancelling {
		r.cancel(errCancelled)
	}
	if b.ExpiresAt != 0 {
		wait := time.Until(time.Unix(b.ExpiresAt, 0))
		t := time.AfterFunc(max(wait, 0), func() { r.cancel(errExpired) })
		defer t.Stop()
	}
	if eff.HasSampling() {
		log.Info(samplingNotice)
	}

	r.started.Store(time.Now().UnixNano())
	r.ran.Store(0) // seeded lines are not this run's work
	r.q = p.disp.addQueue(func(o *outcome) {
		o.res, o.write = r.answerResult(*o)
		o.resp = nil // the line holds what is kept of it
	})
	defer p.disp.removeQueue(r.q) // after the wait below: every answer is collected
	writerErr := make(chan error, 1)
	go func() { writerErr <- r.write() }()

	readErr := r.read()
	r.tasks.Wait()
	close(r.results)
	werr := <-writerErr
	switch {
	case werr != nil:
		return nil, werr
	case ctx.Err() != nil:
		return nil, fmt.Errorf("run %s: %w", job.Name, ErrShutdown)
	case r.runCtx.Err() != nil:
		// Stopped as at shutdown by something else (a full disk).
		return nil, fmt.Errorf("run %s: %w", job.Name, context.Cause(r.runCtx))
	case errors.Is(readErr, errDrained) || r.dropped.Load():
		return nil, fmt.Errorf("run %s: drained: %w", job.Name, ErrShutdown)
	case errors.Is(readErr, ErrInputChanged):
		return b, r.failChanged(ctx, readErr)
	case readErr != nil:
		return nil, readErr
	}
	// The reader saw the input end where it should; a write since would
	// otherwise be retired with it, unread.
	if err := r.inputUnchanged(); errors.Is(err, ErrInputChanged) {
		return b, r.failChanged(ctx, err)
	} else if err != nil {
		return nil, err
	}
	return b, r.finalize(ctx)
}

func (r *run) rate() float64 {
	st := r.started.Load()
	if st == 0 {
		return 0
	}
	el := time.Since(time.Unix(0, st)).Seconds()
	if el <= 0 {
		return 0
	}
	return float64(r.ran.Load()) / el
}

// progress publishes the batch object of a running batch (best effort).
func (r *run) progress() error {
	obj, err := r.p.batchObject(r.job, r.b, r.rate())
	if err != nil {
		return err
	}
	return r.job.Store.Progress(r.runCtx, obj)
}

// finalize publishes the result files and ends the batch.
func (r *run) finalize(ctx context.Context) error {
	p, b := r.p, r.b
	final := StatusCompleted
	switch cause := context.Cause(r.reqCtx); {
	case errors.Is(cause, errCancelled):
		final = StatusCancelled
	case errors.Is(cause, errExpired):
		final = StatusExpired
	}
	now := p.cfg.Now().Unix()
	if err := ledger.Transition(b, StatusFinalizing, now); err != nil {
		return err
	}
	if err := p.ledger.Put(b); err != nil {
		return err
	}
	if err := failpoint.Inject(failpoint.AfterFinalizing); err != nil {
		return err
	}
	if err := r.outF.Sync(); err != nil {
		return fmt.Errorf("sync results: %w", err)
	}
	if err := r.errF.Sync(); err != nil {
		return fmt.Errorf("sync results: %w", err)
	}
	outPath, errPath := p.resultPaths(b, b.Gen)
	for _, f := range []struct {
		path string
		dst  *int64
	}{{outPath, &b.OutMtime}, {errPath, &b.ErrMtime}} {
		st, err := os.Stat(f.path)
		if err != nil {
			return fmt.Errorf("stat results: %w", err)
		}
		*f.dst = st.ModTime().UnixNano()
	}
	if err := ledger.Transition(b, final, now); err != nil {
		return err
	}
	obj, err := p.batchObject(r.job, b, r.rate())
	if err != nil {
		return err
	}
	doc, err := p.docResults(r.job, b, true)
	if err != nil {
		return err
	}
	pubOut, err := p.publishedOutput(b, r.shape, outPath, true)
	if err != nil {
		return err
	}
	if err := r.job.Store.Publish(ctx, Results{Output: pubOut, Errors: errPath, Document: doc, Object: obj, Batch: snapshot(b)}); err != nil {
		return err
	}
	if err := failpoint.Inject(failpoint.FinalStatus); err != nil {
		return err
	}
	if err := p.ledger.Put(b); err != nil {
		return err
	}
	files := r.job.Store.Files()
	r.log.Info("batch ended", "status", final, "completed", b.Completed, "failed", b.Failed,
		"output", files.Output, "errors", files.Errors)
	return p.retire(ctx, r.job)
}

// snapshot copies b for Results.Batch.
func snapshot(b *ledger.Batch) *ledger.Batch {
	c := *b
	c.Metadata = maps.Clone(b.Metadata)
	c.Errors = slices.Clone(b.Errors)
	return &c
}
