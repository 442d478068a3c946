package dir

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/batchd/batchd/internal/goroutines"
	"github.com/batchd/batchd/watcher"
)

// wait is the generous deadline for an expected event.
const wait = 20 * time.Second

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// inboxes returns an inbox folder (not yet created) and a staging folder on
// the same filesystem for write-then-rename.
func inboxes(t *testing.T) (inbox, staging string) {
	root := t.TempDir()
	staging = filepath.Join(root, "staging")
	if err := os.Mkdir(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "inbox"), staging
}

func testConfig(t *testing.T, inbox string) Config {
	return Config{
		Dir:          inbox,
		Rescan:       200 * time.Millisecond,
		Settle:       100 * time.Millisecond,
		PollInterval: 50 * time.Millisecond,
		Logger:       testLogger(t),
	}
}

// start opens a Watcher and closes it at the end of the test.
func start(t *testing.T, w *Watcher) *Watcher {
	t.Helper()
	if err := w.Open(t.Context()); err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := w.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return w
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// drop writes base in staging and renames it into inbox.
func drop(t *testing.T, inbox, staging, base, content string) string {
	t.Helper()
	src := filepath.Join(staging, base)
	writeFile(t, src, content)
	dst := filepath.Join(inbox, base)
	if err := os.Rename(src, dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

func appendFile(t *testing.T, path, content string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// next returns the next event, failing the test when none comes in time.
func next(t *testing.T, w *Watcher) watcher.Event {
	t.Helper()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatal("Events closed")
		}
		return ev
	case <-timer.C:
		t.Fatalf("no event within %v", wait)
	}
	panic("unreachable")
}

// until reads events until one of kind for name comes, and returns the events
// that came before it.
func until(t *testing.T, w *Watcher, kind watcher.Kind, name string) []watcher.Event {
	t.Helper()
	var before []watcher.Event
	for {
		ev := next(t, w)
		if ev.Kind == kind && ev.Name == name {
			return before
		}
		before = append(before, ev)
	}
}

func TestRenamedInJSONLDeliveredOnce(t *testing.T) {
	t.Parallel()
	inbox, staging := inboxes(t)
	w := start(t, New(testConfig(t, inbox)))

	path := drop(t, inbox, staging, "b1.jsonl", "{\"custom_id\":\"1\"}\n")
	ev := next(t, w)
	want := watcher.Event{Kind: watcher.Input, Name: "b1", Path: path, Format: "jsonl"}
	if ev != want {
		t.Fatalf("event = %+v, want %+v", ev, want)
	}
	// The sentinel settles after several rescans have seen b1 again.
	drop(t, inbox, staging, "sentinel.jsonl", "{}\n")
	if before := until(t, w, watcher.Input, "sentinel"); len(before) != 0 {
		t.Fatalf("delivered again: %+v", before)
	}
}

func TestJSONDeliveredAsJSON(t *testing.T) {
	t.Parallel()
	inbox, staging := inboxes(t)
	w := start(t, New(testConfig(t, inbox)))

	path := drop(t, inbox, staging, "doc.json", "{\"requests\":[]}\n")
	ev := next(t, w)
	want := watcher.Event{Kind: watcher.Input, Name: "doc", Path: path, Format: "json"}
	if ev != want {
		t.Fatalf("event = %+v, want %+v", ev, want)
	}
}

func TestIgnoredEntriesNeverDelivered(t *testing.T) {
	t.Parallel()
	inbox, staging := inboxes(t)
	w := start(t, New(testConfig(t, inbox)))

	for _, base := range []string{
		"b1.options.json", ".hidden.jsonl", ".hidden.cancel", "x.tmp", "x.jsonl.tmp",
		"x.part", "b1.jsonl.part", "notes.txt", "README",
	} {
		writeFile(t, filepath.Join(inbox, base), "{}\n")
	}
	for _, sub := range []string{"sub", "dir.jsonl", "dir.cancel"} {
		if err := os.Mkdir(filepath.Join(inbox, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(inbox, sub, "inner.jsonl"), "{}\n")
		writeFile(t, filepath.Join(inbox, sub, "inner.cancel"), "")
	}
	// Anything above that were wrongly taken would settle no later than this.
	drop(t, inbox, staging, "sentinel.jsonl", "{}\n")
	if before := until(t, w, watcher.Input, "sentinel"); len(before) != 0 {
		t.Fatalf("ignored entries delivered: %+v", before)
	}
}

func TestCancelDelivered(t *testing.T) {
	t.Parallel()
	inbox, _ := inboxes(t)
	w := start(t, New(testConfig(t, inbox)))

	path := filepath.Join(inbox, "b7.cancel")
	writeFile(t, path, "no longer needed")
	ev := next(t, w)
	want := watcher.Event{Kind: watcher.Cancel, Name: "b7", Path: path}
	if ev != want {
		t.Fatalf("event = %+v, want %+v", ev, want)
	}
}

// A file written in place in chunks, its last line unterminated until the
// final chunk, is delivered only after the writer has finished.
func TestSlowWriterDeliveredWhenDone(t *testing.T) {
	t.Parallel()
	inbox, _ := inboxes(t)
	cfg := testConfig(t, inbox)
	cfg.Settle = 300 * time.Millisecond
	w := start(t, New(cfg))

	var content bytes.Buffer
	for i := range 40 {
		fmt.Fprintf(&content, "{\"custom_id\":\"r%d\",\"body\":{\"prompt\":\"hello\"}}\n", i)
	}
	full := content.Bytes()
	const chunks = 8
	var cuts []int
	for i := 1; i < chunks; i++ {
		cut := i * len(full) / chunks
		for full[cut-1] == '\n' {
			cut++
		}
		cuts = append(cuts, cut)
	}
	cuts = append(cuts, len(full))

	path := filepath.Join(inbox, "slow.jsonl")
	var finished atomic.Bool
	writerErr := make(chan error, 1)
	go func() {
		writerErr <- func() error {
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
			if err != nil {
				return err
			}
			from := 0
			for i, cut := range cuts {
				if i > 0 {
					time.Sleep(50 * time.Millisecond) // a slow producer, shorter than Settle
				}
				if _, err := f.Write(full[from:cut]); err != nil {
					return err
				}
				from = cut
			}
			if err := f.Close(); err != nil {
				return err
			}
			finished.Store(true)
			return nil
		}()
	}()

	ev := next(t, w)
	if !finished.Load() {
		t.Fatalf("delivered %+v before the writer finished", ev)
	}
	if err := <-writerErr; err != nil {
		t.Fatalf("writer: %v", err)
	}
	if ev.Name != "slow" || ev.Kind != watcher.Input {
		t.Fatalf("event = %+v", ev)
	}
	got, err := os.ReadFile(ev.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, full) {
		t.Fatalf("file at delivery has %d bytes, want %d", len(got), len(full))
	}
}

func TestIncompleteTailWaits(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ base, name, head, tail string }{
		{"partial.jsonl", "partial", "{}\n{\"a\":1}", "\n"},
		{"partial.json", "partial", "{\"requests\":[{}]", "}\n"},
	} {
		t.Run(tt.base, func(t *testing.T) {
			t.Parallel()
			inbox, staging := inboxes(t)
			w := start(t, New(testConfig(t, inbox)))

			path := drop(t, inbox, staging, tt.base, tt.head)
			drop(t, inbox, staging, "sentinel.jsonl", "{}\n")
			if before := until(t, w, watcher.Input, "sentinel"); len(before) != 0 {
				t.Fatalf("incomplete file delivered: %+v", before)
			}
			appendFile(t, path, tt.tail)
			ev := next(t, w)
			if ev.Name != tt.name || ev.Path != path {
				t.Fatalf("event = %+v, want %s", ev, path)
			}
		})
	}
}

// Files present before Open are found by the initial scan and delivered in
// order of mtime, then name; cancels need no settling.
func TestInitialScanInOrder(t *testing.T) {
	t.Parallel()
	inbox, _ := inboxes(t)
	if err := os.Mkdir(inbox, 0o755); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(-time.Hour)
	for _, f := range []struct {
		base  string
		mtime time.Time
	}{
		{"a.jsonl", base.Add(3 * time.Second)},
		{"b.json", base.Add(1 * time.Second)},
		{"c.jsonl", base.Add(2 * time.Second)},
		{"d.jsonl", base.Add(1 * time.Second)},
		{"x.cancel", base.Add(4 * time.Second)},
	} {
		path := filepath.Join(inbox, f.base)
		content := "{}\n"
		if strings.HasSuffix(f.base, ".cancel") {
			content = ""
		}
		writeFile(t, path, content)
		if err := os.Chtimes(path, f.mtime, f.mtime); err != nil {
			t.Fatal(err)
		}
	}
	w := start(t, New(testConfig(t, inbox)))

	var got []string
	for range 5 {
		ev := next(t, w)
		got = append(got, ev.Kind.String()+":"+filepath.Base(ev.Path))
	}
	want := []string{"cancel:x.cancel", "input:b.json", "input:d.jsonl", "input:c.jsonl", "input:a.jsonl"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("order = %v, want %v", got, want)
	}
}

func TestForgetAllowsRedelivery(t *testing.T) {
	t.Parallel()
	inbox, staging := inboxes(t)
	w := start(t, New(testConfig(t, inbox)))

	drop(t, inbox, staging, "b1.jsonl", "{}\n")
	first := next(t, w)
	w.Forget(first.Path)
	second := next(t, w)
	if second != first {
		t.Fatalf("redelivered %+v, want %+v", second, first)
	}
	// Not forgotten this time: delivered no more.
	drop(t, inbox, staging, "sentinel.jsonl", "{}\n")
	if before := until(t, w, watcher.Input, "sentinel"); len(before) != 0 {
		t.Fatalf("delivered again without Forget: %+v", before)
	}
}

func TestNewVersionRedelivered(t *testing.T) {
	t.Parallel()
	inbox, staging := inboxes(t)
	w := start(t, New(testConfig(t, inbox)))

	path := drop(t, inbox, staging, "b1.jsonl", "{}\n")
	next(t, w)
	appendFile(t, path, "{}\n")
	if ev := next(t, w); ev.Path != path {
		t.Fatalf("event = %+v, want %s again", ev, path)
	}
}

func TestPolling(t *testing.T) {
	t.Parallel()
	inbox, staging := inboxes(t)
	cfg := testConfig(t, inbox)
	cfg.Poll = true
	cfg.Rescan = time.Hour // unused when polling
	w := start(t, New(cfg))

	path := drop(t, inbox, staging, "b1.jsonl", "{}\n")
	if ev := next(t, w); ev.Path != path || ev.Format != "jsonl" {
		t.Fatalf("event = %+v", ev)
	}
	cancel := drop(t, inbox, staging, "b1.cancel", "")
	if ev := next(t, w); ev.Path != cancel || ev.Kind != watcher.Cancel {
		t.Fatalf("event = %+v", ev)
	}
	if w.fsw != nil {
		t.Fatal("polling mode started fsnotify")
	}
}

func TestFallsBackToPollingWithoutFsnotify(t *testing.T) {
	t.Parallel()
	inbox, staging := inboxes(t)
	cfg := testConfig(t, inbox)
	cfg.Rescan = time.Hour // only the poll interval can find the file
	w := New(cfg)
	w.newNotify = func() (*fsnotify.Watcher, error) {
		return nil, errors.New("too many open inotify instances")
	}
	start(t, w)

	path := drop(t, inbox, staging, "b1.jsonl", "{}\n")
	if ev := next(t, w); ev.Path != path {
		t.Fatalf("event = %+v", ev)
	}
}

// Many files renamed in at once overflow the inotify queue; rescans reconcile
// and each file is delivered exactly once.
func TestManyFilesDeliveredExactlyOnce(t *testing.T) {
	const n = 20000
	inbox, staging := inboxes(t)
	cfg := testConfig(t, inbox)
	cfg.Rescan = 500 * time.Millisecond
	w := start(t, New(cfg))

	began := time.Now()
	for i := range n {
		writeFile(t, filepath.Join(staging, fmt.Sprintf("f%05d.jsonl", i)), "{\"custom_id\":\"x\"}\n")
	}
	staged := time.Now()
	for i := range n {
		base := fmt.Sprintf("f%05d.jsonl", i)
		if err := os.Rename(filepath.Join(staging, base), filepath.Join(inbox, base)); err != nil {
			t.Fatal(err)
		}
	}

	dropped := time.Now()
	seen := make(map[string]int, n)
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	for len(seen) < n {
		select {
		case ev := <-w.Events():
			seen[ev.Name]++
			if seen[ev.Name] > 1 {
				t.Fatalf("%s delivered twice", ev.Path)
			}
		case <-deadline.C:
			t.Fatalf("%d of %d files delivered", len(seen), n)
		}
	}
	t.Logf("staged %d files in %v, renamed them in in %v, all delivered %v later",
		n, staged.Sub(began), dropped.Sub(staged), time.Since(dropped))
	drop(t, inbox, staging, "sentinel.jsonl", "{}\n")
	if before := until(t, w, watcher.Input, "sentinel"); len(before) != 0 {
		t.Fatalf("%d events after all %d files, e.g. %+v", len(before), n, before[0])
	}
}

// watcherCode is what this package's watcher or fsnotify goroutines run.
var watcherCode = []string{"watcher/dir.(*Watcher)", "fsnotify/fsnotify."}

// watcherGoroutines counts goroutines running this package's watcher or
// fsnotify code.
func watcherGoroutines() int { return goroutines.Count(watcherCode...) }

// waitNoWatcherGoroutines waits, with a generous deadline, for the
// goroutines of closed watchers to be gone.
func waitNoWatcherGoroutines(t *testing.T) {
	t.Helper()
	goroutines.WaitGone(t, wait, watcherCode...)
}

// Not parallel: it counts every watcher goroutine of the process.
func TestCloseEndsEventsAndLeaksNothing(t *testing.T) {
	waitNoWatcherGoroutines(t) // earlier sequential tests
	inbox, staging := inboxes(t)
	w := New(testConfig(t, inbox))
	if err := w.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	drop(t, inbox, staging, "b1.jsonl", "{}\n")
	next(t, w)
	if watcherGoroutines() == 0 {
		t.Fatal("no watcher goroutine seen while open: the leak check would prove nothing")
	}

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, ok := <-w.Events(); ok {
		t.Fatal("Events delivered after Close")
	}
	if err := w.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := w.Open(ctx); err == nil {
		t.Fatal("Open after Close succeeded")
	}
	waitNoWatcherGoroutines(t)
}

// Close returns while the watcher is blocked on a full Events channel.
func TestCloseUnblocksBackpressure(t *testing.T) {
	t.Parallel()
	inbox, _ := inboxes(t)
	if err := os.Mkdir(inbox, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = eventBuffer + 100
	for i := range n {
		writeFile(t, filepath.Join(inbox, fmt.Sprintf("b%d.cancel", i)), "")
	}
	w := New(testConfig(t, inbox))
	if err := w.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Nobody reads: the initial scan's cancels fill the channel.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	count := 0
	for range w.Events() {
		count++
	}
	if count > n {
		t.Fatalf("%d events for %d files", count, n)
	}
}

func TestCloseWithoutOpen(t *testing.T) {
	t.Parallel()
	w := New(DefaultConfig(filepath.Join(t.TempDir(), "inbox")))
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-w.Events(); ok {
		t.Fatal("Events not closed")
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{},
		{Dir: t.TempDir(), Settle: -time.Second},
		{Dir: t.TempDir(), Rescan: -time.Second},
		{Dir: t.TempDir(), PollInterval: -time.Second},
	} {
		w := New(cfg)
		if err := w.Open(t.Context()); err == nil {
			t.Errorf("Open(%+v) succeeded", cfg)
		}
		if err := w.Close(t.Context()); err != nil {
			t.Errorf("Close after failed Open: %v", err)
		}
	}
}

func TestOpenCreatesInbox(t *testing.T) {
	t.Parallel()
	inbox := filepath.Join(t.TempDir(), "data", "inbox")
	start(t, New(testConfig(t, inbox)))
	if info, err := os.Stat(inbox); err != nil || !info.IsDir() {
		t.Fatalf("inbox not created: %v", err)
	}
}

// Events lost by fsnotify are made up for by a full rescan: after an overflow,
// after any watcher error, and periodically.
func TestRescanFindsMissedFiles(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		err    error // sent on fsnotify's error channel
		rescan time.Duration
	}{
		{"overflow", fsnotify.ErrEventOverflow, time.Hour},
		{"watcher error", errors.New("read inotify: input/output error"), time.Hour},
		{"periodic", nil, 100 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			inbox, staging := inboxes(t)
			cfg := testConfig(t, inbox)
			cfg.Rescan = tt.rescan
			w := New(cfg)
			var fsw *fsnotify.Watcher
			w.newNotify = func() (*fsnotify.Watcher, error) {
				var err error
				fsw, err = fsnotify.NewWatcher()
				return fsw, err
			}
			start(t, w)
			// Lose every event from now on.
			if err := fsw.Remove(inbox); err != nil {
				t.Fatal(err)
			}
			path := drop(t, inbox, staging, "missed.jsonl", "{}\n")
			if tt.err != nil {
				fsw.Errors <- tt.err
			}
			if ev := next(t, w); ev.Path != path {
				t.Fatalf("event = %+v, want %s", ev, path)
			}
		})
	}
}

// When the inbox folder is removed, the watcher makes it again and watches
// the new one.
func TestInboxRecreated(t *testing.T) {
	t.Parallel()
	inbox, staging := inboxes(t)
	cfg := testConfig(t, inbox)
	cfg.Rescan = time.Hour // only fsnotify and the rescan after recreating can find files
	w := start(t, New(cfg))

	if err := os.Remove(inbox); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for {
		if _, err := os.Stat(inbox); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("inbox not recreated")
		}
		time.Sleep(10 * time.Millisecond) // polling, not synchronisation
	}
	path := drop(t, inbox, staging, "b1.jsonl", "{}\n")
	if ev := next(t, w); ev.Path != path {
		t.Fatalf("event = %+v, want %s", ev, path)
	}
}

// BenchmarkRescan measures a periodic rescan of a folder whose inputs were all
// delivered: the steady-state cost paid every Rescan.
func BenchmarkRescan(b *testing.B) {
	const n = 5000
	inbox := b.TempDir()
	for i := range n {
		if err := os.WriteFile(filepath.Join(inbox, fmt.Sprintf("f%05d.jsonl", i)), []byte("{}\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	w := New(Config{Dir: inbox, Settle: time.Second, Logger: slog.New(slog.DiscardHandler)})
	now := time.Now()
	if _, err := w.scan(now); err != nil {
		b.Fatal(err)
	}
	ready, err := w.scan(now.Add(time.Second))
	if err != nil || len(ready) != n {
		b.Fatalf("setup: %d ready, %v", len(ready), err)
	}
	b.ResetTimer()
	for b.Loop() {
		if ready, err := w.scan(now.Add(2 * time.Second)); err != nil || len(ready) != 0 {
			b.Fatalf("%d ready, %v", len(ready), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/file")
}
