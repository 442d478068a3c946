package folder_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/store/folder"
	"github.com/batchd/batchd/store/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, storetest.Harness{New: func(t *testing.T) storetest.Fixture {
		root := t.TempDir()
		dir := func(d string) string { return filepath.Join(root, d) }
		for _, d := range []string{"inbox", "outbox", "done"} {
			if err := os.MkdirAll(dir(d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return storetest.Fixture{
			Put: func(t *testing.T, d, base string, data []byte) {
				if err := os.WriteFile(filepath.Join(dir(d), base), data, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			Get: func(t *testing.T, d, base string) ([]byte, bool) {
				data, err := os.ReadFile(filepath.Join(dir(d), base))
				if errors.Is(err, os.ErrNotExist) {
					return nil, false
				}
				if err != nil {
					t.Fatal(err)
				}
				return data, true
			},
			Open: func(t *testing.T, name string) pipeline.Store {
				return folder.New(name, filepath.Join(dir("inbox"), name+".jsonl"), dir("outbox"), dir("done"))
			},
			Stop: func(*testing.T, pipeline.Store, error) {},
		}
	}})
}

// A crash between the retiring record and the input's move leaves the
// input in the inbox: finishing that retire must leave its options with
// it (they are part of the batch's identity when it runs again). Once the
// input moved, the options follow.
func TestFinishRetireLeavesOptionsOfAnUnmovedInput(t *testing.T) {
	root := t.TempDir()
	inbox, done := filepath.Join(root, "inbox"), filepath.Join(root, "done")
	for _, d := range []string{inbox, done} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	input, options := filepath.Join(inbox, "a.jsonl"), filepath.Join(inbox, "a.options.json")
	for path, data := range map[string]string{input: "{}\n", options: `{"metadata":{"k":"v"}}`} {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st := folder.New("a", input, filepath.Join(root, "outbox"), done)
	rec, err := st.RetireRecord()
	if err != nil {
		t.Fatal(err)
	}
	if err := folder.FinishRetire("a", rec); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(options); err != nil {
		t.Fatalf("the options left the inbox while their input stayed: %v", err)
	}
	if err := os.Rename(input, filepath.Join(done, "a.jsonl")); err != nil {
		t.Fatal(err)
	}
	if err := folder.FinishRetire("a", rec); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(done, "a.options.json")); err != nil {
		t.Fatalf("the options did not follow the moved input: %v", err)
	}
}

// Unretire brings a retired input back with its options and a retry mark
// (the mark first: an input in the inbox never lacks it); the retire that
// ends the rerun removes the mark again. An input not in done/ is
// ErrNotRetired and changes nothing.
func TestUnretireAndRetireAgain(t *testing.T) {
	root := t.TempDir()
	dir := func(d string) string { return filepath.Join(root, d) }
	for _, d := range []string{"inbox", "outbox", "done"} {
		if err := os.MkdirAll(dir(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := folder.Unretire("a", "a.jsonl", dir("inbox"), dir("done")); !errors.Is(err, folder.ErrNotRetired) {
		t.Fatalf("unretire of an input not in done/: %v, want ErrNotRetired", err)
	}
	if ents, _ := os.ReadDir(dir("inbox")); len(ents) != 0 {
		t.Fatalf("a refused unretire left %d entries in the inbox", len(ents))
	}
	for base, data := range map[string]string{"a.jsonl": "{}\n", "a.options.json": `{"metadata":{"k":"v"}}`} {
		if err := os.WriteFile(filepath.Join(dir("done"), base), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := folder.Unretire("a", "a.jsonl", dir("inbox"), dir("done")); err != nil {
		t.Fatal(err)
	}
	for _, base := range []string{"a.jsonl", "a.options.json", "a.retry"} {
		if _, err := os.Stat(filepath.Join(dir("inbox"), base)); err != nil {
			t.Fatalf("after unretire: %v", err)
		}
		if _, err := os.Stat(filepath.Join(dir("done"), base)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("after unretire %s is still in done/ (%v)", base, err)
		}
	}
	st := folder.New("a", filepath.Join(dir("inbox"), "a.jsonl"), dir("outbox"), dir("done"))
	if err := st.Retire(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir("inbox"), "a.retry")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the retry mark outlived the rerun's retire (%v)", err)
	}
	for _, base := range []string{"a.jsonl", "a.options.json"} {
		if _, err := os.Stat(filepath.Join(dir("done"), base)); err != nil {
			t.Fatalf("after the second retire: %v", err)
		}
	}
}

// A power cut between the retire move's rename and the inbox's fsync
// leaves the input (or its options) under both names, one file:
// FinishRetire finishes the move (a rename between two names of one file
// does nothing), and the cancel request goes with it. An input that stays in the
// inbox (the cut came before the move) keeps its cancel request: it runs
// again, cancelled as before.
func TestFinishRetireAfterACutMove(t *testing.T) {
	root := t.TempDir()
	inbox, done := filepath.Join(root, "inbox"), filepath.Join(root, "done")
	for _, d := range []string{inbox, done} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	input, cancel := filepath.Join(inbox, "a.jsonl"), filepath.Join(inbox, "a.cancel")
	options := filepath.Join(inbox, "a.options.json")
	for path, data := range map[string]string{input: "{}\n", cancel: ""} {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := folder.New("a", input, filepath.Join(root, "outbox"), done).RetireRecord()
	if err != nil {
		t.Fatal(err)
	}
	if err := folder.FinishRetire("a", rec); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cancel); err != nil {
		t.Fatalf("the cancel request of an input that stays was removed: %v", err)
	}
	if err := os.Link(input, filepath.Join(done, "a.jsonl")); err != nil {
		t.Fatal(err)
	}
	// The cut came during the options' move too: they are at both names.
	if err := os.WriteFile(options, []byte(`{"metadata":{"k":"v"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err = folder.New("a", input, filepath.Join(root, "outbox"), done).RetireRecord()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Link(options, filepath.Join(done, "a.options.json")); err != nil {
		t.Fatal(err)
	}
	if err := folder.FinishRetire("a", rec); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{input, cancel, options} {
		if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after the move was finished (%v)", gone, err)
		}
	}
	if _, err := os.Stat(filepath.Join(done, "a.jsonl")); err != nil {
		t.Errorf("done/a.jsonl: %v", err)
	}
}
