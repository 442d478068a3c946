package daemon_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// A producer writes NAME.jsonl in place and pauses, longer than settle, in
// the middle: the batch starts on the first lines. When the producer writes
// on, that batch fails as input_changed (it neither publishes results of
// half the file nor moves the file away under the writer), and the complete
// file then runs as a new batch whose results pass `batchd check`.
func TestSlowWriterInPlaceRunsTheWholeFile(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e := newEnv(t, openaitest.Options{Fault: func(n int64, _ *http.Request, _ []byte) openaitest.Fault {
		if n == 1 {
			once.Do(func() { close(entered) })
			<-release
		}
		return openaitest.Fault{}
	}})
	e.open(e.config())
	full := chatBatch(30, "slow")
	cut := strings.Index(full, "slow-10\"") // the first 10 lines
	cut = strings.LastIndex(full[:cut], "\n") + 1
	path := filepath.Join(e.dirs.Inbox, "slow.jsonl")
	if err := os.MkdirAll(e.dirs.Inbox, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(full[:cut]); err != nil {
		t.Fatal(err)
	}
	// The producer pauses: the watcher finds a complete-looking file, and its
	// batch starts.
	select {
	case <-entered:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the batch did not start on the first lines\n%s", e.logs)
	}
	if _, err := f.WriteString(full[cut:]); err != nil {
		t.Fatal(err)
	}
	f.Close()
	close(release)

	var o *pipeline.BatchObject
	waitFor(t, 2*time.Minute, "the whole file to run", func() bool {
		o = e.object("slow")
		if o == nil || o.Status != pipeline.StatusCompleted {
			return false
		}
		_, err := os.Stat(filepath.Join(e.dirs.Done, "slow.jsonl"))
		return err == nil
	})
	if o.RequestCounts.Total != 30 || o.RequestCounts.Completed != 30 {
		t.Fatalf("counts %+v, want 30 completed", o.RequestCounts)
	}
	e.check("slow", "jsonl")
	if raw, _ := os.ReadFile(filepath.Join(e.dirs.Done, "slow.jsonl")); string(raw) != full {
		t.Fatalf("done/slow.jsonl is %d bytes, want the whole %d", len(raw), len(full))
	}
	if !strings.Contains(e.logs.String(), "input changed while its batch ran") {
		t.Fatalf("the first batch did not fail as input_changed\n%s", e.logs)
	}
}
