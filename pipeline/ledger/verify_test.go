package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// sampleLedger writes a ledger through Open and Commit with batches whose
// done sets span many pages, and returns the file's bytes.
func sampleLedger(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		b := &Batch{ID: fmt.Sprintf("batch_%03d", i), Name: fmt.Sprint("n", i), Status: "in_progress", Gen: 1, Total: 100_000, CreatedAt: 1, InProgressAt: 1}
		done := NewBitmap()
		for n := 1; n <= 100_000; n += 3 {
			done.Set(n)
			b.Completed++
		}
		if err := l.Commit(b, done, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// usedLeaf returns a leaf page of a ledger file that is in use and not the
// root.
func usedLeaf(t *testing.T, raw []byte) int {
	t.Helper()
	path := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	leaf := 0
	db.View(func(tx *bolt.Tx) error {
		for id := 2; leaf == 0; {
			info, err := tx.Page(id)
			if err != nil || info == nil {
				return err
			}
			if info.Type == "leaf" && uint64(id) != readMeta(raw, 0).root && uint64(id) != readMeta(raw[pageSizeOf(t, raw):], 1).root {
				leaf = id
			}
			id += 1 + info.OverflowCount
		}
		return nil
	})
	if leaf == 0 {
		t.Fatal("the sample ledger has no leaf page besides the root")
	}
	return leaf
}

// swapKeys returns raw with the keys of two batch records swapped where
// they lie, breaking the order of keys that bbolt's own check verifies,
// while every page stays readable.
func swapKeys(t *testing.T, raw []byte) []byte {
	t.Helper()
	b := append([]byte(nil), raw...)
	i := bytes.Index(b, []byte(`batch_003{"id"`))
	j := bytes.Index(b, []byte(`batch_004{"id"`))
	if i < 0 || j < 0 {
		t.Fatal("the sample ledger's records are not where swapKeys looks")
	}
	copy(b[i+6:], "004")
	copy(b[j+6:], "003")
	return b
}

// pageSizeOf reads the page size from meta page 0 of a whole file.
func pageSizeOf(t *testing.T, raw []byte) int {
	t.Helper()
	m := readMeta(raw, 0)
	if m.invalid != "" {
		t.Fatalf("sample ledger: meta page 0: %s", m.invalid)
	}
	return int(m.pageSize)
}

// A damaged ledger file is refused with an error naming it and saying what
// to do, whatever the damage: it never crashes the process (SIGBUS, bbolt
// assertions) and is never taken for an empty ledger.
func TestOpenRefusesADamagedFile(t *testing.T) {
	raw := sampleLedger(t)
	ps := pageSizeOf(t, raw)
	if len(raw) < 16*ps {
		t.Fatalf("sample ledger is only %d pages; the cases below need more", len(raw)/ps)
	}
	m0, m1 := readMeta(raw, 0), readMeta(raw[ps:], 1)
	use := m0
	if m1.txid > m0.txid {
		use = m1
	}
	root := int(use.root)
	corrupt := func(f func(b []byte)) []byte {
		b := append([]byte(nil), raw...)
		f(b)
		return b
	}
	cases := []struct {
		name      string
		file      []byte
		want      string // in the problem
		boltFinds bool   // bbolt's own check finds it: Check reads the file
	}{
		{"empty", nil, "empty", false},
		{"8KiB", raw[:8192], "cut short", false},
		{"half", raw[:len(raw)/2/ps*ps], "cut short", false},
		{"one byte off a page", raw[:len(raw)-1], "whole number", false},
		{"one byte more", append(append([]byte(nil), raw...), 0), "whole number", false},
		{"both meta pages zeroed", corrupt(func(b []byte) { clear(b[:2*ps]) }), "neither meta page", false},
		{"both meta checksums wrong", corrupt(func(b []byte) {
			b[pageHeaderSize+40] ^= 1 // pgid of meta 0
			b[ps+pageHeaderSize+40] ^= 1
		}), "checksum", false},
		{"root page garbage", corrupt(func(b []byte) {
			rng := rand.New(rand.NewPCG(1, 2))
			for i := root * ps; i < (root+1)*ps; i++ {
				b[i] = byte(rng.Uint32())
			}
		}), "", false},
		{"every data page zeroed", corrupt(func(b []byte) { clear(b[2*ps:]) }), "", false},
		{"a leaf page zeroed", corrupt(func(b []byte) {
			leaf := usedLeaf(t, raw)
			clear(b[leaf*ps : (leaf+1)*ps])
		}), "says it is page 0", false},
		{"two keys swapped", swapKeys(t, raw), "consistency check failed", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			if err := os.WriteFile(path, c.file, 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := Open(path)
			if err == nil {
				l.Close()
				t.Fatal("Open accepted a damaged ledger")
			}
			var de *DamagedError
			if !errors.Is(err, ErrDamaged) || !errors.As(err, &de) {
				t.Fatalf("Open: %v; want ErrDamaged", err)
			}
			msg := err.Error()
			for _, want := range []string{path, c.want, "backup", "move it aside", "batchd ledger check"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the error does not say %q:\n%s", want, msg)
				}
			}
			// Check reads what bbolt can and reports its findings as
			// problems; a file bbolt cannot read is an error.
			rep, err := Check(path, CheckOptions{})
			switch {
			case c.boltFinds && err == nil:
				if len(rep.Problems) == 0 || rep.Problems[0].Field != "bbolt" {
					t.Errorf("Check: %v; want bbolt's findings", rep.Problems)
				}
			case !errors.Is(err, ErrDamaged):
				t.Errorf("Check: %v; want ErrDamaged", err)
			}
			after, err := os.ReadFile(path)
			if err != nil || string(after) != string(c.file) {
				t.Errorf("the refused file was changed (%d bytes, was %d): %v", len(after), len(c.file), err)
			}
		})
	}
}

// A damaged file big enough to be compacted is refused before it is copied.
func TestCompactIfWorthRefusesADamagedFile(t *testing.T) {
	raw := sampleLedger(t)
	path := filepath.Join(t.TempDir(), "ledger.db")
	// The meta pages of a real ledger, then 20 MiB of zeros: big, whole
	// pages, but the pages in use are blank.
	if err := os.WriteFile(path, append(raw[:8192:8192], make([]byte, 20<<20)...), 0o600); err != nil {
		t.Fatal(err)
	}
	if done, err := CompactIfWorth(path); done || !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), path) {
		t.Fatalf("CompactIfWorth: %v %v; want ErrDamaged naming the file", done, err)
	}
	if _, err := os.Stat(path + ".compact"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a compaction copy was left: %v", err)
	}
}

// One meta page torn (as a crash during a commit leaves it) is what bbolt's
// two meta pages are for: the ledger opens at the other one, and Check says
// which page it fell back from.
func TestOneBadMetaPageFallsBack(t *testing.T) {
	raw := sampleLedger(t)
	ps := pageSizeOf(t, raw)
	m0, m1 := readMeta(raw, 0), readMeta(raw[ps:], 1)
	newer := 0
	if m1.txid > m0.txid {
		newer = 1
	}
	b := append([]byte(nil), raw...)
	clear(b[newer*ps+pageHeaderSize : newer*ps+pageHeaderSize+metaSize])
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(path, CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 || rep.Problems[0].Field != "meta" || !strings.Contains(rep.Problems[0].Message, fmt.Sprintf("meta page %d is not valid", newer)) {
		t.Errorf("Check: %v; want one problem naming meta page %d", rep.Problems, newer)
	}
	l, err := Open(path)
	if err != nil {
		t.Fatalf("Open with one good meta page: %v", err)
	}
	defer l.Close()
	bs, err := l.List()
	if err != nil || len(bs) < 39 {
		t.Fatalf("after falling back one transaction: %d batches, %v", len(bs), err)
	}
}

// A ledger file that does not exist is created whole; one that exists but
// is empty is damage (bbolt would silently make it a new, empty ledger).
func TestOpenCreatesAWholeFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	if err := os.WriteFile(path+".new", []byte("left by a crash during creation"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := inspect(path); err != nil {
		t.Fatalf("a new ledger: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("files beside a new ledger: %v", ents)
	}
}

// guard turns a fault reading a mapping past the end of its file (SIGBUS,
// fatal to the process otherwise) into an error.
func TestGuardRecoversAFault(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "short"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ps := os.Getpagesize()
	if err := f.Truncate(int64(ps)); err != nil {
		t.Fatal(err)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, 2*ps, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	defer syscall.Munmap(m)
	var got byte
	panicked, err := guard(func() error {
		got = m[ps+1] // past the end of the file
		return nil
	})
	if panicked == nil || err != nil {
		t.Fatalf("guard: panicked %v, err %v (read %d); want the fault as an error", panicked, err, got)
	}
	panicked, err = guard(func() error { panic("bbolt assertion") })
	if panicked == nil || !strings.Contains(panicked.Error(), "bbolt assertion") || err != nil {
		t.Fatalf("guard of a panic: %v %v", panicked, err)
	}
}

// damageRoot writes a small ledger whose root page edit
// changes, and fails the test unless Open and Check refuse it with a
// *DamagedError that says want.
func damageRoot(t *testing.T, want string, edit func(root []byte)) {
	t.Helper()
	raw := smallLedger(t, 1)
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	ps := int(h.use.pageSize)
	edit(raw[int(h.use.root)*ps : int(h.use.root+1)*ps])
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, open := range map[string]func() error{
		"Open": func() error {
			l, err := Open(path)
			if l != nil {
				l.Close()
			}
			return err
		},
		"Check": func() error { _, err := Check(path, CheckOptions{}); return err },
	} {
		if err := open(); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: want a *DamagedError that says %q, got %v", name, want, err)
		}
	}
}

// A damaged inline bucket (a small bucket kept inside its parent's page)
// passed reading and bbolt's check, but its page id sent the first write
// outside the mapping and killed the process (found by FuzzLedgerOpen):
// Open and Check refuse it instead.
func TestOpenRefusesADamagedInlineBucket(t *testing.T) {
	damageRoot(t, "inline bucket", func(page []byte) {
		key := bytes.Index(page, []byte("retiring")) // empty: inline
		if key < 0 {
			t.Fatal("no inline bucket retiring on the root page")
		}
		id := page[key+len("retiring")+bucketHeader:]
		copy(id, []byte{0, 0x60, 0x8e, 0xab, 0xbb, 0x9f, 0, 0}) // page 0x9fbbab8e6000
	})
}

// A tree page whose header gives an overflow far past the file made
// bbolt's check loop over four billion page ids, holding Open and `batchd
// ledger check` for minutes while its memory grew (found by
// FuzzLedgerOpen): it is refused at once.
func TestOpenRefusesAnOverflowPastTheFile(t *testing.T) {
	damageRoot(t, "past the", func(page []byte) { copy(page[12:], []byte{0xff, 0xff, 0xff, 0xff}) })
}
