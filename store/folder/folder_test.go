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
	storetest.Run(t, storetest.Harness{New: func(t *testing.T) storetest.Source {
		root := t.TempDir()
		dir := func(d string) string { return filepath.Join(root, d) }
		for _, d := range []string{"inbox", "outbox", "done"} {
			if err := os.MkdirAll(dir(d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return storetest.Source{
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
