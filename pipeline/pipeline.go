// Package pipeline turns one batch input file into its result files, exactly
// once: it reads the input as a stream, validates each line, skips what the
// ledger records as done, dispatches the rest to the engine with bounded
// in-flight work, and hands every result to a single writer per batch that
// group-commits result lines and ledger records (ARCHITECTURE.md §3).
//
// It knows the engine only through engine.Engine, and no source (watcher) at
// all: the daemon gives it Jobs.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline/ledger"
	"github.com/batchd/batchd/pipeline/validate"
)

// Log keys.
const (
	keyBatch    = "batch"
	keyName     = "name"
	keyLine     = "line"
	keyCustomID = "custom_id"
)

// ErrShutdown is the cause of a run stopped because the pipeline is closing;
// the batch resumes where it stopped on the next run.
var ErrShutdown = errors.New("pipeline shutting down")

var (
	errCancelled = errors.New("batch cancelled")
	errExpired   = errors.New("batch expired")
)

// Config configures a Pipeline.
type Config struct {
	// StateDir holds the ledger and the result files of batches in progress.
	StateDir string
	// MaxLineBytes bounds one input line (default 32 MiB).
	MaxLineBytes int
	// CommitInterval and CommitEvery bound how long and how many results wait
	// for a group commit.
	CommitInterval time.Duration
	CommitEvery    int
	// Workers is how many requests run at once across all batches on an
	// engine that runs each request on a caller's goroutine (Engine.Do: the
	// remote engine). An engine.Queue (the native engine) ignores it: it
	// gets as many requests as its Window asks for, from one goroutine.
	Workers int
	// QueuePerBatch is how many validated requests of one batch may wait in
	// the pipeline for room at the engine.
	QueuePerBatch int
	// ProgressInterval is how often a running batch's NAME.batch.json is rewritten.
	ProgressInterval time.Duration
	// DiskDirs are directories besides StateDir (the outbox) whose free
	// space decides when intake resumes after a write failed with ENOSPC.
	DiskDirs []string
	// DiskResumeFreeBytes and DiskResumeFreePercent: intake paused for a
	// full disk resumes once every watched directory has this many bytes,
	// or this share of its file system, free.
	DiskResumeFreeBytes   int64
	DiskResumeFreePercent float64
	// DiskCheckInterval is how often free space is checked while paused.
	DiskCheckInterval time.Duration
	// Defaults are the batch-level options every batch starts from.
	Defaults Options
	Logger   *slog.Logger
	// Now is the clock (tests set it).
	Now func() time.Time
}

// DefaultConfig returns the defaults for a state directory.
func DefaultConfig(stateDir string) Config {
	return Config{
		StateDir:              stateDir,
		MaxLineBytes:          32 << 20,
		CommitInterval:        200 * time.Millisecond,
		CommitEvery:           4096,
		Workers:               64,
		QueuePerBatch:         256,
		ProgressInterval:      time.Second,
		DiskResumeFreeBytes:   64 << 20,
		DiskResumeFreePercent: 1,
		DiskCheckInterval:     5 * time.Second,
		Defaults:              Options{OnInvalid: OnInvalidContinue},
		Now:                   time.Now,
	}
}

// Validate checks the config, naming the bad field.
func (c Config) Validate() error {
	switch {
	case c.StateDir == "":
		return errors.New("state dir: required")
	case c.MaxLineBytes < 1024:
		return fmt.Errorf("max_line_bytes: must be at least 1024, got %d", c.MaxLineBytes)
	case c.CommitInterval <= 0:
		return fmt.Errorf("commit_interval: must be positive, got %s", c.CommitInterval)
	case c.CommitEvery < 1:
		return fmt.Errorf("commit_every: must be at least 1, got %d", c.CommitEvery)
	case c.Workers < 1:
		return fmt.Errorf("workers: must be at least 1, got %d", c.Workers)
	case c.QueuePerBatch < 1:
		return fmt.Errorf("queue_per_batch: must be at least 1, got %d", c.QueuePerBatch)
	case c.DiskResumeFreeBytes < 0:
		return fmt.Errorf("disk_resume_free_bytes: must not be negative, got %d", c.DiskResumeFreeBytes)
	case c.DiskResumeFreePercent < 0 || c.DiskResumeFreePercent > 100:
		return fmt.Errorf("disk_resume_free_percent: must be from 0 to 100, got %g", c.DiskResumeFreePercent)
	case c.DiskCheckInterval <= 0:
		return fmt.Errorf("disk_check_interval: must be positive, got %s", c.DiskCheckInterval)
	}
	if err := c.Defaults.Validate(); err != nil {
		return fmt.Errorf("defaults: %w", err)
	}
	return nil
}

// Job is one batch input to run. It names the batch; where its files are
// is its Store's business.
type Job struct {
	// Name is the batch name (the input's file name without its extension).
	Name string
	// Format is "jsonl" or "json".
	Format string
	// Store owns the batch's files: its input and options, its published
	// results and object, its retirement.
	Store Store

	// RetryFailed makes a finished batch of the same content run every
	// failed line again (completed ones are kept), not only those that
	// ended for reasons outside the request.
	RetryFailed bool
}

// Committed is one result line of a batch.
type Committed struct {
	// Line is the 1-based input line.
	Line int
	// Errors tells that the line belongs to NAME.errors.jsonl.
	Errors bool
	// Data is the JSON result line, without its newline.
	Data []byte
}

// Pipeline runs jobs. Long-lived: New → Open → Run (many, concurrently) → Close.
type Pipeline struct {
	cfg    Config
	eng    engine.Engine
	log    *slog.Logger
	ledger *ledger.Ledger
	disp   *dispatcher
	table  *inflight
	disk   *diskGuard

	stopDisk context.CancelFunc
	diskDone chan struct{}

	locks batchLocks // per batch id: one run at a time

	mu      sync.Mutex
	running map[string]*run // by name
	cancels map[string]bool // names asked to cancel before they ran
	// draining: intake stopped for a graceful shutdown (drain.go).
	draining atomic.Bool
}

// New returns a pipeline; it does no I/O.
func New(cfg Config, eng engine.Engine) *Pipeline {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger.With("component", "pipeline")
	return &Pipeline{
		cfg:     cfg,
		eng:     eng,
		log:     log,
		disk:    newDiskGuard(cfg, log),
		running: make(map[string]*run),
		cancels: make(map[string]bool),
	}
}

// Open opens the ledger and starts the workers.
func (p *Pipeline) Open(ctx context.Context) error {
	if err := p.cfg.Validate(); err != nil {
		return fmt.Errorf("pipeline config: %w", err)
	}
	if err := fsx.MkdirAll(filepath.Join(p.cfg.StateDir, "batches"), 0o755); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	path := ledgerPath(p.cfg.StateDir)
	if done, err := ledger.CompactIfWorth(path); errors.Is(err, ledger.ErrDamaged) {
		return err
	} else if err != nil {
		p.log.Warn("ledger compaction failed; going on with the file as it is", "error", err)
	} else if done {
		p.log.Info("ledger compacted", "path", path)
	}
	l, err := ledger.Open(path)
	if err != nil {
		return err
	}
	p.ledger = l
	if err := p.openInflight(); err != nil {
		l.Close()
		return err
	}
	p.disp = newDispatcher(p.eng, p.log, p.table, p.cfg.Workers, p.cfg.QueuePerBatch)
	p.disp.start()
	diskCtx, stop := context.WithCancel(context.Background())
	p.stopDisk, p.diskDone = stop, make(chan struct{})
	go func() {
		defer close(p.diskDone)
		p.disk.loop(diskCtx)
	}()
	return nil
}

// openInflight opens the in-flight table (inflight.go) and, when the
// previous process crashed (crash.go), makes suspects of the requests it
// left unfinished.
func (p *Pipeline) openInflight() error {
	crash, err := takeCrashReport(p.cfg.StateDir)
	if err != nil {
		return err
	}
	if operatorStop(crash) {
		p.log.Info("batchd was stopped by SIGQUIT (an operator's stack dump), not a crash: nothing is held against the requests in flight",
			"report", filepath.Join(p.cfg.StateDir, crashFile+".prev"))
		crash = ""
	}
	t, left, err := openInflight(filepath.Join(p.cfg.StateDir, inflightFile), p.cfg.Workers)
	if err != nil {
		return err
	}
	if crash != "" {
		if err := p.suspect(left, crash); err != nil {
			t.close()
			return err
		}
	} else if len(left) > 0 {
		p.log.Info("batchd stopped without closing (killed, or the machine went down) while requests were in flight; they run again", "in_flight", len(left))
	}
	if err := reportCrashes(p.cfg.StateDir); err != nil {
		p.log.Warn("crash reports will not be kept; a request that crashes batchd may crash it again after a restart", "error", err)
	}
	p.table = t
	return nil
}

// suspect records the unfinished requests of left as in flight at a crash.
func (p *Pipeline) suspect(left []ledger.LineRef, crash string) error {
	var open []ledger.LineRef
	for _, r := range left {
		if _, err := p.ledger.Get(r.Batch); err != nil {
			continue // forgotten since
		}
		if done, err := p.ledger.Done(r.Batch); err == nil && !done.Has(r.Line) {
			open = append(open, r)
		}
	}
	counts, err := p.ledger.AddSuspects(open)
	if err != nil {
		return err
	}
	again := 0
	for _, n := range counts {
		if n >= suspectLimit {
			again++
		}
	}
	p.log.Error("batchd crashed: each request it was running now runs alone, and one running at two crashes fails with engine_crashed",
		"crash", crash, "in_flight", len(open), "failing", again, "report", filepath.Join(p.cfg.StateDir, crashFile+".prev"))
	return nil
}

// Close stops the workers and closes the ledger. Runs must have returned.
func (p *Pipeline) Close(ctx context.Context) error {
	if p.stopDisk != nil {
		p.stopDisk()
		<-p.diskDone
	}
	if p.disp != nil {
		p.disp.stop()
	}
	if err := p.table.close(); err != nil {
		p.log.Warn("close the in-flight table", "error", err)
	}
	p.table = nil
	if p.ledger != nil {
		return p.ledger.Close()
	}
	return nil
}

// Dispatch reports the requests between the pipeline and the engine now
// (zero before Open).
func (p *Pipeline) Dispatch() DispatchStats {
	if p.disp == nil {
		return DispatchStats{}
	}
	return p.disp.stats()
}

// Ledger gives read access to the ledger (status, HTTP API).
func (p *Pipeline) Ledger() *ledger.Ledger { return p.ledger }

// Cancel asks the running batch name to cancel: its unfinished requests
// become batch_cancelled lines and it ends cancelled. It reports whether
// name was running.
func (p *Pipeline) Cancel(name string) bool {
	p.mu.Lock()
	r := p.running[name]
	p.mu.Unlock()
	if r != nil {
		r.cancel(errCancelled)
	}
	return r != nil
}

// CancelOnStart makes batch name start cancelled, for a cancel request that
// arrives while its input waits to run. If name is running already, it is
// cancelled now.
func (p *Pipeline) CancelOnStart(name string) {
	p.mu.Lock()
	r := p.running[name]
	if r == nil {
		p.cancels[name] = true
	}
	p.mu.Unlock()
	if r != nil {
		r.cancel(errCancelled)
	}
}

func (p *Pipeline) batchDir(id string) string { return stateBatchDir(p.cfg.StateDir, id) }

// ResultFiles returns batch b's result files as the pipeline holds them
// (committed up to b.OutLen and b.ErrLen bytes), readable while it runs.
func (p *Pipeline) ResultFiles(b *ledger.Batch) (output, errors string) {
	return p.resultPaths(b, b.Gen)
}

// Validator returns a checker for single requests with the daemon's
// batch-level defaults (the online endpoints validate with it); maxTokens
// is the max_tokens of a request that gives none when the defaults give
// none either.
func (p *Pipeline) Validator(maxTokens int) (*validate.Checker, error) {
	d := p.cfg.Defaults
	if d.MaxTokens == 0 {
		d.MaxTokens = maxTokens
	}
	vcfg := d.ValidateConfig()
	if err := vcfg.Validate(); err != nil {
		return nil, err
	}
	return validate.NewChecker(vcfg), nil
}

// Rate is running batch name's requests per second over its current run
// (0 when it is not running).
func (p *Pipeline) Rate(name string) float64 {
	p.mu.Lock()
	r := p.running[name]
	p.mu.Unlock()
	if r == nil {
		return 0
	}
	return r.rate()
}

// Expire forgets the batches that ended before cutoff: their ledger
// records and the pipeline's copies of their results (the published
// files in the outbox and the inputs in done/ stay). A batch running now
// is left alone. It returns the names of the batches forgotten.
func (p *Pipeline) Expire(cutoff time.Time) ([]string, error) {
	bs, err := p.ledger.List()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, b := range bs {
		end := max(b.CompletedAt, b.FailedAt, b.ExpiredAt, b.CancelledAt)
		if !Terminal(b.Status) || end == 0 || end >= cutoff.Unix() {
			continue
		}
		lock := p.batchLock(b.ID)
		if !lock.TryLock() {
			continue // running again (the same content was dropped)
		}
		cur, err := p.ledger.Get(b.ID)
		if err == nil && Terminal(cur.Status) {
			err = p.forget(b.ID)
			if err == nil {
				names = append(names, b.Name)
			}
		} else if errors.Is(err, ledger.ErrNotFound) {
			err = nil
		}
		lock.Unlock()
		if err != nil {
			return names, fmt.Errorf("expire %s: %w", b.ID, err)
		}
	}
	return names, nil
}
