package dir

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/internal/syncbuf"
	"github.com/batchd/batchd/watcher"
)

// nextRefused returns the next event, which must be Refused with code.
func nextRefused(t *testing.T, w *Watcher, code string) watcher.Event {
	t.Helper()
	ev := next(t, w)
	if ev.Kind != watcher.Refused || ev.Code != code || ev.Message == "" {
		t.Fatalf("event = %+v, want a Refused event with code %s", ev, code)
	}
	return ev
}

// settleSentinel drops a sentinel and fails if anything comes before it:
// by then several rescans have seen every other entry again.
func settleSentinel(t *testing.T, w *Watcher, inbox, staging string) {
	t.Helper()
	drop(t, inbox, staging, "sentinel.jsonl", "{}\n")
	if before := until(t, w, watcher.Input, "sentinel"); len(before) != 0 {
		t.Fatalf("delivered again or wrongly: %+v", before)
	}
}

// A name whose derived files would not fit the file-name limit is refused
// once, under a short name; the longest usable name is delivered.
func TestLongNameRefused(t *testing.T) {
	t.Parallel()
	inbox, staging := inboxes(t)
	w := start(t, New(testConfig(t, inbox)))

	long := strings.Repeat("n", 240)
	path := drop(t, inbox, staging, long+".jsonl", "{}\n")
	ev := nextRefused(t, w, filecontract.CodeNameTooLong)
	if ev.Path != path || ev.Name != filecontract.SafeName(long) || ev.Name == long || ev.Format != "jsonl" {
		t.Fatalf("event = %+v", ev)
	}
	settleSentinel(t, w, inbox, staging)

	fits := strings.Repeat("f", filecontract.MaxNameBytes)
	drop(t, inbox, staging, fits+".jsonl", "{}\n")
	if ev := next(t, w); ev.Kind != watcher.Input || ev.Name != fits {
		t.Fatalf("event = %+v, want the input %s", ev, fits)
	}
}

func TestBadNamesRefused(t *testing.T) {
	t.Parallel()
	inbox, staging := inboxes(t)
	w := start(t, New(testConfig(t, inbox)))
	for _, name := range []string{"line\nbreak", "tab\there", "bad\xffutf8", "esc\x1b[31m"} {
		path := drop(t, inbox, staging, name+".jsonl", "{}\n")
		ev := nextRefused(t, w, filecontract.CodeInvalidName)
		if ev.Path != path || ev.Name != filecontract.SafeName(name) {
			t.Fatalf("event = %+v for %q", ev, name)
		}
		if code, _ := filecontract.CheckName(ev.Name); code != "" {
			t.Fatalf("SafeName(%q) = %q, itself refused: %s", name, ev.Name, code)
		}
	}
}

// A symbolic link is refused whatever it points at (here a complete input).
func TestSymlinkRefused(t *testing.T) {
	t.Parallel()
	inbox, staging := inboxes(t)
	w := start(t, New(testConfig(t, inbox)))
	target := filepath.Join(staging, "secret.jsonl")
	writeFile(t, target, "{}\n")
	link := filepath.Join(inbox, "link.jsonl")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	ev := nextRefused(t, w, filecontract.CodeNotRegular)
	if ev.Path != link || ev.Name != "link" || !strings.Contains(ev.Message, "symbolic link") {
		t.Fatalf("event = %+v", ev)
	}
	settleSentinel(t, w, inbox, staging)
}

// A FIFO named like an input is refused and never opened: the watcher goes
// on delivering other files.
func TestFIFORefused(t *testing.T) {
	t.Parallel()
	inbox, staging := inboxes(t)
	w := start(t, New(testConfig(t, inbox)))
	fifo := filepath.Join(inbox, "x.jsonl")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	ev := nextRefused(t, w, filecontract.CodeNotRegular)
	if ev.Path != fifo || !strings.Contains(ev.Message, "FIFO") {
		t.Fatalf("event = %+v", ev)
	}
	settleSentinel(t, w, inbox, staging)
}

// A directory named like an input is logged once and otherwise ignored.
func TestDirectoryLoggedOnce(t *testing.T) {
	t.Parallel()
	inbox, staging := inboxes(t)
	var logs syncbuf.Buffer
	cfg := testConfig(t, inbox)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	w := start(t, New(cfg))
	if err := os.Mkdir(filepath.Join(inbox, "d.jsonl"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Two sentinels: several full rescans see the directory.
	settleSentinel(t, w, inbox, staging)
	os.Remove(filepath.Join(inbox, "sentinel.jsonl"))
	drop(t, inbox, staging, "sentinel2.jsonl", "{}\n")
	if before := until(t, w, watcher.Input, "sentinel2"); len(before) != 0 {
		t.Fatalf("delivered: %+v", before)
	}
	if n := strings.Count(logs.String(), "d.jsonl"); n != 1 {
		t.Fatalf("the directory was logged %d times, want once:\n%s", n, logs.String())
	}
}

// An input that stays incomplete past IncompleteAfter is refused; one
// completed in time is not.
func TestIncompleteRefusedAfterGrace(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ base, content, says string }{
		{"cut.jsonl", "{}\n{\"a\":1}", "no final newline"},
		{"cut.json", "{\"requests\":[{}]", "'}'"},
	} {
		t.Run(tt.base, func(t *testing.T) {
			t.Parallel()
			inbox, staging := inboxes(t)
			cfg := testConfig(t, inbox)
			cfg.IncompleteAfter = 300 * time.Millisecond
			w := start(t, New(cfg))
			path := drop(t, inbox, staging, tt.base, tt.content)
			ev := nextRefused(t, w, filecontract.CodeIncomplete)
			if ev.Path != path || ev.Name != "cut" || !strings.Contains(ev.Message, tt.says) ||
				!strings.Contains(ev.Message, "rename it into the inbox") {
				t.Fatalf("event = %+v", ev)
			}
			settleSentinel(t, w, inbox, staging)
		})
	}
}

// A producer writing in place, pausing mid-line for longer than Settle but
// less than IncompleteAfter, gets its input delivered once it is done.
func TestSlowWriterWithinGraceDelivered(t *testing.T) {
	t.Parallel()
	inbox, _ := inboxes(t)
	cfg := testConfig(t, inbox)
	cfg.IncompleteAfter = 20 * time.Second
	w := start(t, New(cfg))
	path := filepath.Join(inbox, "slow.jsonl")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, chunk := range []string{"{\"custom_id\":", "\"a\"}\n{\"custom", "_id\":\"b\"}"} {
		if _, err := f.WriteString(chunk); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * cfg.Settle) // the producer's pause, not a synchronisation
	}
	select {
	case ev := <-w.Events():
		t.Fatalf("delivered before the writer finished: %+v", ev)
	default:
	}
	if _, err := f.WriteString("\n"); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w); ev.Kind != watcher.Input || ev.Path != path {
		t.Fatalf("event = %+v, want the input", ev)
	}
}
