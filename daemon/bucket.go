package daemon

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/watcher"
	"github.com/batchd/batchd/watcher/s3"
)

// errLeaseLost stops a run whose lease another daemon took over.
var errLeaseLost = errors.New("lease lost to another daemon")

// bucketRunner runs batches whose inputs are in a bucket (docs/bucket.md):
// claim the input, stream it to a local spool, run it through the pipeline
// with its progress checkpointed to the bucket, publish the results with
// conditional writes, and retire the input to done/.
type bucketRunner struct {
	d     *Daemon
	b     *s3.Bucket
	w     *s3.Watcher
	spool string
	log   *slog.Logger
	every time.Duration // checkpoint interval
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

// run runs one input to its end, or until the lease is lost or ctx is done.
func (br *bucketRunner) run(ctx context.Context, ev watcher.Event) error {
	b, name, key, etag := br.b, ev.Name, ev.Path, ev.Version
	log := br.log.With("name", name, "key", key)
	lease, err := b.Claim(ctx, name, key, etag)
	if errors.Is(err, s3.ErrHeld) {
		log.Debug("input claimed elsewhere", "reason", err)
		return nil
	}
	if err != nil {
		return err
	}
	if lease.Resumed {
		log.Info("took over an expired lease; resuming the batch from its checkpoints", "previous_owner", lease.PrevOwner)
	}
	released := false
	defer func() {
		if !released {
			if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
				log.Warn("release lease", "error", err)
			}
		}
	}()
	outKey := b.OutboxKey(name + ".output.jsonl")
	optKey := b.InboxKey(name + watcher.SuffixOptions)
	cancelKey := b.InboxKey(name + watcher.SuffixCancel)
	if pub, ok, err := b.Published(ctx, name, etag); err != nil {
		return err
	} else if ok {
		// Its results were published by a daemon that stopped before
		// retiring the input: finish that.
		log.Info("results already published; finishing the publication", "publisher", pub.Owner)
		if err := b.Install(ctx, pub); err != nil {
			return err
		}
		optTag, _, err := b.Stat(ctx, optKey)
		if err != nil {
			return err
		}
		return br.retire(ctx, name, key, etag, optKey, optTag, cancelKey)
	}
	// Progress objects are written only over what was there at the claim
	// (or what this daemon wrote since).
	batchTag, _, err := b.Stat(ctx, b.OutboxKey(name+".batch.json"))
	if err != nil {
		return err
	}

	dir := filepath.Join(br.spool, name+"-"+shortTag(etag))
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear spool: %w", err)
	}
	job := pipeline.Job{
		Name:   name,
		Format: ev.Format,
		Path:   filepath.Join(dir, "inbox", filepath.Base(key)),
		Outbox: filepath.Join(dir, "outbox"),
		// The local copy of the input goes here once its results are final;
		// the bucket's input moves to done/ after publishing.
		DoneDir:     filepath.Join(dir, "done"),
		OptionsPath: filepath.Join(dir, "inbox", name+watcher.SuffixOptions),
	}
	for _, p := range []string{filepath.Dir(job.Path), job.Outbox, job.DoneDir} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("create spool: %w", err)
		}
	}
	defer os.RemoveAll(dir)
	if err := b.Download(ctx, key, etag, job.Path); err != nil {
		if s3.IsNotFound(err) || errors.Is(err, s3.ErrChanged) {
			log.Info("input changed or removed before it ran", "error", err)
			return nil
		}
		return err
	}
	optTag, _, err := b.Stat(ctx, optKey)
	if err != nil {
		return err
	}
	if optTag != "" {
		if err := b.Download(ctx, optKey, optTag, job.OptionsPath); err != nil && !s3.IsNotFound(err) {
			return err
		}
	}
	_, inMod, err := b.Stat(ctx, key)
	if err != nil {
		return err
	}
	if tag, mod, err := b.Stat(ctx, cancelKey); err != nil {
		return err
	} else if tag != "" && !mod.Before(inMod) {
		br.d.pipe.CancelOnStart(name)
		log.Info("cancel requested; the batch will start cancelled")
	}

	seq, err := b.NextCheckpoint(ctx, name, etag)
	if err != nil {
		return err
	}
	cp, err := newCheckpointer(filepath.Join(dir, "pending"), seq)
	if err != nil {
		return err
	}
	defer cp.close()
	job.OnCommit = cp.add
	job.Seed = func(yield func(pipeline.Committed) error) error {
		n, err := b.ReadCheckpoints(ctx, name, etag, dir, func(r s3.Record) error {
			return yield(pipeline.Committed{Line: r.Line, Errors: r.Errors, Data: r.Result})
		})
		if n > 0 {
			log.Info("read checkpoints", "objects", n)
		}
		return err
	}

	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var wg sync.WaitGroup
	wg.Add(1)
	prog := &progress{b: b, key: b.OutboxKey(name + ".batch.json"), local: filepath.Join(job.Outbox, name+".batch.json"), etag: batchTag}
	go func() {
		defer wg.Done()
		br.keep(runCtx, stop, lease, cp, prog, name, etag, log)
	}()
	ended, runErr := br.d.pipe.Run(runCtx, job)
	stop(nil)
	wg.Wait()
	if errors.Is(context.Cause(runCtx), errLeaseLost) {
		log.Warn("lease lost: another daemon owns this batch now; stopped without publishing")
		released = true
		return nil
	}
	if runErr != nil {
		// Save what is done for whoever runs it next (this daemon after a
		// restart, or another one once the lease is released).
		if err := cp.flush(context.WithoutCancel(ctx), b, name, etag); err != nil {
			log.Warn("checkpoint before stopping", "error", err)
		}
		return runErr
	}

	// Publish: stage the result files, then create the publication record
	// (only if none exists), then install the staged objects in the outbox.
	// A daemon that lost its lease cannot get past the renewal or the
	// record; whoever finds a record whose publisher died installs it.
	staged := map[string]string{}
	for _, base := range []string{name + ".output.jsonl", name + ".errors.jsonl", name + ".batch.json"} {
		sk := b.StagingKey(name, etag, base)
		ct := "application/jsonl"
		if strings.HasSuffix(base, ".json") {
			ct = "application/json"
		}
		if _, err := b.Upload(ctx, sk, filepath.Join(job.Outbox, base), ct, s3.Any); err != nil {
			return err
		}
		staged[b.OutboxKey(base)] = sk
	}
	if err := lease.Renew(ctx); err != nil {
		if errors.Is(err, s3.ErrLeaseLost) {
			log.Warn("lease lost before publishing; another daemon owns this batch now")
			released = true
			return nil
		}
		return err
	}
	pub, err := b.Commit(ctx, name, etag, s3.Publication{Owner: b.Owner(), Objects: staged})
	if err != nil {
		return err
	}
	if pub.Owner != b.Owner() {
		log.Warn("another daemon published this batch first; installing its results", "publisher", pub.Owner)
	}
	if err := b.Install(ctx, pub); err != nil {
		return err
	}
	if err := br.retire(ctx, name, key, etag, optKey, optTag, cancelKey); err != nil {
		return err
	}
	log.Info("results published", "output", b.URL(outKey))
	br.d.notifyEnd(ended)
	return nil
}

// retire moves the input (and its options) to done/, removes a cancel
// request and the checkpoints. The input is removed only if it was not
// replaced meanwhile: a new input of the same name runs next.
func (br *bucketRunner) retire(ctx context.Context, name, key, etag, optKey, optTag, cancelKey string) error {
	b := br.b
	if err := b.Copy(ctx, key, etag, b.DoneKey(filepath.Base(key))); err != nil && !errors.Is(err, s3.ErrPrecondition) {
		return err
	}
	if cur, _, err := b.Stat(ctx, key); err != nil {
		return err
	} else if cur == etag {
		if err := b.Remove(ctx, key); err != nil {
			return err
		}
	}
	if optTag != "" {
		if err := b.Copy(ctx, optKey, optTag, b.DoneKey(filepath.Base(optKey))); err == nil {
			if cur, _, _ := b.Stat(ctx, optKey); cur == optTag {
				b.Remove(ctx, optKey)
			}
		}
	}
	if err := b.Remove(ctx, cancelKey); err != nil {
		return err
	}
	if err := b.RemoveCheckpoints(ctx, name, etag); err != nil {
		return err
	}
	return b.Unpublish(ctx, name, etag)
}

// keep renews the lease and uploads checkpoints and progress until ctx
// ends; a lost lease stops the run.
func (br *bucketRunner) keep(ctx context.Context, stop context.CancelCauseFunc, lease *s3.Lease, cp *checkpointer, prog *progress, name, etag string, log *slog.Logger) {
	renew := time.NewTicker(lease.TTL() / 3)
	defer renew.Stop()
	save := time.NewTicker(br.every)
	defer save.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
			if err := lease.Renew(ctx); err != nil {
				if errors.Is(err, s3.ErrLeaseLost) {
					stop(errLeaseLost)
					return
				}
				if ctx.Err() == nil {
					log.Warn("renew lease", "error", err)
				}
			}
		case <-save.C:
			if err := cp.flush(ctx, br.b, name, etag); err != nil && ctx.Err() == nil {
				log.Warn("upload checkpoint", "error", err)
			}
			if err := prog.publish(ctx); err != nil && ctx.Err() == nil {
				log.Warn("upload progress", "error", err)
			}
		}
	}
}

// progress publishes the local NAME.batch.json to the outbox while the
// batch runs, conditionally: a write that finds the object changed by
// someone else reads it, and stops for good if it is final (the batch was
// published by another daemon).
type progress struct {
	b     *s3.Bucket
	key   string
	local string
	etag  string
	done  bool
}

func (p *progress) publish(ctx context.Context) error {
	if p.done {
		return nil
	}
	data, err := os.ReadFile(p.local)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	tag, err := p.b.PutBytes(ctx, p.key, data, "application/json", s3.IfETag(p.etag))
	if err == nil {
		p.etag = tag
		return nil
	}
	if !errors.Is(err, s3.ErrPrecondition) {
		return err
	}
	cur, curTag, err := p.b.Get(ctx, p.key, 1<<20)
	if err != nil {
		if s3.IsNotFound(err) {
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

// checkpointer collects committed result lines in a local file and uploads
// them as numbered checkpoint objects. add runs on the batch's writer;
// flush on the keeper; files not uploaded yet wait, in order, for the next
// flush.
type checkpointer struct {
	mu      sync.Mutex
	base    string
	f       *os.File
	w       *bufio.Writer
	n       int
	seq     int
	pending []pendingCheckpoint
}

type pendingCheckpoint struct {
	path string
	seq  int
}

func newCheckpointer(base string, seq int) (*checkpointer, error) {
	c := &checkpointer{base: base, seq: seq}
	return c, c.open()
}

func (c *checkpointer) open() error {
	f, err := os.Create(fmt.Sprintf("%s-%08d.jsonl", c.base, c.seq))
	if err != nil {
		return fmt.Errorf("checkpoint spool: %w", err)
	}
	c.f, c.w, c.n = f, bufio.NewWriterSize(f, 256<<10), 0
	return nil
}

func (c *checkpointer) add(lines []pipeline.Committed) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range lines {
		data, err := json.Marshal(s3.Record{Line: l.Line, Errors: l.Errors, Result: l.Data})
		if err != nil {
			return err
		}
		c.w.Write(data)
		if err := c.w.WriteByte('\n'); err != nil {
			return fmt.Errorf("checkpoint spool: %w", err)
		}
		c.n++
	}
	return nil
}

// flush uploads what add collected since the last flush.
func (c *checkpointer) flush(ctx context.Context, b *s3.Bucket, name, etag string) error {
	c.mu.Lock()
	if c.n > 0 {
		if err := c.w.Flush(); err != nil {
			c.mu.Unlock()
			return fmt.Errorf("checkpoint spool: %w", err)
		}
		c.f.Close()
		c.pending = append(c.pending, pendingCheckpoint{c.f.Name(), c.seq})
		c.seq++
		if err := c.open(); err != nil {
			c.mu.Unlock()
			return err
		}
	}
	pend := c.pending
	c.mu.Unlock()
	for len(pend) > 0 {
		p := pend[0]
		if err := b.Checkpoint(ctx, name, etag, p.seq, p.path); err != nil {
			return err
		}
		os.Remove(p.path)
		pend = pend[1:]
		c.mu.Lock()
		c.pending = c.pending[1:]
		c.mu.Unlock()
	}
	return nil
}

func (c *checkpointer) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f != nil {
		c.f.Close()
	}
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
	for _, key := range []string{b.DoneKey(name + ".jsonl"), b.DoneKey(name + ".json"), b.InboxKey(name + ".jsonl"), b.InboxKey(name + ".json")} {
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
	}{{name + ".output.jsonl", &in.Output}, {name + ".errors.jsonl", &in.Errors}, {name + ".batch.json", &in.Object}} {
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
