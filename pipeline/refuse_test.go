package pipeline_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/store/folder"
)

// Refuse fails a batch under the name it is given and moves the input,
// whatever it is, without opening it.
func TestRefuseWritesAFailedObjectAndMovesTheInput(t *testing.T) {
	e := newEnv(t)
	rejected := filepath.Join(e.dir, "rejected")
	long := strings.Repeat("n", 240)
	fifo := filepath.Join(e.inbox, long+".jsonl")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	st := folder.Refused("short~1234", fifo, e.outbox, rejected)
	identity, err := st.Identity()
	if err != nil {
		t.Fatal(err)
	}
	job := pipeline.Job{Name: "short~1234", Format: "jsonl", Store: st}
	b, err := e.pipe.Refuse(context.Background(), job, identity, "not_a_regular_file", "it is a FIFO")
	if err != nil {
		t.Fatal(err)
	}
	o := e.object("short~1234")
	if o.Status != pipeline.StatusFailed || o.ID != b.ID || o.Errors == nil || o.Errors.Data[0].Code != "not_a_regular_file" ||
		o.Batchd.InputFile != long+".jsonl" || o.FailedAt == nil {
		t.Fatalf("object = %+v", o)
	}
	if _, err := os.Lstat(fifo); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the input is still in the inbox: %v", err)
	}
	if st, err := os.Lstat(filepath.Join(rejected, long+".jsonl")); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("rejected: %v %v", st, err)
	}
	got, err := e.pipe.Ledger().Get(b.ID)
	if err != nil || got.Status != pipeline.StatusFailed || got.Name != "short~1234" {
		t.Fatalf("ledger: %+v %v", got, err)
	}
}

// Run refuses to read an input or options file that is a symbolic link
// (one put in place after the source looked at it).
func TestRunReadsNoLinks(t *testing.T) {
	e := newEnv(t)
	target := filepath.Join(t.TempDir(), "secret.jsonl")
	if err := os.WriteFile(target, []byte(chatLines(1, "s")), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	path := filepath.Join(e.inbox, "link.jsonl")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	job := pipeline.Job{Name: "link", Format: "jsonl", Store: folder.New("link", path, e.outbox, e.done)}
	if _, err := e.pipe.Run(ctx, job); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("Run on a link = %v, want a not-a-regular-file error", err)
	}

	job = e.drop("opts", "jsonl", chatLines(1, "o"), "")
	if err := os.Symlink(target, filepath.Join(e.inbox, "opts.options.json")); err != nil {
		t.Fatal(err)
	}
	o := e.run(job)
	if o.Status != pipeline.StatusFailed || o.Errors == nil || o.Errors.Data[0].Code != "invalid_options" ||
		!strings.Contains(o.Errors.Data[0].Message, "not a regular file") {
		t.Fatalf("object = %+v %+v", o.Status, o.Errors)
	}
	if e.srv.Requests() != 0 {
		t.Fatalf("the engine saw %d requests", e.srv.Requests())
	}
}
