package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/pipeline/ledger"
	"github.com/batchd/batchd/pipeline/validate"
)

// Reading a batch's input: identify hashes it into the batch id and counts
// its requests, validateAll checks every line before any runs (on_invalid:
// reject), and read streams it, sending each line not yet done to the
// dispatcher or, when it is not to run, straight to the writer.

// maxBatchErrors bounds errors.data of a batch rejected for invalid lines.
const maxBatchErrors = 1000

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
	ident := eff
	ident.ResultShape = "" // a presentation: the same results in another shape
	// The order of the work, not the work.
	ident.Priority, ident.ServiceTier = "", ""
	ident.OutputExpiresAfter = nil // how long results are kept
	optJSON, _ := json.Marshal(ident)
	fmt.Fprintf(h, "batchd-v1\n%s\n%s\n", job.Format, optJSON)
	chunks := newChunkHasher()
	sink := io.MultiWriter(h, chunks)
	rec := &readErrRecorder{r: f}
	// The look ahead's I/O errors are I/O errors too, not structural ones.
	ahead := &readErrRecorder{}
	src := newSource(io.TeeReader(rec, sink), job.Format, p.cfg.MaxLineBytes, func() (io.ReadCloser, error) {
		f, err := job.Store.OpenInput(ctx)
		if err != nil {
			ahead.err = err
			return nil, err
		}
		ahead.r = f
		return struct {
			io.Reader
			io.Closer
		}{ahead, f}, nil
	})
	for {
		_, _, _, err := src.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if rec.err == nil && ahead.err == nil {
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

// newSource reads the input r in format. A requests document opens the input
// again with open for its keys after "requests" (see DocReader.LookAhead).
func newSource(r io.Reader, format string, maxLine int, open func() (io.ReadCloser, error)) validate.LineSource {
	if format == "json" {
		d := validate.NewDocReader(r, maxLine)
		d.LookAhead(open)
		return d
	}
	return validate.NewLineReader(r, maxLine)
}

// openAhead opens the run's input for a requests document's look ahead.
// The main pass reads the input through a verifyingReader, which tells a
// changed input.
func (r *run) openAhead() (io.ReadCloser, error) { return r.job.Store.OpenInput(r.runCtx) }

// validateAll checks every line before any runs (on_invalid: reject). It
// reports false, with the batch marked failed, when some line is invalid.
func (r *run) validateAll() (bool, error) {
	in, f, err := r.openVerified()
	if err != nil {
		return false, err
	}
	defer f.Close()
	src := newSource(in, r.job.Format, r.p.cfg.MaxLineBytes, r.openAhead)
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
	src := newSource(in, r.job.Format, r.p.cfg.MaxLineBytes, r.openAhead)
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
			if res.Request.LineURL != "" {
				u = res.Request.LineURL
			}
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
			batch: r.b.ID, line: line, alone: stops > 0, lineURL: req.LineURL,
			ctx: r.reqCtx,
			req: &engine.Request{CustomID: cid, Endpoint: req.URL, Body: req.Body, Priority: r.prio},
		}
		r.tasks.Add(1)
		if err := r.p.disp.submit(r.runCtx, r.q, t); err != nil {
			r.tasks.Done()
			return nil
		}
	}
}
