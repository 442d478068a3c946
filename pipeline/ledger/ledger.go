// Package ledger is batchd's source of truth: a bbolt file recording every
// batch, which of its input lines have a committed result line, and how long
// each committed result file is. The pipeline's writer commits here in groups
// (one transaction per many results), after it has fsynced the result files,
// so a crash at any moment leaves the ledger describing a durable prefix of
// each file.
//
// Of batchd it imports only internal/fsx.
package ledger

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/batchd/batchd/internal/fsx"
)

// NewNonce returns a new record's Nonce: 12 random hex digits.
func NewNonce() string {
	var b [6]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// ErrNotFound is returned for a batch the ledger does not know.
var ErrNotFound = errors.New("batch not found")

var (
	bucketBatches  = []byte("batches")
	bucketDone     = []byte("done")
	bucketRetiring = []byte("retiring")
	// bucketNames maps a batch name to the id last recorded under it.
	bucketNames = []byte("names")
)

// linesPerChunk is how many input lines one bitmap chunk covers; a chunk is
// stored as one value so a commit rewrites only the chunks it touched.
const linesPerChunk = 8192

// Batch is what the ledger records about one batch. Its identity is the hash
// of its input content and options.
type Batch struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Format    string `json:"format"`
	Endpoint  string `json:"endpoint,omitempty"`
	Status    string `json:"status"`
	Total     int    `json:"total"`
	Completed int    `json:"completed"`
	Failed    int    `json:"failed"`

	// Gen numbers the result files in use; a reopen writes a new generation.
	Gen int `json:"gen"`
	// Nonce, random and set when the record is created, tells this record
	// from an earlier one of the same content that was forgotten (by
	// retention, or because its results were changed): result file ids
	// carry it, so an id never names a later record's results. Records
	// from before batchd kept one have none.
	Nonce string `json:"nonce,omitempty"`
	// OutLen and ErrLen are the committed lengths of the result files.
	OutLen int64 `json:"out_len"`
	ErrLen int64 `json:"err_len"`
	// OutMtime and ErrMtime (Unix ns) are the result files' modification
	// times when the batch ended: published outputs share their files, so
	// an edit of a published output shows here and its results are not
	// reused.
	OutMtime int64 `json:"out_mtime,omitempty"`
	ErrMtime int64 `json:"err_mtime,omitempty"`

	// Origin is the name whose input made this record; a later name that
	// runs the same content reuses the record (and becomes Name) but shows
	// a batch id of its own (pipeline.ObjectID).
	Origin string `json:"origin,omitempty"`

	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// CachedTokens sums the lines' usage.prompt_tokens_details.cached_tokens.
	CachedTokens int64 `json:"cached_tokens,omitempty"`

	CompletionWindow string            `json:"completion_window,omitempty"`
	Metadata         map[string]string `json:"metadata,omitempty"`
	Errors           []BatchError      `json:"errors,omitempty"`

	CreatedAt    int64 `json:"created_at"`
	InProgressAt int64 `json:"in_progress_at,omitempty"`
	ExpiresAt    int64 `json:"expires_at,omitempty"`
	FinalizingAt int64 `json:"finalizing_at,omitempty"`
	CompletedAt  int64 `json:"completed_at,omitempty"`
	FailedAt     int64 `json:"failed_at,omitempty"`
	ExpiredAt    int64 `json:"expired_at,omitempty"`
	CancellingAt int64 `json:"cancelling_at,omitempty"`
	CancelledAt  int64 `json:"cancelled_at,omitempty"`
}

// BatchError is one entry of a failed batch's errors.data.
type BatchError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Line    *int    `json:"line"`
	Param   *string `json:"param"`
}

// Ledger is an open ledger file. It is safe for concurrent use.
type Ledger struct {
	db *bolt.DB
}

// openOptions are the options of every read-write open.
func openOptions() *bolt.Options {
	return &bolt.Options{Timeout: 500 * time.Millisecond, FreelistType: bolt.FreelistMapType, OpenFile: fsx.OpenNoFollow}
}

// Open opens (creating if needed) the ledger at path. A ledger held by
// another process fails after a short wait instead of blocking forever.
//
// An existing file is checked first: one that is damaged (cut short,
// emptied, broken pages or meta pages, or failing bbolt's own consistency
// check) returns a *DamagedError, never a crash, and never a silently empty
// ledger that would forget what ran. The check reads the whole file once.
// A symbolic link at path is refused (fsx.ErrLink), never followed.
func Open(path string) (*Ledger, error) {
	if err := fsx.NoLink(path); err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := create(path); err != nil {
			return nil, fmt.Errorf("create ledger %s: %w", path, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	db, _, err := openVerified(path, openOptions(), nil)
	if err != nil {
		return nil, err
	}
	if err := db.Update(createBuckets); err != nil {
		db.Close()
		return nil, fmt.Errorf("init ledger %s: %w", path, err)
	}
	return &Ledger{db: db}, nil
}

func createBuckets(tx *bolt.Tx) error {
	for _, b := range [][]byte{bucketBatches, bucketDone, bucketRetiring, bucketNames} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return nil
}

// create makes a new ledger beside path and renames it into place, so that
// a ledger file that exists is always a whole one: an empty file at path is
// damage, not a crash during creation.
func create(path string) error {
	tmp := path + ".new"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	db, err := bolt.Open(tmp, 0o600, openOptions())
	if err != nil {
		return err
	}
	err = db.Update(createBuckets)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return fsx.SyncDir(filepath.Dir(path))
}

// Close closes the file.
func (l *Ledger) Close() error { return l.db.Close() }

// Get returns the batch with the given id, or ErrNotFound.
func (l *Ledger) Get(id string) (*Batch, error) {
	var b *Batch
	err := l.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketBatches).Get([]byte(id))
		if v == nil {
			return ErrNotFound
		}
		b = new(Batch)
		return json.Unmarshal(v, b)
	})
	if err != nil {
		return nil, fmt.Errorf("get batch %s: %w", id, err)
	}
	return b, nil
}

// ByName returns the batch last recorded under name, or ErrNotFound.
func (l *Ledger) ByName(name string) (*Batch, error) {
	var id []byte
	err := l.db.View(func(tx *bolt.Tx) error {
		id = append(id, tx.Bucket(bucketNames).Get([]byte(name))...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("look up batch named %s: %w", name, err)
	}
	if len(id) == 0 {
		return nil, fmt.Errorf("batch named %s: %w", name, ErrNotFound)
	}
	return l.Get(string(id))
}

// Names returns every name with the id last recorded under it.
func (l *Ledger) Names() (map[string]string, error) {
	out := map[string]string{}
	err := l.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketNames).ForEach(func(k, v []byte) error {
			out[string(k)] = string(v)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list names: %w", err)
	}
	return out, nil
}

// List returns every batch, in id order.
func (l *Ledger) List() ([]*Batch, error) {
	var out []*Batch
	err := l.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketBatches).ForEach(func(k, v []byte) error {
			b := new(Batch)
			if err := json.Unmarshal(v, b); err != nil {
				return fmt.Errorf("batch %s: %w", k, err)
			}
			out = append(out, b)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list batches: %w", err)
	}
	return out, nil
}

// Put records b (creating or replacing its record), leaving its done set alone.
func (l *Ledger) Put(b *Batch) error {
	return l.Commit(b, nil, false)
}

// Commit records b and marks the given input lines done, in one transaction.
// With reset, the batch's done set is cleared first and replaced by done.
func (l *Ledger) Commit(b *Batch, done *Bitmap, reset bool) error {
	v, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("encode batch %s: %w", b.ID, err)
	}
	err = l.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketBatches).Put([]byte(b.ID), v); err != nil {
			return err
		}
		if b.Name != "" {
			if err := tx.Bucket(bucketNames).Put([]byte(b.Name), []byte(b.ID)); err != nil {
				return err
			}
		}
		parent := tx.Bucket(bucketDone)
		if reset && parent.Bucket([]byte(b.ID)) != nil {
			if err := parent.DeleteBucket([]byte(b.ID)); err != nil {
				return err
			}
		}
		if done == nil {
			return nil
		}
		bk, err := parent.CreateBucketIfNotExists([]byte(b.ID))
		if err != nil {
			return err
		}
		var key [4]byte
		for _, c := range done.takeDirty(reset) {
			binary.BigEndian.PutUint32(key[:], uint32(c))
			if err := bk.Put(key[:], done.chunk(c)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("commit batch %s: %w", b.ID, err)
	}
	return nil
}

// Done loads the done set of batch id.
func (l *Ledger) Done(id string) (*Bitmap, error) {
	bm := NewBitmap()
	err := l.db.View(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketDone).Bucket([]byte(id))
		if bk == nil {
			return nil
		}
		return bk.ForEach(func(k, v []byte) error {
			if len(k) != 4 {
				return fmt.Errorf("bad chunk key %x", k)
			}
			bm.load(int(binary.BigEndian.Uint32(k)), v)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("load done set of %s: %w", id, err)
	}
	return bm, nil
}

// Delete forgets batch id, its done set and its suspect lines.
func (l *Ledger) Delete(id string) error {
	err := l.db.Update(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketBatches).Get([]byte(id)); v != nil {
			var b Batch
			if json.Unmarshal(v, &b) == nil && string(tx.Bucket(bucketNames).Get([]byte(b.Name))) == id {
				if err := tx.Bucket(bucketNames).Delete([]byte(b.Name)); err != nil {
					return err
				}
			}
		}
		if err := tx.Bucket(bucketBatches).Delete([]byte(id)); err != nil {
			return err
		}
		if err := deleteSuspects(tx, id); err != nil {
			return err
		}
		if tx.Bucket(bucketDone).Bucket([]byte(id)) != nil {
			return tx.Bucket(bucketDone).DeleteBucket([]byte(id))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete batch %s: %w", id, err)
	}
	return nil
}

// PutRetiring records that batch name's files are being moved out of the
// inbox; value says what to finish if that is interrupted.
func (l *Ledger) PutRetiring(name string, value []byte) error {
	err := l.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRetiring).Put([]byte(name), value)
	})
	if err != nil {
		return fmt.Errorf("record retiring %s: %w", name, err)
	}
	return nil
}

// DeleteRetiring forgets a PutRetiring record.
func (l *Ledger) DeleteRetiring(name string) error {
	err := l.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRetiring).Delete([]byte(name))
	})
	if err != nil {
		return fmt.Errorf("forget retiring %s: %w", name, err)
	}
	return nil
}

// Retiring returns the PutRetiring records, by name.
func (l *Ledger) Retiring() (map[string][]byte, error) {
	out := map[string][]byte{}
	err := l.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRetiring).ForEach(func(k, v []byte) error {
			out[string(k)] = append([]byte(nil), v...)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list retiring: %w", err)
	}
	return out, nil
}

// CompactIfWorth rewrites the ledger file at path without its free pages
// when they are more than half of a file over 16 MiB: bbolt files never
// shrink by themselves, and expired batches leave free pages behind. Call
// it before Open. It reports whether it compacted. A damaged file returns a
// *DamagedError, as Open would.
func CompactIfWorth(path string) (bool, error) {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat ledger: %w", err)
	}
	if st.Size() < 16<<20 {
		return false, nil
	}
	// A damaged file is refused (a *DamagedError) before it is copied: a
	// compaction would carry what it could read into a file that looks whole.
	src, _, err := openVerified(path, openOptions(), nil)
	if err != nil {
		return false, err
	}
	stats := src.Stats()
	free := int64(stats.FreePageN+stats.PendingPageN) * int64(src.Info().PageSize)
	if free*2 < st.Size() {
		src.Close()
		return false, nil
	}
	tmp := path + ".compact"
	_, err = compactInto(src, tmp)
	src.Close()
	if err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("compact ledger: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return false, fmt.Errorf("compact ledger: %w", err)
	}
	if err := fsx.SyncDir(filepath.Dir(path)); err != nil {
		return true, fmt.Errorf("compact ledger: %w", err)
	}
	return true, nil
}
