package daemon

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/pipeline/ledger"
	"github.com/batchd/batchd/store/bucket"
	"github.com/batchd/batchd/store/bucket/s3client"
	"github.com/batchd/batchd/watcher"
	"github.com/batchd/batchd/watcher/s3"
)

// bucketSource is a bucket's inbox (docs/bucket.md): each input runs with
// a bucket.Store that owns the protocol (claim, checkpoints, publication,
// retirement).
type bucketSource struct {
	b     *s3client.Bucket
	w     *s3.Watcher
	cfg   bucket.Config
	log   *slog.Logger
	token string // s3.webhook_token
}

func (br *bucketSource) Events() <-chan watcher.Event    { return br.w.Events() }
func (br *bucketSource) Forget(ev watcher.Event)         { br.w.Forget(ev.Path) }
func (br *bucketSource) Close(ctx context.Context) error { return br.w.Close(ctx) }
func (br *bucketSource) retryWhen() string               { return "the next listing" }
func (br *bucketSource) kind() string                    { return "bucket" }

// options implements Source: inbox/NAME.options.json, read within
// optionsReadTimeout (the run reads it again when it starts).
func (br *bucketSource) options(ctx context.Context, ev watcher.Event) (pipeline.Options, error) {
	ctx, cancel := context.WithTimeout(ctx, optionsReadTimeout)
	defer cancel()
	key := br.b.InboxKey(ev.Name + filecontract.SuffixOptions)
	raw, _, err := br.b.Get(ctx, key, bucket.MaxOptionsBytes)
	switch {
	case s3client.IsNotFound(err):
		return pipeline.Options{}, nil
	case err != nil:
		return pipeline.Options{}, fmt.Errorf("read %s: %w", key, err)
	}
	return pipeline.ParseOptions(raw, key)
}

// optionsReadTimeout bounds the read of a bucket input's options for its
// place in the run queue.
const optionsReadTimeout = 10 * time.Second

// serveEvents takes MinIO webhook notifications (POST /v1/bucket-events):
// new inputs start at once instead of at the next listing.
func (br *bucketSource) serveEvents(w http.ResponseWriter, r *http.Request) {
	if tok := br.token; tok != "" {
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
			http.Error(w, "bad or missing Authorization token", http.StatusUnauthorized)
			return
		}
	}
	var ev s3.Event
	if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&ev); err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, errBodyTooSlow) {
			status = http.StatusRequestTimeout
		}
		http.Error(w, "not a bucket notification: "+err.Error(), status)
		return
	}
	n := br.w.Notify(r.Context(), ev)
	br.log.Debug("bucket notification", "event", ev.EventName, "key", ev.Key, "taken", n)
	w.WriteHeader(http.StatusNoContent)
}

// Cancel implements Source for the cancel object inbox/NAME.cancel.
func (br *bucketSource) Cancel(ctx context.Context, ev watcher.Event, p Canceller) {
	defer br.w.Forget(ev.Path)
	if p.Cancel(ev.Name) {
		br.log.Info("cancel requested", "name", ev.Name)
		return
	}
	// Not running here: whoever claims the input sees the cancel object.
	// With no input of that name in the inbox at all, it was meant for a
	// batch that is gone, and must not cancel a later one: remove it.
	ctx, done := context.WithTimeout(ctx, time.Minute)
	defer done()
	for _, ext := range []string{filecontract.SuffixJSONL, filecontract.SuffixJSON} {
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

// RequestCancel implements Source: it writes the cancel object, which the
// next listing delivers (whoever runs the batch sees it).
func (br *bucketSource) RequestCancel(ctx context.Context, name string) error {
	_, err := br.b.PutBytes(ctx, br.b.InboxKey(name+filecontract.SuffixCancel), nil, "application/octet-stream", s3client.Any)
	return err
}

// Refuse implements Source for an inbox object the watcher refused (a name
// batchd cannot use), without reading it: a failed NAME.batch.json under
// the safe name in the outbox, the object moved to rejected/. A failure is
// retried at the next listing; once moved, the object is not delivered
// again. A nil batch and no error: another daemon holds the object.
func (br *bucketSource) Refuse(ctx context.Context, ev watcher.Event, p Refuser) (*ledger.Batch, error) {
	st, err := bucket.OpenRefused(ctx, br.cfg, ev.Name, ev.Path, ev.Version)
	if err != nil || st == nil {
		return nil, err
	}
	defer st.Close()
	br.log.Warn("inbox object refused", "key", ev.Path, "name", ev.Name, "code", ev.Code, "error", ev.Message)
	return p.Refuse(ctx, pipeline.Job{Name: ev.Name, Format: ev.Format, Store: st}, st.Identity(), ev.Code, ev.Message)
}

// Start implements Source: the bucket store claims the input and owns its
// files; the job runs until it ends, the lease is lost or ctx is done. A
// cancel object newer than the input makes it start cancelled (p).
func (br *bucketSource) Start(ctx context.Context, ev watcher.Event, p Canceller) (*Started, error) {
	st, err := bucket.Open(ctx, br.cfg, ev.Name, ev.Path, ev.Version)
	if err != nil || st == nil {
		return nil, err
	}
	if st.CancelRequested() {
		p.CancelOnStart(ev.Name)
		br.log.Info("cancel requested; the batch will start cancelled", "name", ev.Name)
	}
	job := pipeline.Job{Name: ev.Name, Format: ev.Format, Store: st, RetryFailed: st.RetryRequested()}
	return &Started{Job: job, Ctx: st.Context(), Finish: st.Close}, nil
}

// FetchBucketBatch downloads batch name's input and result objects from
// the configured bucket into dir, for `batchd check` (bucket.FetchBatch).
func FetchBucketBatch(ctx context.Context, cfg Config, name, dir string) (pipeline.CheckInput, error) {
	sc := cfg.s3Config()
	if err := sc.Validate(); err != nil {
		return pipeline.CheckInput{}, err
	}
	sc.Logger = slog.New(slog.DiscardHandler)
	b, err := s3client.NewBucket(sc)
	if err != nil {
		return pipeline.CheckInput{}, err
	}
	if err := b.Connect(ctx); err != nil {
		return pipeline.CheckInput{}, err
	}
	return bucket.FetchBatch(ctx, b, name, dir)
}
