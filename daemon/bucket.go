package daemon

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/pipeline/ledger"
	"github.com/batchd/batchd/store/bucket"
	"github.com/batchd/batchd/watcher"
	"github.com/batchd/batchd/watcher/s3"
)

// bucketRunner runs batches whose inputs are in a bucket (docs/bucket.md)
// through the pipeline, each with a bucket.Store that owns the protocol
// (claim, checkpoints, publication, retirement).
type bucketRunner struct {
	d   *Daemon
	b   *s3.Bucket
	w   *s3.Watcher
	cfg bucket.Config
	log *slog.Logger
}

// serveEvents takes MinIO webhook notifications (POST /v1/bucket-events):
// new inputs start at once instead of at the next listing.
func (br *bucketRunner) serveEvents(w http.ResponseWriter, r *http.Request) {
	if tok := br.d.cfg.S3.WebhookToken; tok != "" {
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
			http.Error(w, "bad or missing Authorization token", http.StatusUnauthorized)
			return
		}
	}
	var ev s3.Event
	if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&ev); err != nil {
		http.Error(w, "not a bucket notification: "+err.Error(), http.StatusBadRequest)
		return
	}
	n := br.w.Notify(r.Context(), ev)
	br.log.Debug("bucket notification", "event", ev.EventName, "key", ev.Key, "taken", n)
	w.WriteHeader(http.StatusNoContent)
}

func (br *bucketRunner) cancel(ev watcher.Event) {
	defer br.w.Forget(ev.Path)
	if br.d.pipe.Cancel(ev.Name) {
		br.log.Info("cancel requested", "name", ev.Name)
		return
	}
	// Not running here: whoever claims the input sees the cancel object.
	// With no input of that name in the inbox at all, it was meant for a
	// batch that is gone, and must not cancel a later one: remove it.
	ctx, done := context.WithTimeout(br.d.runCtx, time.Minute)
	defer done()
	for _, ext := range []string{watcher.SuffixJSONL, watcher.SuffixJSON} {
		tag, _, err := br.b.Stat(ctx, br.b.InboxKey(ev.Name+ext))
		if err != nil || tag != "" {
			return
		}
	}
	br.log.Info("cancel request for a batch that is not in the inbox; removed", "name", ev.Name)
	if err := br.b.Remove(ctx, ev.Path); err != nil {
		br.log.Warn("remove cancel request", "name", ev.Name, "error", err)
	}
}

// run runs one input to its end, or until the lease is lost or ctx is done:
// the bucket store claims it and owns its files; the pipeline runs it.
func (br *bucketRunner) run(ctx context.Context, ev watcher.Event) error {
	st, err := bucket.Open(ctx, br.cfg, ev.Name, ev.Path, ev.Version)
	if err != nil || st == nil {
		return err
	}
	if st.CancelRequested() {
		br.d.pipe.CancelOnStart(ev.Name)
		br.log.Info("cancel requested; the batch will start cancelled", "name", ev.Name)
	}
	ended, err := br.d.pipe.Run(st.Context(), pipeline.Job{Name: ev.Name, Format: ev.Format, Store: st})
	if err := st.Close(err); err != nil {
		return err
	}
	br.d.notifyEnd(ended)
	return nil
}

// refuse fails an inbox object the watcher refused (watcher.Refused: a
// name batchd cannot use), without reading it: a failed NAME.batch.json
// under the safe name in the outbox, the object moved to rejected/. A
// failure is retried at the next listing; once moved, the object is not
// delivered again.
func (br *bucketRunner) refuse(ev watcher.Event) {
	ctx := br.d.runCtx
	st, err := bucket.OpenRefused(ctx, br.cfg, ev.Name, ev.Path, ev.Version)
	if err == nil && st == nil {
		return
	}
	if err == nil {
		br.log.Warn("inbox object refused", "key", ev.Path, "name", ev.Name, "code", ev.Code, "error", ev.Message)
		var b *ledger.Batch
		b, err = br.d.pipe.Refuse(ctx, pipeline.Job{Name: ev.Name, Format: ev.Format, Store: st}, st.Identity(), ev.Code, ev.Message)
		st.Close()
		if err == nil {
			br.d.notifyEnd(b)
			return
		}
	}
	if ctx.Err() == nil {
		br.log.Error("failing a refused input failed; it is retried on the next listing", "name", ev.Name, "key", ev.Path, "error", err)
	}
}

// FetchBucketBatch downloads batch name's input (from done/, or inbox/
// while it runs) and result objects from the configured bucket into dir,
// for `batchd check`.
func FetchBucketBatch(ctx context.Context, cfg Config, name, dir string) (pipeline.CheckInput, error) {
	var in pipeline.CheckInput
	sc := cfg.s3Config()
	if err := sc.Validate(); err != nil {
		return in, err
	}
	sc.Logger = slog.New(slog.DiscardHandler)
	b, err := s3.NewBucket(sc)
	if err != nil {
		return in, err
	}
	if err := b.Connect(ctx); err != nil {
		return in, err
	}
	for _, key := range []string{b.DoneKey(name + watcher.SuffixJSONL), b.DoneKey(name + watcher.SuffixJSON), b.InboxKey(name + watcher.SuffixJSONL), b.InboxKey(name + watcher.SuffixJSON)} {
		tag, _, err := b.Stat(ctx, key)
		if err != nil {
			return in, err
		}
		if tag == "" {
			continue
		}
		in.Input = filepath.Join(dir, filepath.Base(key))
		in.Format = strings.TrimPrefix(filepath.Ext(key), ".")
		if err := b.Download(ctx, key, tag, in.Input); err != nil {
			return in, err
		}
		break
	}
	if in.Input == "" {
		return in, fmt.Errorf("no input for batch %q in %s or %s: %w", name, b.URL(b.DoneKey("")), b.URL(b.InboxKey("")), os.ErrNotExist)
	}
	for _, f := range []struct {
		base string
		dst  *string
	}{{name + watcher.SuffixOutput, &in.Output}, {name + watcher.SuffixErrors, &in.Errors}, {name + watcher.SuffixBatch, &in.Object}} {
		*f.dst = filepath.Join(dir, f.base)
		if err := b.Download(ctx, b.OutboxKey(f.base), "", *f.dst); err != nil {
			if s3.IsNotFound(err) {
				return in, fmt.Errorf("%s: %w", b.URL(b.OutboxKey(f.base)), os.ErrNotExist)
			}
			return in, err
		}
	}
	return in, nil
}
