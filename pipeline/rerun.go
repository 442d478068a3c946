package pipeline

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline/ledger"
)

// Content that ran before: a finished batch's results are published again
// under the job's name (finishPublished), its lines that ended for reasons
// outside the request run again (reopen), or, when its result files were
// changed outside batchd, it is forgotten and runs anew (resultsIntact,
// forget).

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

// DropResults removes generation gen of the pipeline's copies of record
// id's results: the files its result file ids name, which then answer
// 404 (output expiry). It does so only while the ledger holds that record
// (nonce: not a later one of the same content) and no run holds it; the
// record stays, and its content, dropped again, runs anew (resultsIntact).
// It reports false when a run holds the record now: the caller tries
// again later.
func (p *Pipeline) DropResults(id, nonce string, gen int) (bool, error) {
	lock := p.batchLock(id)
	if !lock.TryLock() {
		return false, nil
	}
	defer lock.Unlock()
	b, err := p.ledger.Get(id)
	if errors.Is(err, ledger.ErrNotFound) || err == nil && b.Nonce != nonce {
		return true, nil // forgotten: retention removed its files
	}
	if err != nil {
		return false, fmt.Errorf("drop results of %s: %w", id, err)
	}
	if b.Gen == gen && !Terminal(b.Status) {
		return false, nil
	}
	out, errs := p.resultPaths(b, gen)
	for _, f := range []string{out, errs} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("drop results of %s: %w", id, err)
		}
	}
	if err := fsx.SyncDir(p.batchDir(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("drop results of %s: %w", id, err)
	}
	return true, nil
}

// finishPublished (re)publishes a finished batch's results under job's
// name, the output in shape (result_shape).
func (p *Pipeline) finishPublished(ctx context.Context, job Job, b *ledger.Batch, shape string) error {
	obj, err := p.batchObject(job, b, 0)
	if err != nil {
		return err
	}
	out, errs := p.resultPaths(b, b.Gen)
	doc, err := p.docResults(job, b, false)
	if err != nil {
		return err
	}
	if out, err = p.publishedOutput(b, shape, out, false); err != nil {
		return err
	}
	if err := job.Store.Publish(ctx, Results{Output: out, Errors: errs, Document: doc, Object: obj, Batch: snapshot(b)}); err != nil {
		return err
	}
	return p.retire(ctx, job)
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
