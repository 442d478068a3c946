package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/pipeline/ledger"
)

// fileObject is OpenAI's file object.
type fileObject struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Bytes     int64  `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	Filename  string `json:"filename"`
	Purpose   string `json:"purpose"`
	Status    string `json:"status"`
	// ExpiresAt is when the file expires (null: never).
	ExpiresAt *int64 `json:"expires_at"`
}

// Uploaded files are DATA/files/ID (content) and ID.json (the object).
// Batch results are files too, without copies: file-o<hex>-<nonce> and
// file-e<hex>-<nonce> are the output and error files of ledger batch
// batch_<hex> as its first run left them, file-o<hex>-<nonce>-<gen> and
// file-e<hex>-<nonce>-<gen> as a later run of the same record (a retry, a
// re-drop that re-ran cancelled requests) left them; file-i<hex> is its
// input (named by its content alone). The nonce is the record's
// (ledger.Batch.Nonce): once retention forgets a record, a new run of the
// same content is a new record with another nonce, so its results never
// take an older id. A result file id names one immutable content: it is
// served from the pipeline's own copy (never the outbox, which the next
// batch of the same name replaces) up to the length the ledger committed,
// and is gone (404) once a later run or retention replaces that copy.
// Records from before batchd kept nonces keep their ids without one.
const (
	prefixFile   = "file-"
	prefixOutput = "file-o"
	prefixErrors = "file-e"
	prefixInput  = pipeline.InputFilePrefix
)

// resultFileID is the id of batch b's output or error file (prefix) as its
// current run leaves it.
func resultFileID(prefix string, b *ledger.Batch) string {
	id := prefix + strings.TrimPrefix(b.ID, "batch_")
	if b.Nonce != "" {
		id += "-" + b.Nonce
	}
	if b.Gen > 1 {
		id += "-" + strconv.Itoa(b.Gen)
	}
	return id
}

// parseResultFileID splits a result or input file id into its prefix and
// ledger batch id; whether the rest names the record's current run is for
// the record to say (resultFileID).
func parseResultFileID(id string) (prefix, batch string, ok bool) {
	for _, p := range []string{prefixOutput, prefixErrors, prefixInput} {
		rest, found := strings.CutPrefix(id, p)
		if !found || !validID(id, p) {
			continue
		}
		hexID, _, _ := strings.Cut(rest, "-")
		if hexID == "" || strings.Contains(hexID, "_") || p == prefixInput && hexID != rest {
			return "", "", false
		}
		return p, "batch_" + hexID, true
	}
	return "", "", false
}

func (d *Daemon) filesDir() string { return filepath.Join(d.dirs.Root, "files") }

func (d *Daemon) uploadPath(id string) string { return filepath.Join(d.filesDir(), id) }

// handleUpload is POST /v1/files: multipart with purpose=batch and file,
// streamed to disk, at most cfg.API.MaxUploadBytes.
func (d *Daemon) handleUpload(w http.ResponseWriter, r *http.Request) {
	release, ok := d.bodies.uploadSlot(w)
	if !ok {
		return
	}
	defer release()
	limit := d.cfg.API.MaxUploadBytes
	r.Body = http.MaxBytesReader(w, r.Body, limit+1<<20)
	mr, err := r.MultipartReader()
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, "invalid_request", "", "expected a multipart/form-data body with purpose and file: %v", err)
		return
	}
	if err := fsx.MkdirAll(d.filesDir(), 0o755); err != nil {
		logAPI(d.log, r, err)
		writeAPIError(w, http.StatusInternalServerError, "", "", "cannot store files")
		return
	}
	var purpose string
	var anchor, seconds *string
	var obj *fileObject
	var tmp string
	defer func() {
		if tmp != "" {
			os.Remove(tmp)
		}
	}()
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			writeUploadError(w, err)
			return
		}
		switch part.FormName() {
		case "purpose":
			v, _ := io.ReadAll(io.LimitReader(part, 256))
			purpose = strings.TrimSpace(string(v))
		case "expires_after[anchor]", "expires_after[seconds]":
			v, _ := io.ReadAll(io.LimitReader(part, 256))
			val := strings.TrimSpace(string(v))
			if part.FormName() == "expires_after[anchor]" {
				anchor = &val
			} else {
				seconds = &val
			}
		case "file":
			if obj != nil {
				writeAPIError(w, http.StatusBadRequest, "invalid_request", "file", "only one file per upload")
				return
			}
			id := randomID(prefixFile, 12)
			f, err := os.CreateTemp(d.filesDir(), "."+id+"-*.tmp")
			if err != nil {
				logAPI(d.log, r, err)
				writeAPIError(w, http.StatusInternalServerError, "", "", "cannot store the file")
				return
			}
			tmp = f.Name()
			n, err := io.Copy(f, io.LimitReader(part, limit+1))
			if err == nil {
				err = f.Sync()
			}
			f.Close()
			if err != nil {
				writeUploadError(w, err)
				return
			}
			if n > limit {
				writeAPIError(w, http.StatusRequestEntityTooLarge, "file_too_large", "file",
					"the file is larger than the upload limit of %d bytes (config api.max_upload_bytes)", limit)
				return
			}
			name := filepath.Base(part.FileName())
			if name == "." || name == "/" || name == "" {
				name = "upload.jsonl"
			}
			obj = &fileObject{ID: id, Object: "file", Bytes: n, CreatedAt: time.Now().Unix(), Filename: name, Status: "processed"}
		}
	}
	if purpose != "batch" {
		writeAPIError(w, http.StatusBadRequest, "invalid_value", "purpose", "purpose must be \"batch\", got %q", purpose)
		return
	}
	if obj == nil {
		writeAPIError(w, http.StatusBadRequest, "missing_required_parameter", "file", "no file in the upload")
		return
	}
	obj.Purpose = purpose
	after := d.cfg.Expiry.Files
	ea, perr := parseFormExpiry(anchor, seconds)
	if perr == nil && ea != nil {
		after, perr = ea.check("expires_after", true)
	}
	if perr != nil {
		perr.write(w)
		return
	}
	if after > 0 {
		at := obj.CreatedAt + int64(after/time.Second)
		obj.ExpiresAt = &at
	}
	meta, _ := json.Marshal(obj)
	if err := fsx.WriteFile(d.uploadPath(obj.ID)+".json", meta, true); err != nil {
		logAPI(d.log, r, err)
		writeAPIError(w, http.StatusInternalServerError, "", "", "cannot store the file")
		return
	}
	err = os.Rename(tmp, d.uploadPath(obj.ID))
	if err == nil {
		// The file's id is answered only once the file is durable.
		err = fsx.SyncDir(d.filesDir())
	}
	if err != nil {
		os.Remove(d.uploadPath(obj.ID) + ".json")
		logAPI(d.log, r, err)
		writeAPIError(w, http.StatusInternalServerError, "", "", "cannot store the file")
		return
	}
	tmp = ""
	d.log.Info("file uploaded", "file", obj.ID, "bytes", obj.Bytes, "filename", obj.Filename)
	writeJSON(w, http.StatusOK, obj)
}

func writeUploadError(w http.ResponseWriter, err error) {
	writeBodyError(w, err, "file_too_large", "file")
}

// uploaded reads an uploaded file's object.
func (d *Daemon) uploaded(id string) (*fileObject, error) {
	if !validID(id, prefixFile) {
		return nil, errNotFound
	}
	var o fileObject
	if err := readRecord(d.uploadPath(id)+".json", &o); err != nil {
		return nil, err
	}
	if o.expired(time.Now()) {
		return nil, errNotFound // the sweep removes it
	}
	return &o, nil
}

// resultFile resolves a batch result or input file id to its path and
// object. The object's Bytes is how much of the file is the id's content.
func (d *Daemon) resultFile(id string) (string, *fileObject, error) {
	kind, batchID, ok := parseResultFileID(id)
	if !ok {
		return "", nil, errNotFound
	}
	b, err := d.pipe.Ledger().Get(batchID)
	if errors.Is(err, ledger.ErrNotFound) {
		return "", nil, errNotFound
	}
	if err != nil {
		return "", nil, err
	}
	var path string
	size := int64(-1)
	purpose := "batch_output"
	filename := strings.TrimPrefix(id, prefixFile)
	switch kind {
	case prefixOutput, prefixErrors:
		// Only the record and generation the ledger holds, once its run
		// has ended (or is publishing: its results are complete): an older
		// one was replaced or forgotten, a running one is still growing.
		ended := pipeline.Terminal(b.Status) || b.Status == pipeline.StatusFinalizing
		if resultFileID(kind, b) != id || !ended || len(b.Errors) > 0 {
			return "", nil, errNotFound
		}
		out, errs := d.pipe.ResultFiles(b)
		path, size, filename = out, b.OutLen, b.ID+"_output.jsonl"
		if kind == prefixErrors {
			path, size, filename = errs, b.ErrLen, b.ID+"_errors.jsonl"
		}
	case prefixInput:
		// The input keeps its batch's name; a later batch of that name
		// (other content) makes it another file.
		cur, err := d.pipe.Ledger().ByName(b.Name)
		if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return "", nil, fmt.Errorf("input file %s: %w", id, err)
		}
		if err != nil || cur.ID != b.ID {
			return "", nil, errNotFound
		}
		purpose = "batch"
		path = filepath.Join(d.dirs.Done, b.Name+"."+b.Format)
		if _, err := os.Lstat(path); err != nil {
			path = filepath.Join(d.apiDir(), b.Name+"."+b.Format)
		}
		filename = filepath.Base(path)
	}
	// Lstat: a link or FIFO put in done/ is not served (its target may lie
	// outside the data directory).
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) || err == nil && (!st.Mode().IsRegular() || st.Size() < size) {
		return "", nil, errNotFound
	}
	if err != nil {
		return "", nil, err
	}
	if size < 0 {
		size = st.Size()
	}
	o := &fileObject{ID: id, Object: "file", Bytes: size, CreatedAt: b.CreatedAt,
		Filename: filename, Purpose: purpose, Status: "processed"}
	if kind != prefixInput {
		e, err := d.resultExpiry(id)
		if err != nil {
			return "", nil, err
		}
		if e != nil && e.Record == b.ID && e.Nonce == b.Nonce && e.Gen == b.Gen {
			o.ExpiresAt = &e.ExpiresAt
			if o.expired(time.Now()) {
				return "", nil, errNotFound // the sweep removes it
			}
		}
	}
	return path, o, nil
}

// file resolves any file id.
func (d *Daemon) file(id string) (string, *fileObject, error) {
	if o, err := d.uploaded(id); err == nil {
		return d.uploadPath(id), o, nil
	} else if !errors.Is(err, errNotFound) {
		return "", nil, err
	}
	return d.resultFile(id)
}

func (d *Daemon) fileOr404(w http.ResponseWriter, r *http.Request) (string, *fileObject, bool) {
	id := r.PathValue("id")
	path, o, err := d.file(id)
	if errors.Is(err, errNotFound) {
		writeAPIError(w, http.StatusNotFound, "file_not_found", "file_id", "No such File object: %s", id)
		return "", nil, false
	}
	if err != nil {
		logAPI(d.log, r, err)
		writeAPIError(w, http.StatusInternalServerError, "", "", "reading file %s failed", id)
		return "", nil, false
	}
	return path, o, true
}

func (d *Daemon) handleGetFile(w http.ResponseWriter, r *http.Request) {
	if _, o, ok := d.fileOr404(w, r); ok {
		writeJSON(w, http.StatusOK, o)
	}
}

func (d *Daemon) handleFileContent(w http.ResponseWriter, r *http.Request) {
	path, o, ok := d.fileOr404(w, r)
	if !ok {
		return
	}
	// O_NOFOLLOW, O_NONBLOCK: whatever took the file's place since it was
	// resolved, no link is followed and no FIFO blocks the handler.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err == nil {
		if st, serr := f.Stat(); serr != nil || !st.Mode().IsRegular() {
			f.Close()
			f, err = nil, fmt.Errorf("open %s: not a regular file", path)
		}
	}
	if err != nil {
		logAPI(d.log, r, err)
		writeAPIError(w, http.StatusInternalServerError, "", "", "reading file %s failed", o.ID)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	// Only the id's content: a result file's committed length.
	http.ServeContent(w, r, o.Filename, time.Unix(o.CreatedAt, 0), io.NewSectionReader(f, 0, o.Bytes))
}

func (d *Daemon) handleDeleteFile(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := d.uploaded(id); err != nil {
		if errors.Is(err, errNotFound) {
			if _, _, rerr := d.resultFile(id); rerr == nil {
				writeAPIError(w, http.StatusBadRequest, "invalid_request", "file_id", "%s is a batch's result file; it goes with its batch", id)
				return
			}
			writeAPIError(w, http.StatusNotFound, "file_not_found", "file_id", "No such File object: %s", id)
			return
		}
		logAPI(d.log, r, err)
		writeAPIError(w, http.StatusInternalServerError, "", "", "deleting file %s failed", id)
		return
	}
	for _, p := range []string{d.uploadPath(id) + ".json", d.uploadPath(id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			logAPI(d.log, r, err)
			writeAPIError(w, http.StatusInternalServerError, "", "", "deleting file %s failed", id)
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "file", "deleted": true})
}

// handleListFiles is GET /v1/files: uploaded files, newest first
// (?purpose=, ?limit=, ?after=, ?order=asc|desc).
func (d *Daemon) handleListFiles(w http.ResponseWriter, r *http.Request) {
	limit, ok := limitParam(w, r, 10000, 10000)
	if !ok {
		return
	}
	q := r.URL.Query()
	ents, err := os.ReadDir(d.filesDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		logAPI(d.log, r, err)
		writeAPIError(w, http.StatusInternalServerError, "", "", "listing files failed")
		return
	}
	var files []*fileObject
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !validID(id, prefixFile) {
			continue
		}
		o, err := d.uploaded(id)
		if err != nil {
			continue
		}
		if p := q.Get("purpose"); p != "" && o.Purpose != p {
			continue
		}
		files = append(files, o)
	}
	asc := q.Get("order") == "asc"
	slices.SortFunc(files, func(a, b *fileObject) int {
		c := int(b.CreatedAt - a.CreatedAt)
		if c == 0 {
			c = strings.Compare(b.ID, a.ID)
		}
		if asc {
			return -c
		}
		return c
	})
	page, ok := paginate(files, func(o *fileObject) string { return o.ID }, q.Get("after"), limit)
	if !ok {
		writeAPIError(w, http.StatusBadRequest, "invalid_value", "after", "no file %q to list after", q.Get("after"))
		return
	}
	writeJSON(w, http.StatusOK, page)
}
