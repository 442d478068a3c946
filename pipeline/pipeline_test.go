package pipeline_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/openai"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/store/folder"
)

// env is a data directory, a stand-in server and a pipeline on the remote
// engine, for one test.
type env struct {
	t      *testing.T
	dir    string
	inbox  string
	outbox string
	done   string
	srv    *openaitest.Server
	pipe   *pipeline.Pipeline
	eng    *openai.Engine
	// other, when set, is the engine the pipeline runs on instead of eng.
	other engine.Engine
	cfg   pipeline.Config
}

type envOpt func(*pipeline.Config, *openaitest.Options)

func newEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	e := newDataDir(t)
	var so openaitest.Options
	for _, o := range opts {
		o(&e.cfg, &so)
	}
	e.srv = openaitest.NewServer(so)
	if err := e.srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.srv.Close)
	oc := openai.DefaultConfig()
	oc.URLs = []string{e.srv.URL()}
	oc.RetryWaitMin, oc.RetryWaitMax, oc.MaxRetries = time.Millisecond, 5*time.Millisecond, 2
	oc.ProbeInterval = 10 * time.Millisecond
	oc.DownAfter = 1000
	oc.Logger = e.cfg.Logger
	eng, err := openai.New(oc)
	if err != nil {
		t.Fatal(err)
	}
	e.eng = eng
	if err := eng.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(context.Background()) })
	// Registered before any pipeline opens, so it runs after they closed.
	t.Cleanup(func() { checkLedger(t, e.cfg.StateDir) })
	e.open()
	return e
}

// newEnvOn is newEnv on eng, a test double at the engine boundary, with
// no stand-in server.
func newEnvOn(t *testing.T, eng engine.Engine, opt func(*pipeline.Config)) *env {
	t.Helper()
	e := newDataDir(t)
	e.other = eng
	if opt != nil {
		opt(&e.cfg)
	}
	t.Cleanup(func() { checkLedger(t, e.cfg.StateDir) })
	e.open()
	return e
}

// newDataDir makes a data directory and the test config of a pipeline on it.
func newDataDir(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, dir: dir, inbox: filepath.Join(dir, "inbox"), outbox: filepath.Join(dir, "outbox"), done: filepath.Join(dir, "done")}
	for _, d := range []string{e.inbox, e.outbox, e.done} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.cfg = pipeline.DefaultConfig(filepath.Join(dir, "state"))
	e.cfg.CommitInterval = 20 * time.Millisecond
	e.cfg.CommitEvery = 7
	e.cfg.Workers = 8
	e.cfg.ProgressInterval = 10 * time.Millisecond
	e.cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	return e
}

// checkLedger fails t for every broken invariant of the ledger in stateDir
// (pipeline.CheckLedger, as `batchd ledger check` runs it). Every test that
// uses newEnv runs it when it ends.
func checkLedger(t *testing.T, stateDir string) {
	t.Helper()
	rep, err := pipeline.CheckLedger(stateDir, 5*time.Second, folder.CheckRetiring)
	if err != nil {
		t.Errorf("ledger check: %v", err)
		return
	}
	for _, p := range rep.Problems {
		t.Errorf("ledger check: %s", p)
	}
}

func (e *env) open() {
	e.t.Helper()
	var eng engine.Engine = e.eng
	if e.other != nil {
		eng = e.other
	}
	e.pipe = pipeline.New(e.cfg, eng)
	if err := e.pipe.Open(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	p := e.pipe
	e.t.Cleanup(func() { p.Close(context.Background()) })
}

func (e *env) reopen() { e.reopenWith(nil) }

// reopenWith closes the pipeline, calls between (when set), and opens it
// again.
func (e *env) reopenWith(between func()) {
	e.t.Helper()
	if err := e.pipe.Close(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	if between != nil {
		between()
	}
	e.open()
}

// drop writes an input (and options) into the inbox and returns its job.
func (e *env) drop(name, format, content, options string) pipeline.Job {
	e.t.Helper()
	path := filepath.Join(e.inbox, name+"."+format)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
	optPath := filepath.Join(e.inbox, name+".options.json")
	if options != "" {
		if err := os.WriteFile(optPath, []byte(options), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	return pipeline.Job{Name: name, Format: format, Store: folder.New(name, path, e.outbox, e.done)}
}

func (e *env) run(job pipeline.Job) *pipeline.BatchObject {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := e.pipe.Run(ctx, job); err != nil {
		e.t.Fatalf("Run %s: %v", job.Name, err)
	}
	return e.object(job.Name)
}

func (e *env) object(name string) *pipeline.BatchObject {
	e.t.Helper()
	o, err := pipeline.ReadBatchObject(filepath.Join(e.outbox, name+".batch.json"))
	if err != nil {
		e.t.Fatal(err)
	}
	return o
}

// check runs the exactly-once oracle on a finished batch.
func (e *env) check(name, format string) *pipeline.CheckReport {
	e.t.Helper()
	rep, err := pipeline.Check(pipeline.CheckInput{
		Input:   filepath.Join(e.done, name+"."+format),
		Format:  format,
		Output:  filepath.Join(e.outbox, name+".output.jsonl"),
		Errors:  filepath.Join(e.outbox, name+".errors.jsonl"),
		Object:  filepath.Join(e.outbox, name+".batch.json"),
		Results: filepath.Join(e.outbox, name+".results.json"),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if !rep.OK() {
		e.t.Fatalf("check %s: %s", name, strings.Join(rep.Problems, "\n"))
	}
	return rep
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func sortedLines(t *testing.T, path string) []string {
	l := readLines(t, path)
	sort.Strings(l)
	return l
}

// chatLines returns n valid chat lines.
func chatLines(n int, prefix string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"%s%d","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hello number %d"}],"max_tokens":5}}`+"\n", prefix, i, i)
	}
	return b.String()
}

type lineObj struct {
	CustomID *string `json:"custom_id"`
	Line     int     `json:"line"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct{ Code, Message string } `json:"error"`
}

func parseLines(t *testing.T, path string) []lineObj {
	t.Helper()
	var out []lineObj
	for _, l := range readLines(t, path) {
		var o lineObj
		if err := json.Unmarshal([]byte(l), &o); err != nil {
			t.Fatalf("%s: %v: %s", path, err, l)
		}
		out = append(out, o)
	}
	return out
}

func codes(ls []lineObj) map[string]int {
	m := map[string]int{}
	for _, l := range ls {
		switch {
		case l.Error != nil:
			m[l.Error.Code]++
		case l.Response != nil:
			m[fmt.Sprint(l.Response.StatusCode)]++
		}
	}
	return m
}

func TestRunCompletesAndMovesInput(t *testing.T) {
	e := newEnv(t)
	job := e.drop("simple", "jsonl", chatLines(50, "r"), "")
	o := e.run(job)
	if o.Status != pipeline.StatusCompleted {
		t.Fatalf("status %s", o.Status)
	}
	if c := o.RequestCounts; c.Total != 50 || c.Completed != 50 || c.Failed != 0 {
		t.Fatalf("counts %+v", c)
	}
	if o.Usage.InputTokens == 0 || o.Usage.OutputTokens == 0 {
		t.Fatalf("usage not summed: %+v", o.Usage)
	}
	if _, err := os.Stat(filepath.Join(e.inbox, job.Name+".jsonl")); !os.IsNotExist(err) {
		t.Fatalf("input still in inbox: %v", err)
	}
	e.check("simple", "jsonl")
	if got := e.srv.Requests(); got != 50 {
		t.Fatalf("server saw %d requests, want 50", got)
	}
	// No temporary files are left in the outbox.
	ents, _ := os.ReadDir(e.outbox)
	for _, de := range ents {
		if strings.HasPrefix(de.Name(), ".") {
			t.Errorf("leftover %s", de.Name())
		}
	}
}

func TestRedropReusesEveryResult(t *testing.T) {
	e := newEnv(t)
	content := chatLines(20, "x") + "not json\n"
	e.run(e.drop("first", "jsonl", content, ""))
	before := e.srv.Requests()
	o := e.run(e.drop("second", "jsonl", content, ""))
	if got := e.srv.Requests(); got != before {
		t.Fatalf("re-drop called the engine %d more times", got-before)
	}
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 20 || o.RequestCounts.Failed != 1 {
		t.Fatalf("re-drop object %+v", o.RequestCounts)
	}
	a := sortedLines(t, filepath.Join(e.outbox, "first.output.jsonl"))
	b := sortedLines(t, filepath.Join(e.outbox, "second.output.jsonl"))
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatal("re-dropped content gave different output")
	}
	e.check("second", "jsonl")

	// A changed file is a new batch.
	e.run(e.drop("third", "jsonl", content+chatLines(1, "new"), ""))
	if got := e.srv.Requests(); got != before+21 {
		t.Fatalf("changed file: engine saw %d new requests, want 21", got-before)
	}
}

// newEnvStopping is newEnv with 2 workers whose stand-in server closes the
// channel it returns when it is served its nth request.
func newEnvStopping(t *testing.T, nth int64) (*env, <-chan struct{}) {
	var served atomic.Int64
	stopAt := make(chan struct{})
	e := newEnv(t, func(c *pipeline.Config, o *openaitest.Options) {
		c.Workers = 2
		o.Fault = func(n int64, r *http.Request, body []byte) openaitest.Fault {
			if served.Add(1) == nth {
				close(stopAt)
			}
			return openaitest.Fault{}
		}
	})
	return e, stopAt
}

func TestShutdownMidwayThenResumeIsExactlyOnce(t *testing.T) {
	e, stopAt := newEnvStopping(t, 40)
	content := chatLines(300, "s")
	job := e.drop("resume", "jsonl", content, "")
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stopAt; cancel() }()
	if _, err := e.pipe.Run(ctx, job); err == nil {
		t.Fatal("Run returned no error after its context was cancelled")
	}
	if _, err := os.Stat(filepath.Join(e.inbox, job.Name+".jsonl")); err != nil {
		t.Fatalf("input left the inbox before the batch ended: %v", err)
	}
	e.reopen()
	o := e.run(job)
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 300 {
		t.Fatalf("after resume: %s %+v", o.Status, o.RequestCounts)
	}
	e.check("resume", "jsonl")
	if got := e.srv.Requests(); got >= 300+40 {
		t.Fatalf("resume redid too much: %d requests for 300 lines", got)
	}
}

func TestCancelKeepsCompletedAndCancelsTheRest(t *testing.T) {
	release := make(chan struct{})
	e := newEnv(t, func(c *pipeline.Config, o *openaitest.Options) {
		c.Workers = 4
		o.Fault = func(n int64, r *http.Request, body []byte) openaitest.Fault {
			if n > 10 {
				<-release
				return openaitest.Fault{Hang: true}
			}
			return openaitest.Fault{}
		}
	})
	job := e.drop("cx", "jsonl", chatLines(100, "c"), "")
	type res struct{ err error }
	done := make(chan res, 1)
	go func() {
		_, err := e.pipe.Run(context.Background(), job)
		done <- res{err}
	}()
	// Cancel once ten results are committed.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if o, err := pipeline.ReadBatchObject(filepath.Join(e.outbox, "cx.batch.json")); err == nil && o.RequestCounts.Completed >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ten results never committed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !e.pipe.Cancel("cx") {
		t.Fatal("Cancel says cx is not running")
	}
	close(release)
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	o := e.object("cx")
	if o.Status != pipeline.StatusCancelled || o.CancellingAt == nil || o.CancelledAt == nil {
		t.Fatalf("status %s cancelling_at %v cancelled_at %v", o.Status, o.CancellingAt, o.CancelledAt)
	}
	if o.RequestCounts.Completed != 10 || o.RequestCounts.Failed != 90 {
		t.Fatalf("counts %+v", o.RequestCounts)
	}
	if c := codes(parseLines(t, filepath.Join(e.outbox, "cx.errors.jsonl"))); c["batch_cancelled"] != 90 {
		t.Fatalf("error codes %v", c)
	}
	e.check("cx", "jsonl")
}

func TestCancelBeforeStart(t *testing.T) {
	e := newEnv(t)
	if e.pipe.Cancel("early") {
		t.Fatal("Cancel says a batch that never ran is running")
	}
	e.pipe.CancelOnStart("early")
	o := e.run(e.drop("early", "jsonl", chatLines(5, "e"), ""))
	if o.Status != pipeline.StatusCancelled || o.RequestCounts.Failed != 5 {
		t.Fatalf("%s %+v", o.Status, o.RequestCounts)
	}
	if e.srv.Requests() != 0 {
		t.Fatalf("engine called %d times for a cancelled batch", e.srv.Requests())
	}
	e.check("early", "jsonl")
}

func TestCompletionWindowExpires(t *testing.T) {
	e := newEnv(t, func(c *pipeline.Config, o *openaitest.Options) {
		o.Fault = func(n int64, r *http.Request, body []byte) openaitest.Fault {
			if n > 3 {
				return openaitest.Fault{Hang: true}
			}
			return openaitest.Fault{}
		}
		c.Workers = 1
	})
	o := e.run(e.drop("exp", "jsonl", chatLines(20, "w"), `{"completion_window":"1s"}`))
	if o.Status != pipeline.StatusExpired || o.ExpiredAt == nil {
		t.Fatalf("status %s", o.Status)
	}
	if o.RequestCounts.Completed != 3 || o.RequestCounts.Failed != 17 {
		t.Fatalf("counts %+v", o.RequestCounts)
	}
	if c := codes(parseLines(t, filepath.Join(e.outbox, "exp.errors.jsonl"))); c["batch_expired"] != 17 {
		t.Fatalf("codes %v", c)
	}
	e.check("exp", "jsonl")
}

func TestRejectFailsWholeBatchWithoutRunning(t *testing.T) {
	e := newEnv(t)
	content := chatLines(3, "ok") + "{bad json\n" + `{"custom_id":"t","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"x"}],"max_tokens":3,"temperature":9}}` + "\n"
	o := e.run(e.drop("rej", "jsonl", content, `{"on_invalid":"reject"}`))
	if o.Status != pipeline.StatusFailed || o.Errors == nil || len(o.Errors.Data) != 2 {
		t.Fatalf("status %s errors %+v", o.Status, o.Errors)
	}
	d := o.Errors.Data
	if d[0].Code != "invalid_json_line" || *d[0].Line != 4 || *d[1].Line != 5 || d[1].Param == nil || *d[1].Param != "temperature" {
		t.Fatalf("errors.data %+v %+v", d[0], d[1])
	}
	if e.srv.Requests() != 0 {
		t.Fatal("a rejected batch ran requests")
	}
	if _, err := os.Stat(filepath.Join(e.outbox, "rej.output.jsonl")); !os.IsNotExist(err) {
		t.Fatal("a rejected batch has an output file")
	}
}

func TestInvalidOptionsFailTheBatch(t *testing.T) {
	e := newEnv(t)
	o := e.run(e.drop("badopt", "jsonl", chatLines(2, "b"), `{"temperatur": 1}`))
	if o.Status != pipeline.StatusFailed || o.Errors == nil || o.Errors.Data[0].Code != "invalid_options" ||
		!strings.Contains(o.Errors.Data[0].Message, "temperatur") {
		t.Fatalf("%s %+v", o.Status, o.Errors)
	}
}

func TestEngineUnavailableLineRerunsOnRedrop(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	e := newEnv(t, func(c *pipeline.Config, o *openaitest.Options) {
		o.Fault = func(n int64, r *http.Request, body []byte) openaitest.Fault {
			if failing.Load() && bytes.Contains(body, []byte("number 3\"")) {
				return openaitest.Fault{Status: 500}
			}
			return openaitest.Fault{}
		}
	})
	content := chatLines(6, "u")
	o := e.run(e.drop("un", "jsonl", content, ""))
	if o.RequestCounts.Completed != 5 || o.RequestCounts.Failed != 1 {
		t.Fatalf("counts %+v", o.RequestCounts)
	}
	ls := parseLines(t, filepath.Join(e.outbox, "un.errors.jsonl"))
	if len(ls) != 1 || ls[0].Error == nil || ls[0].Error.Code != "engine_unavailable" || *ls[0].CustomID != "u3" || ls[0].Line != 4 {
		t.Fatalf("errors %+v", ls)
	}
	failing.Store(false)
	before := e.srv.Requests()
	o = e.run(e.drop("un2", "jsonl", content, ""))
	if got := e.srv.Requests() - before; got != 1 {
		t.Fatalf("re-drop ran %d requests, want only the unavailable one", got)
	}
	if o.RequestCounts.Completed != 6 || o.RequestCounts.Failed != 0 {
		t.Fatalf("after re-drop %+v", o.RequestCounts)
	}
	e.check("un2", "jsonl")
}

func TestServerRefusalIsA400LineWithItsBody(t *testing.T) {
	e := newEnv(t, func(c *pipeline.Config, o *openaitest.Options) {
		o.Fault = func(n int64, r *http.Request, body []byte) openaitest.Fault {
			if bytes.Contains(body, []byte("number 1\"")) {
				return openaitest.Fault{Status: 400, Body: `{"error":{"message":"context too long","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`}
			}
			return openaitest.Fault{}
		}
	})
	e.run(e.drop("ref", "jsonl", chatLines(3, "f"), ""))
	ls := parseLines(t, filepath.Join(e.outbox, "ref.errors.jsonl"))
	if len(ls) != 1 || ls[0].Response == nil || ls[0].Response.StatusCode != 400 || !bytes.Contains(ls[0].Response.Body, []byte("context_length_exceeded")) {
		t.Fatalf("errors %+v", ls)
	}
	e.check("ref", "jsonl")
}

func TestRequestsDocument(t *testing.T) {
	e := newEnv(t)
	doc := `{"url":"/v1/chat/completions","defaults":{"max_tokens":4},"system_prompt":"be brief","requests":[
		{"custom_id":"a","messages":[{"role":"user","content":"one"}]},
		{"messages":[{"role":"user","content":"two"}]},
		{"custom_id":"c","messages":[{"role":"user","content":"three"}],"temperature":7}
	]}`
	o := e.run(e.drop("doc", "json", doc, ""))
	if o.RequestCounts.Total != 3 || o.RequestCounts.Completed != 2 || o.RequestCounts.Failed != 1 {
		t.Fatalf("counts %+v", o.RequestCounts)
	}
	e.check("doc", "json")
}

func TestStructurallyBrokenDocumentFails(t *testing.T) {
	e := newEnv(t)
	o := e.run(e.drop("broken", "json", `{"requests":[{"custom_id":"a"`, ""))
	if o.Status != pipeline.StatusFailed || o.Errors == nil || o.Errors.Data[0].Code != "invalid_file" {
		t.Fatalf("%s %+v", o.Status, o.Errors)
	}
}

func TestLineTooLongIsOneErrorAndNextLineRuns(t *testing.T) {
	e := newEnv(t, func(c *pipeline.Config, o *openaitest.Options) { c.MaxLineBytes = 1024 })
	long := `{"custom_id":"long","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}],"max_tokens":2}}` + "\n"
	o := e.run(e.drop("long", "jsonl", chatLines(1, "a")+long+chatLines(1, "b"), ""))
	if o.RequestCounts.Completed != 2 || o.RequestCounts.Failed != 1 {
		t.Fatalf("counts %+v", o.RequestCounts)
	}
	ls := parseLines(t, filepath.Join(e.outbox, "long.errors.jsonl"))
	if len(ls) != 1 || ls[0].Error.Code != "line_too_long" || ls[0].Line != 2 {
		t.Fatalf("errors %+v", ls)
	}
	e.check("long", "jsonl")
}

func TestRedropOfCancelledBatchRunsOnlyTheCancelledLines(t *testing.T) {
	e := newEnv(t)
	content := chatLines(8, "k")
	e.pipe.CancelOnStart("k1")
	o := e.run(e.drop("k1", "jsonl", content, ""))
	if o.Status != pipeline.StatusCancelled || o.RequestCounts.Failed != 8 {
		t.Fatalf("first run %s %+v", o.Status, o.RequestCounts)
	}
	o = e.run(e.drop("k2", "jsonl", content, ""))
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 8 || o.RequestCounts.Failed != 0 {
		t.Fatalf("re-drop %s %+v", o.Status, o.RequestCounts)
	}
	if got := e.srv.Requests(); got != 8 {
		t.Fatalf("engine saw %d requests, want 8", got)
	}
	e.check("k2", "jsonl")
}

// Expire forgets finished batches ended before the cutoff: the ledger
// record and the pipeline's copies go, the outbox and done/ stay, and the
// same content dropped again runs anew.
func TestExpireForgetsFinishedBatches(t *testing.T) {
	e := newEnv(t)
	content := chatLines(3, "old")
	e.run(e.drop("old", "jsonl", content, ""))
	if names, err := e.pipe.Expire(time.Now().Add(-time.Hour)); err != nil || len(names) != 0 {
		t.Fatalf("expire with an old cutoff: %v %v", names, err)
	}
	names, err := e.pipe.Expire(time.Now().Add(time.Hour))
	if err != nil || len(names) != 1 || names[0] != "old" {
		t.Fatalf("expire: %v %v", names, err)
	}
	if bs, _ := e.pipe.Ledger().List(); len(bs) != 0 {
		t.Fatalf("ledger still has %d batches", len(bs))
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "state", "batches")); len(ents) != 0 {
		t.Fatalf("state still has %d batch dirs", len(ents))
	}
	for _, p := range []string{filepath.Join(e.outbox, "old.output.jsonl"), filepath.Join(e.done, "old.jsonl")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	before := e.srv.Requests()
	e.run(e.drop("old", "jsonl", content, ""))
	if got := e.srv.Requests() - before; got != 3 {
		t.Fatalf("the same content after expiry sent %d requests, want 3 (it runs anew)", got)
	}
}
