package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/pipeline/ledger"
	"github.com/batchd/batchd/store/bucket"
	"github.com/batchd/batchd/store/folder"
	"github.com/batchd/batchd/wire"
)

// Batches created over HTTP are inputs in DATA/api/: ID.jsonl (a link to
// the uploaded file), ID.options.json (the request's batch options),
// ID.api.json (what the API was asked), ID.cancel (a cancel request). They
// run through the same queue, pipeline and ledger as dropped files (the
// batch name is the API id), and are queued again when the daemon starts.
//
// The ledger keys its records by content, so two API batches over the same
// file share one record (the second reuses or re-runs the first's results).
// Each API batch's own status and counts are ID.final.json: the record as
// that batch published it, written when it ends, before its input retires.

func (d *Daemon) apiDir() string { return filepath.Join(d.dirs.Root, "api") }

func (d *Daemon) apiFinalPath(id string) string { return filepath.Join(d.apiDir(), id+".final.json") }

// apiStore is the store of an API batch: the folder's, which also keeps
// the batch's own final record (ID.final.json).
type apiStore struct {
	*folder.Store
	id, final string
}

var _ pipeline.Store = (*apiStore)(nil)

// Publish implements pipeline.Store: the folder's publish, then the
// record as this batch ended, under its API id.
func (s *apiStore) Publish(ctx context.Context, r pipeline.Results) error {
	if err := s.Store.Publish(ctx, r); err != nil {
		return err
	}
	if r.Batch == nil {
		return errors.New("publish: no batch record to keep")
	}
	b := *r.Batch
	b.Name = s.id
	data, err := json.Marshal(&b)
	if err != nil {
		return fmt.Errorf("encode final record of %s: %w", s.id, err)
	}
	return fsx.WriteFile(s.final, data, true)
}

// apiFinal reads API batch id's own final record (errNotFound while it has
// not ended).
func (d *Daemon) apiFinal(id string) (*ledger.Batch, error) {
	var b ledger.Batch
	if err := readRecord(d.apiFinalPath(id), &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// apiBatch is DATA/api/ID.api.json.
type apiBatch struct {
	ID               string            `json:"id"`
	InputFileID      string            `json:"input_file_id"`
	Endpoint         string            `json:"endpoint"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata,omitempty"`
	CreatedAt        int64             `json:"created_at"`
	// OutputExpiresAfter is how many seconds after the batch writes its
	// output and error files they expire (0: never): output_expires_after,
	// else the config's expiry.outputs when the batch was created.
	OutputExpiresAfter int64 `json:"output_expires_after,omitempty"`
}

func (d *Daemon) apiBatchMeta(id string) (*apiBatch, error) {
	if !validID(id, "batch_") {
		return nil, errNotFound
	}
	var m apiBatch
	if err := readRecord(filepath.Join(d.apiDir(), id+".api.json"), &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// createRequest is the body of POST /v1/batches: OpenAI's fields, and
// batchd's batch-level options (on_invalid, max_tokens, temperature, ...).
type createRequest struct {
	InputFileID        string          `json:"input_file_id"`
	Endpoint           string          `json:"endpoint"`
	OutputExpiresAfter json.RawMessage `json:"output_expires_after"`
}

func (d *Daemon) handleCreateBatch(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		writeBodyError(w, err, "request_too_large", "")
		return
	}
	var req createRequest
	var body struct {
		pipeline.Options
		// output_expires_after is the request's own (req), checked with
		// the API's errors; this shadows the options' field of that name.
		OutputExpiresAfter json.RawMessage `json:"output_expires_after"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		writeAPIError(w, http.StatusBadRequest, "invalid_json", "", "the body is not a JSON object: %v", err)
		return
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		writeAPIError(w, http.StatusBadRequest, "invalid_value", "", "batch options: %v", err)
		return
	}
	opts := body.Options
	switch {
	case req.InputFileID == "":
		writeAPIError(w, http.StatusBadRequest, "missing_required_parameter", "input_file_id", "input_file_id is required")
		return
	case req.Endpoint == "":
		writeAPIError(w, http.StatusBadRequest, "missing_required_parameter", "endpoint", "endpoint is required")
		return
	case req.Endpoint != engine.EndpointChat && req.Endpoint != engine.EndpointCompletions && req.Endpoint != engine.EndpointEmbeddings &&
		req.Endpoint != engine.EndpointResponses && req.Endpoint != wire.EndpointMessages:
		writeAPIError(w, http.StatusBadRequest, "invalid_value", "endpoint", "endpoint must be /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses or /v1/messages, got %q", req.Endpoint)
		return
	case len(opts.Metadata) > 16:
		writeAPIError(w, http.StatusBadRequest, "invalid_value", "metadata", "metadata has at most 16 pairs")
		return
	}
	for k, v := range opts.Metadata {
		if len(k) > 64 || len(v) > 512 {
			writeAPIError(w, http.StatusBadRequest, "invalid_value", "metadata", "metadata keys are at most 64 characters and values at most 512")
			return
		}
	}
	outputExpiry, perr := parseJSONExpiry(req.OutputExpiresAfter)
	if perr != nil {
		perr.write(w)
		return
	}
	if outputExpiry == 0 {
		outputExpiry = d.cfg.Expiry.Outputs
	}
	if opts.CompletionWindow == "" {
		opts.CompletionWindow = "24h"
	}
	if err := d.cfg.Batch.Merge(opts).Validate(); err != nil {
		writeAPIError(w, http.StatusBadRequest, "invalid_value", "", "%v", err)
		return
	}
	file, err := d.uploaded(req.InputFileID)
	if errors.Is(err, errNotFound) {
		writeAPIError(w, http.StatusNotFound, "file_not_found", "input_file_id", "No such File object: %s", req.InputFileID)
		return
	}
	if err != nil {
		logAPI(d.log, r, err)
		writeAPIError(w, http.StatusInternalServerError, "", "", "reading the input file failed")
		return
	}
	if file.Purpose != "batch" {
		writeAPIError(w, http.StatusBadRequest, "invalid_value", "input_file_id", "file %s has purpose %q; a batch input needs purpose \"batch\"", file.ID, file.Purpose)
		return
	}
	meta := apiBatch{ID: randomID("batch_", 16), InputFileID: file.ID, Endpoint: req.Endpoint,
		CompletionWindow: opts.CompletionWindow, Metadata: opts.Metadata, CreatedAt: time.Now().Unix(),
		OutputExpiresAfter: int64(outputExpiry / time.Second)}
	if err := d.writeAPIBatch(meta, opts); err != nil {
		logAPI(d.log, r, err)
		writeAPIError(w, http.StatusInternalServerError, "", "", "creating the batch failed")
		return
	}
	d.log.Info("batch created over the API", "name", meta.ID, "input_file_id", file.ID)
	d.api.Submit(meta.ID)
	writeJSON(w, http.StatusOK, d.pendingObject(&meta))
}

// writeAPIBatch stores a new API batch's files: the input (a hard link to
// the upload, or a copy), its options, and last its record.
func (d *Daemon) writeAPIBatch(meta apiBatch, opts pipeline.Options) error {
	dir := d.apiDir()
	if err := fsx.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	in := filepath.Join(dir, meta.ID+filecontract.SuffixJSONL)
	if err := os.Link(d.uploadPath(meta.InputFileID), in); err != nil {
		if err := fsx.CopyFile(d.uploadPath(meta.InputFileID), in); err != nil {
			return err
		}
	}
	data, _ := json.Marshal(opts)
	if err := fsx.WriteFile(filepath.Join(dir, meta.ID+filecontract.SuffixOptions), data, true); err != nil {
		return err
	}
	data, _ = json.Marshal(meta)
	return fsx.WriteFile(filepath.Join(dir, meta.ID+".api.json"), data, true)
}

// pendingObject is the object of an API batch the pipeline has not
// started yet.
func (d *Daemon) pendingObject(m *apiBatch) *pipeline.BatchObject {
	b := &ledger.Batch{ID: m.ID, Name: m.ID, Endpoint: m.Endpoint, Status: pipeline.StatusValidating,
		CompletionWindow: m.CompletionWindow, Metadata: m.Metadata, CreatedAt: m.CreatedAt}
	o := pipeline.NewBatchObject(b, pipeline.BatchdInfo{Name: m.ID})
	o.InputFileID = m.InputFileID
	if _, err := os.Stat(filepath.Join(d.apiDir(), m.ID+filecontract.SuffixCancel)); err == nil {
		o.Status = pipeline.StatusCancelling
	}
	return o
}

// batchObject renders a ledger batch for the API: an API batch keeps its
// API id and input file; result files get file ids.
func (d *Daemon) batchObject(b *ledger.Batch) *pipeline.BatchObject {
	info := pipeline.BatchdInfo{Name: b.Name, InputFile: pipeline.InputFileID(b.ID),
		OutputFile: resultFileID(prefixOutput, b), ErrorFile: resultFileID(prefixErrors, b)}
	o := pipeline.NewBatchObject(b, info)
	if m, err := d.apiBatchMeta(b.Name); err == nil {
		o.ID, o.InputFileID, o.CreatedAt, o.Metadata = m.ID, m.InputFileID, m.CreatedAt, m.Metadata
		if o.Endpoint == "" {
			o.Endpoint = m.Endpoint
		}
	}
	if r := d.pipe.Rate(b.Name); r > 0 {
		o.Batchd.Rate = r
	}
	return o
}

// findBatch resolves an API id (the batch name) or a ledger id. An API
// batch that ended is its own final record; one still queued or running is
// the ledger's record under its name (none before it starts).
func (d *Daemon) findBatch(id string) (*ledger.Batch, *apiBatch, error) {
	if m, err := d.apiBatchMeta(id); err == nil {
		b, err := d.apiBatchRecord(id)
		return b, m, err
	} else if !errors.Is(err, errNotFound) {
		return nil, nil, err
	}
	if !validID(id, "batch_") {
		return nil, nil, errNotFound
	}
	l := d.pipe.Ledger()
	b, err := l.Get(id)
	if err == nil {
		if b.Origin != "" {
			b.Name = b.Origin // the name whose batch has the record's id
		}
		return b, nil, nil
	}
	if !errors.Is(err, ledger.ErrNotFound) {
		return nil, nil, err
	}
	// Another name that ran a record's content has an id of its own.
	names, err := l.Names()
	if err != nil {
		return nil, nil, err
	}
	for name, rid := range names {
		if b, err := l.Get(rid); err == nil && pipeline.ObjectID(b, name) == id {
			b.Name = name
			return b, nil, nil
		}
	}
	return nil, nil, errNotFound
}

// apiBatchRecord is the record of API batch id: its final one, else the
// ledger's under its name while it runs, else nil (not started).
func (d *Daemon) apiBatchRecord(id string) (*ledger.Batch, error) {
	b, err := d.apiFinal(id)
	if !errors.Is(err, errNotFound) {
		return b, err
	}
	b, err = d.pipe.Ledger().ByName(id)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("record of batch %s: %w", id, err)
	}
	// A shared record that ended, while this batch's input waits to run:
	// another batch's end (the same content), not yet this one's. (An
	// ended batch with no final record of its own is one from before
	// batchd kept them: its record is the ledger's.)
	if pipeline.Terminal(b.Status) {
		if _, err := os.Lstat(filepath.Join(d.apiDir(), id+filecontract.SuffixJSONL)); err == nil {
			return nil, nil
		}
	}
	return b, nil
}

func (d *Daemon) batchOr404(w http.ResponseWriter, r *http.Request) (*ledger.Batch, *apiBatch, bool) {
	id := r.PathValue("id")
	b, m, err := d.findBatch(id)
	if errors.Is(err, errNotFound) {
		writeAPIError(w, http.StatusNotFound, "batch_not_found", "batch_id", "No such Batch object: %s", id)
		return nil, nil, false
	}
	if err != nil {
		logAPI(d.log, r, err)
		writeAPIError(w, http.StatusInternalServerError, "", "", "reading batch %s failed", id)
		return nil, nil, false
	}
	return b, m, true
}

func (d *Daemon) object(b *ledger.Batch, m *apiBatch) *pipeline.BatchObject {
	if b == nil {
		return d.pendingObject(m)
	}
	return d.batchObject(b)
}

func (d *Daemon) handleGetBatch(w http.ResponseWriter, r *http.Request) {
	if b, m, ok := d.batchOr404(w, r); ok {
		writeJSON(w, http.StatusOK, d.object(b, m))
	}
}

// handleListBatches is GET /v1/batches: every batch, dropped or created
// here, newest first.
func (d *Daemon) handleListBatches(w http.ResponseWriter, r *http.Request) {
	limit, ok := limitParam(w, r, 20, 100)
	if !ok {
		return
	}
	bs, err := d.pipe.Ledger().List()
	if err != nil {
		logAPI(d.log, r, err)
		writeAPIError(w, http.StatusInternalServerError, "", "", "listing batches failed")
		return
	}
	names, err := d.pipe.Ledger().Names()
	if err != nil {
		logAPI(d.log, r, err)
		writeAPIError(w, http.StatusInternalServerError, "", "", "listing batches failed")
		return
	}
	// A dropped batch per name, each showing the record (by content) it
	// ran or reused; API batches are listed from DATA/api/, each with its
	// own record.
	byID := make(map[string]*ledger.Batch, len(bs))
	for _, b := range bs {
		byID[b.ID] = b
	}
	seen := map[string]bool{}
	var objs []*pipeline.BatchObject
	add := func(b *ledger.Batch, name string) {
		if _, err := d.apiBatchMeta(name); err == nil {
			return
		}
		nb := *b
		nb.Name = name
		seen[b.ID] = true
		objs = append(objs, d.batchObject(&nb))
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if b := byID[names[name]]; b != nil {
			add(b, name)
		}
	}
	for _, b := range bs {
		if !seen[b.ID] {
			add(b, b.Name)
		}
	}
	if ents, err := os.ReadDir(d.apiDir()); err == nil {
		for _, e := range ents {
			id, ok := strings.CutSuffix(e.Name(), ".api.json")
			if !ok {
				continue
			}
			m, err := d.apiBatchMeta(id)
			if err != nil {
				continue
			}
			b, err := d.apiBatchRecord(id)
			if err != nil {
				continue
			}
			objs = append(objs, d.object(b, m))
		}
	}
	slices.SortStableFunc(objs, func(a, b *pipeline.BatchObject) int {
		if a.CreatedAt != b.CreatedAt {
			return int(b.CreatedAt - a.CreatedAt)
		}
		return strings.Compare(b.ID, a.ID)
	})
	after := r.URL.Query().Get("after")
	page, ok := paginate(objs, func(o *pipeline.BatchObject) string { return o.ID }, after, limit)
	if !ok {
		writeAPIError(w, http.StatusBadRequest, "invalid_value", "after", "no batch %q to list after", after)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// handleCancelBatch is POST /v1/batches/{id}/cancel.
func (d *Daemon) handleCancelBatch(w http.ResponseWriter, r *http.Request) {
	b, m, ok := d.batchOr404(w, r)
	if !ok {
		return
	}
	o := d.object(b, m)
	if pipeline.Terminal(o.Status) {
		writeAPIError(w, http.StatusConflict, "invalid_state", "", "Cannot cancel a batch with status %s.", o.Status)
		return
	}
	// The source that owns the batch records the request (it survives a
	// restart) and delivers it as its cancel event.
	name := o.Batchd.Name
	var src Source = d.api
	if m == nil {
		src = d.sources[0] // the inbox: a folder or a bucket
	}
	if err := src.RequestCancel(r.Context(), name); err != nil {
		logAPI(d.log, r, err)
		writeAPIError(w, http.StatusInternalServerError, "", "", "cancelling failed")
		return
	}
	d.log.Info("cancel requested over the API", "name", name)
	if o.Status != pipeline.StatusCancelling {
		o.Status = pipeline.StatusCancelling
		now := time.Now().Unix()
		o.CancellingAt = &now
	}
	writeJSON(w, http.StatusOK, o)
}

// handleBatchResults is GET /v1/batches/{id}/results?status=completed|failed&after=&limit=:
// result lines as they are committed, also while the batch runs.
func (d *Daemon) handleBatchResults(w http.ResponseWriter, r *http.Request) {
	b, _, ok := d.batchOr404(w, r)
	if !ok {
		return
	}
	limit, ok := limitParam(w, r, 100, 1000)
	if !ok {
		return
	}
	q := r.URL.Query()
	status := q.Get("status")
	if status == "" {
		status = "completed"
	}
	if status != "completed" && status != "failed" {
		writeAPIError(w, http.StatusBadRequest, "invalid_value", "status", "status must be completed or failed, got %q", status)
		return
	}
	empty := listPage[json.RawMessage]{Object: "list", Data: []json.RawMessage{}}
	if b == nil {
		writeJSON(w, http.StatusOK, empty)
		return
	}
	// The pipeline's own files, up to what b committed: an ended batch's
	// results are those its run left (gone once a later run of the same
	// content replaced them), never what the outbox holds now.
	if cur, err := d.pipe.Ledger().Get(b.ID); err != nil || cur.Gen != b.Gen {
		writeJSON(w, http.StatusOK, empty)
		return
	}
	out, errs := d.pipe.ResultFiles(b)
	path, n := out, b.OutLen
	if status == "failed" {
		path, n = errs, b.ErrLen
	}
	page, found, err := readResults(path, n, q.Get("after"), limit)
	if errors.Is(err, os.ErrNotExist) {
		writeJSON(w, http.StatusOK, empty)
		return
	}
	if err != nil {
		logAPI(d.log, r, err)
		writeAPIError(w, http.StatusInternalServerError, "", "", "reading results failed")
		return
	}
	if !found {
		writeAPIError(w, http.StatusBadRequest, "invalid_value", "after", "no result %q to list after", q.Get("after"))
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// readResults pages through the first n bytes (all when n < 0) of a
// result file: up to limit lines after the line whose id is after.
func readResults(path string, n int64, after string, limit int) (listPage[json.RawMessage], bool, error) {
	page := listPage[json.RawMessage]{Object: "list", Data: []json.RawMessage{}}
	f, err := os.Open(path)
	if err != nil {
		return page, false, err
	}
	defer f.Close()
	var src io.Reader = f
	if n >= 0 {
		src = io.LimitReader(f, n)
	}
	br := bufio.NewReaderSize(src, 1<<16)
	skipping := after != ""
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 1 && line[len(line)-1] == '\n' {
			var l struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(line, &l) == nil {
				switch {
				case skipping:
					skipping = l.ID != after
				case len(page.Data) == limit:
					page.HasMore = true
					return page, true, nil
				default:
					page.Data = append(page.Data, json.RawMessage(slices.Clone(line[:len(line)-1])))
					id := l.ID
					if page.FirstID == nil {
						page.FirstID = &id
					}
					page.LastID = &id
				}
			}
		}
		if err == io.EOF {
			return page, !skipping, nil
		}
		if err != nil {
			return page, false, err
		}
	}
}

// handleRetryBatch is POST /v1/batches/{id}/retry: a finished batch runs
// its failed and cancelled requests again; completed ones are kept, never
// redone. The input moves back from done/ to where it came from, with a
// NAME.retry marker, so a restart in between still retries.
func (d *Daemon) handleRetryBatch(w http.ResponseWriter, r *http.Request) {
	b, m, ok := d.batchOr404(w, r)
	if !ok {
		return
	}
	o := d.object(b, m)
	if b == nil || !pipeline.Terminal(o.Status) {
		writeAPIError(w, http.StatusConflict, "invalid_state", "", "Only a finished batch can be retried; this one is %s.", o.Status)
		return
	}
	if o.RequestCounts.Failed == 0 {
		writeAPIError(w, http.StatusConflict, "invalid_state", "", "The batch has no failed requests to retry.")
		return
	}
	// The ledger says a batch ended a moment before its input reaches
	// done/: wait for its run to be over.
	if !d.waitIdle(r.Context(), b.Name, 30*time.Second) {
		writeAPIError(w, http.StatusConflict, "invalid_state", "", "The batch is still finishing; retry in a moment.")
		return
	}
	base := b.Name + "." + b.Format
	if m == nil && d.bucket != nil {
		d.retryBucketBatch(w, r, b, o, base)
		return
	}
	dir := d.dirs.Inbox
	if m != nil {
		dir = d.apiDir()
	}
	if _, err := os.Lstat(filepath.Join(d.dirs.Done, base)); err != nil {
		writeAPIError(w, http.StatusConflict, "invalid_state", "", "The batch's input is no longer in done/; it cannot be retried.")
		return
	}
	// An API batch runs again: its own final record goes first, durably,
	// so that no power cut leaves it saying the batch ended while its
	// input is back to run (its record is the ledger's until it ends
	// anew). Should the move back fail, the record returns.
	var final []byte
	if m != nil {
		var err error
		if final, err = d.dropAPIFinal(m.ID); err != nil {
			logAPI(d.log, r, err)
			writeAPIError(w, http.StatusInternalServerError, "", "", "retrying failed")
			return
		}
	}
	if err := folder.Unretire(b.Name, base, dir, d.dirs.Done); err != nil {
		if final != nil {
			if werr := fsx.WriteFile(d.apiFinalPath(m.ID), final, true); werr != nil {
				d.log.Error("restore final record", "name", m.ID, "error", werr)
			}
		}
		if errors.Is(err, folder.ErrNotRetired) {
			writeAPIError(w, http.StatusConflict, "invalid_state", "", "The batch's input is no longer in done/; it cannot be retried.")
			return
		}
		logAPI(d.log, r, err)
		writeAPIError(w, http.StatusInternalServerError, "", "", "retrying failed")
		return
	}
	d.log.Info("retry requested over the API", "name", b.Name, "failed", o.RequestCounts.Failed)
	if m != nil {
		d.api.Submit(b.Name)
	}
	o.Status = pipeline.StatusInProgress
	writeJSON(w, http.StatusOK, o)
}

// retryBucketBatch is handleRetryBatch for a batch of the bucket: its input
// returns from done/ to the inbox with a retry mark (bucket.Unretire), and
// whichever daemon claims it runs the failed requests again.
func (d *Daemon) retryBucketBatch(w http.ResponseWriter, r *http.Request, b *ledger.Batch, o *pipeline.BatchObject, base string) {
	switch err := bucket.Unretire(r.Context(), d.bucket.b, b.Name, base); {
	case errors.Is(err, bucket.ErrNotRetired):
		writeAPIError(w, http.StatusConflict, "invalid_state", "", "The batch's input is no longer in done/; it cannot be retried.")
		return
	case errors.Is(err, bucket.ErrInputWaiting):
		writeAPIError(w, http.StatusConflict, "invalid_state", "", "A newer input of this name waits in the inbox; it runs instead.")
		return
	case err != nil:
		logAPI(d.log, r, err)
		writeAPIError(w, http.StatusInternalServerError, "", "", "retrying failed")
		return
	}
	d.log.Info("retry requested over the API", "name", b.Name, "failed", o.RequestCounts.Failed)
	o.Status = pipeline.StatusInProgress
	writeJSON(w, http.StatusOK, o)
}

// dropAPIFinal removes API batch id's final record durably and returns
// what it held (nil when there was none).
func (d *Daemon) dropAPIFinal(id string) ([]byte, error) {
	path := d.apiFinalPath(id)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read final record of %s: %w", id, err)
	}
	if err := os.Remove(path); err != nil {
		return nil, fmt.Errorf("remove final record of %s: %w", id, err)
	}
	return raw, fsx.SyncDir(filepath.Dir(path))
}

// waitIdle waits until no run of name is queued or running (false on
// timeout or when ctx ends).
func (d *Daemon) waitIdle(ctx context.Context, name string, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if !d.runs.busy(name) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return false
		case <-tick.C:
		}
	}
}

// expireAPI removes the records of the API batches among names (those
// whose ledger records retention forgot) and of those that ended before
// cutoff with a record another name ran last; it returns names with the
// latter added.
func (d *Daemon) expireAPI(cutoff time.Time, names []string) []string {
	for _, name := range names {
		if validID(name, "batch_") {
			d.forgetAPI(name)
		}
	}
	// API batches that reused a record another name ran last.
	ents, _ := os.ReadDir(d.apiDir())
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".final.json")
		if !ok || !validID(id, "batch_") {
			continue
		}
		b, ferr := d.apiFinal(id)
		if ferr != nil || !pipeline.Terminal(b.Status) {
			continue
		}
		if end := max(b.CompletedAt, b.FailedAt, b.ExpiredAt, b.CancelledAt); end == 0 || end >= cutoff.Unix() {
			continue
		}
		if _, serr := os.Lstat(filepath.Join(d.apiDir(), id+filecontract.SuffixJSONL)); serr == nil {
			continue // retried: it runs again
		}
		d.forgetAPI(id)
		names = append(names, id)
	}
	return names
}

// forgetAPI removes API batch id's records.
func (d *Daemon) forgetAPI(id string) {
	for _, ext := range []string{".api.json", ".final.json", filecontract.SuffixOptions, filecontract.SuffixRetry, filecontract.SuffixCancel} {
		os.Remove(filepath.Join(d.apiDir(), id+ext))
	}
}
