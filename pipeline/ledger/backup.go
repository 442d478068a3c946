package ledger

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/batchd/batchd/internal/fsx"
)

// Backup writes a consistent copy of the open ledger to w from one read
// transaction, so that writers carry on meanwhile. size, if not nil, is
// called with the copy's length before the first byte is written (an HTTP
// handler sets Content-Length from it, so that a cut copy is detected).
func (l *Ledger) Backup(w io.Writer, size func(int64)) (int64, error) {
	var n int64
	err := l.db.View(func(tx *bolt.Tx) error {
		if size != nil {
			size(tx.Size())
		}
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	if err != nil {
		return n, fmt.Errorf("back up ledger: %w", err)
	}
	return n, nil
}

// BackupFile writes a copy of the ledger file at path, which no process has
// open, to w. It takes bbolt's shared lock for up to timeout (ErrLocked past
// it: a running batchd holds the file, and Backup on its open ledger is the
// way) and refuses a damaged file (*DamagedError) rather than copy it.
func BackupFile(path string, w io.Writer, timeout time.Duration) (int64, error) {
	if _, err := os.Stat(path); err != nil {
		return 0, fmt.Errorf("open ledger: %w", err)
	}
	db, _, err := openVerified(path, &bolt.Options{ReadOnly: true, Timeout: timeout, FreelistType: bolt.FreelistMapType}, nil)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	return (&Ledger{db: db}).Backup(w, nil)
}

// CompactResult is what Compact did.
type CompactResult struct {
	Before, After int64 // file sizes in bytes
}

// Compact rewrites the ledger file at path without its free pages, which
// bbolt never gives back by itself. The caller must make sure no daemon
// runs on it (bbolt's lock is also taken, for up to timeout: ErrLocked past
// it). The new file is written beside path, synced, checked to open cleanly
// and to hold every key and value of the old one, and only then renamed
// over it; a failure at any step leaves path as it was.
func Compact(path string, timeout time.Duration) (CompactResult, error) {
	st, err := os.Stat(path)
	if err != nil {
		return CompactResult{}, fmt.Errorf("open ledger: %w", err)
	}
	opts := openOptions()
	opts.Timeout = timeout
	src, _, err := openVerified(path, opts, nil)
	if err != nil {
		return CompactResult{}, err
	}
	defer src.Close()
	tmp := path + ".compact"
	after, err := compactInto(src, tmp)
	if err != nil {
		os.Remove(tmp)
		return CompactResult{}, fmt.Errorf("compact ledger %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return CompactResult{}, fmt.Errorf("compact ledger %s: %w", path, err)
	}
	if err := fsx.SyncDir(filepath.Dir(path)); err != nil {
		return CompactResult{}, fmt.Errorf("compact ledger %s: %w", path, err)
	}
	return CompactResult{Before: st.Size(), After: after}, nil
}

// compactInto copies src into a new file at tmp, syncs it and verifies it
// against src; it returns the new file's size.
func compactInto(src *bolt.DB, tmp string) (int64, error) {
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	dst, err := bolt.Open(tmp, 0o600, nil)
	if err != nil {
		return 0, err
	}
	err = bolt.Compact(dst, src, 64<<20)
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	copied, _, err := openVerified(tmp, &bolt.Options{ReadOnly: true, FreelistType: bolt.FreelistMapType}, nil)
	if err != nil {
		return 0, fmt.Errorf("the compacted copy does not open: %w", err)
	}
	defer copied.Close()
	want, err := digest(src)
	if err != nil {
		return 0, err
	}
	got, err := digest(copied)
	if err != nil {
		return 0, err
	}
	if !bytes.Equal(want, got) {
		return 0, errors.New("the compacted copy differs from the ledger; the ledger is left as it was")
	}
	st, err := os.Stat(tmp)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// digest hashes every bucket, key and value of db in order.
func digest(db *bolt.DB) ([]byte, error) {
	h := sha256.New()
	err := db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			writeField(h, 'B', name)
			return digestBucket(h, b)
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	return h.Sum(nil), nil
}

func digestBucket(h hash.Hash, b *bolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		if v == nil { // a nested bucket
			writeField(h, 'B', k)
			if err := digestBucket(h, b.Bucket(k)); err != nil {
				return err
			}
			writeField(h, 'E', nil)
			return nil
		}
		writeField(h, 'K', k)
		writeField(h, 'V', v)
		return nil
	})
}

// writeField writes a tag, a length and bytes, so that no two different
// sequences of fields hash the same stream.
func writeField(h hash.Hash, tag byte, p []byte) {
	n := len(p)
	h.Write([]byte{tag, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	h.Write(p)
}
