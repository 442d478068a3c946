package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/pipeline/ledger"
)

// Files expire as OpenAI's do: an upload expires_after[seconds] after it
// was uploaded (its ID.json keeps expires_at), a batch's output and error
// files output_expires_after.seconds after the batch wrote them (the
// anchor is the files' creation, not the batch's). Both default to the
// config's expiry keys. An expired file answers 404 at once; the sweep
// (every minute, and at start) removes it from disk:
//
//   - an upload: DATA/files/ID, then ID.json, then the directory fsynced;
//   - a batch's results: the pipeline's copies its result file ids name
//     (Pipeline.DropResults; the ledger record and the batch object stay,
//     output_file_id and error_file_id then answer 404), and the outbox
//     files (or bucket objects) of each name that asked for the expiry
//     and has not been taken by a batch of other content since. Each
//     publication that asks for an expiry writes DATA/state/expiry/OUT.json
//     (OUT the output file id) durably before its files are published,
//     and the sweep removes that record last, so a crash at any point
//     leaves a record whose sweep runs again.
//
// Result file ids name one content, which several batches may show (the
// same content run again reuses it): the earliest expiry asked wins.

// Expiry limits, OpenAI's: 3600 to 2592000 seconds.
const (
	minExpiry = pipeline.MinExpiry
	maxExpiry = pipeline.MaxExpiry
)

// expirySweep is how often expired files are removed from disk.
const expirySweep = time.Minute

// expiresAfter is OpenAI's expiration policy: {anchor, seconds}.
type expiresAfter struct {
	Anchor  string `json:"anchor"`
	Seconds *int64 `json:"seconds"`
}

// check validates the policy of field (the request's name for it) and
// returns its duration; the error names the field that is wrong, as the
// request wrote it (form: expires_after[seconds], else
// output_expires_after.seconds).
func (e expiresAfter) check(field string, form bool) (time.Duration, *paramError) {
	param := func(sub string) string {
		if form {
			return field + "[" + sub + "]"
		}
		return field + "." + sub
	}
	switch {
	case e.Anchor == "":
		return 0, &paramError{param("anchor"), "missing_required_parameter", param("anchor") + " is required (\"created_at\")"}
	case e.Anchor != "created_at":
		return 0, &paramError{param("anchor"), "invalid_value", fmt.Sprintf("%s must be \"created_at\", got %q", param("anchor"), e.Anchor)}
	case e.Seconds == nil:
		return 0, &paramError{param("seconds"), "missing_required_parameter", param("seconds") + " is required"}
	}
	if *e.Seconds < int64(minExpiry/time.Second) || *e.Seconds > int64(maxExpiry/time.Second) {
		return 0, &paramError{param("seconds"), "invalid_value",
			fmt.Sprintf("%s must be between 3600 (1 hour) and 2592000 (30 days), got %d", param("seconds"), *e.Seconds)}
	}
	return time.Duration(*e.Seconds) * time.Second, nil
}

// parseJSONExpiry reads output_expires_after from a JSON body (0 when it
// is absent or null).
func parseJSONExpiry(raw json.RawMessage) (time.Duration, *paramError) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var e expiresAfter
	if err := json.Unmarshal(raw, &e); err != nil {
		return 0, &paramError{"output_expires_after", "invalid_value",
			fmt.Sprintf("output_expires_after must be {\"anchor\": \"created_at\", \"seconds\": N} with N whole seconds: %v", err)}
	}
	return e.check("output_expires_after", false)
}

// paramError is a 400 naming the parameter that is wrong.
type paramError struct{ param, code, msg string }

func (p *paramError) write(w http.ResponseWriter) {
	writeAPIError(w, http.StatusBadRequest, p.code, p.param, "%s", p.msg)
}

// parseFormExpiry reads a multipart upload's expires_after[anchor] and
// expires_after[seconds] (nil when neither was sent).
func parseFormExpiry(anchor, seconds *string) (*expiresAfter, *paramError) {
	if anchor == nil && seconds == nil {
		return nil, nil
	}
	var e expiresAfter
	if anchor != nil {
		e.Anchor = *anchor
	}
	if seconds != nil {
		n, err := strconv.ParseInt(strings.TrimSpace(*seconds), 10, 64)
		if err != nil {
			return nil, &paramError{"expires_after[seconds]", "invalid_value",
				fmt.Sprintf("expires_after.seconds must be a whole number of seconds, got %q", *seconds)}
		}
		e.Seconds = &n
	}
	return &e, nil
}

// outputExpiry is DATA/state/expiry/OUT.json: when the results of record
// Record (Nonce, generation Gen) expire, and the names whose published
// copies go with them.
type outputExpiry struct {
	ExpiresAt int64         `json:"expires_at"`
	Record    string        `json:"record"`
	Nonce     string        `json:"nonce,omitempty"`
	Gen       int           `json:"gen"`
	Names     []expiredName `json:"names"`
}

// expiredName is a name whose published results expire: in the outbox
// folder, or the bucket's.
type expiredName struct {
	Name   string `json:"name"`
	Bucket bool   `json:"bucket,omitempty"`
}

func (d *Daemon) expiryDir() string { return filepath.Join(d.dirs.State, "expiry") }

// expiryPath is the expiry record of result file id (output or errors).
func (d *Daemon) expiryPath(id string) string {
	if rest, ok := strings.CutPrefix(id, prefixErrors); ok {
		id = prefixOutput + rest
	}
	return filepath.Join(d.expiryDir(), id+".json")
}

// resultExpiry reads result file id's expiry record (nil when it has none).
func (d *Daemon) resultExpiry(id string) (*outputExpiry, error) {
	var e outputExpiry
	err := readRecord(d.expiryPath(id), &e)
	if errors.Is(err, errNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// recordOutputExpiry notes, durably, that b's results as name publishes
// them expire at at: the earliest expiry asked for them wins.
func (d *Daemon) recordOutputExpiry(b *ledger.Batch, name expiredName, at time.Time) error {
	d.expiryMu.Lock()
	defer d.expiryMu.Unlock()
	id := resultFileID(prefixOutput, b)
	e, err := d.resultExpiry(id)
	if err != nil {
		return fmt.Errorf("output expiry of %s: %w", name.Name, err)
	}
	if e == nil || e.Record != b.ID || e.Nonce != b.Nonce || e.Gen != b.Gen {
		e = &outputExpiry{ExpiresAt: at.Unix(), Record: b.ID, Nonce: b.Nonce, Gen: b.Gen}
	}
	e.ExpiresAt = min(e.ExpiresAt, at.Unix())
	if !slices.Contains(e.Names, name) {
		e.Names = append(e.Names, name)
	}
	if err := fsx.MkdirAll(d.expiryDir(), 0o755); err != nil {
		return fmt.Errorf("output expiry of %s: %w", name.Name, err)
	}
	data, _ := json.Marshal(e)
	if err := fsx.WriteFile(d.expiryPath(id), data, true); err != nil {
		return fmt.Errorf("output expiry of %s: %w", name.Name, err)
	}
	return nil
}

// expiringStore is a job's store whose publication notes when its results
// expire (after > 0).
type expiringStore struct {
	pipeline.Store
	d     *Daemon
	name  expiredName
	after time.Duration
}

// Publish implements pipeline.Store: the expiry record first, then the
// results.
func (s *expiringStore) Publish(ctx context.Context, r pipeline.Results) error {
	if r.Batch != nil && r.Output != "" {
		if err := s.d.recordOutputExpiry(r.Batch, s.name, time.Now().Add(s.after)); err != nil {
			return err
		}
	}
	return s.Store.Publish(ctx, r)
}

// withOutputExpiry wraps the store of input dl when its results expire:
// an API batch's as it was created, any other's as its options'
// output_expires_after says, else as the config's expiry.outputs.
func (d *Daemon) withOutputExpiry(ctx context.Context, dl delivery, st pipeline.Store) pipeline.Store {
	name, after := dl.ev.Name, d.cfg.Expiry.Outputs
	if dl.src.kind() == "api" {
		after = 0
		if m, err := d.apiBatchMeta(name); err == nil {
			after = time.Duration(m.OutputExpiresAfter) * time.Second
		}
	} else if o, err := dl.src.options(ctx, dl.ev); err == nil && o.OutputExpiresAfter != nil {
		// Invalid options fail the run, which then publishes nothing to expire.
		if own, err := o.OutputExpiresAfter.Duration(); err == nil {
			after = own
		}
	}
	if after <= 0 {
		return st
	}
	return &expiringStore{Store: st, d: d, name: expiredName{Name: name, Bucket: dl.src.kind() == "bucket"}, after: after}
}

// expiryLoop removes expired files at start and every expirySweep.
func (d *Daemon) expiryLoop(ctx context.Context) {
	defer d.wg.Done()
	t := time.NewTicker(expirySweep)
	defer t.Stop()
	for {
		d.ExpireFiles(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ExpireFiles removes the uploads and batch results that expired at now
// and returns how many it removed (the sweep calls it every minute; an
// expired file answers 404 before).
func (d *Daemon) ExpireFiles(ctx context.Context, now time.Time) int {
	d.expiryMu.Lock()
	defer d.expiryMu.Unlock()
	n, err := d.expireUploads(now)
	if err != nil {
		d.log.Warn("expire uploaded files", "error", err)
	}
	m, err := d.expireOutputs(ctx, now)
	if err != nil {
		d.log.Warn("expire batch results", "error", err)
	}
	return n + m
}

// expireUploads removes the uploads that expired at now: the content,
// then the object (which keeps its expiry until then), then the directory
// fsynced.
func (d *Daemon) expireUploads(now time.Time) (int, error) {
	ents, err := readDirIfAny(d.filesDir())
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !validID(id, prefixFile) {
			continue
		}
		var o fileObject
		if err := readRecord(d.uploadPath(id)+".json", &o); err != nil || !o.expired(now) {
			continue
		}
		for _, p := range []string{d.uploadPath(id), d.uploadPath(id) + ".json"} {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return n, fmt.Errorf("remove expired file %s: %w", id, err)
			}
		}
		if err := fsx.SyncDir(d.filesDir()); err != nil {
			return n, err
		}
		d.log.Info("uploaded file expired and removed", "file", id, "expires_at", *o.ExpiresAt)
		n++
	}
	return n, nil
}

// expireOutputs removes the batch results that expired at now (see the
// package comment above).
func (d *Daemon) expireOutputs(ctx context.Context, now time.Time) (int, error) {
	ents, err := readDirIfAny(d.expiryDir())
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ent := range ents {
		id, ok := strings.CutSuffix(ent.Name(), ".json")
		if !ok || !strings.HasPrefix(id, prefixOutput) {
			continue
		}
		e, err := d.resultExpiry(id)
		if err != nil {
			return n, err
		}
		if e == nil || e.ExpiresAt > now.Unix() {
			continue
		}
		done, err := d.pipe.DropResults(e.Record, e.Nonce, e.Gen)
		if err != nil {
			return n, err
		}
		if !done {
			continue // running again now: the next sweep
		}
		for _, name := range e.Names {
			if err := d.removePublished(ctx, name, e); err != nil {
				return n, err
			}
		}
		if err := os.Remove(d.expiryPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return n, fmt.Errorf("remove expiry record %s: %w", id, err)
		}
		if err := fsx.SyncDir(d.expiryDir()); err != nil {
			return n, err
		}
		d.log.Info("batch results expired and removed", "output_file_id", id, "names", len(e.Names), "expires_at", e.ExpiresAt)
		n++
	}
	return n, nil
}

// expiredSuffixes are the published files that expire with a batch's
// results; NAME.batch.json, the batch object, stays.
var expiredSuffixes = []string{filecontract.SuffixOutput, filecontract.SuffixErrors, filecontract.SuffixResults}

// removePublished removes name's published results, unless another record
// than e's has taken the name since (they are its own).
func (d *Daemon) removePublished(ctx context.Context, name expiredName, e *outputExpiry) error {
	cur, err := d.pipe.Ledger().ByName(name.Name)
	if err == nil && (cur.ID != e.Record || cur.Nonce != e.Nonce) {
		return nil
	}
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return fmt.Errorf("expire results of %s: %w", name.Name, err)
	}
	if name.Bucket {
		if d.bucket == nil {
			return nil // the daemon runs on a folder now: not its bucket
		}
		b := d.bucket.b
		for _, suffix := range expiredSuffixes {
			if err := b.Remove(ctx, b.OutboxKey(name.Name+suffix)); err != nil {
				return fmt.Errorf("expire results of %s: %w", name.Name, err)
			}
		}
		return nil
	}
	for _, suffix := range expiredSuffixes {
		p := filepath.Join(d.dirs.Outbox, name.Name+suffix)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("expire results of %s: %w", name.Name, err)
		}
	}
	return fsx.SyncDir(d.dirs.Outbox)
}

// readDirIfAny reads dir, which may not exist yet (no entries then).
func readDirIfAny(dir string) ([]os.DirEntry, error) {
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	return ents, nil
}

// expired reports whether file object o has expired at now.
func (o *fileObject) expired(now time.Time) bool {
	return o.ExpiresAt != nil && *o.ExpiresAt <= now.Unix()
}
