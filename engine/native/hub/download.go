package hub

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// partialSuffix names the file a download is written to before it is
// verified and renamed into place.
const partialSuffix = ".partial"

// progressStep is how many bytes pass between Progress calls.
const progressStep = 1 << 20

// errStalled aborts an attempt that received no data for stallTimeout.
var errStalled = errors.New("download stalled: no data received")

// transientError marks an error worth retrying: network failures and
// truncated transfers. Anything not marked (and not a retryable HTTP status)
// is permanent.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

func transient(err error) error { return &transientError{err} }

// requestError classifies an error from http.Client.Do.
func requestError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		if errors.Is(context.Cause(ctx), errStalled) {
			return transient(errStalled)
		}
		return err
	}
	var cert *tls.CertificateVerificationError
	if errors.As(err, &cert) {
		return err
	}
	return transient(err)
}

func retryable(err error) (bool, time.Duration) {
	var te *transientError
	if errors.As(err, &te) {
		return true, 0
	}
	var se *httpStatusError
	if errors.As(err, &se) && se.retryable() {
		return true, se.retryAfter
	}
	return false, 0
}

// retry runs attempt until it succeeds, fails permanently, or fails
// c.retries times in a row without making progress, sleeping with
// exponential backoff between attempts.
func (c *Client) retry(ctx context.Context, log *slog.Logger, what string, attempt func(context.Context) (progressed bool, err error)) error {
	retries, delay, maxDelay := c.retries, c.backoff, c.maxBackoff
	if retries <= 0 {
		retries = 5
	}
	if delay <= 0 {
		delay = time.Second
	}
	if maxDelay <= 0 {
		maxDelay = 30 * time.Second
	}
	first := delay
	failures := 0
	for {
		progressed, err := attempt(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, context.Cause(ctx))
		}
		ok, after := retryable(err)
		if !ok {
			return err
		}
		if progressed {
			failures, delay = 0, first
		}
		failures++
		if failures >= retries {
			return fmt.Errorf("%s: giving up after %d attempts: %w", what, failures, err)
		}
		wait := min(max(delay, after), maxDelay)
		log.Warn("transient error, retrying", "op", what, "attempt", failures, "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w", what, context.Cause(ctx))
		case <-t.C:
		}
		delay = min(delay*2, maxDelay)
	}
}

// escapePath escapes each segment of a repository path for a URL.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// fetch makes sure f is present, complete and verified under dir.
func (c *Client) fetch(ctx context.Context, log *slog.Logger, repo, sha, dir string, f remoteFile) error {
	final := filepath.Join(dir, filepath.FromSlash(f.path))
	log = log.With("file", f.path)
	if fi, err := os.Lstat(final); err == nil {
		switch {
		case !fi.Mode().IsRegular():
			return fmt.Errorf("%s exists and is not a regular file", final)
		case f.size < 0 || fi.Size() == f.size:
			// Files only get their final name after verification.
			log.Debug("already downloaded", "bytes", fi.Size())
			c.progress(f.path, fi.Size(), fi.Size())
			return nil
		default:
			log.Warn("cached file has the wrong size, downloading it again", "bytes", fi.Size(), "want", f.size)
			if err := os.Remove(final); err != nil {
				return err
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return err
	}

	d := &download{
		c:       c,
		log:     log,
		file:    f,
		url:     c.baseURL() + "/" + repo + "/resolve/" + url.PathEscape(sha) + "/" + escapePath(f.path),
		partial: final + partialSuffix,
		final:   final,
	}
	start := time.Now()
	if err := c.retry(ctx, log, "download", d.attempt); err != nil {
		return err
	}
	log.Info("downloaded", "bytes", d.done.Load(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

func (c *Client) progress(file string, done, total int64) {
	if c.Progress != nil {
		c.Progress(file, done, total)
	}
}

// download is the state of one file's download across attempts.
type download struct {
	c       *Client
	log     *slog.Logger
	file    remoteFile
	url     string
	partial string
	final   string
	done    atomic.Int64
}

// attempt makes one request for the rest of the file and, when the file is
// complete, verifies and installs it.
func (d *download) attempt(ctx context.Context) (progressed bool, err error) {
	fh, err := os.OpenFile(d.partial, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return false, err
	}
	defer func() {
		if fh != nil {
			fh.Close()
		}
	}()
	fi, err := fh.Stat()
	if err != nil {
		return false, err
	}
	offset := fi.Size()
	if d.file.size >= 0 && offset > d.file.size {
		d.log.Warn("partial download is larger than the file, starting over", "bytes", offset, "want", d.file.size)
		if err := restart(fh); err != nil {
			return false, err
		}
		offset = 0
	}
	// Hash what is already there; the file position ends at offset.
	h := sha256.New()
	if offset > 0 {
		if _, err := io.CopyN(h, fh, offset); err != nil {
			return false, fmt.Errorf("reading partial download: %w", err)
		}
	}
	if d.file.size >= 0 && offset == d.file.size {
		// Complete from an earlier pull; only verification is left.
		d.done.Store(offset)
		err := d.install(fh, h, offset, d.file.size, d.file.sha256)
		fh = nil // closed by install
		return false, err
	}

	// The watchdog cancels the attempt when no data arrives for a while.
	stall := d.c.stallTimeout
	if stall <= 0 {
		stall = 60 * time.Second
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchdog := time.AfterFunc(stall, func() { cancel(errStalled) })
	defer watchdog.Stop()

	req, err := d.c.newRequest(actx, d.url)
	if err != nil {
		return false, err
	}
	// Offsets count identity-encoded bytes: never let the transport
	// negotiate compression.
	req.Header.Set("Accept-Encoding", "identity")
	if offset > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", offset))
	}
	resp, err := d.c.httpClient().Do(req)
	if err != nil {
		return false, requestError(actx, err)
	}
	defer resp.Body.Close()

	size, etags := linkedHeaders(resp)
	switch {
	case resp.StatusCode == http.StatusPartialContent && offset > 0:
		start, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != offset {
			// Not the range asked for: start over.
			if err := restart(fh); err != nil {
				return false, err
			}
			return false, transient(fmt.Errorf("server answered Range bytes=%d- with Content-Range %q; restarting", offset, resp.Header.Get("Content-Range")))
		}
		if size < 0 {
			size = total
		}
		d.log.Info("resuming download", "from", offset)
	case resp.StatusCode == http.StatusOK:
		if offset > 0 {
			d.log.Info("server does not support resuming, starting over", "discarded", offset)
			if err := restart(fh); err != nil {
				return false, err
			}
			offset = 0
			h.Reset()
		}
		if size < 0 && resp.ContentLength >= 0 {
			size = resp.ContentLength
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		if err := restart(fh); err != nil {
			return false, err
		}
		return false, transient(fmt.Errorf("server rejected Range bytes=%d-; restarting", offset))
	default:
		if err := d.c.statusError(resp); err != nil {
			return false, err
		}
		return false, fmt.Errorf("unexpected HTTP status %s", resp.Status)
	}

	// The API's size and sha256 take precedence over response headers.
	if d.file.size >= 0 {
		size = d.file.size
	}
	want := d.file.sha256
	if want == "" {
		for _, e := range etags {
			if isSHA256(e) {
				want = strings.ToLower(e)
				break
			}
		}
	}

	d.done.Store(offset)
	d.c.progress(d.file.path, offset, size)
	body := io.Reader(&watchedReader{r: resp.Body, watchdog: watchdog, stall: stall})
	if size >= 0 {
		// Read at most one byte more than expected, to detect oversize.
		body = io.LimitReader(body, size-offset+1)
	}
	w := &progressWriter{d: d, total: size, next: offset + progressStep}
	n, err := io.Copy(io.MultiWriter(fh, h, w), body)
	got := offset + n
	if err != nil {
		if errors.Is(err, errReadFailed) {
			if errors.Is(context.Cause(actx), errStalled) {
				err = errStalled
			}
			return n > 0, transient(fmt.Errorf("after %d of %d bytes: %w", got, size, err))
		}
		return n > 0, fmt.Errorf("writing %s: %w", d.partial, err)
	}
	switch {
	case size >= 0 && got > size:
		d.discard(fh)
		fh = nil // closed by discard
		return true, fmt.Errorf("%w: server sent more than the expected %d bytes", ErrChecksum, size)
	case size >= 0 && got < size:
		// The body ended cleanly but early (no Content-Length to catch it).
		return n > 0, transient(fmt.Errorf("connection closed after %d of %d bytes", got, size))
	}
	err = d.install(fh, h, got, size, want)
	fh = nil // closed by install
	return true, err
}

// install verifies the complete partial file (fh, positioned at its end,
// with h holding the hash of its contents) and renames it into place. It
// closes fh.
func (d *download) install(fh *os.File, h hash.Hash, got, size int64, want string) error {
	if size >= 0 && got != size {
		d.discard(fh)
		return fmt.Errorf("%w: size %d, expected %d", ErrChecksum, got, size)
	}
	if want != "" {
		if sum := hex.EncodeToString(h.Sum(nil)); sum != want {
			d.discard(fh)
			return fmt.Errorf("%w: sha256 %s, expected %s", ErrChecksum, sum, want)
		}
	} else {
		d.log.Debug("no sha256 published for the file, size checked only")
	}
	if err := fh.Sync(); err != nil {
		fh.Close()
		return fmt.Errorf("syncing %s: %w", d.partial, err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", d.partial, err)
	}
	if err := os.Rename(d.partial, d.final); err != nil {
		return fmt.Errorf("installing %s: %w", d.final, err)
	}
	syncDir(filepath.Dir(d.final))
	d.c.progress(d.file.path, got, got)
	return nil
}

// discard closes and removes a partial file that failed verification, so
// the next pull starts afresh.
func (d *download) discard(fh *os.File) {
	fh.Close()
	if err := os.Remove(d.partial); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log.Warn("removing bad download", "path", d.partial, "err", err)
	}
}

// restart empties a partial file.
func restart(fh *os.File) error {
	if err := fh.Truncate(0); err != nil {
		return fmt.Errorf("truncating partial download: %w", err)
	}
	if _, err := fh.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("rewinding partial download: %w", err)
	}
	return nil
}

// syncDir makes a rename durable; failures only cost durability.
func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		_ = f.Sync()
		f.Close()
	}
}

// linkedHeaders returns the file size and the candidate checksums the Hub
// publishes: X-Linked-Size and X-Linked-Etag (set for files stored in LFS,
// usually on the redirect to the CDN) and ETag, looking at the final
// response and every redirect response before it. Size is -1 when absent.
func linkedHeaders(resp *http.Response) (size int64, etags []string) {
	size = -1
	var linked, plain []string
	for r := resp; r != nil; {
		if size < 0 {
			if n, err := strconv.ParseInt(r.Header.Get("X-Linked-Size"), 10, 64); err == nil && n >= 0 {
				size = n
			}
		}
		if e := cleanETag(r.Header.Get("X-Linked-Etag")); e != "" {
			linked = append(linked, e)
		}
		if e := cleanETag(r.Header.Get("ETag")); e != "" {
			plain = append(plain, e)
		}
		if r.Request == nil {
			break
		}
		r = r.Request.Response
	}
	return size, append(linked, plain...)
}

func cleanETag(e string) string {
	e = strings.TrimSpace(e)
	e = strings.TrimPrefix(e, "W/")
	return strings.Trim(e, `"`)
}

// parseContentRange parses "bytes START-END/TOTAL"; total is -1 for "*".
func parseContentRange(s string) (start, total int64, ok bool) {
	rest, found := strings.CutPrefix(strings.TrimSpace(s), "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	first, last, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err1 := strconv.ParseInt(first, 10, 64)
	end, err2 := strconv.ParseInt(last, 10, 64)
	if err1 != nil || err2 != nil || start < 0 || end < start {
		return 0, 0, false
	}
	total = -1
	if tot != "*" {
		t, err := strconv.ParseInt(tot, 10, 64)
		if err != nil || t <= end {
			return 0, 0, false
		}
		total = t
	}
	return start, total, true
}

// errReadFailed tags errors reading the response body, as opposed to
// writing the file.
var errReadFailed = errors.New("reading response")

// watchedReader resets the stall watchdog whenever data arrives and tags
// read errors.
type watchedReader struct {
	r        io.Reader
	watchdog *time.Timer
	stall    time.Duration
}

func (w *watchedReader) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if n > 0 {
		w.watchdog.Reset(w.stall)
	}
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%w: %w", errReadFailed, err)
	}
	return n, err
}

// progressWriter counts bytes and reports progress about every MiB.
type progressWriter struct {
	d     *download
	total int64
	next  int64
}

func (w *progressWriter) Write(p []byte) (int, error) {
	done := w.d.done.Add(int64(len(p)))
	if done >= w.next {
		w.next = done + progressStep
		w.d.c.progress(w.d.file.path, done, w.total)
	}
	return len(p), nil
}
