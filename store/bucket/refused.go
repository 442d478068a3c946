package bucket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"strings"

	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/store/bucket/s3client"
)

var _ pipeline.Store = (*Refused)(nil)

// Refused is the store of an inbox object batchd refuses to run without
// reading it (a watcher.Refused event: a name it cannot use). Under a
// lease on the refused batch's safe name, pipeline.Refuse publishes its
// failed NAME.batch.json in the outbox and the object moves to
// PREFIX/rejected/NAME.jsonl (or .json), as DATA/rejected/ in a folder.
// Open → pipeline.Refuse → Close.
type Refused struct {
	b               *s3client.Bucket
	log             *slog.Logger
	name, key, etag string
	lease           *lease
}

// OpenRefused claims the refused object key (at etag) for the batch name
// its outputs take (filecontract.SafeName of the key's name). It returns a nil
// Refused and no error when there is nothing to do: another daemon holds
// the claim, or the object was replaced or removed.
func OpenRefused(ctx context.Context, cfg Config, name, key, etag string) (*Refused, error) {
	if code, msg := filecontract.CheckName(name); code != "" {
		// Only a safe name may name keys: none may leave its prefix.
		return nil, fmt.Errorf("refuse %s: the name of its outputs is unusable: %s", cfg.Bucket.URL(key), msg)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := cfg.Bucket
	r := &Refused{b: b, log: cfg.Logger.With("name", name, "key", key), name: name, key: key, etag: etag}
	lease, err := claim(ctx, b, name, key, etag)
	if errors.Is(err, errHeld) {
		r.log.Debug("refused input claimed elsewhere", "reason", err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r.lease = lease
	if cur, _, err := b.Stat(ctx, key); err != nil || cur != etag {
		r.Close()
		return nil, err
	}
	return r, nil
}

// Identity names the refused object version: refusing it again gives the
// same batch (pipeline.Refuse).
func (r *Refused) Identity() string { return r.b.URL(r.key) + "\n" + r.etag }

// Close releases the claim.
func (r *Refused) Close() {
	if err := r.lease.Release(context.Background()); err != nil {
		r.log.Warn("release lease", "error", err)
	}
}

// Files implements pipeline.Store: the input as its key names it under
// inbox/.
func (r *Refused) Files() pipeline.Files {
	return pipeline.Files{
		Input:   strings.TrimPrefix(r.key, r.b.InboxKey("")),
		Options: r.name + filecontract.SuffixOptions,
		Output:  r.name + filecontract.SuffixOutput,
		Errors:  r.name + filecontract.SuffixErrors,
	}
}

// OpenInput implements pipeline.Store: a refused input is never read.
func (r *Refused) OpenInput(context.Context) (io.ReadCloser, error) {
	return nil, fmt.Errorf("%s is refused; it is not read", r.b.URL(r.key))
}

// Options implements pipeline.Store: none is read.
func (r *Refused) Options(context.Context) ([]byte, error) { return nil, nil }

// Resume implements pipeline.Store: nothing ran.
func (r *Refused) Resume(context.Context, func(pipeline.Committed) error) error { return nil }

// Checkpoint implements pipeline.Store: nothing runs.
func (r *Refused) Checkpoint([]pipeline.Committed) error { return nil }

// Progress implements pipeline.Store: nothing runs.
func (r *Refused) Progress(context.Context, []byte) error { return nil }

// Publish implements pipeline.Store: the failed object goes to the outbox
// (result objects an earlier batch of the name left are removed), while
// the lease is still this daemon's.
func (r *Refused) Publish(ctx context.Context, res pipeline.Results) error {
	if err := r.lease.Renew(ctx); err != nil {
		if errors.Is(err, errLeaseTaken) {
			return fmt.Errorf("refuse %s: %w", r.name, ErrLeaseLost)
		}
		return err
	}
	if _, err := r.b.PutBytes(ctx, r.b.OutboxKey(r.name+filecontract.SuffixBatch), res.Object, "application/json", s3client.Any); err != nil {
		return err
	}
	return removeResults(ctx, r.b, r.name, pipeline.Results{})
}

// RetireRecord implements pipeline.Store: Retire is idempotent.
func (r *Refused) RetireRecord() ([]byte, error) { return nil, nil }

// Retire implements pipeline.Store: the object moves to rejected/ under
// the safe name, unless it was replaced meanwhile (the new version is
// judged anew).
func (r *Refused) Retire(ctx context.Context) error {
	dst := r.b.RejectedKey(r.name + path.Ext(r.key))
	if err := r.b.Copy(ctx, r.key, r.etag, dst); err != nil && !errors.Is(err, s3client.ErrPrecondition) && !s3client.IsNotFound(err) {
		return err
	}
	if cur, _, err := r.b.Stat(ctx, r.key); err != nil {
		return err
	} else if cur == r.etag {
		return r.b.Remove(ctx, r.key)
	}
	return nil
}
