package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/store/folder"
)

// gate holds the engine's first request until the test opens it, and
// records the custom_id of every request the engine saw.
type gate struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once

	mu  sync.Mutex
	ids []string
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) opt(cfg *pipeline.Config, so *openaitest.Options) {
	so.Fault = func(n int64, _ *http.Request, body []byte) openaitest.Fault {
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		json.Unmarshal(body, &req)
		if len(req.Messages) > 0 {
			g.mu.Lock()
			g.ids = append(g.ids, strings.SplitN(req.Messages[0].Content, " ", 2)[0])
			g.mu.Unlock()
		}
		if n == 1 {
			g.once.Do(func() { close(g.entered) })
			<-g.release
		}
		return openaitest.Fault{}
	}
}

// seen returns the version tags ("v1", "v2") of the requests the engine saw.
func (g *gate) seen() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := map[string]int{}
	for _, id := range g.ids {
		m[id]++
	}
	return m
}

// versionLines returns n chat lines of version tag, each about pad bytes
// long; the tag starts every message, so the engine can tell versions apart.
func versionLines(tag string, n, pad int) string {
	var b strings.Builder
	filler := strings.Repeat("x", pad)
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"%s-%d","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"%s %d %s"}],"max_tokens":5}}`+"\n", tag, i, tag, i, filler)
	}
	return b.String()
}

// startRun runs job in the background; the returned func waits for it.
func (e *env) startRun(ctx context.Context, job pipeline.Job) func() error {
	errc := make(chan error, 1)
	go func() {
		_, err := e.pipe.Run(ctx, job)
		errc <- err
	}()
	return func() error {
		select {
		case err := <-errc:
			return err
		case <-time.After(2 * time.Minute):
			e.t.Fatal("run did not end")
			return nil
		}
	}
}

func (e *env) waitEntered(g *gate) {
	e.t.Helper()
	select {
	case <-g.entered:
	case <-time.After(2 * time.Minute):
		e.t.Fatal("the engine saw no request")
	}
}

// assertChanged checks that name's batch failed as input_changed with a
// message saying what to do, published no results, and left its input in
// the inbox.
func (e *env) assertChanged(name, format, want string) *pipeline.BatchObject {
	e.t.Helper()
	o := e.object(name)
	if o.Status != pipeline.StatusFailed || o.Errors == nil || len(o.Errors.Data) != 1 || o.Errors.Data[0].Code != pipeline.CodeInputChanged {
		e.t.Fatalf("object: status %s, errors %+v; want failed with input_changed", o.Status, o.Errors)
	}
	msg := o.Errors.Data[0].Message
	for _, w := range []string{name + "." + format, want, "rename it into the inbox"} {
		if !strings.Contains(msg, w) {
			e.t.Errorf("message %q does not say %q", msg, w)
		}
	}
	for _, suffix := range []string{".output.jsonl", ".errors.jsonl"} {
		if _, err := os.Stat(filepath.Join(e.outbox, name+suffix)); !os.IsNotExist(err) {
			e.t.Errorf("%s%s published for a batch whose input changed: %v", name, suffix, err)
		}
	}
	if _, err := os.Stat(filepath.Join(e.inbox, name+"."+format)); err != nil {
		e.t.Errorf("the changed input left the inbox: %v", err)
	}
	return o
}

// rerun runs the inbox's name as it is now (the watcher's next delivery) and
// checks it completes with want requests, exactly once.
func (e *env) rerun(name string, want int) {
	e.t.Helper()
	path := filepath.Join(e.inbox, name+".jsonl")
	o := e.run(pipeline.Job{Name: name, Format: "jsonl", Store: folder.New(name, path, e.outbox, e.done)})
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Total != want || o.RequestCounts.Completed != want {
		errs, _ := os.ReadFile(filepath.Join(e.outbox, name+".errors.jsonl"))
		e.t.Fatalf("rerun: status %s counts %+v, want %d completed\n%.600s", o.Status, o.RequestCounts, want, errs)
	}
	e.check(name, "jsonl")
}

// Lines appended after the reader reached the end (the producer paused
// longer than settle, then wrote on): the batch fails as input_changed
// instead of publishing results of a part of the file and retiring the rest
// unread; the whole file then runs as a new batch.
func TestAppendAfterAcceptanceFailsInputChanged(t *testing.T) {
	g := newGate()
	e := newEnv(t, g.opt)
	v1 := versionLines("v1", 10, 10)
	job := e.drop("grow", "jsonl", v1, "")
	wait := e.startRun(context.Background(), job)
	e.waitEntered(g)
	f, err := os.OpenFile(filepath.Join(e.inbox, "grow.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(versionLines("v2", 5, 10))
	f.Close()
	close(g.release)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	// Found by the reader (it grew past the accepted length) or, when the
	// reader had reached the end, by the check before publishing.
	e.assertChanged("grow", "jsonl", fmt.Sprint(len(v1)))
	e.rerun("grow", 15)
}

// A file cut short and rewritten while the reader is in its first chunk:
// the reader never hands on a line of the second chunk, the batch fails,
// and only the first version's lines reached the engine.
func TestTruncateAfterAcceptanceNeverMixesVersions(t *testing.T) {
	g := newGate()
	e := newEnv(t, g.opt, func(c *pipeline.Config, _ *openaitest.Options) { c.Workers, c.QueuePerBatch = 1, 1 })
	// ~2.5 MiB in lines of ~10 KiB: three chunks.
	job := e.drop("cut", "jsonl", versionLines("v1", 250, 10<<10), "")
	wait := e.startRun(context.Background(), job)
	e.waitEntered(g)
	v2 := versionLines("v2", 20, 10)
	if err := os.WriteFile(filepath.Join(e.inbox, "cut.jsonl"), []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	e.assertChanged("cut", "jsonl", "cut to")
	if s := g.seen(); s["v2"] != 0 || s["v1"] == 0 || s["v1"] >= 250 {
		t.Fatalf("engine saw %v: want only some v1 lines", s)
	}
	e.rerun("cut", 20)
	if s := g.seen(); s["v2"] != 20 {
		t.Fatalf("engine saw %d v2 lines, want 20", s["v2"])
	}
}

// Bytes rewritten in place, same length: the changed chunk's hash differs
// and none of its lines runs.
func TestRewriteInPlaceAfterAcceptanceFailsInputChanged(t *testing.T) {
	g := newGate()
	e := newEnv(t, g.opt, func(c *pipeline.Config, _ *openaitest.Options) { c.Workers, c.QueuePerBatch = 1, 1 })
	v1 := versionLines("v1", 250, 10<<10)
	job := e.drop("edit", "jsonl", v1, "")
	wait := e.startRun(context.Background(), job)
	e.waitEntered(g)
	// The same bytes with version 2's tag from 2 MiB on: same length.
	at := strings.Index(v1[2<<20:], "\n") + 2<<20 + 1
	edited := v1[:at] + strings.NewReplacer(`"v1-`, `"v2-`, `"v1 `, `"v2 `).Replace(v1[at:])
	if err := os.WriteFile(filepath.Join(e.inbox, "edit.jsonl"), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	e.assertChanged("edit", "jsonl", "are not the ones accepted")
	if s := g.seen(); s["v2"] != 0 {
		t.Fatalf("engine saw %d lines of the rewritten part", s["v2"])
	}
	e.rerun("edit", 250)
}

// A file renamed over the input while it runs: the reader keeps reading
// the file it opened, and the check before publishing finds another file.
func TestReplaceAfterAcceptanceFailsInputChanged(t *testing.T) {
	g := newGate()
	e := newEnv(t, g.opt)
	job := e.drop("swap", "jsonl", versionLines("v1", 10, 10), "")
	wait := e.startRun(context.Background(), job)
	e.waitEntered(g)
	tmp := filepath.Join(e.inbox, ".swap.tmp")
	if err := os.WriteFile(tmp, []byte(versionLines("v2", 7, 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(e.inbox, "swap.jsonl")); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	e.assertChanged("swap", "jsonl", "replaced by another file")
	e.rerun("swap", 7)
}

// The input changes while batchd is stopped in the middle of its batch: the
// old batch fails as input_changed (it does not stay in progress for ever)
// and the new content runs as a new batch. When the first content comes
// back, its batch runs on from where it stopped.
func TestRestartWithChangedContent(t *testing.T) {
	g := newGate()
	e := newEnv(t, g.opt, func(c *pipeline.Config, _ *openaitest.Options) { c.Workers = 1 })
	v1 := versionLines("v1", 10, 10)
	job := e.drop("again", "jsonl", v1, "")
	ctx, stop := context.WithCancel(context.Background())
	wait := e.startRun(ctx, job)
	e.waitEntered(g)
	stop()
	close(g.release)
	if err := wait(); err == nil {
		t.Fatal("a run stopped midway returned no error")
	}
	old, err := e.pipe.Ledger().ByName("again")
	if err != nil || old.Status != pipeline.StatusInProgress {
		t.Fatalf("before restart: %+v, %v", old, err)
	}
	e.reopenWith(func() {
		if err := os.WriteFile(filepath.Join(e.inbox, "again.jsonl"), []byte(versionLines("v2", 4, 10)), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	e.rerun("again", 4)
	b, err := e.pipe.Ledger().Get(old.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b.Status != pipeline.StatusFailed || len(b.Errors) != 1 || b.Errors[0].Code != pipeline.CodeInputChanged {
		t.Fatalf("the stopped batch is %s %+v, want failed with input_changed", b.Status, b.Errors)
	}
	done := b.Completed + b.Failed

	// The first content comes back: its batch runs on, reusing what it did.
	before := g.seen()["v1"]
	e.drop("again", "jsonl", v1, "")
	e.rerun("again", 10)
	if got := g.seen()["v1"] - before; got != 10-done {
		t.Fatalf("engine saw %d more v1 requests, want %d (10 less the %d done)", got, 10-done, done)
	}
}
