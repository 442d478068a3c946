package pipeline

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/internal/failpoint"
	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline/ledger"
	"github.com/batchd/batchd/pipeline/validate"
	"github.com/batchd/batchd/wire"
)

// samplingNotice is logged once per batch run whose options set sampling defaults.
const samplingNotice = "Batch-level sampling params serve as defaults; per-request values in JSONL body take priority."

// maxBatchErrors bounds errors.data of a batch rejected for invalid lines.
const maxBatchErrors = 1000

// run is one execution of one batch.
type run struct {
	p    *Pipeline
	job  Job
	log  *slog.Logger
	b    *ledger.Batch // owned by the writer once it starts
	vcfg validate.Config
	// man is the input as identify read it: every read is checked against it.
	man *manifest

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
				return b, p.finishPublished(ctx, job, b)
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

// identify hashes the input and its effective options into the batch id,
// counts its requests, and returns the manifest every later read of the
// input is checked against. fileErr is a structural problem of a requests
// document. An input that changed while it was read (its length or
// modification time moved) is an error wrapping ErrInputChanged: it has no
// identity yet, and runs once it is complete again.
func (p *Pipeline) identify(ctx context.Context, job Job, eff Options) (id string, total int, man *manifest, fileErr, err error) {
	f, err := job.Store.OpenInput(ctx)
	if err != nil {
		return "", 0, nil, nil, fmt.Errorf("open input: %w", err)
	}
	defer f.Close()
	before, statable := fileStat(f)
	h := sha256.New()
	optJSON, _ := json.Marshal(eff)
	fmt.Fprintf(h, "batchd-v1\n%s\n%s\n", job.Format, optJSON)
	chunks := newChunkHasher()
	sink := io.MultiWriter(h, chunks)
	rec := &readErrRecorder{r: f}
	src := newSource(io.TeeReader(rec, sink), job.Format, p.cfg.MaxLineBytes)
	for {
		_, _, _, err := src.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if rec.err == nil {
				// Hash the rest so the id still names this content.
				if _, err := io.Copy(sink, f); err != nil {
					return "", 0, nil, nil, fmt.Errorf("read input: %w", err)
				}
				fileErr = err
				break
			}
			return "", 0, nil, nil, fmt.Errorf("read input: %w", err)
		}
		total++
	}
	man = chunks.done()
	if statable {
		after, ok := fileStat(f)
		if !ok || after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) || man.size != after.Size() {
			return "", 0, nil, nil, &changedError{job.Store.Files().Input, "it was written to while batchd read it"}
		}
		man.mtime = before.ModTime().UnixNano()
	}
	sum := h.Sum(nil)
	return "batch_" + hex.EncodeToString(sum[:16]), total, man, fileErr, nil
}

// readErrRecorder remembers the first read error of its reader, to tell an
// I/O failure from a structural problem in what was read.
type readErrRecorder struct {
	r   io.Reader
	err error
}

func (e *readErrRecorder) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

func newSource(r io.Reader, format string, maxLine int) validate.LineSource {
	if format == "json" {
		return validate.NewDocReader(r, maxLine)
	}
	return validate.NewLineReader(r, maxLine)
}

// Refuse ends job as a failed batch with code and message, without reading
// its input (a source refused it: a name batchd cannot use, a link, a FIFO,
// an input that never became complete). job.Name must be a usable name
// (the source's shortened one); the batch object is published under it and
// the input, whatever it is, retires through job.Store, which must not open
// it. identity names the entry the source refused (for a file: its path,
// inode, size and modification time), so refusing the same entry again
// after a crash replaces the same record.
func (p *Pipeline) Refuse(ctx context.Context, job Job, identity, code, message string) (*ledger.Batch, error) {
	h := sha256.New()
	fmt.Fprintf(h, "batchd-refused\n%s\n%s\n", identity, code)
	id := "batch_" + hex.EncodeToString(h.Sum(nil)[:16])
	lock := p.batchLock(id)
	lock.Lock()
	defer lock.Unlock()
	now := p.cfg.Now().Unix()
	b := &ledger.Batch{ID: id, Name: job.Name, Origin: job.Name, Format: job.Format, Gen: 1, Nonce: ledger.NewNonce(), CreatedAt: now}
	return p.fail(ctx, job, b, code, message)
}

// fail ends a new batch as failed before any request ran.
func (p *Pipeline) fail(ctx context.Context, job Job, b *ledger.Batch, code, msg string) (*ledger.Batch, error) {
	p.log.Warn("batch failed", keyName, job.Name, keyBatch, b.ID, "code", code, "error", msg)
	if err := ledger.Transition(b, StatusFailed, p.cfg.Now().Unix()); err != nil {
		return nil, err
	}
	b.Total, b.Completed, b.Failed = 0, 0, 0
	b.Errors = []ledger.BatchError{{Code: code, Message: msg}}
	if err := p.ledger.Put(b); err != nil {
		return nil, err
	}
	return b, p.publishFailed(ctx, job, b)
}

// publishFailed publishes a failed batch's object (an earlier batch's
// outputs of the same name are removed) and retires the input.
func (p *Pipeline) publishFailed(ctx context.Context, job Job, b *ledger.Batch) error {
	obj, err := p.batchObject(job, b, 0)
	if err != nil {
		return err
	}
	if err := job.Store.Publish(ctx, Results{Object: obj, Batch: snapshot(b)}); err != nil {
		return err
	}
	return p.retire(ctx, job)
}

// resultsIntact reports whether a finished batch's result files are as it
// left them: same length and modification time.
func (p *Pipeline) resultsIntact(b *ledger.Batch) bool {
	out, errs := p.resultPaths(b, b.Gen)
	for _, f := range []struct {
		path       string
		size, mtim int64
	}{{out, b.OutLen, b.OutMtime}, {errs, b.ErrLen, b.ErrMtime}} {
		st, err := os.Stat(f.path)
		if err != nil || st.Size() != f.size || (f.mtim != 0 && st.ModTime().UnixNano() != f.mtim) {
			return false
		}
	}
	return true
}

// forget drops a batch's record and result files, so its content runs anew.
func (p *Pipeline) forget(id string) error {
	if err := p.ledger.Delete(id); err != nil {
		return err
	}
	if err := os.RemoveAll(p.batchDir(id)); err != nil {
		return fmt.Errorf("remove results of %s: %w", id, err)
	}
	return nil
}

// finishPublished (re)publishes a finished batch's results under job's name.
func (p *Pipeline) finishPublished(ctx context.Context, job Job, b *ledger.Batch) error {
	obj, err := p.batchObject(job, b, 0)
	if err != nil {
		return err
	}
	out, errs := p.resultPaths(b, b.Gen)
	doc, err := p.docResults(job, b, false)
	if err != nil {
		return err
	}
	if err := job.Store.Publish(ctx, Results{Output: out, Errors: errs, Document: doc, Object: obj, Batch: snapshot(b)}); err != nil {
		return err
	}
	return p.retire(ctx, job)
}

// snapshot copies b for Results.Batch.
func snapshot(b *ledger.Batch) *ledger.Batch {
	c := *b
	c.Metadata = maps.Clone(b.Metadata)
	c.Errors = slices.Clone(b.Errors)
	return &c
}

func (p *Pipeline) resultPaths(b *ledger.Batch, gen int) (out, errs string) {
	return stateResultPaths(p.cfg.StateDir, b.ID, gen)
}

// retire retires the input through its store. A store whose retire takes
// several steps gives a record the ledger keeps meanwhile, so that Recover
// finishes an interrupted one instead of leaving an options file or cancel
// request to apply to a later batch of the same name.
func (p *Pipeline) retire(ctx context.Context, job Job) error {
	rec, err := job.Store.RetireRecord()
	if err != nil {
		return err
	}
	if rec != nil {
		if err := p.ledger.PutRetiring(job.Name, rec); err != nil {
			return err
		}
	}
	if err := failpoint.Inject(failpoint.RetireMove); err != nil {
		return err
	}
	if err := job.Store.Retire(ctx); err != nil {
		return err
	}
	if rec != nil {
		if err := p.ledger.DeleteRetiring(job.Name); err != nil {
			return err
		}
	}
	p.mu.Lock()
	delete(p.cancels, job.Name)
	p.mu.Unlock()
	return nil
}

// Recover finishes retires a crash interrupted, handing each record kept
// in the ledger (Store.RetireRecord) to finish, the FinishRetire of the
// store that wrote it. Call it after Open, before running jobs.
func (p *Pipeline) Recover(finish func(name string, record []byte) error) error {
	recs, err := p.ledger.Retiring()
	if err != nil {
		return err
	}
	for name, v := range recs {
		p.log.Info("finishing an interrupted move to done", keyName, name)
		if err := finish(name, v); err != nil {
			return fmt.Errorf("retiring record of %s: %w", name, err)
		}
		if err := p.ledger.DeleteRetiring(name); err != nil {
			return err
		}
	}
	return nil
}

// reopen prepares a finished batch whose content was dropped again: results
// are reused, and lines that ended for reasons outside the request
// (cancelled, expired, engine unavailable) run again. It reports whether
// anything is left to run.
//
// With retryAll every failed line runs again (POST /v1/batches/{id}/retry).
func (p *Pipeline) reopen(b *ledger.Batch, eff Options, retryAll bool) (bool, error) {
	oldOut, oldErrs := p.resultPaths(b, b.Gen)
	newOut, newErrs := p.resultPaths(b, b.Gen+1)
	done, err := p.ledger.Done(b.ID)
	if err != nil {
		return false, err
	}
	in, err := os.Open(oldErrs)
	if err != nil {
		return false, fmt.Errorf("open results of %s: %w", b.ID, err)
	}
	defer in.Close()
	var kept bytes.Buffer
	removed := 0
	br := bufio.NewReaderSize(io.LimitReader(in, b.ErrLen), 1<<16)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			var l struct {
				Line  int        `json:"line"`
				Error *LineError `json:"error"`
			}
			if json.Unmarshal(line, &l) == nil && l.Line > 0 && (retryAll || l.Error != nil && rerunnable(l.Error.Code)) {
				done.Clear(l.Line)
				removed++
			} else {
				kept.Write(line)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return false, fmt.Errorf("read results of %s: %w", b.ID, err)
		}
	}
	if removed == 0 {
		return false, nil
	}
	if err := fsx.CopyPrefix(oldOut, newOut, b.OutLen); err != nil {
		return false, err
	}
	if err := fsx.WriteFile(newErrs, kept.Bytes(), true); err != nil {
		return false, err
	}
	now := p.cfg.Now()
	b.Gen++
	b.ErrLen = int64(kept.Len())
	b.Failed -= removed
	if err := ledger.Transition(b, StatusInProgress, now.Unix()); err != nil {
		return false, err
	}
	b.ExpiresAt = 0
	if w, _ := eff.Window(); w > 0 {
		b.ExpiresAt = now.Add(w).Unix()
	}
	if err := p.ledger.Commit(b, done, true); err != nil {
		return false, err
	}
	os.Remove(oldOut)
	os.Remove(oldErrs)
	return true, nil
}

// openResults opens the current generation's result files, cut back to their
// committed lengths, and removes files of other generations.
func (r *run) openResults() error {
	dir := r.p.batchDir(r.b.ID)
	if err := fsx.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create batch dir: %w", err)
	}
	outPath, errPath := r.p.resultPaths(r.b, r.b.Gen)
	var err error
	if r.outF, err = openAt(outPath, r.b.OutLen); err != nil {
		return err
	}
	if r.errF, err = openAt(errPath, r.b.ErrLen); err != nil {
		return err
	}
	if err := fsx.SyncDir(dir); err != nil {
		return err
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if p := filepath.Join(dir, e.Name()); p != outPath && p != errPath {
			os.Remove(p)
		}
	}
	r.outW = bufio.NewWriterSize(r.outF, 1<<16)
	r.errW = bufio.NewWriterSize(r.errF, 1<<16)
	return nil
}

// openAt opens path for appending after its first n bytes, discarding
// anything written after the last commit.
func openAt(path string, n int64) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		// A new file: its name is made durable before the ledger can
		// record a length of it.
		if err := fsx.SyncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return nil, err
		}
	} else if errors.Is(err, os.ErrExist) {
		f, err = os.OpenFile(path, os.O_RDWR, 0o644)
	}
	if err != nil {
		return nil, fmt.Errorf("open results: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat results: %w", err)
	}
	if st.Size() < n {
		f.Close()
		return nil, fmt.Errorf("results file %s is shorter (%d bytes) than its committed length %d", path, st.Size(), n)
	}
	if st.Size() > n {
		if err := f.Truncate(n); err != nil {
			f.Close()
			return nil, fmt.Errorf("truncate results: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("sync results: %w", err)
		}
	}
	if _, err := f.Seek(n, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("seek results: %w", err)
	}
	return f, nil
}

func (r *run) closeFiles() {
	if r.outF != nil {
		r.outF.Close()
	}
	if r.errF != nil {
		r.errF.Close()
	}
}

// execute runs a batch that has work left (or is validating) to its end.
func (p *Pipeline) execute(ctx context.Context, job Job, b *ledger.Batch, man *manifest, eff Options, vcfg validate.Config, log *slog.Logger) (*ledger.Batch, error) {
	r := &run{p: p, job: job, log: log, b: b, vcfg: vcfg, man: man, results: make(chan result, 1024)}
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

// seed writes the lines the store resumes from (Store.Resume) that are not
// done yet, and commits them.
func (r *run) seed() error {
	n := 0
	err := r.job.Store.Resume(r.runCtx, func(c Committed) error {
		if c.Line < 1 || c.Line > r.b.Total {
			return fmt.Errorf("line %d: out of range (the batch has %d lines)", c.Line, r.b.Total)
		}
		if r.done.Has(c.Line) {
			return nil
		}
		res := result{line: c.Line, kind: toOutput, data: c.Data}
		if c.Errors {
			res.kind = toErrors
		} else {
			var l OutputLine
			if err := json.Unmarshal(c.Data, &l); err != nil || l.Response == nil {
				return fmt.Errorf("line %d: not an output line", c.Line)
			}
			res.usage = usageOf(l.Response.Body)
		}
		n++
		return r.append(res)
	})
	if err != nil {
		return fmt.Errorf("seed %s from checkpoint: %w", r.job.Name, err)
	}
	if n == 0 {
		return nil
	}
	if err := r.commit(); err != nil {
		return err
	}
	r.log.Info("resumed from checkpoint", "lines", n, "done", r.b.Completed+r.b.Failed, "total", r.b.Total)
	r.prior, err = r.p.ledger.Done(r.b.ID)
	return err
}

// validateAll checks every line before any runs (on_invalid: reject). It
// reports false, with the batch marked failed, when some line is invalid.
func (r *run) validateAll() (bool, error) {
	in, f, err := r.openVerified()
	if err != nil {
		return false, err
	}
	defer f.Close()
	src := newSource(in, r.job.Format, r.p.cfg.MaxLineBytes)
	chk := validate.NewChecker(r.vcfg)
	var errs []ledger.BatchError
	for {
		n, raw, tooLong, err := src.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return false, fmt.Errorf("read input: %w", err)
		}
		res := check(chk, n, raw, tooLong, r.p.cfg.MaxLineBytes)
		if res.Problem != nil && len(errs) < maxBatchErrors {
			line := n
			be := ledger.BatchError{Code: res.Problem.Code, Message: res.Problem.Message, Line: &line}
			if res.Problem.Param != "" {
				be.Param = strPtr(res.Problem.Param)
			}
			errs = append(errs, be)
		}
	}
	now := r.p.cfg.Now().Unix()
	if len(errs) > 0 {
		r.log.Warn("batch rejected: invalid lines", "invalid", len(errs))
		if err := ledger.Transition(r.b, StatusFailed, now); err != nil {
			return false, err
		}
		r.b.Errors, r.b.Total = errs, 0
		return false, r.p.ledger.Put(r.b)
	}
	if err := ledger.Transition(r.b, StatusInProgress, now); err != nil {
		return false, err
	}
	return true, r.p.ledger.Put(r.b)
}

func check(chk *validate.Checker, n int, raw []byte, tooLong bool, maxLine int) validate.Result {
	if tooLong {
		return chk.TooLong(n, maxLine)
	}
	return chk.Check(n, raw)
}

// read streams the input, sending every line not yet done either to the
// writer (invalid lines, and every request once the batch is cancelled or
// expired) or to the engine. It reads through a verifyingReader: an input
// that changed ends the read with ErrInputChanged before any line of the
// changed part is sent, and the requests in flight are dropped (left
// undone, as at shutdown).
func (r *run) read() (err error) {
	in, f, err := r.openVerified()
	if err != nil {
		return err
	}
	defer f.Close()
	src := newSource(in, r.job.Format, r.p.cfg.MaxLineBytes)
	chk := validate.NewChecker(r.vcfg)
	suspects, err := r.p.ledger.Suspects(r.b.ID)
	if err != nil {
		return err
	}
	defer func() {
		if errors.Is(err, ErrInputChanged) {
			r.cancelReq(err) // before execute waits: what is in flight is dropped
		}
	}()
	for {
		n, raw, tooLong, err := src.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read input: %w", err)
		}
		if r.runCtx.Err() != nil {
			return nil
		}
		// Every line is checked, done or not, so duplicate detection sees the
		// same file on every run.
		res := check(chk, n, raw, tooLong, r.p.cfg.MaxLineBytes)
		if res.Request != nil && r.endpoint.Load() == nil {
			u := res.Request.URL
			r.endpoint.Store(&u)
		}
		if r.prior.Has(n) {
			continue
		}
		if res.Problem != nil {
			r.results <- problemResult(r.b.ID, res)
			continue
		}
		req := res.Request
		if cause := r.stopCause(); cause != nil {
			r.results <- causeResult(r.b.ID, req.Line, req.CustomID, cause)
			continue
		}
		if r.reqCtx.Err() != nil {
			return nil // shutting down: the line is left for the next run
		}
		if r.p.draining.Load() {
			return errDrained // the line is left for the next run
		}
		line, cid := req.Line, req.CustomID
		stops := suspects[line]
		if stops >= suspectLimit && !r.job.RetryFailed {
			r.log.Error("request failed: the daemon stopped twice while it ran, the second time alone; it is not run again",
				keyLine, line, keyCustomID, cid)
			r.results <- crashedResult(r.b.ID, line, cid, stops)
			continue
		}
		t := task{
			batch: r.b.ID, line: line, alone: stops > 0,
			ctx: r.reqCtx,
			req: &engine.Request{CustomID: cid, Endpoint: req.URL, Body: req.Body},
		}
		r.tasks.Add(1)
		if err := r.p.disp.submit(r.runCtx, r.q, t); err != nil {
			r.tasks.Done()
			return nil
		}
	}
}

func problemResult(batchID string, res validate.Result) result {
	l := &OutputLine{ID: requestID(batchID, res.Line), Line: res.Line}
	if res.HasCustomID {
		l.CustomID = strPtr(res.CustomID)
	}
	p := res.Problem
	if p.Kind == validate.KindBadRequest {
		msg := p.Message
		if p.Param != "" {
			msg = p.Param + ": " + msg
		}
		l.Response = &LineResponse{StatusCode: 400, RequestID: l.ID, Body: wire.BadRequest(msg, p.Param, p.Code)}
	} else {
		l.Error = &LineError{Code: p.Code, Message: p.Message}
	}
	return result{line: res.Line, kind: toErrors, data: encodeLine(l)}
}

func causeResult(batchID string, line int, cid string, cause error) result {
	code, msg := CodeBatchCancelled, "The batch was cancelled before this request completed."
	if errors.Is(cause, errExpired) {
		code, msg = CodeBatchExpired, "The batch's completion window passed before this request completed."
	}
	l := &OutputLine{ID: requestID(batchID, line), CustomID: strPtr(cid), Error: &LineError{Code: code, Message: msg}, Line: line}
	return result{line: line, kind: toErrors, data: encodeLine(l)}
}

func crashedResult(batchID string, line int, cid string, stops int) result {
	l := &OutputLine{ID: requestID(batchID, line), CustomID: strPtr(cid), Line: line, Error: &LineError{Code: CodeEngineCrashed,
		Message: fmt.Sprintf("batchd stopped without closing %d times while this request ran, the last time with nothing else running (a crash, an OOM kill or kill -9): it is not run again. Retry the batch to run it once more.", stops)}}
	return result{line: line, kind: toErrors, data: encodeLine(l)}
}

// answerResult is engineResult for an outcome, run by whoever took the
// engine's answer (a worker, or the engine's goroutine in done). A panic
// while reading the answer (a response the engine built wrong) fails that
// request alone with a 500, as a panic in the engine does.
func (r *run) answerResult(o outcome) (res result, ok bool) {
	defer func() {
		if v := recover(); v != nil {
			r.log.Error("the engine's answer to a request could not be read; failing that request", keyLine, o.line, keyCustomID, o.cid,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			res, ok = r.engineResult(o.line, o.cid, engine.Recovered(v), nil)
		}
	}()
	return r.engineResult(o.line, o.cid, o.resp, o.err)
}

// engineResult turns the engine's answer into a result line. It reports
// false when the run is shutting down: the line is left for the next run.
func (r *run) engineResult(line int, cid string, resp *engine.Response, err error) (result, bool) {
	id := requestID(r.b.ID, line)
	l := &OutputLine{ID: id, CustomID: strPtr(cid)}
	switch {
	case err == nil && !json.Valid(resp.Body):
		l.Error = &LineError{Code: CodeInvalidResponse, Message: fmt.Sprintf("the engine answered status %d with a body that is not JSON", resp.StatusCode)}
		l.Line = line
	case err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300:
		l.Response = &LineResponse{StatusCode: resp.StatusCode, RequestID: answerID(resp, id), Body: resp.Body}
		return result{line: line, kind: toOutput, data: encodeLine(l), usage: usageOf(resp.Body)}, true
	case err == nil:
		l.Response = &LineResponse{StatusCode: resp.StatusCode, RequestID: answerID(resp, id), Body: resp.Body}
		l.Line = line
	case r.runCtx.Err() != nil:
		return result{}, false
	case r.reqCtx.Err() != nil:
		if cause := r.stopCause(); cause != nil {
			return causeResult(r.b.ID, line, cid, cause), true
		}
		return result{}, false // the run shut down after all
	default:
		if !errors.Is(err, engine.ErrUnavailable) {
			r.log.Warn("engine error", keyLine, line, keyCustomID, cid, "error", err)
		}
		l.Error = &LineError{Code: CodeEngineUnavailable, Message: err.Error()}
		l.Line = line
	}
	return result{line: line, kind: toErrors, data: encodeLine(l)}, true
}

// answerID is the request_id of an engine's answer: the engine's own, or
// the line's id when the engine gave none (a native engine's 400), so
// every response line names its request.
func answerID(resp *engine.Response, lineID string) string {
	if resp.RequestID != "" {
		return resp.RequestID
	}
	return lineID
}

func usageOf(body []byte) lineUsage {
	var u struct {
		Usage wire.Usage `json:"usage"`
	}
	if json.Unmarshal(body, &u) != nil {
		return lineUsage{}
	}
	lu := lineUsage{in: int64(u.Usage.PromptTokens), out: int64(u.Usage.CompletionTokens)}
	if d := u.Usage.PromptTokensDetails; d != nil {
		lu.cached = int64(d.CachedTokens)
	}
	return lu
}

// write is the batch's single writer: it appends result lines and
// group-commits them, every CommitEvery results or CommitInterval.
func (r *run) write() error {
	cfg := r.p.cfg
	tick := time.NewTicker(cfg.CommitInterval)
	defer tick.Stop()
	pending := 0
	var werr error
	reqDone := r.reqCtx.Done()
	lastProgress := time.Time{}
	commit := func() {
		if werr == nil {
			if werr = r.commit(); werr != nil {
				r.stopRun(werr)
			}
		}
		pending = 0
	}
	add := func(res result) {
		if werr != nil {
			return
		}
		if err := r.append(res); err != nil {
			werr = err
			r.stopRun(err)
			return
		}
		pending++
		if pending >= cfg.CommitEvery {
			commit()
		}
	}
	var answers []outcome
	for {
		select {
		case res, ok := <-r.results:
			if !ok {
				if pending > 0 || r.statusChange() {
					commit()
				}
				return werr
			}
			add(res)
		case <-r.q.ready:
			answers = r.p.disp.collect(r.q, answers)
			for i, o := range answers {
				if o.write {
					add(o.res)
				} else if errors.Is(o.err, errDrained) {
					r.dropped.Store(true)
				}
				answers[i] = outcome{}
				r.tasks.Done()
			}
		case <-tick.C:
			if pending > 0 || r.statusChange() {
				commit()
			}
			if werr == nil && time.Since(lastProgress) >= cfg.ProgressInterval {
				lastProgress = time.Now()
				if err := r.progress(); isENOSPC(err) {
					r.p.diskFull(fmt.Errorf("write progress: %w", err))
				} else if err != nil {
					r.log.Warn("write progress", "error", err)
				}
			}
		case <-reqDone:
			reqDone = nil
			if r.runCtx.Err() == nil {
				commit()
			}
		}
	}
}

// statusChange records a cancel in the batch record; it reports whether the
// record changed.
func (r *run) statusChange() bool {
	if r.b.Status == StatusInProgress && errors.Is(context.Cause(r.reqCtx), errCancelled) && r.runCtx.Err() == nil {
		if err := ledger.Transition(r.b, StatusCancelling, r.p.cfg.Now().Unix()); err != nil {
			r.log.Error("batch not cancelling", "error", err)
			return false
		}
		r.log.Info("batch cancelling")
		return true
	}
	return false
}

func (r *run) append(res result) error {
	if ep := r.endpoint.Load(); r.b.Endpoint == "" && ep != nil {
		r.b.Endpoint = *ep
	}
	w := r.outW
	if res.kind == toErrors {
		w = r.errW
		r.errDir = true
		r.b.Failed++
		r.b.ErrLen += int64(len(res.data) + 1)
	} else {
		r.outDirty = true
		r.b.Completed++
		r.b.OutLen += int64(len(res.data) + 1)
		r.b.InputTokens += res.usage.in
		r.b.OutputTokens += res.usage.out
		r.b.CachedTokens += res.usage.cached
	}
	w.Write(res.data)
	if err := w.WriteByte('\n'); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	r.done.Set(res.line)
	r.ran.Add(1)
	if r.track {
		r.committing = append(r.committing, Committed{Line: res.line, Errors: res.kind == toErrors, Data: res.data})
	}
	return nil
}

// commit makes the appended lines durable, then records them in the ledger.
func (r *run) commit() error {
	r.statusChange()
	if err := r.outW.Flush(); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	if err := r.errW.Flush(); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	if err := failpoint.Inject(failpoint.ResultsSync); err != nil {
		return fmt.Errorf("sync results %s: %w", r.outF.Name(), err)
	}
	if r.outDirty {
		if err := r.outF.Sync(); err != nil {
			return fmt.Errorf("sync results: %w", err)
		}
		r.outDirty = false
	}
	if r.errDir {
		if err := r.errF.Sync(); err != nil {
			return fmt.Errorf("sync results: %w", err)
		}
		r.errDir = false
	}
	if err := failpoint.Inject(failpoint.LedgerCommit); err != nil {
		return fmt.Errorf("commit results: %w", err)
	}
	if err := r.p.ledger.Commit(r.b, r.done, false); err != nil {
		return err
	}
	if err := failpoint.Inject(failpoint.AfterCommit); err != nil {
		return err
	}
	if r.track && len(r.committing) > 0 {
		err := r.job.Store.Checkpoint(r.committing)
		clear(r.committing)
		r.committing = r.committing[:0]
		if err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	return nil
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
	if err := r.job.Store.Publish(ctx, Results{Output: outPath, Errors: errPath, Document: doc, Object: obj, Batch: snapshot(b)}); err != nil {
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

// batchObject renders batch b as NAME.batch.json.
func (p *Pipeline) batchObject(job Job, b *ledger.Batch, rate float64) ([]byte, error) {
	files := job.Store.Files()
	info := BatchdInfo{
		Name:       job.Name,
		InputFile:  files.Input,
		OutputFile: files.Output,
		ErrorFile:  files.Errors,
		UpdatedAt:  p.cfg.Now().Unix(),
		Rate:       rate,
	}
	if sr, ok := p.eng.(engine.StatsReporter); ok {
		info.Paused = sr.Stats().Paused
	}
	data, err := json.MarshalIndent(NewBatchObject(b, info), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode batch object: %w", err)
	}
	return append(data, '\n'), nil
}
