// Package bucket is the pipeline.Store of a MinIO/S3 bucket, and the home of
// the bucket protocol (docs/bucket.md): it claims an input with a lease
// (lease.go: the lease record and its rules), keeps a local copy of it to
// read, saves the batch's committed lines as checkpoint objects so another
// daemon can resume it (checkpoint.go), publishes the results with a
// commit record, exactly one daemon publishing each input version
// (publish.go), and retires the input to done/. The daemon only wires it to
// the pipeline. It talks to the bucket through store/bucket/s3client and
// never imports the daemon.
package bucket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/internal/failpoint"
	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/store/bucket/s3client"
)

var _ pipeline.Store = (*Store)(nil)

// ErrLeaseLost stops a run whose lease another daemon took over: it stops
// without publishing, and the other daemon resumes from the checkpoints.
var ErrLeaseLost = errors.New("lease lost to another daemon")

// MaxOptionsBytes bounds NAME.options.json read from the bucket (here and
// by the daemon, for an input's place in its run queue).
const MaxOptionsBytes = 16 << 20

// Config configures the stores of one bucket.
type Config struct {
	Bucket *s3client.Bucket
	// Spool is a local folder for the copies of inputs that run and the
	// checkpoints not uploaded yet (one subfolder per batch, removed after).
	Spool string
	// CheckpointInterval is how often checkpoints and progress go up.
	CheckpointInterval time.Duration
	Logger             *slog.Logger
}

// Store is one claimed input of the bucket. Open → (pipeline.Run with
// Context) → Close.
type Store struct {
	cfg             Config
	b               *s3client.Bucket
	log             *slog.Logger
	name, key, etag string
	optKey, optTag  string
	options         []byte
	cancelKey       string
	cancelRequested bool
	retryKey        string
	retryRequested  bool
	dir, input      string
	lease           *lease
	cp              *checkpointer
	prog            *progress
	runCtx          context.Context
	stopRun         context.CancelCauseFunc
	stopRenew       context.CancelFunc
	renewer         sync.WaitGroup
	renewerStopOnce sync.Once
	stopSave        context.CancelFunc
	saver           sync.WaitGroup
	saverStopOnce   sync.Once
}

// Open claims batch name's input object key at version etag and prepares
// it to run: a local copy of the input, its options, the checkpoint
// sequence, a goroutine that renews the lease until Close, and one that
// uploads checkpoints and progress until Publish or Close. It returns a nil Store and no error when
// there is nothing to run: the input is claimed by another daemon, was
// replaced or removed, or its results were already published (Open then
// finishes that publication and retires the input).
func Open(ctx context.Context, cfg Config, name, key, etag string) (*Store, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := cfg.Bucket
	if code, msg := filecontract.CheckName(name); code != "" {
		// The watcher refuses such inputs (OpenRefused): no key derived
		// from a name may leave its prefix.
		return nil, fmt.Errorf("open %s: %s", b.URL(key), msg)
	}
	s := &Store{cfg: cfg, b: b, log: cfg.Logger.With("name", name, "key", key), name: name, key: key, etag: etag,
		optKey: b.InboxKey(name + filecontract.SuffixOptions), cancelKey: b.InboxKey(name + filecontract.SuffixCancel),
		retryKey: b.InboxKey(name + filecontract.SuffixRetry)}
	lease, err := claim(ctx, b, name, key, etag)
	if errors.Is(err, errHeld) {
		s.log.Debug("input claimed elsewhere", "reason", err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.lease = lease
	if lease.resumed {
		s.log.Info("took over an expired lease; resuming the batch from its checkpoints", "previous_owner", lease.prevOwner)
	}
	run, err := s.open(ctx)
	if err != nil || !run {
		s.release(ctx)
		os.RemoveAll(s.dir)
		return nil, err
	}
	s.runCtx, s.stopRun = context.WithCancelCause(ctx)
	// Renewal has a goroutine of its own, so that no upload of checkpoints
	// or progress (slow under load) can hold it up past the TTL.
	var renewCtx, saveCtx context.Context
	renewCtx, s.stopRenew = context.WithCancel(s.runCtx)
	saveCtx, s.stopSave = context.WithCancel(s.runCtx)
	s.renewer.Add(1)
	go func() {
		defer s.renewer.Done()
		s.renew(renewCtx)
	}()
	s.saver.Add(1)
	go func() {
		defer s.saver.Done()
		s.save(saveCtx)
	}()
	return s, nil
}

// open does Open's work under the lease; it reports false when there is
// nothing to run.
func (s *Store) open(ctx context.Context) (bool, error) {
	b := s.b
	if pub, ok, err := published(ctx, b, s.name, s.etag); err != nil {
		return false, err
	} else if ok {
		// Its results were published by a daemon that stopped before
		// retiring the input: finish that.
		s.log.Info("results already published; finishing the publication", "publisher", pub.Owner)
		if err := install(ctx, b, pub); err != nil {
			return false, err
		}
		if s.optTag, _, err = b.Stat(ctx, s.optKey); err != nil {
			return false, err
		}
		return false, s.Retire(ctx)
	}
	// Progress objects are written only over what was there at the claim
	// (or what this daemon wrote since).
	batchKey := b.OutboxKey(s.name + filecontract.SuffixBatch)
	batchTag, _, err := b.Stat(ctx, batchKey)
	if err != nil {
		return false, err
	}
	s.prog = &progress{b: b, key: batchKey, etag: batchTag}

	s.dir = filepath.Join(s.cfg.Spool, s.name+"-"+shortTag(s.etag))
	if err := os.RemoveAll(s.dir); err != nil {
		return false, fmt.Errorf("clear spool: %w", err)
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return false, fmt.Errorf("create spool: %w", err)
	}
	s.input = filepath.Join(s.dir, "input")
	if err := b.Download(ctx, s.key, s.etag, s.input); err != nil {
		if s3client.IsNotFound(err) || errors.Is(err, s3client.ErrChanged) {
			s.log.Info("input changed or removed before it ran", "error", err)
			return false, nil
		}
		return false, err
	}
	opts, optTag, err := b.Get(ctx, s.optKey, MaxOptionsBytes)
	switch {
	case s3client.IsNotFound(err):
	case err != nil:
		return false, err
	default:
		s.options, s.optTag = opts, optTag
	}
	_, inMod, err := b.Stat(ctx, s.key)
	if err != nil {
		return false, err
	}
	if tag, mod, err := b.Stat(ctx, s.cancelKey); err != nil {
		return false, err
	} else if tag != "" && !mod.Before(inMod) {
		s.cancelRequested = true
	}
	if tag, _, err := b.Stat(ctx, s.retryKey); err != nil {
		return false, err
	} else if tag != "" {
		s.retryRequested = true
	}
	seq, err := nextCheckpoint(ctx, b, s.name, s.etag)
	if err != nil {
		return false, err
	}
	if s.cp, err = newCheckpointer(filepath.Join(s.dir, "pending"), seq); err != nil {
		return false, err
	}
	return true, nil
}

// Context is the context the batch runs under: ctx of Open, also ended
// (with cause ErrLeaseLost) when another daemon takes the lease over.
func (s *Store) Context() context.Context { return s.runCtx }

// CancelRequested tells that a cancel object newer than the input waits in
// the inbox: the batch should start cancelled.
func (s *Store) CancelRequested() bool { return s.cancelRequested }

// RetryRequested tells that a retry mark (Unretire's) waits in the inbox:
// the batch's failed and cancelled requests run again (pipeline.Job's
// RetryFailed).
func (s *Store) RetryRequested() bool { return s.retryRequested }

// Close ends the claim after the run returned runErr: a run stopped early
// saves its committed lines as checkpoints for whoever runs it next; the
// lease is released unless it was lost (the run's error is then dropped:
// the batch belongs to another daemon). It returns runErr otherwise.
func (s *Store) Close(runErr error) error {
	s.stopSaver()
	s.stopRenewer()
	lost := errors.Is(context.Cause(s.runCtx), ErrLeaseLost) || errors.Is(runErr, ErrLeaseLost)
	s.stopRun(nil)
	defer os.RemoveAll(s.dir)
	defer s.cp.close()
	if lost {
		s.log.Warn("lease lost: another daemon owns this batch now; stopped without publishing")
		return nil
	}
	bg := context.WithoutCancel(s.runCtx)
	if runErr != nil {
		// Save what is done for whoever runs it next (this daemon after a
		// restart, or another one once the lease is released).
		if err := s.cp.flush(bg, s.b, s.name, s.etag); err != nil {
			s.log.Warn("checkpoint before stopping", "error", err)
		}
	}
	s.release(bg)
	return runErr
}

func (s *Store) release(ctx context.Context) {
	if err := s.lease.Release(context.WithoutCancel(ctx)); err != nil {
		s.log.Warn("release lease", "error", err)
	}
}

func (s *Store) stopRenewer() {
	s.renewerStopOnce.Do(func() {
		s.stopRenew()
		s.renewer.Wait()
	})
}

func (s *Store) stopSaver() {
	s.saverStopOnce.Do(func() {
		s.stopSave()
		s.saver.Wait()
	})
}

// Files implements pipeline.Store.
func (s *Store) Files() pipeline.Files {
	return pipeline.Files(filecontract.FilesOf(s.name, path.Base(s.key)))
}

// OpenInput implements pipeline.Store: the local copy of the input at the
// claimed version.
func (s *Store) OpenInput(context.Context) (io.ReadCloser, error) {
	return fsx.OpenRegular(s.input)
}

// Options implements pipeline.Store: the options object as Open read it.
func (s *Store) Options(context.Context) ([]byte, error) { return s.options, nil }

// Resume implements pipeline.Store: the records of every checkpoint of
// this input version, any daemon's, in order.
func (s *Store) Resume(ctx context.Context, yield func(pipeline.Committed) error) error {
	n, err := readCheckpoints(ctx, s.b, s.name, s.etag, s.dir, func(r checkpointRecord) error {
		return yield(pipeline.Committed{Line: r.Line, Errors: r.Errors, Data: r.Result})
	})
	if n > 0 {
		s.log.Info("read checkpoints", "objects", n)
	}
	return err
}

// Checkpoint implements pipeline.Store: the lines go to a local file that
// the saver uploads as the next checkpoint object.
func (s *Store) Checkpoint(lines []pipeline.Committed) error { return s.cp.add(lines) }

// Progress implements pipeline.Store: the saver uploads the latest object
// at its next tick, conditionally (see progress).
func (s *Store) Progress(_ context.Context, object []byte) error {
	s.prog.set(object)
	return nil
}

// Publish implements pipeline.Store: it stops the saver, stages the result
// files and the object under this daemon's staging keys (the lease is
// renewed all the while, however long the uploads take), renews the lease,
// creates the publication record (only if none exists) and installs the
// record's objects in the outbox. A daemon that lost its lease cannot get
// past the renewal or the record (ErrLeaseLost); whoever finds a record
// whose publisher died installs it.
func (s *Store) Publish(ctx context.Context, r pipeline.Results) error {
	s.stopSaver()
	b := s.b
	staged := map[string]string{}
	files := []struct{ suffix, src, ct string }{
		{filecontract.SuffixOutput, r.Output, "application/jsonl"},
		{filecontract.SuffixErrors, r.Errors, "application/jsonl"},
		{filecontract.SuffixResults, r.Document, "application/json"},
	}
	for _, f := range files {
		if f.src == "" {
			continue
		}
		base := s.name + f.suffix
		sk := stagingKey(b, s.name, s.etag, base)
		if _, err := b.Upload(ctx, sk, f.src, f.ct, s3client.Any); err != nil {
			return err
		}
		staged[b.OutboxKey(base)] = sk
	}
	base := s.name + filecontract.SuffixBatch
	sk := stagingKey(b, s.name, s.etag, base)
	if _, err := b.PutBytes(ctx, sk, r.Object, "application/json", s3client.Any); err != nil {
		return err
	}
	staged[b.OutboxKey(base)] = sk
	if err := s.lease.Renew(ctx); err != nil {
		if errors.Is(err, errLeaseTaken) {
			return fmt.Errorf("publish %s: %w", s.name, ErrLeaseLost)
		}
		return err
	}
	if err := failpoint.Inject(failpoint.BucketCommit); err != nil {
		return err
	}
	pub, err := commit(ctx, b, s.name, s.etag, publication{Owner: b.Owner(), Objects: staged})
	if err != nil {
		return err
	}
	if err := failpoint.Inject(failpoint.BucketInstall); err != nil {
		return err
	}
	if pub.Owner != b.Owner() {
		s.log.Warn("another daemon published this batch first; installing its results", "publisher", pub.Owner)
	}
	if err := install(ctx, b, pub); err != nil {
		return err
	}
	if err := removeResults(ctx, b, s.name, r); err != nil {
		return err
	}
	s.log.Info("results published", "output", b.URL(b.OutboxKey(s.name+filecontract.SuffixOutput)))
	return nil
}

// removeResults removes the result objects of batch name that r does not
// have from the outbox: a failed batch has none, an input that is not a
// requests document has no NAME.results.json, and an earlier batch's of
// the same name must not pass for its own.
func removeResults(ctx context.Context, b *s3client.Bucket, name string, r pipeline.Results) error {
	var stale []string
	if r.Document == "" {
		stale = append(stale, filecontract.SuffixResults)
	}
	if r.Output == "" {
		stale = append(stale, filecontract.SuffixOutput, filecontract.SuffixErrors)
	}
	for _, suffix := range stale {
		if err := b.Remove(ctx, b.OutboxKey(name+suffix)); err != nil {
			return err
		}
	}
	return nil
}

// RetireRecord implements pipeline.Store: none is needed, since Retire is
// idempotent and an interrupted one is finished when the input is
// delivered again (Open finds the publication record).
func (s *Store) RetireRecord() ([]byte, error) { return nil, nil }

// Retire implements pipeline.Store: the input (and its options) are copied
// to done/ and removed only if they were not replaced meanwhile (a new
// input of the same name runs next, with the options it finds); the cancel
// request, the checkpoints and the publication record go. A run always
// reads the version it claimed (a local copy downloaded at that ETag), so
// lines of two versions never mix: a replaced object is a new batch.
func (s *Store) Retire(ctx context.Context) error {
	b := s.b
	// A failed precondition is an input replaced since; none at all, one
	// retired already.
	if err := b.Copy(ctx, s.key, s.etag, b.DoneKey(path.Base(s.key))); err != nil && !errors.Is(err, s3client.ErrPrecondition) && !s3client.IsNotFound(err) {
		return err
	}
	cur, _, err := b.Stat(ctx, s.key)
	if err != nil {
		return err
	}
	if cur == s.etag {
		if err := b.Remove(ctx, s.key); err != nil {
			return err
		}
	}
	// The options of a replaced input stay with it: it runs next.
	if s.optTag != "" && (cur == "" || cur == s.etag) {
		if err := b.Copy(ctx, s.optKey, s.optTag, b.DoneKey(path.Base(s.optKey))); err == nil {
			if cur, _, _ := b.Stat(ctx, s.optKey); cur == s.optTag {
				b.Remove(ctx, s.optKey)
			}
		}
	}
	for _, key := range []string{s.cancelKey, s.retryKey} {
		if err := b.Remove(ctx, key); err != nil {
			return err
		}
	}
	if err := removeCheckpoints(ctx, b, s.name, s.etag); err != nil {
		return err
	}
	return unpublish(ctx, b, s.name, s.etag)
}

// ErrNotRetired is Unretire's error when the input is not in done/.
var ErrNotRetired = errors.New("the input is not in done/")

// ErrInputWaiting is Unretire's error when an input of the batch's name
// waits in the inbox already (a newer one: it runs instead).
var ErrInputWaiting = errors.New("an input of that name waits in the inbox")

// Unretire is Retire undone, to run a finished batch's failed requests
// again (the API's retry): batch name's input (base: NAME.jsonl or
// NAME.json) returns from done/ to the inbox with its options, after a
// NAME.retry mark there, which makes the run that claims it rerun the
// failed and cancelled requests (RetryRequested) and keep the completed
// ones when that daemon's ledger holds the batch (another daemon runs every
// request again; the results are replaced whole, never duplicated). Retire
// removes the mark. Each step is done before the next: the mark, the
// options, the input, each a copy conditional on the done/ object's ETag
// and then the removal of that object, so a crash leaves the input in
// done/ (a retry may be asked again) or in the inbox with its options and
// its mark.
func Unretire(ctx context.Context, b *s3client.Bucket, name, base string) error {
	src := b.DoneKey(base)
	tag, _, err := b.Stat(ctx, src)
	if err != nil {
		return fmt.Errorf("unretire %s: %w", name, err)
	}
	if tag == "" {
		return fmt.Errorf("unretire %s: %w", name, ErrNotRetired)
	}
	if cur, _, err := b.Stat(ctx, b.InboxKey(base)); err != nil {
		return fmt.Errorf("unretire %s: %w", name, err)
	} else if cur != "" {
		return fmt.Errorf("unretire %s: %w", name, ErrInputWaiting)
	}
	if _, err := b.PutBytes(ctx, b.InboxKey(name+filecontract.SuffixRetry), nil, "application/octet-stream", s3client.Any); err != nil {
		return fmt.Errorf("unretire %s: %w", name, err)
	}
	opt := name + filecontract.SuffixOptions
	optTag, _, err := b.Stat(ctx, b.DoneKey(opt))
	if err != nil {
		return fmt.Errorf("unretire %s: %w", name, err)
	}
	moves := []struct{ base, tag string }{{opt, optTag}, {base, tag}}
	for _, m := range moves {
		if m.tag == "" {
			continue
		}
		if err := b.Copy(ctx, b.DoneKey(m.base), m.tag, b.InboxKey(m.base)); err != nil {
			return fmt.Errorf("unretire %s: %w", name, err)
		}
		if err := b.Remove(ctx, b.DoneKey(m.base)); err != nil {
			return fmt.Errorf("unretire %s: %w", name, err)
		}
	}
	return nil
}

// renew renews the lease every TTL/3 until ctx ends, and sooner again
// after a failed attempt (each gives up after lease.RenewTimeout); a lost
// lease stops the run.
func (s *Store) renew(ctx context.Context) {
	ttl := s.lease.TTL()
	t := time.NewTimer(ttl / 3)
	defer t.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// An attempt is not cut short by ctx (it is bounded by
		// RenewTimeout): one cut short may still be applied, and Release
		// must know the lease's last ETag.
		start := time.Now()
		err := s.lease.Renew(context.WithoutCancel(ctx))
		switch {
		case err == nil:
			renewed = start
			s.log.Debug("lease renewed", "took", time.Since(start).Round(time.Millisecond))
			t.Reset(ttl / 3)
		case errors.Is(err, errLeaseTaken):
			s.stopRun(ErrLeaseLost)
			return
		case ctx.Err() != nil:
			return
		default:
			s.log.Warn("renew lease; trying again", "error", err, "last_renewed_ago", time.Since(renewed).Round(time.Millisecond), "ttl", ttl)
			t.Reset(ttl / 30)
		}
	}
}

// save uploads checkpoints and progress every CheckpointInterval until
// ctx ends.
func (s *Store) save(ctx context.Context) {
	t := time.NewTicker(s.cfg.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.cp.flush(ctx, s.b, s.name, s.etag); err != nil && ctx.Err() == nil {
			s.log.Warn("upload checkpoint", "error", err)
		}
		if err := s.prog.publish(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("upload progress", "error", err)
		}
	}
}

// progress publishes the running batch's object to the outbox,
// conditionally: a write that finds the object changed by someone else
// reads it, and stops for good if it is final (the batch was published by
// another daemon).
type progress struct {
	b    *s3client.Bucket
	key  string
	etag string
	done bool

	mu     sync.Mutex
	latest []byte // the writer's newest object; nil once uploaded
}

func (p *progress) set(object []byte) {
	p.mu.Lock()
	p.latest = object
	p.mu.Unlock()
}

func (p *progress) publish(ctx context.Context) error {
	p.mu.Lock()
	data := p.latest
	p.latest = nil
	p.mu.Unlock()
	if p.done || data == nil {
		return nil
	}
	tag, err := p.b.PutBytes(ctx, p.key, data, "application/json", s3client.IfETag(p.etag))
	if err == nil {
		p.etag = tag
		return nil
	}
	if !errors.Is(err, s3client.ErrPrecondition) {
		return err
	}
	cur, curTag, err := p.b.Get(ctx, p.key, 1<<20)
	if err != nil {
		if s3client.IsNotFound(err) {
			p.etag = ""
			return nil
		}
		return err
	}
	var obj struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(cur, &obj) == nil && pipeline.Terminal(obj.Status) {
		p.done = true
		return nil
	}
	p.etag = curTag
	return nil
}

func shortTag(etag string) string {
	etag = strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return -1
	}, etag)
	return etag[:min(len(etag), 12)]
}
