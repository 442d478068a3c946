package pipeline

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/batchd/batchd/pipeline/ledger"
)

// What the dispatcher leaves in the table survives a process that never
// closed it, is read back by the next open, and a clean close leaves
// nothing. A slot past the table's size grows it (a deeper window).
func TestInflightTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), inflightFile)
	tab, left, err := openInflight(path, 4)
	if err != nil || len(left) != 0 {
		t.Fatalf("fresh table: %v %v", left, err)
	}
	id := "batch_" + string(slices.Repeat([]byte("f"), 64))
	for _, step := range []func() error{
		func() error { return tab.set(0, id, 12) },
		func() error { return tab.set(2, "batch_b", 1<<20) },
		func() error { return tab.set(3, "batch_c", 5) },
		func() error { return tab.clear(3) },
		func() error { return tab.set(9, "batch_d", 1) }, // past the end: grows the table
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	// A crash: the file is not closed; the next start reads it.
	tab2, left, err := openInflight(path, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []ledger.LineRef{{Batch: id, Line: 12}, {Batch: "batch_b", Line: 1 << 20}, {Batch: "batch_d", Line: 1}}
	if !slices.Equal(left, want) {
		t.Fatalf("left in flight: %v, want %v", left, want)
	}
	if err := tab2.set(1, "batch_e", 3); err != nil {
		t.Fatal(err)
	}
	if err := tab2.close(); err != nil {
		t.Fatal(err)
	}
	if _, left, err = openInflight(path, 2); err != nil || len(left) != 0 {
		t.Fatalf("after a clean close: %v %v, want nothing in flight", left, err)
	}
	// Garbage in the file is skipped, not trusted.
	if err := os.WriteFile(path, slices.Repeat([]byte{'R', 0, 0, 0, 1, 250}, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, left, err = openInflight(path, 2); err != nil || len(left) != 0 {
		t.Fatalf("garbage table: %v %v", left, err)
	}
}

// The table is mapped; once the mapping is given up (a store faulted, a
// full disk) slots are written with pwrite, past the end too, and the next
// open reads what either way wrote.
func TestInflightTableWithoutMapping(t *testing.T) {
	path := filepath.Join(t.TempDir(), inflightFile)
	tab, _, err := openInflight(path, 2)
	if err != nil {
		t.Fatal(err)
	}
	if tab.data.Load() == nil {
		t.Fatal("the table is not mapped")
	}
	for _, step := range []func() error{
		func() error { return tab.set(0, "batch_a", 1) },
		func() error { return tab.set(1, "batch_b", 2) },
		func() error { tab.unmap(); return nil },
		func() error { return tab.clear(0) },
		func() error { return tab.set(5, "batch_c", 3) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if tab.grow(64 * inflightSlot) {
		t.Fatal("a table given up on was mapped again")
	}
	_, left, err := openInflight(path, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []ledger.LineRef{{Batch: "batch_b", Line: 2}, {Batch: "batch_c", Line: 3}}
	if !slices.Equal(left, want) {
		t.Fatalf("left in flight: %v, want %v", left, want)
	}
}
