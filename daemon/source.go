package daemon

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/pipeline/ledger"
	"github.com/batchd/batchd/store/folder"
	"github.com/batchd/batchd/watcher"
	"github.com/batchd/batchd/watcher/dir"
)

// Source is where batches come from: the inbox folder, a bucket, or the
// HTTP API (POST /v1/batches). The daemon reads every source's events,
// runs the inputs through the pipeline and hands cancel requests back to
// the source that delivered them.
//
// Delivery is at least once: an input is delivered again after a restart
// and again after Forget while it is still pending at the source (its
// input not retired). The ledger makes a second delivery cheap and
// idempotent. The consumer acknowledges each event with Forget once its
// outcome is durable (the run ended, or failed and should be retried);
// until then the source does not deliver that input again.
type Source interface {
	// Events delivers inputs (watcher.Input), cancel requests
	// (watcher.Cancel) and inputs refused unread (watcher.Refused). It is
	// closed by Close.
	Events() <-chan watcher.Event
	// Start prepares input ev to run: its job (the store that owns its
	// files), the context it runs in (done when the job stops being ours,
	// as when a bucket lease is lost) and the acknowledgement of its end.
	// A nil Started and no error: nothing to run here (another daemon
	// holds it, or its results were published already). A cancel request
	// the source holds for it is applied to p.
	Start(ctx context.Context, ev watcher.Event, p Canceller) (*Started, error)
	// Cancel handles cancel request ev of this source: it cancels batch
	// ev.Name if it runs, makes it start cancelled if its input waits
	// here, and drops a stale request (one whose batch is gone) so that
	// it never cancels a later batch of the same name.
	Cancel(ctx context.Context, ev watcher.Event, p Canceller)
	// RequestCancel records a cancel request for batch name durably (it
	// survives a restart); it comes back as a Cancel event.
	RequestCancel(ctx context.Context, name string) error
	// Refuse fails input ev, which the source refused unread
	// (watcher.Refused), through p at once: its failed batch object is
	// published and the entry set aside. A nil batch and no error: there is
	// nothing to fail (another daemon did it). An error wrapping
	// os.ErrNotExist: the entry vanished.
	Refuse(ctx context.Context, ev watcher.Event, p Refuser) (*ledger.Batch, error)
	// Forget acknowledges ev: the consumer is done with it.
	Forget(ev watcher.Event)
	Close(ctx context.Context) error
	// retryWhen says when an input whose run failed is delivered again.
	retryWhen() string
	// kind names the source in metrics: dir, bucket or api.
	kind() string
	// options reads input ev's NAME.options.json as it is now (zero
	// Options when it has none), for the run queue's admission order; the
	// run reads it again when it starts.
	options(ctx context.Context, ev watcher.Event) (pipeline.Options, error)
}

// Started is an input a source prepared to run.
type Started struct {
	Job pipeline.Job
	// Ctx is the context the job runs in.
	Ctx context.Context
	// Finish acknowledges the run's end to the source with the run's error
	// and returns the error that remains (nil: the outcome is durable).
	Finish func(runErr error) error
}

// Canceller is what a source's cancel handling asks of the pipeline.
type Canceller interface {
	// Cancel cancels batch name if it runs, reporting whether it did.
	Cancel(name string) bool
	// CancelOnStart makes batch name start cancelled.
	CancelOnStart(name string)
}

// Refuser is what a source's refusal asks of the pipeline.
type Refuser interface {
	// Refuse fails job at once with code and message, without reading
	// its input; identity names the refused entry (pipeline.Refuse).
	Refuse(ctx context.Context, job pipeline.Job, identity, code, message string) (*ledger.Batch, error)
}

var (
	_ Refuser   = (*pipeline.Pipeline)(nil)
	_ Source    = (*folderSource)(nil)
	_ Source    = (*bucketSource)(nil)
	_ Source    = (*apiSource)(nil)
	_ Canceller = (*pipeline.Pipeline)(nil)
)

// folderSource is the inbox folder (ARCHITECTURE.md §2).
type folderSource struct {
	w    *dir.Watcher
	dirs Dirs
	log  *slog.Logger
}

func (s *folderSource) Events() <-chan watcher.Event    { return s.w.Events() }
func (s *folderSource) Forget(ev watcher.Event)         { s.w.Forget(ev.Path) }
func (s *folderSource) Close(ctx context.Context) error { return s.w.Close(ctx) }
func (s *folderSource) retryWhen() string               { return "the next rescan" }
func (s *folderSource) kind() string                    { return "dir" }

func (s *folderSource) options(_ context.Context, ev watcher.Event) (pipeline.Options, error) {
	return optionsBeside(ev)
}

// optionsBeside reads the NAME.options.json beside the folder input ev.
func optionsBeside(ev watcher.Event) (pipeline.Options, error) {
	o, _, err := pipeline.ReadOptionsFile(filepath.Join(filepath.Dir(ev.Path), ev.Name+filecontract.SuffixOptions))
	return o, err
}

// Start implements Source: the input runs from the inbox, its outputs go
// to the outbox.
func (s *folderSource) Start(ctx context.Context, ev watcher.Event, _ Canceller) (*Started, error) {
	return folderJob(ctx, ev, folder.New(ev.Name, ev.Path, s.dirs.Outbox, s.dirs.Done)), nil
}

// Refuse implements Source: the entry moves to rejected/.
func (s *folderSource) Refuse(ctx context.Context, ev watcher.Event, p Refuser) (*ledger.Batch, error) {
	return refuseFile(ctx, ev, s.dirs.Outbox, s.dirs.Rejected, p)
}

// refuseFile fails the refused entry ev.Path of a folder, publishing its
// failed object in outbox and moving the entry to rejected.
func refuseFile(ctx context.Context, ev watcher.Event, outbox, rejected string, p Refuser) (*ledger.Batch, error) {
	st := folder.Refused(ev.Name, ev.Path, outbox, rejected)
	identity, err := st.Identity()
	if err != nil {
		return nil, err
	}
	return p.Refuse(ctx, pipeline.Job{Name: ev.Name, Format: ev.Format, Store: st}, identity, ev.Code, ev.Message)
}

// folderJob is the job of an input in a folder (the inbox, DATA/api),
// which runs its failed requests again under a NAME.retry mark beside it.
func folderJob(ctx context.Context, ev watcher.Event, st pipeline.Store) *Started {
	job := pipeline.Job{Name: ev.Name, Format: ev.Format, Store: st}
	mark := filepath.Join(filepath.Dir(ev.Path), ev.Name+filecontract.SuffixRetry)
	if _, err := os.Stat(mark); err == nil {
		job.RetryFailed = true
	}
	return &Started{Job: job, Ctx: ctx, Finish: func(err error) error {
		if err == nil && job.RetryFailed {
			os.Remove(mark)
		}
		return err
	}}
}

// Cancel implements Source for NAME.cancel in the inbox. A cancel file
// older than the waiting input was meant for an earlier batch.
func (s *folderSource) Cancel(_ context.Context, ev watcher.Event, p Canceller) {
	waiting := func() bool {
		cst, err := os.Stat(ev.Path)
		if err != nil {
			return false
		}
		for _, ext := range []string{filecontract.SuffixJSONL, filecontract.SuffixJSON} {
			if ist, err := os.Stat(filepath.Join(s.dirs.Inbox, ev.Name+ext)); err == nil && !cst.ModTime().Before(ist.ModTime()) {
				return true
			}
		}
		return false
	}
	if cancelByFile(s.log, ev, p, waiting) {
		s.w.Forget(ev.Path)
	}
}

// cancelByFile handles a cancel request kept as the file ev.Path: it
// cancels batch ev.Name if it runs, makes it start cancelled if waiting()
// says its input waits, and otherwise removes the stale request (so it
// never cancels a later batch of the name), reporting true.
func cancelByFile(log *slog.Logger, ev watcher.Event, p Canceller, waiting func() bool) (removed bool) {
	if p.Cancel(ev.Name) {
		log.Info("cancel requested", "name", ev.Name)
		return false
	}
	if waiting() {
		p.CancelOnStart(ev.Name)
		log.Info("cancel requested; the batch will start cancelled", "name", ev.Name)
		return false
	}
	log.Info("cancel request for a batch that is neither running nor waiting; removed", "name", ev.Name)
	if err := os.Remove(ev.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Warn("remove cancel request", "name", ev.Name, "error", err)
	}
	return true
}

// RequestCancel implements Source: it writes inbox/NAME.cancel, which the
// watcher delivers. The pipeline removes it when the batch retires.
func (s *folderSource) RequestCancel(_ context.Context, name string) error {
	return fsx.WriteFile(filepath.Join(s.dirs.Inbox, name+filecontract.SuffixCancel), nil, true)
}
