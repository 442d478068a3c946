package pipeline

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/batchd/batchd/internal/failpoint"
	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline/ledger"
)

// Writing a batch's results: the result files are opened cut back to
// their last commit and seeded with the lines a store checkpointed; the
// batch's single writer appends result lines and group-commits them: the
// files are fsynced first, then the ledger records the lines as done.

func (p *Pipeline) resultPaths(b *ledger.Batch, gen int) (out, errs string) {
	return stateResultPaths(p.cfg.StateDir, b.ID, gen)
}

// openResults opens the current generation's result files, cut back to their
// committed lengths, and removes files of other generations.
func (r *run) openResults() error {
	dir := r.p.batchDir(r.b.ID)
	if err := fsx.NoLink(dir); err != nil {
		return fmt.Errorf("batch dir: %w", err)
	}
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
		f, err = fsx.OpenNoFollow(path, os.O_RDWR, 0)
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
			// Checked when it was written; a line of an older batchd
			// whose usage is not token counts adds nothing.
			res.usage, _ = usageOf(l.Response.Body)
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
		r.b.InputTokens = AddTokens(r.b.InputTokens, res.usage.in)
		r.b.OutputTokens = AddTokens(r.b.OutputTokens, res.usage.out)
		r.b.CachedTokens = AddTokens(r.b.CachedTokens, res.usage.cached)
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
