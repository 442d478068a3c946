package ledger

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/internal/fsx"
)

func TestBitmapSetClearHas(t *testing.T) {
	b := NewBitmap()
	for _, n := range []int{1, 8, 9, linesPerChunk, linesPerChunk + 1, 1_000_000} {
		if b.Has(n) {
			t.Fatalf("empty bitmap has %d", n)
		}
		b.Set(n)
		b.Set(n) // idempotent
		if !b.Has(n) {
			t.Fatalf("bitmap lacks %d after Set", n)
		}
	}
	if b.Len() != 6 {
		t.Fatalf("Len = %d, want 6", b.Len())
	}
	b.Clear(9)
	b.Clear(9)
	if b.Has(9) || b.Len() != 5 {
		t.Fatalf("after Clear(9): Has=%v Len=%d", b.Has(9), b.Len())
	}
	if b.Has(0) || b.Has(-3) {
		t.Fatal("non-positive lines are never in the set")
	}
}

func TestCommitAndReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	b := &Batch{ID: "batch_x", Name: "x", Status: "in_progress", Total: 3, Gen: 1}
	done := NewBitmap()
	done.Set(2)
	done.Set(linesPerChunk + 5)
	b.Completed, b.OutLen = 2, 123
	if err := l.Commit(b, done, false); err != nil {
		t.Fatal(err)
	}
	// A second commit writes only what changed since the first.
	done.Set(3)
	if err := l.Commit(b, done, false); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, err := l.Get("batch_x")
	if err != nil {
		t.Fatal(err)
	}
	if got.OutLen != 123 || got.Completed != 2 || got.Name != "x" {
		t.Fatalf("reloaded batch = %+v", got)
	}
	bm, err := l.Done("batch_x")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 3, linesPerChunk + 5} {
		if !bm.Has(n) {
			t.Errorf("reloaded done set lacks line %d", n)
		}
	}
	if bm.Has(1) || bm.Len() != 3 {
		t.Errorf("reloaded done set: Has(1)=%v Len=%d", bm.Has(1), bm.Len())
	}

	// reset replaces the done set wholesale.
	bm.Clear(3)
	if err := l.Commit(got, bm, true); err != nil {
		t.Fatal(err)
	}
	bm2, _ := l.Done("batch_x")
	if bm2.Has(3) || !bm2.Has(2) {
		t.Fatalf("after reset commit: Has(3)=%v Has(2)=%v", bm2.Has(3), bm2.Has(2))
	}

	if _, err := l.Get("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(unknown) = %v, want ErrNotFound", err)
	}
	list, err := l.List()
	if err != nil || len(list) != 1 {
		t.Fatalf("List = %v, %v", list, err)
	}
	if err := l.Delete("batch_x"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Get("batch_x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after Delete: %v", err)
	}
}

func TestSecondOpenFailsFast(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l2, err := Open(path); err == nil {
		l2.Close()
		t.Fatal("a second Open of a held ledger succeeded")
	}
}

// A link planted at the ledger's path is refused, naming the path, whether
// its target is a ledger (another data directory's) or does not exist:
// nothing outside is read, locked, compacted or created through it.
func TestOpenRefusesALink(t *testing.T) {
	outside := t.TempDir()
	other := filepath.Join(outside, "ledger.db")
	l, err := Open(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Put(&Batch{ID: "batch_other", Status: "completed"}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	before, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{other, filepath.Join(outside, "none.db")} {
		path := filepath.Join(t.TempDir(), "ledger.db")
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
		if l, err := Open(path); err == nil {
			l.Close()
			t.Fatalf("a link to %s was opened", target)
		} else if !errors.Is(err, fsx.ErrLink) || !strings.Contains(err.Error(), path) {
			t.Errorf("error %q does not refuse the link at %s", err, path)
		}
		if _, err := CompactIfWorth(path); err != nil {
			t.Errorf("CompactIfWorth of a small file's link: %v", err)
		}
		if _, err := Check(path, CheckOptions{}); !errors.Is(err, fsx.ErrLink) {
			t.Errorf("Check through a link: %v", err)
		}
	}
	if after, _ := os.ReadFile(other); string(after) != string(before) {
		t.Error("the linked ledger changed")
	}
	if _, err := os.Stat(filepath.Join(outside, "none.db")); err == nil {
		t.Error("a ledger was created at a dangling link's target")
	}
}

func BenchmarkCommit1000(b *testing.B) {
	l, err := Open(filepath.Join(b.TempDir(), "ledger.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	batch := &Batch{ID: "batch_bench", Status: "in_progress", Gen: 1}
	done := NewBitmap()
	line := 0
	b.ResetTimer()
	for range b.N {
		for range 1000 {
			line++
			done.Set(line)
		}
		if err := l.Commit(batch, done, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "lines/s")
}

// ByName finds the batch last recorded under a name, and forgets it with
// the batch.
func TestByName(t *testing.T) {
	l, err := Open(filepath.Join(t.TempDir(), "l.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.ByName("x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("empty ledger: %v", err)
	}
	for _, id := range []string{"batch_1", "batch_2"} {
		if err := l.Put(&Batch{ID: id, Name: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := l.ByName("x"); err != nil || b.ID != "batch_2" {
		t.Fatalf("by name: %+v %v", b, err)
	}
	if err := l.Delete("batch_1"); err != nil {
		t.Fatal(err)
	}
	if b, err := l.ByName("x"); err != nil || b.ID != "batch_2" {
		t.Fatalf("after deleting the older one: %+v %v", b, err)
	}
	if err := l.Delete("batch_2"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ByName("x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after deleting it: %v", err)
	}
	// A ledger that cannot be read says so: it does not pass for one
	// without the name.
	if err := l.Put(&Batch{ID: "batch_3", Name: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := l.ByName("x"); err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "batch named x") {
		t.Fatalf("closed ledger: %+v %v", b, err)
	}
}

// A ledger whose records were mostly deleted is compacted to a smaller
// file that still holds the rest.
func TestCompactIfWorth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.db")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	big := make(map[string]string)
	for i := range 25 {
		big[fmt.Sprint(i)] = strings.Repeat("x", 4000)
	}
	for i := range 300 {
		b := &Batch{ID: fmt.Sprintf("batch_%05d", i), Name: fmt.Sprint(i), Metadata: big, Status: "completed"}
		if err := l.Put(b); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 300 {
		if i%100 == 0 {
			continue
		}
		if err := l.Delete(fmt.Sprintf("batch_%05d", i)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	before, _ := os.Stat(path)
	done, err := CompactIfWorth(path)
	if err != nil || !done {
		t.Fatalf("compact: %v %v (file %d bytes)", done, err, before.Size())
	}
	after, _ := os.Stat(path)
	if after.Size()*4 > before.Size() {
		t.Fatalf("compacted %d → %d bytes", before.Size(), after.Size())
	}
	l, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := l.List()
	if err != nil || len(bs) != 3 {
		t.Fatalf("after compaction: %d batches, %v", len(bs), err)
	}
	if b, err := l.ByName("100"); err != nil || b.ID != "batch_00100" {
		t.Fatalf("by name after compaction: %v %v", b, err)
	}
	l.Close()
	if done, err := CompactIfWorth(path); err != nil || done {
		t.Fatalf("a compact ledger compacted again: %v %v", done, err)
	}
}
