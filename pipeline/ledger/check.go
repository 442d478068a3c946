package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// CheckOptions tells Check what the ledger alone cannot.
type CheckOptions struct {
	// Timeout bounds the wait for the lock a running batchd holds on the
	// file (default 1s); past it Check returns ErrLocked.
	Timeout time.Duration
	// ResultFiles names the result files whose committed lengths b records
	// (b.OutLen, b.ErrLen); nil skips the comparison with their sizes.
	ResultFiles func(b *Batch) (output, errors string)
	// Retiring checks one retiring record (see PutRetiring); nil accepts any.
	Retiring func(name string, value []byte) error
}

// Problem is one broken invariant of the ledger.
type Problem struct {
	Batch   string // the batch id, or "" for the file as a whole
	Field   string // what is wrong: a Batch field's JSON name, "done", "names", "suspects", "retiring", "bbolt", "meta"
	Message string
}

func (p Problem) String() string {
	if p.Batch == "" {
		return fmt.Sprintf("%s: %s", p.Field, p.Message)
	}
	return fmt.Sprintf("%s: %s: %s", p.Batch, p.Field, p.Message)
}

// CheckReport is what Check found.
type CheckReport struct {
	Batches  int
	Retiring int // interrupted moves to done, which the next start finishes
	Problems []Problem
}

// OK reports whether no problem was found.
func (r *CheckReport) OK() bool { return len(r.Problems) == 0 }

func (r *CheckReport) add(batch, field, format string, args ...any) {
	r.Problems = append(r.Problems, Problem{Batch: batch, Field: field, Message: fmt.Sprintf(format, args...)})
}

// Check verifies, without changing it, the ledger file at path: bbolt's own
// consistency check, and the ledger's invariants. For each batch: its
// record decodes under its own id; its done set counts completed + failed
// lines; its status is known and has its timestamp;
// its committed result lengths fit in the files they describe. Every name
// points at a batch, every done set belongs to one, and every retiring
// record can be finished.
//
// A file it cannot read returns an error: a *DamagedError, or ErrLocked
// when a running batchd holds it. Problems found go in the report.
func Check(path string, opts CheckOptions) (*CheckReport, error) {
	if _, err := os.Lstat(path); err != nil { // a link is refused below
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	var boltErrs []string
	db, h, err := openVerified(path, &bolt.Options{ReadOnly: true, PreLoadFreelist: true, Timeout: opts.Timeout, FreelistType: bolt.FreelistMapType}, &boltErrs)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rep := &CheckReport{}
	if h.otherFault != "" {
		rep.add("", "meta", "meta page %d is not valid (%s); bbolt uses meta page %d (transaction %d)", h.otherPage, h.otherFault, h.use.page, h.use.txid)
	}
	for _, e := range boltErrs {
		rep.add("", "bbolt", "%s", e)
	}
	err = db.View(func(tx *bolt.Tx) error {
		checkTx(tx, opts, rep)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check ledger %s: %w", path, err)
	}
	return rep, nil
}

func checkTx(tx *bolt.Tx, opts CheckOptions, rep *CheckReport) {
	buckets := map[string]*bolt.Bucket{}
	for _, name := range [][]byte{bucketBatches, bucketDone, bucketRetiring, bucketNames} {
		if buckets[string(name)] = tx.Bucket(name); buckets[string(name)] == nil {
			rep.add("", string(name), "bucket missing")
		}
	}
	batches, done, retiring, names := buckets[string(bucketBatches)], buckets[string(bucketDone)], buckets[string(bucketRetiring)], buckets[string(bucketNames)]
	if batches != nil {
		batches.ForEach(func(k, v []byte) error {
			rep.Batches++
			id := string(k)
			var b Batch
			if err := json.Unmarshal(v, &b); err != nil {
				rep.add(id, "record", "does not decode: %v", err)
				return nil
			}
			if b.ID != id {
				rep.add(id, "id", "the record under this key says %q", b.ID)
			}
			var set *bolt.Bucket
			if done != nil {
				set = done.Bucket(k)
			}
			checkBatch(&b, set, opts, rep)
			return nil
		})
	}
	if done != nil {
		done.ForEach(func(k, v []byte) error {
			if v != nil {
				rep.add(string(k), "done", "a value where a done set (a bucket) belongs")
			} else if batches == nil || batches.Get(k) == nil {
				rep.add(string(k), "done", "a done set for a batch the ledger does not have")
			}
			return nil
		})
	}
	if names != nil {
		names.ForEach(func(k, v []byte) error {
			if batches == nil || batches.Get(v) == nil {
				rep.add(string(v), "names", "name %q points at a batch the ledger does not have", k)
			}
			return nil
		})
	}
	if sus := tx.Bucket(bucketSuspects); sus != nil { // optional: ledgers before it lack it
		sus.ForEach(func(k, v []byte) error {
			if len(k) < 6 || k[len(k)-5] != 0 || len(v) != 1 {
				rep.add("", "suspects", "entry %q is not a suspect line", k)
			} else if id := k[:len(k)-5]; batches == nil || batches.Get(id) == nil {
				rep.add(string(id), "suspects", "a suspect line of a batch the ledger does not have")
			}
			return nil
		})
	}
	if retiring != nil {
		retiring.ForEach(func(k, v []byte) error {
			rep.Retiring++
			if opts.Retiring != nil {
				if err := opts.Retiring(string(k), v); err != nil {
					rep.add("", "retiring", "record of %q cannot be finished: %v", k, err)
				}
			}
			return nil
		})
	}
}

func checkBatch(b *Batch, set *bolt.Bucket, opts CheckOptions, rep *CheckReport) {
	id := b.ID
	if b.CreatedAt == 0 {
		rep.add(id, "created_at", "not set")
	}
	if st, ok := statusTime[b.Status]; !ok {
		rep.add(id, "status", "unknown status %q", b.Status)
	} else if *st.at(b) == 0 {
		rep.add(id, st.field, "not set, but the status is %s", b.Status)
	}
	if b.Completed < 0 || b.Failed < 0 || b.Completed+b.Failed > b.Total {
		rep.add(id, "request_counts", "completed %d + failed %d do not fit in total %d", b.Completed, b.Failed, b.Total)
	}
	// Line numbers count blank lines, which are not requests: a done line
	// may lie past total.
	count := 0
	if set != nil {
		set.ForEach(func(k, v []byte) error {
			if len(k) != 4 || len(v) > linesPerChunk/8 {
				rep.add(id, "done", "chunk %x holds %d bytes: not a done-set chunk", k, len(v))
				return nil
			}
			for _, x := range v {
				count += bits.OnesCount8(x)
			}
			return nil
		})
	}
	if count != b.Completed+b.Failed {
		rep.add(id, "done", "%d lines marked done, but request_counts completed %d + failed %d = %d", count, b.Completed, b.Failed, b.Completed+b.Failed)
	}
	if opts.ResultFiles == nil {
		return
	}
	out, errs := opts.ResultFiles(b)
	for _, f := range []struct {
		field, path string
		n           int64
	}{{"out_len", out, b.OutLen}, {"err_len", errs, b.ErrLen}} {
		st, err := os.Stat(f.path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			// A finished batch whose files are gone runs again when its
			// content comes back; one in progress cannot resume.
			if f.n > 0 && !terminal(b.Status) {
				rep.add(id, f.field, "%d bytes committed, but %s does not exist", f.n, f.path)
			}
		case err != nil:
			rep.add(id, f.field, "%v", err)
		case st.Size() < f.n:
			rep.add(id, f.field, "%d bytes committed, but %s has only %d", f.n, f.path, st.Size())
		}
	}
}
