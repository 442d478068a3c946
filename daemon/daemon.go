// Package daemon wires batchd together: config, the data directory and its
// lock, the engine, the pipeline, the watcher and HTTP. It is the only
// package that knows all the others.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/daemon/ops"
	"github.com/batchd/batchd/daemon/webhook"
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/openai"
	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/pipeline/ledger"
	"github.com/batchd/batchd/store/bucket"
	"github.com/batchd/batchd/store/bucket/s3client"
	"github.com/batchd/batchd/store/folder"
	"github.com/batchd/batchd/watcher"
	"github.com/batchd/batchd/watcher/dir"
	"github.com/batchd/batchd/watcher/s3"
	"github.com/batchd/batchd/wire"
)

// Dirs are the folders of a data directory. Rejected holds the inbox
// entries refused without being read (watcher.Refused).
type Dirs struct{ Root, Inbox, Outbox, Done, Rejected, State string }

// DataDirs returns the folders of data directory root.
func DataDirs(root string) Dirs {
	return Dirs{
		Root:     root,
		Inbox:    filepath.Join(root, filecontract.DirInbox),
		Outbox:   filepath.Join(root, filecontract.DirOutbox),
		Done:     filepath.Join(root, filecontract.DirDone),
		Rejected: filepath.Join(root, filecontract.DirRejected),
		State:    filepath.Join(root, filecontract.DirState),
	}
}

// ErrInUse is returned by Open when another batchd holds the data directory.
var ErrInUse = errors.New("data directory in use")

// Daemon is a running batchd. New → Open → (runs) → Close.
type Daemon struct {
	cfg  Config
	log  *slog.Logger
	dirs Dirs

	lock     *os.File
	eng      engine.Engine
	pipe     *pipeline.Pipeline
	sources  []Source      // the inbox (folder or bucket), then the API
	bucket   *bucketSource // nil unless the inbox is a bucket
	api      *apiSource
	http     *http.Server
	bodies   *bodyLimits // paces request bodies, bounds uploads (api_bodies.go)
	httpAddr net.Addr

	cancel context.CancelFunc
	wg     sync.WaitGroup

	started time.Time
	sampler *ops.Sampler
	hooks   *webhook.Sender // nil without webhooks.urls
	sd      *systemd        // notifies the service manager: see systemd.go
	runCtx  context.Context

	acc     *access        // the API keys HTTP checks (Reload swaps them)
	level   *slog.LevelVar // the log level Reload sets (nil: not reloadable)
	runners sync.WaitGroup // the runBatches goroutines (Drain waits for them)
	// draining: intake stopped for a graceful shutdown (shutdown.go).
	draining atomic.Bool
	reloadMu sync.Mutex
	live     *Config // the config in effect after reloads (reload.go)

	runs *runQueue // the inputs waiting for a batch runner (runqueue.go)

	expiryMu sync.Mutex // orders the expiry records' updates and the sweep (expiry.go)
}

// delivery is an event and the source it came from.
type delivery struct {
	src Source
	ev  watcher.Event
	// rank is the input's priority in the run queue (its options').
	rank engine.Priority
	// requeued: put back in the run queue after its run stopped; it goes
	// first.
	requeued bool
}

// New returns a daemon for cfg; it does no I/O.
func New(cfg Config, log *slog.Logger) *Daemon {
	if log == nil {
		log = slog.Default()
	}
	return &Daemon{cfg: cfg, log: log, dirs: DataDirs(cfg.Data), runs: newRunQueue(), sd: newSystemd()}
}

// NewEngine builds the engine the config names.
func (c Config) NewEngine(log *slog.Logger) (engine.Engine, error) {
	switch c.Engine {
	case "openai":
		oc := c.openaiConfig()
		oc.Logger = log
		if err := oc.Validate(); err != nil {
			return nil, err
		}
		if len(oc.Routes) > 0 {
			return openai.NewRouter(oc)
		}
		return openai.New(oc)
	case "native":
		nc := c.nativeConfig()
		nc.Logger = log
		return native.New(nc)
	}
	return nil, fmt.Errorf("engine: unknown engine %q", c.Engine)
}

func (c Config) nativeConfig() native.Config {
	nc := native.DefaultConfig()
	nc.Models = c.Native.Models
	nc.Threads = c.Native.Threads
	nc.Kernels = c.Native.Kernels
	nc.Device = c.Native.Device
	// The config's defaults are native's, so a value below 1 was written
	// by the user: native refuses it by name.
	nc.MaxBatchTokens = c.Native.MaxBatchTokens
	nc.MaxSeqs = c.Native.MaxSeqs
	nc.StrictModel = c.Native.StrictModel
	nc.KVCacheBytes = c.Native.KVCacheBytes
	nc.DisablePrefixCache = c.Native.DisablePrefixCache
	nc.KeepWeightsMapped = c.Native.KeepWeightsMapped
	nc.AdapterRoot = c.Native.AdapterRoot
	nc.MaxAdapters = c.Native.MaxAdapters
	nc.Speculative = c.Native.Speculative
	return nc
}

func (c Config) openaiConfig() openai.Config {
	oc := openai.DefaultConfig()
	oc.URLs = c.OpenAI.URLs
	oc.APIKey = c.OpenAI.APIKey
	oc.Model = c.OpenAI.Model
	oc.Routes = c.OpenAI.Routes
	oc.MaxInFlight = c.OpenAI.MaxInFlight
	oc.MaxRetries = c.OpenAI.MaxRetries
	oc.RetryWaitMin = c.OpenAI.RetryWaitMin
	oc.RetryWaitMax = c.OpenAI.RetryWaitMax
	oc.AttemptTimeout = c.OpenAI.AttemptTimeout
	oc.HangAfter = c.OpenAI.HangAfter
	oc.MaxAnswerBytes = c.OpenAI.MaxAnswerBytes
	oc.MaxAnswerBytesInFlight = c.OpenAI.MaxAnswerBytesInFlight
	oc.MediaRoot = c.MediaRoot
	if c.OpenAI.ProbeInterval > 0 {
		oc.ProbeInterval = c.OpenAI.ProbeInterval
	}
	return oc
}

func (c Config) pipelineConfig() pipeline.Config {
	pc := pipeline.DefaultConfig(filepath.Join(c.Data, filecontract.DirState))
	pc.MaxLineBytes = c.Pipeline.MaxLineBytes
	pc.CommitInterval = c.Pipeline.CommitInterval
	pc.CommitEvery = c.Pipeline.CommitEvery
	pc.Workers = c.Pipeline.Workers
	pc.QueuePerBatch = c.Pipeline.QueuePerBatch
	pc.ProgressInterval = c.Pipeline.ProgressInterval
	pc.DiskResumeFreeBytes = c.Pipeline.DiskResumeFreeBytes
	pc.DiskResumeFreePercent = c.Pipeline.DiskResumeFreePercent
	pc.DiskCheckInterval = c.Pipeline.DiskCheckInterval
	if !c.IsBucket() {
		pc.DiskDirs = []string{filepath.Join(c.Data, filecontract.DirOutbox)}
	}
	pc.Defaults = pipeline.Options{OnInvalid: pipeline.OnInvalidContinue}.Merge(c.Batch)
	return pc
}

// Open takes the data directory, starts the engine, the pipeline, the
// watcher, the batch runners and HTTP.
func (d *Daemon) Open(ctx context.Context) (err error) {
	if err := d.cfg.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := checkDataDirs(d.dirs); err != nil {
		return err
	}
	for _, p := range []string{d.dirs.Inbox, d.dirs.Outbox, d.dirs.Done, d.dirs.State} {
		if err := fsx.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("create data dir: %w", err)
		}
	}
	// Nothing in the data directory is written (the lock's pid, the stale
	// address, the outbox's temporaries) before both locks are held: the
	// lock file's, and the ledger's (pipe.Open), which holds even when
	// someone removed the lock file under a running daemon.
	if err := d.takeLock(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			d.Close(context.Background())
		}
	}()
	runCtx, cancel := context.WithCancel(context.Background())
	d.cancel, d.runCtx = cancel, runCtx

	if d.eng, err = d.cfg.NewEngine(d.log.With("component", "engine")); err != nil {
		return err
	}
	// The pipeline (its ledger) opens before the engine loads its models:
	// a damaged ledger is refused at once, not after a slow model load.
	// Nothing reaches the engine before a batch runs.
	pc := d.cfg.pipelineConfig()
	pc.Logger = d.log
	d.pipe = pipeline.New(pc, d.eng)
	if err := d.pipe.Open(runCtx); err != nil {
		if errors.Is(err, ledger.ErrLocked) {
			return fmt.Errorf("%w: %s is in use by another batchd, which holds its ledger (was state/batchd.lock removed?): %w", ErrInUse, d.dirs.Root, err)
		}
		return err
	}
	d.lockTaken()
	if err := folder.CleanOutbox(d.dirs.Outbox); err != nil {
		return err
	}
	if err := d.pipe.Recover(folder.FinishRetire); err != nil {
		return err
	}
	if err := d.eng.Open(runCtx); err != nil {
		return fmt.Errorf("open engine: %w", err)
	}
	if d.cfg.IsBucket() {
		if err := d.openBucket(ctx, runCtx); err != nil {
			return err
		}
	} else {
		wc := dir.DefaultConfig(d.dirs.Inbox)
		wc.Rescan, wc.Settle, wc.Poll = d.cfg.Watcher.Rescan, d.cfg.Watcher.Settle, d.cfg.Watcher.Poll
		wc.IncompleteAfter = d.cfg.Watcher.IncompleteAfter
		if d.cfg.Watcher.PollInterval > 0 {
			wc.PollInterval = d.cfg.Watcher.PollInterval
		}
		wc.Logger = d.log.With("component", "watcher")
		w := dir.New(wc)
		if err := w.Open(runCtx); err != nil {
			return fmt.Errorf("open watcher: %w", err)
		}
		d.sources = append(d.sources, &folderSource{w: w, dirs: d.dirs, log: d.log.With("component", "folder")})
	}
	if len(d.cfg.Webhooks.URLs) > 0 {
		wc := d.cfg.webhookConfig(filepath.Join(d.dirs.State, "webhooks"))
		wc.Logger = d.log.With("component", "webhook")
		if d.hooks, err = webhook.New(wc); err != nil {
			return err
		}
		if err := d.hooks.Start(runCtx); err != nil {
			return fmt.Errorf("start webhooks: %w", err)
		}
	}
	d.started = time.Now()
	d.api = newAPISource(d.apiDir(), d.dirs.Outbox, d.dirs.Done, d.dirs.Rejected, d.log.With("component", "api"))
	if err := d.api.Open(runCtx); err != nil {
		return err
	}
	d.sources = append(d.sources, d.api)
	if !d.cfg.HTTPOff() {
		if err := d.serveHTTP(); err != nil {
			return err
		}
		if len(d.cfg.API.Keys) == 0 && !isLoopback(d.HTTPAddr()) {
			d.log.Warn("api.open: the API, status page and metrics on this address need no key", "listen", d.HTTPAddr())
		}
	}
	if d.cfg.Retention > 0 {
		d.wg.Add(1)
		go d.expireLoop(runCtx)
	}
	d.wg.Add(1)
	go d.expiryLoop(runCtx)
	for _, src := range d.sources {
		d.wg.Add(1)
		go d.receive(runCtx, src)
	}
	for range d.cfg.Pipeline.MaxConcurrentBatches {
		d.wg.Add(1)
		d.runners.Add(1)
		go d.runBatches(runCtx)
	}
	inbox, outbox := d.dirs.Inbox, d.dirs.Outbox
	if d.bucket != nil {
		inbox, outbox = d.bucket.b.URL(d.bucket.b.InboxKey("")), d.bucket.b.URL(d.bucket.b.OutboxKey(""))
	}
	d.log.Info("batchd running", "data", d.dirs.Root, "inbox", inbox, "outbox", outbox,
		"engine", d.cfg.Engine, "listen", d.HTTPAddr())
	d.notifyReady(runCtx)
	return nil
}

// openBucket connects to the bucket (waiting, with logged retries, while
// the server cannot be reached; ctx ends the wait) and starts its watcher.
func (d *Daemon) openBucket(ctx, runCtx context.Context) error {
	sc := d.cfg.s3Config()
	sc.Logger = d.log
	b, err := s3client.NewBucket(sc)
	if err != nil {
		return err
	}
	if err := b.Connect(ctx); err != nil {
		return fmt.Errorf("open bucket source: %w", err)
	}
	w := s3.NewWatcher(b)
	if err := w.Open(runCtx); err != nil {
		return fmt.Errorf("open bucket watcher: %w", err)
	}
	blog := d.log.With("component", "bucket")
	d.bucket = &bucketSource{b: b, w: w, log: blog, token: d.cfg.S3.WebhookToken, cfg: bucket.Config{Bucket: b,
		Spool: filepath.Join(d.dirs.State, "bucket"), CheckpointInterval: d.cfg.S3.CheckpointInterval, Logger: blog}}
	d.sources = append(d.sources, d.bucket)
	d.log.Info("bucket source connected", "bucket", b.Name(), "owner", b.Owner(), "endpoint", sc.Endpoint)
	return nil
}

// HTTPAddr is the address HTTP listens on ("" when disabled).
func (d *Daemon) HTTPAddr() string {
	if d.httpAddr == nil {
		return ""
	}
	return d.httpAddr.String()
}

// takeLock takes the data directory's lock file; lockTaken records it once
// the ledger's lock is held too.
func (d *Daemon) takeLock() error {
	f, err := flockDataDir(d.dirs)
	if err != nil {
		return err
	}
	d.lock = f
	return nil
}

// lockTaken records this process as the data directory's only daemon.
func (d *Daemon) lockTaken() {
	recordPid(d.lock)
	// A previous run's address is stale; serveHTTP records this one's.
	os.Remove(AddrFile(d.dirs))
}

// receive turns src's events into queued jobs, and hands its cancel
// requests back to it.
func (d *Daemon) receive(ctx context.Context, src Source) {
	defer d.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-src.Events():
			if !ok {
				return
			}
			switch ev.Kind {
			case watcher.Cancel:
				src.Cancel(ctx, ev, d.pipe)
			case watcher.Input:
				d.enqueue(ctx, delivery{src: src, ev: ev})
			case watcher.Refused:
				d.refuse(delivery{src: src, ev: ev})
			}
		}
	}
}

// refuse fails an inbox entry the watcher refused, at once and without
// reading it, and moves it to rejected/. While a batch of the same name
// runs, it waits for that run to finish.
func (d *Daemon) refuse(dl delivery) {
	ev := dl.ev
	if !d.runs.claim(dl) {
		return // waits for its name's run, or draining: refused after the restart
	}
	b, err := dl.src.Refuse(d.runCtx, ev, d.pipe)
	switch {
	case err == nil:
		d.notifyEnd(b)
	case errors.Is(err, os.ErrNotExist):
		d.log.Info("refused input vanished", "name", ev.Name)
	case d.runCtx.Err() != nil:
	default:
		d.log.Error("failing a refused input failed; it is retried on "+dl.src.retryWhen(), "name", ev.Name, "error", err)
	}
	d.finished(dl)
}

// enqueue queues an input for a batch runner. While draining it stays in
// its source for the restart; while its name runs or waits already its
// source delivers it again after Forget if it is still pending there.
func (d *Daemon) enqueue(ctx context.Context, dl delivery) {
	if d.runs.busy(dl.ev.Name) {
		return
	}
	dl.rank = d.rank(ctx, dl)
	if d.runs.push(dl) {
		d.pokeStatus()
	}
}

// rank is input dl's priority in the run queue: that of its options over
// the config's batch defaults. Options that cannot be read or are invalid
// count as normal here; the run reads them again and fails the batch,
// naming the field, if they are still invalid.
func (d *Daemon) rank(ctx context.Context, dl delivery) engine.Priority {
	o, err := dl.src.options(ctx, dl.ev)
	if err != nil {
		d.log.Debug("read options for the run queue", "name", dl.ev.Name, "error", err)
	}
	p, err := d.cfg.Batch.Merge(o).Rank()
	if err != nil {
		return engine.PriorityNormal
	}
	return p
}

func (d *Daemon) next() (delivery, bool) {
	dl, ok := d.runs.next()
	if ok {
		d.pokeStatus()
	}
	return dl, ok
}

// requeue puts back first in the queue an input whose run stopped (ran),
// or did not start, because the disk is full: it waits there, still
// active, until space returns (pipeline.WaitForSpace).
func (d *Daemon) requeue(dl delivery, ran bool) {
	if ran {
		d.log.Info("batch paused: the disk is full; it resumes when space returns", "name", dl.ev.Name)
	}
	d.runs.requeue(dl)
}

// runBatches runs queued inputs, first come first served: the source
// prepares each job, the pipeline runs it, the source acknowledges its end.
// While the disk is full no job starts, and one the full disk stopped
// waits first in the queue.
func (d *Daemon) runBatches(ctx context.Context) {
	defer d.wg.Done()
	defer d.runners.Done()
	for {
		if d.pipe.WaitForSpace(ctx) != nil {
			return
		}
		dl, ok := d.next()
		if !ok {
			return
		}
		if d.pipe.DiskState().Full {
			d.requeue(dl, false) // it filled while this runner waited for work
			continue
		}
		ev := dl.ev
		st, err := dl.src.Start(ctx, ev, d.pipe)
		if err == nil && st != nil {
			st.Job.Store = d.withOutputExpiry(ctx, dl, st.Job.Store)
			var b *ledger.Batch
			b, err = d.pipe.Run(st.Ctx, st.Job)
			err = st.Finish(err)
			if errors.Is(err, pipeline.ErrDiskFull) && ctx.Err() == nil {
				d.requeue(dl, true)
				continue
			}
			if err == nil {
				d.notifyEnd(b)
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, pipeline.ErrShutdown) || ctx.Err() != nil:
			d.log.Info("batch paused for shutdown; it resumes on restart", "name", ev.Name)
		case errors.Is(err, os.ErrNotExist):
			d.log.Info("input vanished before it ran", "name", ev.Name)
		default:
			d.log.Error("batch run failed; it is retried on "+dl.src.retryWhen(), "name", ev.Name, "error", err)
		}
		d.finished(dl)
	}
}

// expireLoop forgets batches that ended more than cfg.Retention ago, at
// start and every hour.
func (d *Daemon) expireLoop(ctx context.Context) {
	defer d.wg.Done()
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		d.Expire(time.Now().Add(-d.cfg.Retention))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Expire forgets the batches that ended before cutoff, with the API's
// records of them, and returns how many (the retention loop calls it).
func (d *Daemon) Expire(cutoff time.Time) int {
	names, err := d.pipe.Expire(cutoff)
	names = d.expireAPI(cutoff, names)
	if len(names) > 0 {
		d.log.Info("forgot finished batches past retention", "batches", len(names), "retention", d.cfg.Retention)
	}
	if err != nil {
		d.log.Warn("expire batches", "error", err)
	}
	return len(names)
}

// notifyEnd sends the batch-end webhook of b (API batches by their API id).
func (d *Daemon) notifyEnd(b *ledger.Batch) {
	if d.hooks == nil || b == nil || !pipeline.Terminal(b.Status) {
		return
	}
	id := b.ID
	if _, err := d.apiBatchMeta(b.Name); err == nil {
		id = b.Name
	}
	if err := d.hooks.Notify("batch."+b.Status, id); err != nil {
		d.log.Warn("queue webhook", "name", b.Name, "error", err)
	}
}

func (d *Daemon) finished(dl delivery) {
	again, ok := d.runs.finished(dl.ev.Name)
	d.pokeStatus()
	dl.src.Forget(dl.ev)
	if ok {
		d.refuse(again)
	}
}

func (d *Daemon) serveHTTP() error {
	mux := http.NewServeMux()
	d.bodies = newBodyLimits(d.cfg.API)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if d.draining.Load() {
			http.Error(w, "shutting down: no new work taken", http.StatusServiceUnavailable)
			return
		}
		if sr, ok := d.eng.(engine.StatsReporter); ok {
			switch st := sr.Stats(); {
			case st.Paused:
				http.Error(w, "engine unreachable: batches paused", http.StatusServiceUnavailable)
				return
			case st.Hung:
				http.Error(w, "engine not answering: requests sent, no response", http.StatusServiceUnavailable)
				return
			}
		}
		w.Write([]byte("ready\n"))
	})
	// Every other route needs a key when there are keys.
	d.acc = newAccess(d.cfg.API.Keys)
	acc := d.acc
	if d.bucket != nil {
		// MinIO's webhook target sends s3.webhook_token when it is set
		// (serveEvents checks it); otherwise it must send an API key.
		var events http.Handler = http.HandlerFunc(d.bucket.serveEvents)
		if d.cfg.S3.WebhookToken == "" {
			events = acc.api(events)
		}
		mux.Handle("POST /v1/bucket-events", events)
	}
	src := opsState{d}
	d.sampler = ops.NewSampler(src, 0, 0)
	d.sampler.Start(d.runCtx)
	metrics := ops.NewMetrics(src).WithSampler(d.sampler).Handler()
	if !d.cfg.API.MetricsPublic {
		metrics = acc.page(metrics)
	}
	mux.Handle("GET /metrics", metrics)
	mux.Handle("/", acc.page(ops.NewStatusPage(src, d.sampler).Handler()))
	api := http.NewServeMux()
	api.HandleFunc("POST /v1/files", d.handleUpload)
	api.HandleFunc("GET /v1/files", d.handleListFiles)
	api.HandleFunc("GET /v1/files/{id}", d.handleGetFile)
	api.HandleFunc("GET /v1/files/{id}/content", d.handleFileContent)
	api.HandleFunc("DELETE /v1/files/{id}", d.handleDeleteFile)
	api.HandleFunc("POST /v1/batches", d.handleCreateBatch)
	api.HandleFunc("GET /v1/batches", d.handleListBatches)
	api.HandleFunc("GET /v1/batches/{id}", d.handleGetBatch)
	api.HandleFunc("POST /v1/batches/{id}/cancel", d.handleCancelBatch)
	api.HandleFunc("GET /v1/batches/{id}/results", d.handleBatchResults)
	api.HandleFunc("POST /v1/batches/{id}/retry", d.handleRetryBatch)
	api.HandleFunc("POST /v1/chat/completions", d.handleOnline(engine.EndpointChat))
	api.HandleFunc("POST /v1/completions", d.handleOnline(engine.EndpointCompletions))
	api.HandleFunc("POST /v1/embeddings", d.handleOnline(engine.EndpointEmbeddings))
	api.HandleFunc("POST /v1/responses", d.handleOnline(engine.EndpointResponses))
	api.HandleFunc("POST /v1/messages", d.handleOnline(wire.EndpointMessages))
	api.HandleFunc("GET /v1/models", d.handleModels)
	api.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusNotFound, "unknown_url", "", "Unknown request URL: %s %s.", r.Method, r.URL.Path)
	})
	mux.Handle("/v1/", anthropicErrors(acc.api(d.intake(api))))
	mux.Handle("GET "+LedgerBackupPath, acc.admin(http.HandlerFunc(d.handleLedgerBackup)))
	ln, err := net.Listen("tcp", d.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", d.cfg.Listen, err)
	}
	d.httpAddr = ln.Addr()
	if err := writeAddrFile(d.dirs, ln.Addr()); err != nil {
		ln.Close()
		return err
	}
	// Headers must come within ReadHeaderTimeout, bodies at the pace
	// bodyLimits sets; an idle keep-alive connection is closed after IdleTimeout.
	d.http = &http.Server{Handler: d.bodies.paceBodies(mux), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := d.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("http server", "error", err)
		}
	}()
	return nil
}

// Close stops everything in reverse order of opening and releases the data
// directory. Batches in progress stop at a commit point and resume on the
// next Open.
func (d *Daemon) Close(ctx context.Context) error {
	d.notifyStopping()
	var errs []error
	if d.http != nil {
		errs = append(errs, d.http.Shutdown(ctx))
	}
	if d.cancel != nil {
		d.cancel()
	}
	d.runs.close()
	for _, src := range d.sources {
		errs = append(errs, src.Close(ctx))
	}
	d.wg.Wait()
	if d.sampler != nil {
		d.sampler.Close()
	}
	if d.hooks != nil {
		errs = append(errs, d.hooks.Close(ctx))
	}
	if d.pipe != nil {
		errs = append(errs, d.pipe.Close(ctx))
	}
	if d.eng != nil {
		errs = append(errs, d.eng.Close(ctx))
	}
	if d.lock != nil {
		errs = append(errs, d.lock.Close())
		d.lock = nil
	}
	return errors.Join(errs...)
}
