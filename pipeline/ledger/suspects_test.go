package ledger

import (
	"path/filepath"
	"testing"
)

// Suspect lines count unclean stops per line, survive a reopen, leave with
// their batch, and the checker names one whose batch is gone.
func TestSuspects(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"batch_a", "batch_ab"} { // one id a prefix of the other
		if err := l.Put(&Batch{ID: id, Name: id, Status: "in_progress", Total: 9, CreatedAt: 1, InProgressAt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	a3, a7, ab3 := LineRef{"batch_a", 3}, LineRef{"batch_a", 7}, LineRef{"batch_ab", 3}
	counts, err := l.AddSuspects([]LineRef{a3, a7, a3})
	if err != nil || counts[a3] != 1 || counts[a7] != 1 {
		t.Fatalf("first stop: %v %v (a line named twice counts once)", counts, err)
	}
	if counts, err = l.AddSuspects([]LineRef{a3, ab3}); err != nil || counts[a3] != 2 || counts[ab3] != 1 {
		t.Fatalf("second stop: %v %v", counts, err)
	}
	l.Close()
	if l, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, err := l.Suspects("batch_a")
	if err != nil || len(got) != 2 || got[3] != 2 || got[7] != 1 {
		t.Fatalf("batch_a after reopen: %v %v, want {3:2 7:1}", got, err)
	}
	if err := l.Delete("batch_a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Suspects("batch_a"); len(got) != 0 {
		t.Fatalf("batch_a's suspects outlived it: %v", got)
	}
	if got, _ := l.Suspects("batch_ab"); len(got) != 1 || got[3] != 1 {
		t.Fatalf("deleting batch_a took batch_ab's suspects: %v", got)
	}
	// An orphan (written as a crash between two transactions could not,
	// but a damaged file might).
	if _, err := l.AddSuspects([]LineRef{{"batch_gone", 1}}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	rep, err := Check(path, CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 || rep.Problems[0].Batch != "batch_gone" || rep.Problems[0].Field != "suspects" {
		t.Fatalf("check: %q, want one problem naming batch_gone's suspect line", rep.Problems)
	}
}
