package ledger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// smallLedger writes a ledger with 1 KiB pages (the smallest bbolt and
// inspect accept, so that fuzz inputs stay a few KiB) holding batches,
// done sets and a retiring record, and returns its bytes.
func smallLedger(tb testing.TB, batches int) []byte {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "ledger.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{PageSize: minPageSize, FreelistType: bolt.FreelistMapType})
	if err != nil {
		tb.Fatal(err)
	}
	if err := db.Update(createBuckets); err != nil {
		tb.Fatal(err)
	}
	if err := db.Close(); err != nil {
		tb.Fatal(err)
	}
	l, err := Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	for i := range batches {
		b := &Batch{ID: fmt.Sprintf("batch_%d", i), Name: fmt.Sprint("n", i), Format: "jsonl", Status: "in_progress",
			Gen: 1, Total: 300, CreatedAt: 1, InProgressAt: 1, Metadata: map[string]string{"k": "v"}}
		done := NewBitmap()
		for n := 1; n <= 300; n += 2 {
			done.Set(n)
			b.Completed++
		}
		if err := l.Commit(b, done, false); err != nil {
			tb.Fatal(err)
		}
	}
	if batches > 1 {
		if err := l.PutRetiring("old", []byte(`{"id":"batch_0"}`)); err != nil {
			tb.Fatal(err)
		}
		if err := l.Delete("batch_0"); err != nil {
			tb.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// fixMetaChecksums rewrites the checksums of raw's two meta pages, so that
// a mutation of a real ledger gets past them to bbolt's pages. The page
// size is taken from meta page 0.
func fixMetaChecksums(raw []byte) {
	if len(raw) < pageHeaderSize+metaSize {
		return
	}
	ps := int(binary.NativeEndian.Uint32(raw[pageHeaderSize+8:]))
	if ps < minPageSize || ps > maxPageSize {
		ps = minPageSize
	}
	for _, off := range []int{0, ps} {
		if len(raw) < off+pageHeaderSize+metaSize {
			continue
		}
		m := raw[off+pageHeaderSize : off+pageHeaderSize+metaSize]
		h := fnv.New64a()
		h.Write(m[:56])
		binary.NativeEndian.PutUint64(m[56:], h.Sum64())
	}
}

// FuzzLedgerOpen: whatever the bytes of a ledger file, Open and Check
// either read it or refuse it with a *DamagedError naming the file; never a
// panic, a SIGBUS or another error. A file Open accepts takes a commit and
// opens again. With fix set, the meta pages' checksums are recomputed
// first, so that damage reaches the pages behind them.
func FuzzLedgerOpen(f *testing.F) {
	for _, n := range []int{0, 1, 3} {
		raw := smallLedger(f, n)
		f.Add(raw, false)
		f.Add(raw, true)
		f.Add(raw[:len(raw)/2], false)
		f.Add(raw[:len(raw)-minPageSize], true)
		cut := append([]byte(nil), raw...)
		for i := 2 * minPageSize; i < len(cut); i += 97 {
			cut[i] ^= 0x5a
		}
		f.Add(cut, true)
	}
	f.Add([]byte{}, false)
	f.Add([]byte("not a ledger"), false)

	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, fix bool) {
		if fix {
			data = append([]byte(nil), data...)
			fixMetaChecksums(data)
		}
		path := filepath.Join(dir, "ledger.db")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		refused := func(op string, err error) {
			t.Helper()
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), path) {
				t.Fatalf("%s: the error is not a *DamagedError naming the file: %v", op, err)
			}
		}
		rep, err := Check(path, CheckOptions{})
		if err != nil {
			refused("Check", err)
		} else {
			for _, p := range rep.Problems {
				if p.String() == "" {
					t.Fatal("Check: a problem without words")
				}
			}
		}
		l, err := Open(path)
		if err != nil {
			refused("Open", err)
			return
		}
		if _, err := l.List(); err != nil {
			l.Close()
			t.Skipf("List on a file Open accepted: %v", err) // a decode error, reported: not a crash
		}
		b := &Batch{ID: "batch_fuzz", Name: "fuzz", Status: "in_progress", Gen: 1, Total: 9}
		done := NewBitmap()
		done.Set(3)
		if err := l.Commit(b, done, false); err != nil {
			l.Close()
			t.Fatalf("Commit on a file Open accepted: %v", err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l, err = Open(path)
		if err != nil {
			t.Fatalf("reopen after a commit: %v", err)
		}
		defer l.Close()
		got, err := l.Done("batch_fuzz")
		if err != nil || !got.Has(3) || got.Len() != 1 {
			t.Fatalf("reopen after a commit: done set %v, %v", got, err)
		}
	})
}
