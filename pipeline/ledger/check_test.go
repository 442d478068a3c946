package ledger

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Check finds each broken invariant, naming the batch and the field, and
// leaves the file as it was.
func TestCheckFindsBrokenInvariants(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	results := filepath.Join(dir, "results")
	if err := os.MkdirAll(results, 0o755); err != nil {
		t.Fatal(err)
	}
	files := func(b *Batch) (string, string) {
		return filepath.Join(results, b.ID+".out"), filepath.Join(results, b.ID+".err")
	}
	put := func(b *Batch, doneLines ...int) {
		t.Helper()
		done := NewBitmap()
		for _, n := range doneLines {
			done.Set(n)
		}
		if err := l.Commit(b, done, false); err != nil {
			t.Fatal(err)
		}
		out, errs := files(b)
		os.WriteFile(out, bytes.Repeat([]byte("x"), 10), 0o644)
		os.WriteFile(errs, nil, 0o644)
	}
	// Sound: a finished batch (with a blank line: line 4 of 3 requests),
	// and one in progress.
	put(&Batch{ID: "batch_ok", Name: "ok", Status: "completed", Total: 3, Completed: 2, Failed: 1, OutLen: 10, CreatedAt: 1, CompletedAt: 2}, 1, 2, 4)
	put(&Batch{ID: "batch_run", Name: "run", Status: "in_progress", Total: 9, Completed: 1, OutLen: 5, CreatedAt: 1, InProgressAt: 1}, 3)
	// Broken.
	put(&Batch{ID: "batch_count", Name: "count", Status: "in_progress", Total: 9, Completed: 2, CreatedAt: 1, InProgressAt: 1}, 1)
	put(&Batch{ID: "batch_time", Name: "time", Status: "cancelled", Total: 1, Failed: 1, CreatedAt: 1}, 1)
	put(&Batch{ID: "batch_len", Name: "len", Status: "in_progress", Total: 5, Completed: 1, OutLen: 11, CreatedAt: 1, InProgressAt: 1}, 1)
	put(&Batch{ID: "batch_gone", Name: "gone", Status: "in_progress", Total: 5, Failed: 1, ErrLen: 7, CreatedAt: 1, InProgressAt: 1}, 2)
	_, errs := files(&Batch{ID: "batch_gone"})
	os.Remove(errs)
	if err := l.PutRetiring("ok", []byte(`{"inbox":"/in","done_dir":"/done"}`)); err != nil {
		t.Fatal(err)
	}
	if err := l.PutRetiring("junk", []byte(`{`)); err != nil {
		t.Fatal(err)
	}
	err = l.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketNames).Put([]byte("lost"), []byte("batch_lost")); err != nil {
			return err
		}
		_, err := tx.Bucket(bucketDone).CreateBucket([]byte("batch_orphan"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	stBefore, _ := os.Stat(path)

	rep, err := Check(path, CheckOptions{
		ResultFiles: files,
		Retiring: func(name string, v []byte) error {
			if !bytes.HasPrefix(v, []byte(`{"inbox"`)) {
				return errors.New("not a record")
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range rep.Problems {
		got = append(got, p.String())
	}
	want := []string{
		"batch_count: done: 1 lines marked done, but request_counts completed 2 + failed 0 = 2",
		"batch_gone: err_len: 7 bytes committed, but " + errs + " does not exist",
		"batch_len: out_len: 11 bytes committed, but " + filepath.Join(results, "batch_len.out") + " has only 10",
		"batch_time: cancelled_at: not set, but the status is cancelled",
		"batch_orphan: done: a done set for a batch the ledger does not have",
		`batch_lost: names: name "lost" points at a batch the ledger does not have`,
		`retiring: record of "junk" cannot be finished: not a record`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if rep.Batches != 6 || rep.Retiring != 2 || rep.OK() {
		t.Errorf("report: %d batches, %d retiring, OK %v", rep.Batches, rep.Retiring, rep.OK())
	}
	after, _ := os.ReadFile(path)
	stAfter, _ := os.Stat(path)
	if !bytes.Equal(before, after) || !stAfter.ModTime().Equal(stBefore.ModTime()) {
		t.Error("Check changed the ledger file")
	}
}

// A ledger that a running process holds is reported as such, after the
// timeout, instead of being waited for.
func TestCheckOfAHeldLedger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := Check(path, CheckOptions{Timeout: 50 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Fatalf("Check of a held ledger: %v; want ErrLocked", err)
	}
	if _, err := Check(filepath.Join(t.TempDir(), "none.db"), CheckOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Check of no file: %v", err)
	}
}
