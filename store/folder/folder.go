// Package folder is the pipeline.Store of a data directory (ARCHITECTURE.md
// §2): the input and NAME.options.json in the inbox, the results and
// NAME.batch.json in the outbox, the input moved to done/ once they are
// final. It owns the folder's publish protocol (link or copy beside, fsync,
// rename, fsync the directory) and its retire protocol. It imports no
// source (watcher/dir finds the inputs) and never the daemon.
package folder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/internal/failpoint"
	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline"
)

var _ pipeline.Store = (*Store)(nil)

// Store is one batch's files in a data directory.
type Store struct {
	name   string
	input  string // the input file
	outbox string
	done   string
	// options is NAME.options.json beside the input; "" when the options
	// stay where they are (a refused input's options are for the next NAME).
	options string
	// record is the retire record RetireRecord gave, which Retire follows.
	record []byte
	// published stops progress from replacing the final object.
	published bool
	// opened is the input file the first OpenInput found; later opens and
	// Retire compare with it.
	opened *fileVersion
}

// fileVersion identifies one version of a file: the file (device, inode)
// and its length and modification time.
type fileVersion struct {
	dev, ino    uint64
	size, mtime int64
}

func versionOf(st os.FileInfo) fileVersion {
	v := fileVersion{size: st.Size(), mtime: st.ModTime().UnixNano()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		v.dev, v.ino = uint64(sys.Dev), sys.Ino
	}
	return v
}

// New returns the store of batch name whose input is the file input; its
// results go to outbox and the input to done once they are final. It does
// no I/O.
func New(name, input, outbox, done string) *Store {
	return &Store{name: name, input: input, outbox: outbox, done: done,
		options: filepath.Join(filepath.Dir(input), name+filecontract.SuffixOptions)}
}

// Refused returns the store of an input refused without being read: its
// failed object is published under name (a usable one, which may differ
// from the input's), the entry (whatever it is) is renamed to rejected,
// and NAME.options.json stays for the next NAME.
func Refused(name, input, outbox, rejected string) *Store {
	return &Store{name: name, input: input, outbox: outbox, done: rejected}
}

// Identity names the input entry as it is now (path, device, inode, size,
// modification time), without opening it: refusing the same entry twice
// gives the same batch (pipeline.Refuse).
func (s *Store) Identity() (string, error) {
	st, err := os.Lstat(s.input)
	if err != nil {
		return "", fmt.Errorf("refuse %s: %w", s.name, err)
	}
	id := fmt.Sprintf("%s\n%d\n%d", s.input, st.Size(), st.ModTime().UnixNano())
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		id += fmt.Sprintf("\n%d:%d", sys.Dev, sys.Ino)
	}
	return id, nil
}

func (s *Store) outPath(suffix string) string { return filepath.Join(s.outbox, s.name+suffix) }

// Files implements pipeline.Store.
func (s *Store) Files() pipeline.Files {
	return pipeline.Files(filecontract.FilesOf(s.name, filepath.Base(s.input)))
}

// OpenInput implements pipeline.Store: a regular file only (no link is
// followed, a FIFO never blocks). Once one call opened it, a later call that
// finds another file under the input's name (renamed over it) returns an
// error wrapping pipeline.ErrInputChanged. Changes in place are the
// pipeline's to find: it checks the content it reads.
func (s *Store) OpenInput(context.Context) (io.ReadCloser, error) {
	f, err := fsx.OpenRegular(s.input)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", s.input, err)
	}
	v := versionOf(st)
	switch {
	case s.opened == nil:
		s.opened = &v
	case v.dev != s.opened.dev || v.ino != s.opened.ino:
		f.Close()
		return nil, fmt.Errorf("%s was replaced by another file after batchd accepted it: %w", filepath.Base(s.input), pipeline.ErrInputChanged)
	}
	return f, nil
}

// Options implements pipeline.Store.
func (s *Store) Options(context.Context) ([]byte, error) {
	if s.options == "" {
		return nil, nil
	}
	raw, err := fsx.ReadRegular(s.options)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return raw, err
}

// Resume implements pipeline.Store: a folder's results live in the
// pipeline's state only, so there is nothing to resume from.
func (s *Store) Resume(context.Context, func(pipeline.Committed) error) error { return nil }

// Checkpoint implements pipeline.Store: a no-op (the ledger is the
// folder's checkpoint).
func (s *Store) Checkpoint([]pipeline.Committed) error { return nil }

// Progress implements pipeline.Store: NAME.batch.json replaced atomically,
// not fsynced; nothing once Publish wrote the final one.
func (s *Store) Progress(_ context.Context, object []byte) error {
	if s.published {
		return nil
	}
	if err := fsx.MkdirAll(s.outbox, 0o755); err != nil {
		return fmt.Errorf("create outbox: %w", err)
	}
	return fsx.WriteFile(s.outPath(filecontract.SuffixBatch), object, false)
}

// Publish implements pipeline.Store: the result files (NAME.results.json
// too, for a requests document) are copied beside
// their final names, fsynced and renamed into place, the outbox fsynced, and
// then the object written the same way.
func (s *Store) Publish(_ context.Context, r pipeline.Results) error {
	if err := fsx.MkdirAll(s.outbox, 0o755); err != nil {
		return fmt.Errorf("create outbox: %w", err)
	}
	out, errs, doc := s.outPath(filecontract.SuffixOutput), s.outPath(filecontract.SuffixErrors), s.outPath(filecontract.SuffixResults)
	stale := []string{doc}
	if r.Output == "" {
		stale = append(stale, out, errs)
	}
	if r.Output == "" || r.Document == "" {
		for _, path := range stale {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove stale output: %w", err)
			}
		}
	}
	if r.Output != "" {
		if err := publish(r.Output, out); err != nil {
			return err
		}
		if err := publish(r.Errors, errs); err != nil {
			return err
		}
		if r.Document != "" {
			if err := publish(r.Document, doc); err != nil {
				return err
			}
		}
		if err := fsx.SyncDir(s.outbox); err != nil {
			return err
		}
		if err := failpoint.Inject(failpoint.FolderPublishObject); err != nil {
			return err
		}
	}
	if err := fsx.WriteFile(s.outPath(filecontract.SuffixBatch), r.Object, true); err != nil {
		return err
	}
	s.published = true
	return nil
}

// retiring is a folder's retire record: what FinishRetire needs to finish
// one a crash interrupted, instead of leaving an options file or cancel
// request to apply to a later batch of the same name.
type retiring struct {
	// Input is the input file; options stay in the inbox while it does
	// (a retire cut short, or a changed input left to run again).
	Input      string `json:"input,omitempty"`
	Inbox      string `json:"inbox"`
	DoneDir    string `json:"done_dir"`
	OptionsSum string `json:"options_sha256,omitempty"`
}

// RetireRecord implements pipeline.Store: the inbox, done/ and the hash of
// the options file that goes with the input.
func (s *Store) RetireRecord() ([]byte, error) {
	rec := retiring{Input: s.input, Inbox: filepath.Dir(s.input), DoneDir: s.done}
	if s.options != "" {
		if raw, err := fsx.ReadRegular(s.options); err == nil {
			sum := sha256.Sum256(raw)
			rec.OptionsSum = hex.EncodeToString(sum[:])
		}
	}
	raw, err := json.Marshal(rec)
	s.record = raw
	return raw, err
}

// Retire implements pipeline.Store: the input moves to done/ (both
// folders fsynced), then FinishRetire with the record RetireRecord gave
// (the options file is judged by its content then). An input that is not
// the version the first OpenInput found (written to since, or replaced)
// stays in the inbox with its options, to run as a new batch. A producer
// that writes on after the move writes into done/, which batchd never
// reads: inputs are renamed in once complete.
func (s *Store) Retire(context.Context) error {
	raw := s.record
	if raw == nil {
		var err error
		if raw, err = s.RetireRecord(); err != nil {
			return err
		}
	}
	if err := fsx.MkdirAll(s.done, 0o755); err != nil {
		return fmt.Errorf("create done dir: %w", err)
	}
	if s.stillOpened() {
		if err := moveFile(s.input, filepath.Join(s.done, filepath.Base(s.input))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := failpoint.Inject(failpoint.FolderRetireOptions); err != nil {
		return err
	}
	return FinishRetire(s.name, raw)
}

// stillOpened reports whether the input is the version OpenInput found
// (or was never opened: a refused entry moves whatever it is).
func (s *Store) stillOpened() bool {
	if s.opened == nil {
		return true
	}
	st, err := os.Lstat(s.input)
	return err != nil || versionOf(st) == *s.opened
}

// FinishRetire finishes the retire of batch name from its record: the
// options file moves to done/ if it still has the content the input ran
// with and the input left the inbox (a crash before the input moved
// leaves both: the input runs again, with its options, and retires then),
// and the cancel request is removed. It is idempotent; the pipeline calls
// it through Recover for records a crash left.
func FinishRetire(name string, record []byte) error {
	rec, err := decodeRetiring(record)
	if err != nil {
		return err
	}
	optPath := filepath.Join(rec.Inbox, name+filecontract.SuffixOptions)
	inputStays := false
	if rec.Input != "" {
		st, err := os.Lstat(rec.Input)
		inputStays = err == nil
		// A power cut after the move's rename reached done/ but before the
		// inbox was fsynced leaves the input under both names, one file:
		// the move happened, and is finished here.
		moved := filepath.Join(rec.DoneDir, filepath.Base(rec.Input))
		if dst, err := os.Lstat(moved); inputStays && err == nil && os.SameFile(st, dst) {
			if err := os.Remove(rec.Input); err != nil {
				return fmt.Errorf("finish the move of %s: %w", rec.Input, err)
			}
			if err := fsx.SyncDir(rec.Inbox); err != nil {
				return err
			}
			inputStays = false
		}
	}
	if raw, err := fsx.ReadRegular(optPath); err == nil && rec.OptionsSum != "" && !inputStays {
		sum := sha256.Sum256(raw)
		if hex.EncodeToString(sum[:]) == rec.OptionsSum {
			if err := moveFile(optPath, filepath.Join(rec.DoneDir, name+filecontract.SuffixOptions)); err != nil {
				return err
			}
		}
	}
	// The cancel request and the retry mark were for this run: removed
	// durably, so that a power cut never revives one for a later batch.
	// An input that stays keeps them: it runs again, as this run did (a
	// changed input is newer than its cancel request, which then counts as
	// an earlier batch's).
	if inputStays {
		return nil
	}
	removed := false
	for _, m := range []struct{ suffix, what string }{{filecontract.SuffixCancel, "cancel request"}, {filecontract.SuffixRetry, "retry mark"}} {
		switch err := os.Remove(filepath.Join(rec.Inbox, name+m.suffix)); {
		case err == nil:
			removed = true
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("remove %s: %w", m.what, err)
		}
	}
	if removed {
		return fsx.SyncDir(rec.Inbox)
	}
	return nil
}

// ErrNotRetired is Unretire's error when the input is not in done/.
var ErrNotRetired = errors.New("the input is not in done/")

// Unretire is Retire undone, to run a finished batch's failed requests
// again: batch name's input (base: NAME.jsonl or NAME.json) moves back from
// done to inbox with its options file, after a NAME.retry mark beside it,
// which makes the pipeline rerun the failed and cancelled requests and keep
// the completed ones (FinishRetire removes the mark when the rerun
// retires). Each step is durable before the next begins (the mark fsynced
// with its folder; each move fsyncs both folders), in this order, so that
// a power cut leaves the input either still in done/ or in the inbox with
// its options and its mark, never without them. An input that is not in
// done/ gives an error wrapping ErrNotRetired.
func Unretire(name, base, inbox, done string) error {
	src := filepath.Join(done, base)
	if _, err := os.Lstat(src); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("unretire %s: %w", name, ErrNotRetired)
		}
		return fmt.Errorf("unretire %s: %w", name, err)
	}
	if err := fsx.WriteFile(filepath.Join(inbox, name+filecontract.SuffixRetry), nil, true); err != nil {
		return fmt.Errorf("unretire %s: %w", name, err)
	}
	opt := filepath.Join(done, name+filecontract.SuffixOptions)
	if _, err := os.Lstat(opt); err == nil {
		if err := moveFile(opt, filepath.Join(inbox, name+filecontract.SuffixOptions)); err != nil {
			return fmt.Errorf("unretire %s: %w", name, err)
		}
	}
	if err := moveFile(src, filepath.Join(inbox, base)); err != nil {
		return fmt.Errorf("unretire %s: %w", name, err)
	}
	return nil
}

// CheckRetiring checks a retire record as FinishRetire reads it
// (pipeline.CheckLedger).
func CheckRetiring(_ string, record []byte) error {
	_, err := decodeRetiring(record)
	return err
}

// decodeRetiring reads a retiring record, refusing one FinishRetire could
// not finish.
func decodeRetiring(v []byte) (retiring, error) {
	var rec retiring
	if err := json.Unmarshal(v, &rec); err != nil {
		return rec, fmt.Errorf("decode: %w", err)
	}
	if rec.Inbox == "" || rec.DoneDir == "" {
		return rec, errors.New("it names no inbox or no done directory")
	}
	return rec, nil
}

// CleanOutbox removes temporary files a crash may have left in an outbox.
func CleanOutbox(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("read outbox: %w", err)
	}
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, ".") && strings.HasSuffix(n, filecontract.SuffixTmp) {
			if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove leftover %s: %w", n, err)
			}
		}
	}
	return nil
}

// publish places a copy of src at dst atomically: copied under a temporary
// name beside dst (whatever was there removed first), fsynced, then renamed
// over dst (replacing dst itself, even a link, never writing through it).
// The caller fsyncs dst's directory. A copy, never a hard link: the pipeline reuses its own file for
// every later name that runs the same content, and a link would let a
// consumer's edit of one published file (an append, a truncate) change every
// other name's results and the ledger's record of them. On a filesystem
// that clones (XFS, Btrfs) the copy shares blocks and costs no space.
func publish(src, dst string) error {
	dir, base := filepath.Split(dst)
	tmp := filepath.Join(dir, "."+base+filecontract.SuffixTmp)
	// Whatever is at tmp goes first: a leftover, or a link someone planted
	// in the outbox, which the copy would otherwise write through (to a
	// file outside DATA) and the rename would then publish as dst.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("publish %s: remove stale %s: %w", base, tmp, err)
	}
	if err := fsx.CopyFile(src, tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("publish %s: %w", base, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return nil
}

// moveFile renames src to dst (replacing dst), making both directories durable.
// A move a power cut interrupted (each directory's entry is durable on its
// own) can leave src and dst as two names of one file, where rename(2) does
// nothing: src is removed instead.
func moveFile(src, dst string) error {
	sst, serr := os.Lstat(src)
	dst0, derr := os.Lstat(dst)
	if serr == nil && derr == nil && os.SameFile(sst, dst0) {
		if err := os.Remove(src); err != nil {
			return fmt.Errorf("move %s: %w", src, err)
		}
	} else if err := os.Rename(src, dst); err != nil {
		return fmt.Errorf("move %s: %w", src, err)
	}
	if err := fsx.SyncDir(filepath.Dir(dst)); err != nil {
		return err
	}
	return fsx.SyncDir(filepath.Dir(src))
}
