package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// fillLedger writes n batches with done sets of lines lines each to a new
// ledger at path and returns it open.
func fillLedger(t *testing.T, path string, n, lines int) *Ledger {
	t.Helper()
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		b := &Batch{ID: fmt.Sprintf("batch_%04d", i), Name: fmt.Sprintf("b%04d", i), Status: "in_progress", Total: lines, Gen: 1,
			CreatedAt: 1700000000, InProgressAt: 1700000001}
		done := NewBitmap()
		for line := 1; line <= lines; line += 2 {
			done.Set(line)
		}
		b.Completed = done.Len()
		if err := l.Commit(b, done, false); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// snapshot is every batch and its done set, for comparing two ledgers.
func snapshot(t *testing.T, l *Ledger) map[string][2]any {
	t.Helper()
	bs, err := l.List()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]any{}
	for _, b := range bs {
		done, err := l.Done(b.ID)
		if err != nil {
			t.Fatal(err)
		}
		var set []int
		for line := 1; line <= b.Total; line++ {
			if done.Has(line) {
				set = append(set, line)
			}
		}
		out[b.ID] = [2]any{*b, set}
	}
	return out
}

// After most batches are deleted, Compact shrinks the file and keeps every
// remaining batch and done set; Backup of the open ledger and BackupFile of
// a closed one give a file that opens with the same content.
func TestCompactAndBackup(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	l := fillLedger(t, path, 200, 20000)
	for i := range 190 {
		if err := l.Delete(fmt.Sprintf("batch_%04d", i)); err != nil {
			t.Fatal(err)
		}
	}
	want := snapshot(t, l)
	if len(want) != 10 {
		t.Fatalf("%d batches left, want 10", len(want))
	}

	// Online: a copy from the open ledger.
	var online bytes.Buffer
	var announced int64
	n, err := l.Backup(&online, func(size int64) { announced = size })
	if err != nil || n != announced || int64(online.Len()) != n {
		t.Fatalf("Backup: %d bytes, announced %d, buffer %d, err %v", n, announced, online.Len(), err)
	}
	// Offline while it is open here: bbolt's lock refuses.
	if _, err := BackupFile(path, &bytes.Buffer{}, 50*time.Millisecond); !errors.Is(err, ErrLocked) {
		t.Errorf("BackupFile of an open ledger: %v, want ErrLocked", err)
	}
	if _, err := Compact(path, 50*time.Millisecond); !errors.Is(err, ErrLocked) {
		t.Errorf("Compact of an open ledger: %v, want ErrLocked", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var offline bytes.Buffer
	if _, err := BackupFile(path, &offline, time.Second); err != nil {
		t.Fatal(err)
	}
	for what, copy := range map[string][]byte{"online": online.Bytes(), "offline": offline.Bytes()} {
		p := filepath.Join(dir, what+".db")
		if err := os.WriteFile(p, copy, 0o600); err != nil {
			t.Fatal(err)
		}
		if rep, err := Check(p, CheckOptions{}); err != nil || !rep.OK() || rep.Batches != 10 {
			t.Errorf("%s copy: check %+v, %v", what, rep, err)
		}
		c, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := snapshot(t, c); !reflect.DeepEqual(got, want) {
			t.Errorf("%s copy differs from the ledger", what)
		}
		c.Close()
	}

	res, err := Compact(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if res.After != st.Size() || res.After*2 > res.Before {
		t.Errorf("compact: %d bytes before, %d after (file %d): want it at least halved", res.Before, res.After, st.Size())
	}
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Errorf("compact left its temporary file: %v", err)
	}
	l, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := snapshot(t, l); !reflect.DeepEqual(got, want) {
		t.Errorf("the compacted ledger lost or changed batches: %d of %d", len(got), len(want))
	}
}
