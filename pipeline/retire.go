package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/batchd/batchd/internal/failpoint"
	"github.com/batchd/batchd/pipeline/ledger"
)

// The end of an input: retire has its store retire it (a folder's moves
// it to done/), with a record the ledger keeps meanwhile so that Recover
// finishes a retire a crash interrupted; and batches that fail before any
// request runs (Refuse, fail) publish their object and retire at once.

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
