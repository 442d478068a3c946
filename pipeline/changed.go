package pipeline

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/batchd/batchd/pipeline/ledger"
)

// ErrInputChanged is the cause of a run whose input is no longer the
// content the batch accepted: a file appended to, cut short, rewritten or
// replaced, an object replaced. Stores return it (wrapped) from OpenInput
// for an input replaced since the first call; the pipeline returns it for
// content that differs from what identify read.
var ErrInputChanged = errors.New("input changed after it was accepted")

// CodeInputChanged is the errors.data code of a batch stopped because its
// input changed while it ran (or while batchd was stopped).
const CodeInputChanged = "input_changed"

// inputChunk is how much of the input one hash of the manifest covers: the
// reader releases no byte of a chunk before the whole chunk matched.
const inputChunk = 1 << 20

// changedAdvice ends every input_changed message: what the producer should
// do instead.
const changedAdvice = "Lines of the two versions are never mixed: this batch stopped, and the file as it is now runs as a new batch once it is complete. Write an input elsewhere (or under a dot-name, *.tmp or *.part) and rename it into the inbox once it is complete."

// changedError says how an input changed.
type changedError struct {
	file, what string
}

func (e *changedError) Error() string {
	return fmt.Sprintf("%s changed after batchd accepted it: %s", e.file, e.what)
}

func (e *changedError) Unwrap() error { return ErrInputChanged }

// manifest is the content identify read: its length, the hash of every
// inputChunk bytes, and the file's modification time when it could be seen
// (0 otherwise).
type manifest struct {
	size  int64
	mtime int64
	sums  [][sha256.Size]byte
}

// chunkHasher builds a manifest from the bytes written to it.
type chunkHasher struct {
	m   *manifest
	cur []byte
}

func newChunkHasher() *chunkHasher {
	return &chunkHasher{m: &manifest{}, cur: make([]byte, 0, inputChunk)}
}

func (c *chunkHasher) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), inputChunk-len(c.cur))
		c.cur = append(c.cur, p[:k]...)
		p = p[k:]
		if len(c.cur) == inputChunk {
			c.flush()
		}
	}
	c.m.size += int64(n)
	return n, nil
}

func (c *chunkHasher) flush() {
	c.m.sums = append(c.m.sums, sha256.Sum256(c.cur))
	c.cur = c.cur[:0]
}

// done returns the manifest of everything written.
func (c *chunkHasher) done() *manifest {
	if len(c.cur) > 0 {
		c.flush()
	}
	return c.m
}

// fileStat returns what Stat says of r, when r can say it (an *os.File).
func fileStat(r io.Reader) (os.FileInfo, bool) {
	s, ok := r.(interface{ Stat() (os.FileInfo, error) })
	if !ok {
		return nil, false
	}
	st, err := s.Stat()
	return st, err == nil
}

// verifyingReader reads an input as its manifest describes it: it releases
// the bytes of a chunk only once the whole chunk hashed as identify saw it,
// and ends with ErrInputChanged (a *changedError) instead of a chunk that
// differs, a file shorter than the manifest, or bytes past its end. So no
// line of another version is ever read.
type verifyingReader struct {
	r     io.Reader
	m     *manifest
	file  string
	buf   []byte
	pos   int
	chunk int
	off   int64
	err   error
}

func newVerifyingReader(r io.Reader, m *manifest, file string) *verifyingReader {
	return &verifyingReader{r: r, m: m, file: file}
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	for v.pos == len(v.buf) {
		if v.err != nil {
			return 0, v.err
		}
		v.fill()
	}
	n := copy(p, v.buf[v.pos:])
	v.pos += n
	return n, nil
}

// fill reads and checks the next chunk, or checks the file ends where the
// manifest does.
func (v *verifyingReader) fill() {
	v.pos = 0
	if v.chunk == len(v.m.sums) {
		v.buf = v.buf[:0]
		var one [1]byte
		n, err := io.ReadFull(v.r, one[:])
		switch {
		case n > 0:
			v.err = &changedError{v.file, fmt.Sprintf("it grew past the %d bytes accepted", v.m.size)}
		case err == io.EOF:
			v.err = io.EOF
		default:
			v.err = err
		}
		return
	}
	if v.buf == nil {
		v.buf = make([]byte, 0, min(v.m.size, inputChunk))
	}
	v.buf = v.buf[:min(v.m.size-v.off, inputChunk)]
	n, err := io.ReadFull(v.r, v.buf)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		v.buf = v.buf[:0]
		v.err = &changedError{v.file, fmt.Sprintf("it was cut to %d bytes (%d were accepted)", v.off+int64(n), v.m.size)}
		return
	case err != nil:
		v.buf = v.buf[:0]
		v.err = err
		return
	}
	if sha256.Sum256(v.buf) != v.m.sums[v.chunk] {
		end := v.off + int64(len(v.buf))
		v.buf = v.buf[:0]
		v.err = &changedError{v.file, fmt.Sprintf("bytes %d to %d are not the ones accepted (rewritten in place or replaced)", v.off, end)}
		return
	}
	v.chunk++
	v.off += int64(len(v.buf))
}

// openVerified opens the run's input through a verifyingReader.
func (r *run) openVerified() (io.Reader, io.Closer, error) {
	f, err := r.job.Store.OpenInput(r.runCtx)
	if err != nil {
		return nil, nil, fmt.Errorf("open input: %w", err)
	}
	return newVerifyingReader(f, r.man, r.job.Store.Files().Input), f, nil
}

// inputUnchanged checks, before the results are published, that the input
// is still the length and modification time identify saw (a change since
// the reader's last check). An input that is gone is no change: its results
// stand for the content that ran, and nothing new waits to run.
func (r *run) inputUnchanged() error {
	f, err := r.job.Store.OpenInput(r.runCtx)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open input: %w", err)
	}
	defer f.Close()
	st, ok := fileStat(f)
	if !ok {
		return nil
	}
	file := r.job.Store.Files().Input
	switch {
	case st.Size() != r.man.size:
		return &changedError{file, fmt.Sprintf("it is now %d bytes long (%d were accepted)", st.Size(), r.man.size)}
	case r.man.mtime != 0 && st.ModTime().UnixNano() != r.man.mtime:
		return &changedError{file, "it was written to after it was accepted"}
	}
	return nil
}

// failChanged ends the run's batch as failed with input_changed. What ran
// stays done in the ledger (it is reused if this very content comes back);
// like every failed batch it publishes no result files. The input is not
// retired: it is the new content, which runs as a new batch.
func (r *run) failChanged(ctx context.Context, cause error) error {
	p, b := r.p, r.b
	r.log.Warn("input changed while its batch ran; the batch fails and the file as it is now runs as a new batch",
		"error", cause, "done", b.Completed+b.Failed, "total", b.Total)
	b.Status, b.FailedAt = StatusFailed, p.cfg.Now().Unix()
	b.Errors = []ledger.BatchError{{Code: CodeInputChanged, Message: changedMessage(cause)}}
	if err := p.ledger.Put(b); err != nil {
		return err
	}
	obj, err := p.batchObject(r.job, b, 0)
	if err != nil {
		return err
	}
	if err := r.job.Store.Publish(ctx, Results{Object: obj}); err != nil {
		return err
	}
	p.mu.Lock()
	delete(p.cancels, r.job.Name)
	p.mu.Unlock()
	return nil
}

func changedMessage(cause error) string {
	var ce *changedError
	if errors.As(cause, &ce) {
		return ce.Error() + ". " + changedAdvice
	}
	return cause.Error() + ". " + changedAdvice
}

// reviveChanged returns b ready to run on when it failed with
// input_changed and its content is delivered again (the file came back as
// it was): what was done stays done. Any other record is returned as is.
func (p *Pipeline) reviveChanged(b *ledger.Batch) (*ledger.Batch, error) {
	if b.Status != StatusFailed || len(b.Errors) != 1 || b.Errors[0].Code != CodeInputChanged {
		return b, nil
	}
	b.Status, b.FailedAt, b.Errors = StatusInProgress, 0, nil
	if b.InProgressAt == 0 {
		b.InProgressAt = p.cfg.Now().Unix()
	}
	if err := p.ledger.Put(b); err != nil {
		return nil, err
	}
	p.log.Info("content that stopped as input_changed came back as it was; its batch runs on", keyName, b.Name, keyBatch, b.ID)
	return b, nil
}

// failStale fails the batch last recorded under job's name when it is still
// in progress but over other content: its input changed while batchd was
// stopped. The new content (batch id) runs as a new batch; the old one
// would otherwise stay in progress for ever.
func (p *Pipeline) failStale(job Job, id string) error {
	old, err := p.ledger.ByName(job.Name)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check for a stale batch: %w", err)
	}
	if old.ID == id || old.Format != job.Format || Terminal(old.Status) {
		return nil
	}
	p.mu.Lock()
	running := p.running[job.Name] != nil
	p.mu.Unlock()
	if running {
		return nil
	}
	file := job.Store.Files().Input
	p.log.Warn("input changed while batchd was stopped; its unfinished batch fails and the new content runs as a new batch",
		keyName, job.Name, keyBatch, old.ID, "done", old.Completed+old.Failed, "total", old.Total)
	old.Status, old.FailedAt = StatusFailed, p.cfg.Now().Unix()
	old.Errors = []ledger.BatchError{{Code: CodeInputChanged,
		Message: (&changedError{file, "its content is not the one this batch was running when batchd stopped"}).Error() + ". " + changedAdvice}}
	return p.ledger.Put(old)
}
