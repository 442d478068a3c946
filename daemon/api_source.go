package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/pipeline/ledger"
	"github.com/batchd/batchd/store/folder"
	"github.com/batchd/batchd/watcher"
)

// apiSource is the HTTP API as a source: POST /v1/batches submits batch
// ID (its input DATA/api/ID.jsonl, written before), POST
// /v1/batches/{id}/cancel requests its cancel (DATA/api/ID.cancel). Open
// delivers again every batch whose input has not retired yet, with its
// cancel request first.
type apiSource struct {
	dir, outbox, done, rejected string
	log                         *slog.Logger

	mu      sync.Mutex
	pending []watcher.Event // to deliver, in order
	out     map[string]bool // inputs delivered and not forgotten
	again   map[string]bool // inputs submitted again while out
	wake    chan struct{}
	events  chan watcher.Event
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func newAPISource(dir, outbox, done, rejected string, log *slog.Logger) *apiSource {
	return &apiSource{dir: dir, outbox: outbox, done: done, rejected: rejected, log: log, out: map[string]bool{}, again: map[string]bool{},
		wake: make(chan struct{}, 1), events: make(chan watcher.Event)}
}

func (s *apiSource) inputPath(id string) string {
	return filepath.Join(s.dir, id+filecontract.SuffixJSONL)
}
func (s *apiSource) cancelPath(id string) string {
	return filepath.Join(s.dir, id+filecontract.SuffixCancel)
}
func (s *apiSource) finalPath(id string) string { return filepath.Join(s.dir, id+".final.json") }
func (s *apiSource) retryWhen() string          { return "restart or a retry request" }
func (s *apiSource) kind() string               { return "api" }

// Open queues every API batch whose input has not retired (moved to
// done/) and starts delivering.
func (s *apiSource) Open(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("open api source: %w", err)
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read api dir: %w", err)
	}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), filecontract.SuffixJSONL)
		if !ok || !validID(id, "batch_") {
			continue
		}
		if _, err := os.Stat(s.cancelPath(id)); err == nil {
			s.push(watcher.Event{Kind: watcher.Cancel, Name: id, Path: s.cancelPath(id)})
		}
		s.Submit(id)
	}
	// Delivery runs until Close, not until ctx is done.
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.wg.Add(1)
	go s.deliver(ctx)
	return nil
}

// Submit delivers API batch id's input; if it is out (queued or running)
// it is delivered again once forgotten.
func (s *apiSource) Submit(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out[id] {
		s.again[id] = true
		return
	}
	s.out[id] = true
	s.pushLocked(watcher.Event{Kind: watcher.Input, Name: id, Path: s.inputPath(id), Format: filecontract.FormatJSONL})
}

func (s *apiSource) push(ev watcher.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pushLocked(ev)
}

func (s *apiSource) pushLocked(ev watcher.Event) {
	s.pending = append(s.pending, ev)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// deliver sends pending events, in order, until ctx ends.
func (s *apiSource) deliver(ctx context.Context) {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		var ev watcher.Event
		ok := len(s.pending) > 0
		if ok {
			ev = s.pending[0]
		}
		s.mu.Unlock()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case s.events <- ev:
			s.mu.Lock()
			s.pending = s.pending[1:]
			s.mu.Unlock()
		}
	}
}

func (s *apiSource) Events() <-chan watcher.Event { return s.events }

// Forget implements Source: an input submitted again while it was out is
// delivered again now.
func (s *apiSource) Forget(ev watcher.Event) {
	if ev.Kind != watcher.Input {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.out, ev.Name)
	if s.again[ev.Name] {
		delete(s.again, ev.Name)
		s.out[ev.Name] = true
		s.pushLocked(ev)
	}
}

// Close stops delivering and closes Events.
func (s *apiSource) Close(context.Context) error {
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
		s.cancel = nil
		close(s.events)
	}
	return nil
}

// Start implements Source: the input runs as a folder input of DATA/api
// whose store also keeps the batch's own final record.
func (s *apiSource) Start(ctx context.Context, ev watcher.Event, _ Canceller) (*Started, error) {
	st := &apiStore{Store: folder.New(ev.Name, ev.Path, s.outbox, s.done), id: ev.Name, final: s.finalPath(ev.Name)}
	return folderJob(ctx, ev, st), nil
}

func (s *apiSource) options(_ context.Context, ev watcher.Event) (pipeline.Options, error) {
	return optionsBeside(ev)
}

// Refuse implements Source. The API checks what it accepts when it is
// uploaded, so it delivers no refused input; one would be failed as the
// inbox fails its own, moved to rejected/.
func (s *apiSource) Refuse(ctx context.Context, ev watcher.Event, p Refuser) (*ledger.Batch, error) {
	return refuseFile(ctx, ev, s.outbox, s.rejected, p)
}

// RequestCancel implements Source: DATA/api/ID.cancel keeps the request
// over a restart (the pipeline removes it when the batch retires); the
// event cancels it now.
func (s *apiSource) RequestCancel(_ context.Context, id string) error {
	if err := fsx.WriteFile(s.cancelPath(id), nil, true); err != nil {
		return err
	}
	s.push(watcher.Event{Kind: watcher.Cancel, Name: id, Path: s.cancelPath(id)})
	return nil
}

// Cancel implements Source. A request for a batch whose input retired is
// stale: it is removed.
func (s *apiSource) Cancel(_ context.Context, ev watcher.Event, p Canceller) {
	cancelByFile(s.log, ev, p, func() bool {
		_, err := os.Lstat(s.inputPath(ev.Name))
		return err == nil
	})
}
