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
