package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/batchd/batchd/engine/native/demomodel"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/internal/syncbuf"
	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/pipeline/ledger"
	"github.com/batchd/batchd/store/folder"
)

// env is a data directory and a stand-in server for daemons of one test.
type env struct {
	t    *testing.T
	dirs daemon.Dirs
	srv  *openaitest.Server
	url  string
	logs *syncbuf.Buffer
}

func newEnv(t *testing.T, opts openaitest.Options) *env {
	t.Helper()
	e := &env{t: t, dirs: daemon.DataDirs(t.TempDir()), logs: new(syncbuf.Buffer)}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", e.logs)
		}
	})
	e.srv = openaitest.NewServer(opts)
	if err := e.srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.srv.Close)
	e.url = e.srv.URL()
	return e
}

// config is a daemon config for e with short intervals.
func (e *env) config() daemon.Config {
	cfg := daemon.DefaultConfig()
	cfg.Data, cfg.Listen = e.dirs.Root, ""
	cfg.Engine = "openai"
	cfg.OpenAI.URLs = []string{e.url}
	cfg.OpenAI.RetryWaitMin, cfg.OpenAI.RetryWaitMax, cfg.OpenAI.MaxRetries = 5*time.Millisecond, 50*time.Millisecond, 2
	cfg.OpenAI.ProbeInterval = 20 * time.Millisecond
	cfg.Pipeline.CommitInterval = 20 * time.Millisecond
	cfg.Pipeline.ProgressInterval = 20 * time.Millisecond
	cfg.Watcher.Settle = 50 * time.Millisecond
	cfg.Watcher.Rescan = time.Second
	return cfg
}

// open opens a daemon on cfg; it is closed when the test ends unless the
// test closes it first. Once it is closed (and every daemon opened after it,
// whose cleanups run first), the ledger of its state directory is checked
// as `batchd ledger check` checks it.
func (e *env) open(cfg daemon.Config) *daemon.Daemon {
	e.t.Helper()
	d := daemon.New(cfg, slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err := d.Open(context.Background()); err != nil {
		e.t.Fatalf("open daemon: %v", err)
	}
	var once sync.Once
	e.t.Cleanup(func() {
		once.Do(func() { closeDaemon(e.t, d) })
		checkLedger(e.t, daemon.DataDirs(cfg.Data).State, cfg.Source == "" || cfg.Source == "dir")
	})
	return d
}

// checkLedger fails t for every broken invariant of the ledger in stateDir
// (pipeline.CheckLedger, as `batchd ledger check` runs it). folder says
// whether retiring records are the folder store's, which it then checks too.
func checkLedger(t *testing.T, stateDir string, folderStore bool) {
	t.Helper()
	var retiring func(string, []byte) error
	if folderStore {
		retiring = folder.CheckRetiring
	}
	rep, err := pipeline.CheckLedger(stateDir, 5*time.Second, retiring)
	if err != nil {
		t.Errorf("ledger check after the daemon closed: %v", err)
		return
	}
	for _, p := range rep.Problems {
		t.Errorf("ledger check after the daemon closed: %s", p)
	}
}

func closeDaemon(t *testing.T, d *daemon.Daemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Close(ctx); err != nil {
		t.Errorf("close daemon: %v", err)
	}
}

// drop places an inbox file the way producers should: a dot-name, then a rename.
func (e *env) drop(name, content string) {
	e.t.Helper()
	if err := os.MkdirAll(e.dirs.Inbox, 0o755); err != nil {
		e.t.Fatal(err)
	}
	tmp := filepath.Join(e.dirs.Inbox, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(e.dirs.Inbox, name)); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) object(name string) *pipeline.BatchObject {
	o, err := pipeline.ReadBatchObject(filepath.Join(e.dirs.Outbox, name+".batch.json"))
	if err != nil {
		return nil
	}
	return o
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitEnded waits until batch name has a terminal status and its input is
// in done/, and returns its object.
func (e *env) waitEnded(name, format string) *pipeline.BatchObject {
	e.t.Helper()
	return e.waitEndedWithin(name, format, 60*time.Second)
}

// waitEndedWithin is waitEnded with its own deadline, for batches that
// generate many tokens on the native engine (slow under -race).
func (e *env) waitEndedWithin(name, format string, timeout time.Duration) *pipeline.BatchObject {
	e.t.Helper()
	var o *pipeline.BatchObject
	waitFor(e.t, timeout, "batch "+name+" to end", func() bool {
		o = e.object(name)
		if o == nil || !pipeline.Terminal(o.Status) {
			return false
		}
		_, err := os.Stat(filepath.Join(e.dirs.Done, name+"."+format))
		return err == nil
	})
	return o
}

// check runs the exactly-once oracle on a finished batch.
func (e *env) check(name, format string) *pipeline.CheckReport {
	e.t.Helper()
	rep, err := pipeline.Check(pipeline.CheckInput{
		Input:   filepath.Join(e.dirs.Done, name+"."+format),
		Format:  format,
		Output:  filepath.Join(e.dirs.Outbox, name+".output.jsonl"),
		Errors:  filepath.Join(e.dirs.Outbox, name+".errors.jsonl"),
		Object:  filepath.Join(e.dirs.Outbox, name+".batch.json"),
		Results: filepath.Join(e.dirs.Outbox, name+".results.json"),
	})
	if err != nil {
		e.t.Fatalf("check %s: %v", name, err)
	}
	if !rep.OK() {
		e.t.Fatalf("check %s:\n%s", name, strings.Join(rep.Problems, "\n"))
	}
	return rep
}

func (e *env) lines(name string) []string {
	e.t.Helper()
	raw, err := os.ReadFile(filepath.Join(e.dirs.Outbox, name))
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
}

// chatBatch returns n valid chat lines whose prompts name tag.
func chatBatch(n int, tag string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"%s-%d","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"batch %s line %d"}],"max_tokens":5}}`+"\n", tag, i, tag, i)
	}
	return b.String()
}

func TestDroppedFilesProduceOutputsAndMoveToDone(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	e.open(e.config())
	e.drop("lines.options.json", `{"metadata":{"team":"qa"}}`)
	e.drop("lines.jsonl", chatBatch(25, "l")+"{not json\n")
	e.drop("doc.json", `{"url":"/v1/chat/completions","defaults":{"max_tokens":4},"requests":[
		{"custom_id":"a","messages":[{"role":"user","content":"one"}]},
		{"custom_id":"b","messages":[{"role":"user","content":"two"}]},
		{"custom_id":"c","messages":[{"role":"user","content":"three"}],"temperature":7}]}`)
	// Ignored by the daemon: dot-files and partial files.
	e.drop(".hidden.jsonl", chatBatch(1, "h"))
	e.drop("partial.jsonl.part", chatBatch(1, "p"))

	o := e.waitEnded("lines", "jsonl")
	if o.Status != pipeline.StatusCompleted || o.RequestCounts != (pipeline.RequestCounts{Total: 26, Completed: 25, Failed: 1}) {
		t.Errorf("lines: %s %+v", o.Status, o.RequestCounts)
	}
	if o.Metadata["team"] != "qa" {
		t.Errorf("lines: metadata %v, want the options file's", o.Metadata)
	}
	e.check("lines", "jsonl")
	o = e.waitEnded("doc", "json")
	if o.Status != pipeline.StatusCompleted || o.RequestCounts != (pipeline.RequestCounts{Total: 3, Completed: 2, Failed: 1}) {
		t.Errorf("doc: %s %+v", o.Status, o.RequestCounts)
	}
	e.check("doc", "json")
	var docResults []struct {
		CustomID any `json:"custom_id"`
		Error    any `json:"error"`
	}
	if raw, err := os.ReadFile(filepath.Join(e.dirs.Outbox, "doc.results.json")); err != nil || json.Unmarshal(raw, &docResults) != nil ||
		len(docResults) != 3 || docResults[0].CustomID != "a" || docResults[2].CustomID != "c" || docResults[0].Error != nil || docResults[2].Error == nil {
		t.Errorf("doc.results.json: %v %+v", err, docResults)
	}
	if _, err := os.Stat(filepath.Join(e.dirs.Outbox, "lines.results.json")); err == nil {
		t.Errorf("a JSONL input got a results.json")
	}
	if got := len(e.lines("lines.output.jsonl")); got != 25 {
		t.Errorf("lines.output.jsonl has %d lines, want 25", got)
	}

	// Only what the daemon must ignore is left in the inbox; the options
	// follow their input to done/ (just after it).
	var left []string
	want := []string{".hidden.jsonl", "partial.jsonl.part"}
	waitFor(t, 30*time.Second, "the inbox to hold only ignored files", func() bool {
		ents, _ := os.ReadDir(e.dirs.Inbox)
		left = left[:0]
		for _, de := range ents {
			left = append(left, de.Name())
		}
		return reflect.DeepEqual(left, want)
	})
	if _, err := os.Stat(filepath.Join(e.dirs.Done, "lines.options.json")); err != nil {
		t.Errorf("options file not in done/: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.dirs.Outbox, "hidden.batch.json")); err == nil {
		t.Error("a dot-file ran as a batch")
	}
	if e.srv.Requests() != 27 {
		t.Errorf("the stand-in saw %d requests, want 27", e.srv.Requests())
	}
}

func TestSecondDaemonOnTheSameDataDirFailsFast(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	e.open(e.config())
	second := daemon.New(e.config(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	err := second.Open(context.Background())
	if err == nil {
		closeDaemon(t, second)
		t.Fatal("a second daemon opened a data directory in use")
	}
	if !errors.Is(err, daemon.ErrInUse) {
		t.Errorf("error %v is not ErrInUse", err)
	}
	if want := "in use by another batchd (pid " + strconv.Itoa(os.Getpid()) + ")"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
	// The first daemon still works.
	e.drop("after.jsonl", chatBatch(3, "a"))
	if o := e.waitEnded("after", "jsonl"); o.Status != pipeline.StatusCompleted {
		t.Errorf("status %s", o.Status)
	}
}

func TestLockIsReleasedOnClose(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	first := e.open(e.config())
	closeDaemon(t, first)
	e.open(e.config())
}

func TestCancelFileEndsTheBatchCancelled(t *testing.T) {
	const answered = 5
	e := newEnv(t, openaitest.Options{Fault: func(n int64, r *http.Request, body []byte) openaitest.Fault {
		if n > answered {
			return openaitest.Fault{Hang: true}
		}
		return openaitest.Fault{}
	}})
	e.open(e.config())
	e.drop("cx.jsonl", chatBatch(50, "c"))
	waitFor(t, 30*time.Second, "the first answers to be committed", func() bool {
		o := e.object("cx")
		return o != nil && o.RequestCounts.Completed == answered
	})
	e.drop("cx.cancel", "")
	o := e.waitEnded("cx", "jsonl")
	if o.Status != pipeline.StatusCancelled || o.CancellingAt == nil || o.CancelledAt == nil {
		t.Fatalf("status %s cancelling_at %v cancelled_at %v", o.Status, o.CancellingAt, o.CancelledAt)
	}
	if o.RequestCounts != (pipeline.RequestCounts{Total: 50, Completed: answered, Failed: 50 - answered}) {
		t.Errorf("counts %+v", o.RequestCounts)
	}
	for _, l := range e.lines("cx.errors.jsonl") {
		var el struct {
			Error    *struct{ Code string } `json:"error"`
			Response any                    `json:"response"`
		}
		if err := json.Unmarshal([]byte(l), &el); err != nil || el.Error == nil || el.Error.Code != pipeline.CodeBatchCancelled || el.Response != nil {
			t.Errorf("error line %s: want a batch_cancelled line (%v)", l, err)
		}
	}
	e.check("cx", "jsonl")
	// The cancel request is removed once the input is in done/.
	waitFor(t, 30*time.Second, "cx.cancel to leave the inbox", func() bool {
		_, err := os.Stat(filepath.Join(e.dirs.Inbox, "cx.cancel"))
		return os.IsNotExist(err)
	})
}

// inFlight wraps the stand-in's handler: it counts the batches with a
// request in flight (the batch is named in the prompt), and holds every
// request until requests of two batches have arrived, which only happens
// when two batches run at once.
type inFlight struct {
	next     http.Handler
	tag      *regexp.Regexp
	mu       sync.Mutex
	perBatch map[string]int
	seen     map[string]bool
	maxBatch int
	both     chan struct{} // closed once two batches were seen
	timedOut atomic.Bool
}

func (f *inFlight) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	m := f.tag.FindSubmatch(body)
	if m == nil {
		f.next.ServeHTTP(w, r)
		return
	}
	batch := string(m[1])
	f.mu.Lock()
	f.perBatch[batch]++
	if f.perBatch[batch] == 1 {
		f.maxBatch = max(f.maxBatch, len(f.perBatch))
	}
	if !f.seen[batch] {
		f.seen[batch] = true
		if len(f.seen) == 2 {
			close(f.both)
		}
	}
	f.mu.Unlock()
	// Decrement before the answer is complete, so a batch that ended is
	// never counted alongside its successor.
	defer func() {
		f.mu.Lock()
		if f.perBatch[batch]--; f.perBatch[batch] == 0 {
			delete(f.perBatch, batch)
		}
		f.mu.Unlock()
	}()
	select {
	case <-f.both:
	case <-r.Context().Done():
		return
	case <-time.After(20 * time.Second):
		f.timedOut.Store(true)
	}
	f.next.ServeHTTP(w, r)
}

func TestConcurrentBatchesAllFinish(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	f := &inFlight{
		next:     e.srv.Handler(),
		tag:      regexp.MustCompile(`"batch (f\d+) line`),
		perBatch: map[string]int{},
		seen:     map[string]bool{},
		both:     make(chan struct{}),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: f}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	e.url = "http://" + ln.Addr().String() + "/v1"

	cfg := e.config()
	cfg.Pipeline.MaxConcurrentBatches = 2
	e.open(cfg)
	const files, lines = 6, 20 // fewer lines than workers: one batch cannot hold them all
	for i := range files {
		e.drop(fmt.Sprintf("f%d.jsonl", i), chatBatch(lines, fmt.Sprintf("f%d", i)))
	}
	for i := range files {
		name := fmt.Sprintf("f%d", i)
		if o := e.waitEnded(name, "jsonl"); o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != lines {
			t.Errorf("%s: %s %+v", name, o.Status, o.RequestCounts)
		}
		e.check(name, "jsonl")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.timedOut.Load() {
		t.Error("requests of two batches were never in flight together")
	}
	if f.maxBatch > 2 {
		t.Errorf("%d batches had requests in flight at once, want at most max_concurrent_batches 2", f.maxBatch)
	}
}

func TestCloseMidBatchAndReopenFinishesExactlyOnce(t *testing.T) {
	const total, answered = 300, 60
	var holding atomic.Bool
	holding.Store(true)
	e := newEnv(t, openaitest.Options{Fault: func(n int64, r *http.Request, body []byte) openaitest.Fault {
		if holding.Load() && n > answered {
			return openaitest.Fault{Hang: true}
		}
		return openaitest.Fault{}
	}})
	first := e.open(e.config())
	e.drop("resume.jsonl", chatBatch(total, "r")+"{not json\n")
	waitFor(t, 30*time.Second, "the first answers to be committed", func() bool {
		o := e.object("resume")
		return o != nil && o.RequestCounts.Completed == answered
	})
	closeDaemon(t, first)
	if o := e.object("resume"); pipeline.Terminal(o.Status) {
		t.Fatalf("after Close mid-batch: status %s", o.Status)
	}
	if _, err := os.Stat(filepath.Join(e.dirs.Inbox, "resume.jsonl")); err != nil {
		t.Fatalf("the input left the inbox before its batch ended: %v", err)
	}

	holding.Store(false)
	before := e.srv.Requests()
	e.open(e.config())
	o := e.waitEnded("resume", "jsonl")
	if o.Status != pipeline.StatusCompleted || o.RequestCounts != (pipeline.RequestCounts{Total: total + 1, Completed: total, Failed: 1}) {
		t.Fatalf("after reopen: %s %+v", o.Status, o.RequestCounts)
	}
	rep := e.check("resume", "jsonl")
	if rep.OutputLines != total || rep.ErrorLines != 1 {
		t.Errorf("check: %d output and %d error lines", rep.OutputLines, rep.ErrorLines)
	}
	// Committed answers are not asked again.
	if again := e.srv.Requests() - before; again > total-answered {
		t.Errorf("the reopened daemon sent %d requests; only %d were left", again, total-answered)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	cfg := e.config()
	cfg.Listen = "127.0.0.1:0"
	d := e.open(cfg)
	addr := d.HTTPAddr()
	if addr == "" {
		t.Fatal("HTTPAddr is empty with listen 127.0.0.1:0")
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get("/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz: %d %q", code, body)
	}
	if code, _ := get("/nope"); code != http.StatusNotFound {
		t.Errorf("/nope: %d", code)
	}

	// With the remote engine down, a running batch pauses and /readyz says so.
	e.srv.Stop()
	e.drop("down.jsonl", chatBatch(30, "d"))
	waitFor(t, 30*time.Second, "/readyz to report the engine down", func() bool {
		code, _ := get("/readyz")
		return code == http.StatusServiceUnavailable
	})
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while the engine is down: %d", code)
	}
	if err := e.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "/readyz to recover", func() bool {
		code, _ := get("/readyz")
		return code == http.StatusOK
	})
	// An outage is a pause: every request completes, none is an error line.
	if o := e.waitEnded("down", "jsonl"); o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 30 || o.RequestCounts.Failed != 0 {
		t.Fatalf("after the outage: %s %+v\n%s", o.Status, o.RequestCounts, strings.Join(e.lines("down.errors.jsonl"), "\n"))
	}
	e.check("down", "jsonl")

	// Without listen, there is no HTTP.
	e2 := newEnv(t, openaitest.Options{})
	if d := e2.open(e2.config()); d.HTTPAddr() != "" {
		t.Errorf("HTTPAddr %q with listen off", d.HTTPAddr())
	}
}

func TestReadinessWhileEngineHangs(t *testing.T) {
	// The remote engine takes requests and answers nothing: /readyz turns
	// unready within hang_after, and ready again once it answers; the batch
	// completes with no error line.
	release := make(chan struct{})
	var hanging atomic.Bool
	hanging.Store(true)
	e := newEnv(t, openaitest.Options{Fault: func(_ int64, r *http.Request, _ []byte) openaitest.Fault {
		if hanging.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		return openaitest.Fault{}
	}})
	cfg := e.config()
	cfg.Listen = "127.0.0.1:0"
	cfg.OpenAI.HangAfter = 200 * time.Millisecond
	d := e.open(cfg)
	get := func() (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + d.HTTPAddr() + "/readyz")
		if err != nil {
			t.Fatalf("GET /readyz: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	e.drop("hung.jsonl", chatBatch(10, "h"))
	waitFor(t, 30*time.Second, "/readyz to report the engine hung", func() bool {
		code, body := get()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "engine not answering")
	})
	hanging.Store(false)
	close(release)
	waitFor(t, 30*time.Second, "/readyz to recover", func() bool {
		code, _ := get()
		return code == http.StatusOK
	})
	o := e.waitEnded("hung", "jsonl")
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Failed != 0 {
		t.Errorf("batch after the hang: %s %+v", o.Status, o.RequestCounts)
	}
	e.check("hung", "jsonl")
}

func writeConfig(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "batchd.yaml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFile(t *testing.T) {
	t.Run("unknown keys are rejected by name", func(t *testing.T) {
		for _, tc := range []struct{ content, key string }{
			{"pipeline:\n  comit_interval: 20ms\n", "comit_interval"},
			{"listn: 127.0.0.1:1\n", "listn"},
			{"openai:\n  url: http://x/v1\n", "url"},
		} {
			_, err := daemon.LoadFile(writeConfig(t, tc.content))
			if err == nil || !strings.Contains(err.Error(), tc.key) {
				t.Errorf("%q: error %v, want one naming %q", tc.content, err, tc.key)
			}
		}
	})
	t.Run("empty file gives the defaults", func(t *testing.T) {
		for _, content := range []string{"", "# nothing set\n"} {
			cfg, err := daemon.LoadFile(writeConfig(t, content))
			if err != nil {
				t.Fatalf("%q: %v", content, err)
			}
			if !reflect.DeepEqual(cfg, daemon.DefaultConfig()) {
				t.Errorf("%q: %+v, want the defaults %+v", content, cfg, daemon.DefaultConfig())
			}
		}
		// The defaults name the native engine, which needs a model.
		def := daemon.DefaultConfig()
		if err := def.Validate(); err == nil || !strings.Contains(err.Error(), "native.models") {
			t.Errorf("the defaults without a model: %v, want an error naming native.models", err)
		}
		def.Native.Models = []native.ModelConfig{{Path: "model.gguf"}}
		if err := def.Validate(); err != nil {
			t.Errorf("the defaults with a model do not validate: %v", err)
		}
	})
	t.Run("environment references are expanded", func(t *testing.T) {
		t.Setenv("BATCHD_TEST_URL", "http://10.0.0.7:8000/v1")
		t.Setenv("BATCHD_TEST_KEY", "sk-test")
		cfg, err := daemon.LoadFile(writeConfig(t, `
data: /srv/${BATCHD_TEST_NOT_SET}batchd
openai:
  urls: ["${BATCHD_TEST_URL}"]
  api_key: ${BATCHD_TEST_KEY}
  model: $BATCHD_TEST_KEY
pipeline:
  commit_interval: 25ms
  max_concurrent_batches: 3
`))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.OpenAI.URLs[0] != "http://10.0.0.7:8000/v1" || len(cfg.OpenAI.URLs) != 1 {
			t.Errorf("urls %v", cfg.OpenAI.URLs)
		}
		if cfg.OpenAI.APIKey != "sk-test" {
			t.Errorf("api_key %q", cfg.OpenAI.APIKey)
		}
		if cfg.OpenAI.Model != "$BATCHD_TEST_KEY" {
			t.Errorf("a bare $NAME was expanded: model %q", cfg.OpenAI.Model)
		}
		if cfg.Data != "/srv/batchd" {
			t.Errorf("an unset variable expands to nothing: data %q", cfg.Data)
		}
		if cfg.Pipeline.CommitInterval != 25*time.Millisecond || cfg.Pipeline.MaxConcurrentBatches != 3 {
			t.Errorf("pipeline %+v", cfg.Pipeline)
		}
		// Fields the file leaves alone keep their defaults.
		if cfg.Pipeline.Workers != daemon.DefaultConfig().Pipeline.Workers || cfg.Log != daemon.DefaultConfig().Log {
			t.Errorf("defaults lost: workers %d log %+v", cfg.Pipeline.Workers, cfg.Log)
		}
	})
	t.Run("native.kernels", func(t *testing.T) {
		if def := daemon.DefaultConfig().Native.Kernels; def != "auto" {
			t.Errorf("default native.kernels %q, want auto", def)
		}
		cfg, err := daemon.LoadFile(writeConfig(t, "native:\n  kernels: avx2\n"))
		if err != nil || cfg.Native.Kernels != "avx2" {
			t.Fatalf("native.kernels avx2: %q, %v", cfg.Native.Kernels, err)
		}
		// BATCHD_KERNELS overrides the file.
		if err := daemon.ApplyEnv(&cfg, func(k string) string {
			if k == "BATCHD_KERNELS" {
				return "generic"
			}
			return ""
		}); err != nil || cfg.Native.Kernels != "generic" {
			t.Errorf("BATCHD_KERNELS=generic over the file: %q, %v", cfg.Native.Kernels, err)
		}
	})
	t.Run("a missing file is an error", func(t *testing.T) {
		if _, err := daemon.LoadFile(filepath.Join(t.TempDir(), "none.yaml")); err == nil {
			t.Error("no error")
		}
	})
}

func TestApplyEnv(t *testing.T) {
	env := map[string]string{
		"BATCHD_DATA":                   "/var/lib/batchd",
		"BATCHD_LISTEN":                 "0.0.0.0:9090",
		"BATCHD_OPENAI_URL":             "http://a:8000/v1, http://b:8000/v1",
		"BATCHD_OPENAI_API_KEY":         "sk-env",
		"BATCHD_OPENAI_MODEL":           "m",
		"BATCHD_LOG_LEVEL":              "debug",
		"BATCHD_LOG_FORMAT":             "json",
		"BATCHD_MAX_CONCURRENT_BATCHES": "7",
		"BATCHD_OPENAI_MAX_INFLIGHT":    "11",
		"BATCHD_KERNELS":                "generic",
		"BATCHD_API_KEY":                "sk-one",
		"BATCHD_API_KEYS":               "sk-two, sk-three",
	}
	cfg := daemon.DefaultConfig()
	cfg.Engine = "openai"
	if err := daemon.ApplyEnv(&cfg, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	want := daemon.DefaultConfig()
	want.Engine = "openai"
	want.Data, want.Listen = "/var/lib/batchd", "0.0.0.0:9090"
	want.OpenAI.URLs = []string{"http://a:8000/v1", "http://b:8000/v1"}
	want.OpenAI.APIKey, want.OpenAI.Model, want.OpenAI.MaxInFlight = "sk-env", "m", 11
	want.Log = daemon.LogConfig{Level: "debug", Format: "json"}
	want.Pipeline.MaxConcurrentBatches = 7
	want.Native.Kernels = "generic"
	want.API.Keys = []string{"sk-one", "sk-two", "sk-three"}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("got  %+v\nwant %+v", cfg, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("validate: %v", err)
	}

	// Unset variables change nothing.
	cfg = daemon.DefaultConfig()
	if err := daemon.ApplyEnv(&cfg, func(string) string { return "" }); err != nil || !reflect.DeepEqual(cfg, daemon.DefaultConfig()) {
		t.Errorf("empty environment: %v, %+v", err, cfg)
	}
	// A bad number names its variable.
	for _, name := range []string{"BATCHD_MAX_CONCURRENT_BATCHES", "BATCHD_OPENAI_MAX_INFLIGHT"} {
		cfg = daemon.DefaultConfig()
		err := daemon.ApplyEnv(&cfg, func(k string) string {
			if k == name {
				return "lots"
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=lots: error %v", name, err)
		}
	}
}

func TestValidateNamesTheBadField(t *testing.T) {
	tests := []struct {
		field string
		edit  func(*daemon.Config)
	}{
		{"data", func(c *daemon.Config) { c.Data = "" }},
		{"engine", func(c *daemon.Config) { c.Engine = "native-ish" }},
		{"openai.urls", func(c *daemon.Config) { c.OpenAI.URLs = nil }},
		{"openai.max_inflight", func(c *daemon.Config) { c.OpenAI.MaxInFlight = 0 }},
		{"pipeline.max_concurrent_batches", func(c *daemon.Config) { c.Pipeline.MaxConcurrentBatches = 0 }},
		{"pipeline.commit_interval", func(c *daemon.Config) { c.Pipeline.CommitInterval = 0 }},
		{"pipeline.commit_every", func(c *daemon.Config) { c.Pipeline.CommitEvery = 0 }},
		{"pipeline.workers", func(c *daemon.Config) { c.Pipeline.Workers = -1 }},
		{"pipeline.queue_per_batch", func(c *daemon.Config) { c.Pipeline.QueuePerBatch = 0 }},
		{"pipeline.max_line_bytes", func(c *daemon.Config) { c.Pipeline.MaxLineBytes = 10 }},
		{"log.level", func(c *daemon.Config) { c.Log.Level = "loud" }},
		{"log.format", func(c *daemon.Config) { c.Log.Format = "xml" }},
		{"api.keys[0]", func(c *daemon.Config) { c.API.Keys = []string{""} }},
		{"listen", func(c *daemon.Config) { c.Listen = "0.0.0.0:8080" }},
		{"watcher.settle", func(c *daemon.Config) { c.Watcher.Settle = 0 }},
		{"watcher.rescan", func(c *daemon.Config) { c.Watcher.Rescan = -time.Second }},
		{"on_invalid", func(c *daemon.Config) { c.Batch.OnInvalid = "shrug" }},
		{"result_shape", func(c *daemon.Config) { c.Batch.ResultShape = "xml" }},
		{"native.kernels", func(c *daemon.Config) {
			c.Engine, c.Native.Models, c.Native.Kernels = "native", []native.ModelConfig{{Path: "m.gguf"}}, "sse9"
		}},
		{"native.device", func(c *daemon.Config) {
			c.Engine, c.Native.Models, c.Native.Device = "native", []native.ModelConfig{{Path: "m.gguf"}}, "gpu"
		}},
		{"native.max_seqs", func(c *daemon.Config) {
			c.Engine, c.Native.Models, c.Native.MaxSeqs = "native", []native.ModelConfig{{Path: "m.gguf"}}, 0
		}},
		{"native.speculative.method", func(c *daemon.Config) {
			c.Engine, c.Native.Models, c.Native.Speculative.Method = "native", []native.ModelConfig{{Path: "m.gguf"}}, "eagle"
		}},
		{"native.speculative.k", func(c *daemon.Config) {
			c.Engine, c.Native.Models, c.Native.Speculative.K = "native", []native.ModelConfig{{Path: "m.gguf"}}, 0
		}},
		{"native.max_batch_tokens", func(c *daemon.Config) {
			c.Engine, c.Native.Models, c.Native.MaxBatchTokens = "native", []native.ModelConfig{{Path: "m.gguf"}}, -1
		}},
	}
	for _, tc := range tests {
		t.Run(tc.field, func(t *testing.T) {
			cfg := daemon.DefaultConfig()
			cfg.Engine = "openai"
			tc.edit(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %v, want one naming %s", err, tc.field)
			}
			// Open refuses it too, before touching the data directory.
			never := filepath.Join(t.TempDir(), "never")
			if tc.field != "data" {
				cfg.Data = never
			}
			if err := daemon.New(cfg, nil).Open(context.Background()); err == nil {
				t.Error("Open accepted an invalid config")
			}
			if _, err := os.Stat(never); !os.IsNotExist(err) {
				t.Errorf("Open created the data directory: %v", err)
			}
		})
	}
}

func TestRedropUnderTheSameNameLeavesNoTempFiles(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	e.open(e.config())
	content := chatBatch(10, "s") + "{not json\n"
	e.drop("same.jsonl", content)
	first := e.waitEnded("same", "jsonl")
	if err := os.Remove(filepath.Join(e.dirs.Done, "same.jsonl")); err != nil {
		t.Fatal(err)
	}
	before := e.srv.Requests()
	e.drop("same.jsonl", content)
	second := e.waitEnded("same", "jsonl")
	if e.srv.Requests() != before {
		t.Errorf("the same content ran %d requests again", e.srv.Requests()-before)
	}
	if second.ID != first.ID || second.RequestCounts != first.RequestCounts {
		t.Errorf("re-drop: %s %+v, first run %s %+v", second.ID, second.RequestCounts, first.ID, first.RequestCounts)
	}
	e.check("same", "jsonl")
	ents, _ := os.ReadDir(e.dirs.Outbox)
	var left []string
	for _, de := range ents {
		if strings.HasPrefix(de.Name(), ".") {
			left = append(left, de.Name())
		}
	}
	if len(left) > 0 {
		t.Fatalf("regression (fixed bug): temporary files left in the outbox: %v. pipeline/files.go publish (line 59-75) hard-links the "+
			"state file to .NAME.*.tmp and renames it over NAME.*; when NAME.* already is a link to the same inode "+
			"(re-publishing a finished batch), rename(2) is a no-op that succeeds and the .tmp link stays. Fix: "+
			"os.Remove(tmp) after the rename (ignoring ErrNotExist), or skip when os.SameFile(src, dst).", left)
	}
}

func TestStaleCancelDoesNotCancelALaterBatch(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	first := e.open(e.config())
	e.drop("late.jsonl", chatBatch(3, "first"))
	if o := e.waitEnded("late", "jsonl"); o.Status != pipeline.StatusCompleted {
		t.Fatalf("first batch: %s", o.Status)
	}
	closeDaemon(t, first)
	// A cancel for a batch that has ended, seen by the next daemon. Once
	// the watcher has handed it over (its debug log says so), anything
	// dropped later reaches the daemon after it.
	e.drop("late.cancel", "")
	e.open(e.config())
	waitFor(t, 30*time.Second, "the watcher to deliver late.cancel", func() bool {
		return strings.Contains(e.logs.String(), "kind=cancel batch=late ")
	})

	// New content under the same name, submitted later, must run.
	e.drop("late.jsonl", chatBatch(4, "second"))
	waitFor(t, 60*time.Second, "the second batch named late to end", func() bool {
		o := e.object("late")
		return o != nil && o.RequestCounts.Total == 4 && pipeline.Terminal(o.Status)
	})
	if o := e.object("late"); o.Status != pipeline.StatusCompleted {
		t.Fatalf("regression (fixed bug): a NAME.cancel dropped after batch NAME ended stays in the inbox and in Pipeline.cancels, and "+
			"cancels the next, unrelated batch named NAME (it ended %s with %+v). daemon/daemon.go receive "+
			"(watcher.Cancel case) calls pipe.Cancel, which (pipeline/pipeline.go Cancel) records a pending cancel "+
			"for any name not running; only retire clears it and the file. Fix: when no batch of that name is "+
			"running or queued and batch NAME has ended (outbox/NAME.batch.json terminal, no NAME input in the "+
			"inbox), discard the request and remove NAME.cancel; keep pending cancels only for names with an input "+
			"waiting.", o.Status, o.RequestCounts)
	}
}

func TestFailedOpenReleasesTheDataDir(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := e.config()
	cfg.Listen = busy.Addr().String()
	d := daemon.New(cfg, slog.New(slog.NewTextHandler(e.logs, nil)))
	err = d.Open(context.Background())
	if err == nil {
		closeDaemon(t, d)
		t.Fatal("Open succeeded on a listen address in use")
	}
	if !strings.Contains(err.Error(), "listen") {
		t.Errorf("error %q does not say what failed", err)
	}
	// Everything Open started is stopped, the lock included; Close again is harmless.
	if err := d.Close(context.Background()); err != nil {
		t.Errorf("Close after a failed Open: %v", err)
	}
	cfg.Listen = ""
	e.open(cfg)
	e.drop("after.jsonl", chatBatch(2, "a"))
	e.waitEnded("after", "jsonl")
}

func TestValidateChecksEngineFields(t *testing.T) {
	for _, tc := range []struct {
		field string
		edit  func(*daemon.Config)
	}{
		{"openai.urls[0]", func(c *daemon.Config) { c.OpenAI.URLs = []string{"not a url"} }},
		{"openai.max_retries", func(c *daemon.Config) { c.OpenAI.MaxRetries = -1 }},
		{"openai.retry_wait_max", func(c *daemon.Config) { c.OpenAI.RetryWaitMax = time.Millisecond; c.OpenAI.RetryWaitMin = time.Second }},
		{"openai.attempt_timeout", func(c *daemon.Config) { c.OpenAI.AttemptTimeout = 0 }},
		{"openai.hang_after", func(c *daemon.Config) { c.OpenAI.HangAfter = 0 }},
		{"openai.max_answer_bytes", func(c *daemon.Config) { c.OpenAI.MaxAnswerBytes = 0 }},
		{"openai.max_answer_bytes_inflight", func(c *daemon.Config) { c.OpenAI.MaxAnswerBytesInFlight = 1 << 20 }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			cfg := daemon.DefaultConfig()
			cfg.Engine = "openai"
			tc.edit(&cfg)
			err := cfg.Validate()
			if err == nil {
				t.Fatalf("regression (fixed bug): Config.Validate accepts a bad %s; only Open (NewEngine → openai.Config.Validate) "+
					"rejects it, after creating the data directory, so `batchd run` reports it as \"start: ...\" with "+
					"exit 1 instead of \"config: ...\" with exit 2. daemon/config.go Validate checks only openai.urls "+
					"(non-empty) and openai.max_inflight. Fix: in Validate, map the fields into openai.Config as "+
					"NewEngine does and return its Validate error.", tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %v, want one naming %s", err, tc.field)
			}
		})
	}
}

func TestEditingAPublishedOutputDoesNotCorruptReuse(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	e.open(e.config())
	content := chatBatch(5, "k")
	e.drop("orig.jsonl", content)
	e.waitEnded("orig", "jsonl")
	want := e.lines("orig.output.jsonl")
	// A consumer empties the file it has read, in place.
	if err := os.Truncate(filepath.Join(e.dirs.Outbox, "orig.output.jsonl"), 0); err != nil {
		t.Fatal(err)
	}
	// The same content again reuses the first run's results.
	e.drop("copy.jsonl", content)
	e.waitEnded("copy", "jsonl")
	raw, err := os.ReadFile(filepath.Join(e.dirs.Outbox, "copy.output.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(raw), "\n"); got != len(want) {
		t.Fatalf("regression (fixed bug): re-dropped content published %d output lines, not %d: pipeline/files.go publish hard-links "+
			"outbox/NAME.output.jsonl to state/batches/ID/output.GEN.jsonl, so a consumer that truncates or "+
			"appends to a published output in place rewrites the copy batchd reuses for the same content (and the "+
			"ledger's committed lengths no longer match it). Fix: publish a copy, or make the state file "+
			"read-only (0444) before linking and check its size against the ledger when reusing it.", got, len(want))
	}
}

// The native engine end to end: a demo model written by batchd, a batch of
// chat, completions and embeddings requests dropped in the inbox.
func TestNativeEngineRunsADroppedBatch(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	model := demoModel(t)
	cfg := e.config()
	cfg.Engine = "native"
	cfg.Native.Models = []native.ModelConfig{{Path: model}}
	e.open(cfg)
	e.drop("native.jsonl", `{"custom_id":"c","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"max_tokens":4}}
{"custom_id":"p","method":"POST","url":"/v1/completions","body":{"prompt":"Once upon","max_tokens":3,"temperature":0.8,"seed":5}}
{"custom_id":"e","method":"POST","url":"/v1/embeddings","body":{"input":"a cat"}}
`)
	o := e.waitEnded("native", "jsonl")
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 3 {
		t.Fatalf("%s %+v\n%s", o.Status, o.RequestCounts, strings.Join(e.lines("native.errors.jsonl"), "\n"))
	}
	if o.Usage.OutputTokens == 0 || o.Usage.InputTokens == 0 {
		t.Fatalf("usage %+v", o.Usage)
	}
	e.check("native", "jsonl")
}

// The example config in deploy/ loads: every key it shows exists.
func TestExampleConfigLoads(t *testing.T) {
	cfg, err := daemon.LoadFile("../deploy/config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Source != "dir" || cfg.S3.Endpoint == "" || cfg.S3.CheckpointInterval != 5*time.Second {
		t.Fatalf("example config read as source %q, s3 %+v", cfg.Source, cfg.S3)
	}
}

// demoModel writes a tiny demo model for the native engine and returns its path.
func demoModel(t *testing.T) string {
	t.Helper()
	return writeDemoModel(t, demomodel.Shapes["tiny"])
}

// writeDemoModel writes a demo model of shape and returns its path.
func writeDemoModel(t *testing.T, shape demomodel.Shape) string {
	t.Helper()
	model := filepath.Join(t.TempDir(), "demo-"+shape.Name+".gguf")
	if err := demomodel.WriteFile(model, shape, kernels.F32, 7); err != nil {
		t.Fatal(err)
	}
	return model
}

// A damaged ledger is refused before the engine loads its models (a native
// model load is slow): here the model does not exist, and the error is the
// ledger's.
func TestDamagedLedgerIsRefusedBeforeTheEngineLoads(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	if err := os.MkdirAll(e.dirs.State, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dirs.State, "ledger.db"), bytes.Repeat([]byte{0xAB}, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := e.config()
	cfg.Engine = "native"
	cfg.Native.Models = []native.ModelConfig{{Path: filepath.Join(t.TempDir(), "missing.gguf")}}
	d := daemon.New(cfg, slog.New(slog.NewTextHandler(e.logs, nil)))
	err := d.Open(context.Background())
	if err == nil {
		closeDaemon(t, d)
		t.Fatal("Open succeeded on a damaged ledger")
	}
	if !errors.Is(err, ledger.ErrDamaged) {
		t.Fatalf("Open: %v; want the ledger's damage reported before the engine's missing model", err)
	}
	if err := d.Close(context.Background()); err != nil {
		t.Errorf("Close after a failed Open: %v", err)
	}
}
