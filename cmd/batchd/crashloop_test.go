package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// No crash loop, with a real process: batchd crashes (SIGABRT: the Go
// runtime dies printing a crash report, as on a fatal error no recover can
// catch) each time one request reaches the engine. After the first crash
// that request runs with nothing else in flight; after the second it is
// failed with engine_crashed and never sent again, and the rest of the
// batch completes exactly once. An operator's SIGQUIT (a stack dump, the
// same kind of report) counts for nothing: two of them first hold nothing
// against the request. (Nor does a kill -9: the crash test kills batchd 20
// times and expects no engine_crashed line.)
func TestCrashingTwiceOnOneRequestFailsItNotTheBatch(t *testing.T) {
	bin := needBinary(t)
	var (
		phase   atomic.Int32 // which batchd process runs: 1 to 5
		alone   atomic.Bool  // the fourth process's poison is at the engine
		beside  atomic.Int32 // other requests at the engine meanwhile
		poisons [6]atomic.Int32
		seen    = make(chan int32, 6)
	)
	srv, root, cfgPath := crashFixture(t, func(n int64, r *http.Request, body []byte) openaitest.Fault {
		if !bytes.Contains(body, []byte("POISON")) {
			if alone.Load() {
				beside.Add(1)
			}
			return openaitest.Fault{}
		}
		ph := phase.Load()
		poisons[ph].Add(1)
		if ph == 4 {
			alone.Store(true)
			defer alone.Store(false)
		}
		seen <- ph
		<-r.Context().Done() // hangs until batchd is gone
		return openaitest.Fault{}
	})
	in := poisonInput()
	data := filepath.Join(root, "data")
	placeInput(t, filepath.Join(data, "inbox"), "loop.jsonl", []byte(in))
	logPath := filepath.Join(root, "batchd.log")
	for ph := int32(1); ph <= 4; ph++ {
		phase.Store(ph)
		p := startBatchd(t, bin, data, cfgPath, srv.URL(), logPath)
		awaitPoison(t, seen, ph, logPath)
		// SIGQUIT (processes 1 and 2: an operator's stack dump) and
		// SIGABRT (3 and 4: a crash) kill a Go program the way a fatal
		// runtime error does: the runtime prints a report (also to
		// batchd's crash log) and exits.
		sig := syscall.SIGABRT
		if ph <= 2 {
			sig = syscall.SIGQUIT
		}
		p.signal(t, sig)
	}
	phase.Store(5)
	p := startBatchd(t, bin, data, cfgPath, srv.URL(), logPath)
	waitFor(t, 2*time.Minute, "the batch to finish", func() bool {
		if !p.running() {
			t.Fatalf("batchd exited: %v\n%s", p.err, logTail(logPath))
		}
		return finished(data, "loop", "jsonl")
	})
	if n := beside.Load(); n != 0 {
		t.Fatalf("%d requests reached the engine while the suspect ran after the first crash: it should run alone", n)
	}
	for ph := 1; ph <= 5; ph++ {
		if n, want := poisons[ph].Load(), int32(min(1, 5-ph)); n != want {
			t.Fatalf("the poison reached the engine %d times in process %d, want %d", n, ph, want)
		}
	}
	o, err := pipeline.ReadBatchObject(filepath.Join(data, "outbox", "loop.batch.json"))
	if err != nil {
		t.Fatal(err)
	}
	if o.RequestCounts.Completed != 20 || o.RequestCounts.Failed != 1 {
		t.Fatalf("counts %+v, want 20 completed and the poison failed", o.RequestCounts)
	}
	errs := fileLines(t, filepath.Join(data, "outbox", "loop.errors.jsonl"))
	if len(errs) != 1 || !strings.Contains(errs[0], `"custom_id":"r10"`) || !strings.Contains(errs[0], `"code":"engine_crashed"`) {
		t.Fatalf("errors file: %q", errs)
	}
	rep, err := pipeline.Check(pipeline.CheckInput{
		Input: filepath.Join(data, "done", "loop.jsonl"), Format: "jsonl",
		Output: filepath.Join(data, "outbox", "loop.output.jsonl"), Errors: filepath.Join(data, "outbox", "loop.errors.jsonl"),
		Object: filepath.Join(data, "outbox", "loop.batch.json"),
	})
	if err != nil || !rep.OK() {
		t.Fatalf("check: %v %v", err, rep.Problems)
	}
	if !strings.Contains(logTail(logPath), "engine_crashed") {
		t.Fatalf("the log does not say why the request failed\n%s", logTail(logPath))
	}
	if report, err := os.ReadFile(filepath.Join(data, "state", "crash.log.prev")); err != nil || !bytes.HasPrefix(report, []byte("SIGABRT")) {
		t.Fatalf("the last crash's report was not kept in state/crash.log.prev: %v %.40q", err, report)
	}
}

// The same over the API, with a real process: a batch created by POST
// /v1/batches whose request crashes batchd twice ends with that request's
// engine_crashed line, and POST /v1/batches/{id}/retry runs it once more
// (the engine fixed meanwhile): the batch ends with every request
// completed, the poison sent once by the retry and no other request sent
// again.
func TestRetryOverTheAPIAfterEngineCrashed(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short: it builds batchd and crashes it twice")
	}
	bin := needBinary(t)
	var (
		phase   atomic.Int32 // 1, 2: processes that crash; 3: the one that runs on
		poisons [4]atomic.Int32
		others  [4]atomic.Int32
		seen    = make(chan int32, 4)
	)
	srv, root, cfgPath := crashFixture(t, func(n int64, r *http.Request, body []byte) openaitest.Fault {
		ph := phase.Load()
		if !bytes.Contains(body, []byte("POISON")) {
			others[ph].Add(1)
			return openaitest.Fault{}
		}
		poisons[ph].Add(1)
		if ph == 3 {
			return openaitest.Fault{} // fixed: the retry's run answers
		}
		seen <- ph
		<-r.Context().Done() // hangs until batchd is gone
		return openaitest.Fault{}
	})
	in := poisonInput()
	data := filepath.Join(root, "data")
	logPath := filepath.Join(root, "batchd.log")
	start := func() (*proc, string) {
		p := startBatchdCmd(t, bin, logPath, nil, "run", "--config", cfgPath, "--data", data, "--engine", "openai",
			"--openai-url", srv.URL(), "--listen", "127.0.0.1:0")
		p.waitReady(t)
		return p, "http://" + loggedListenAddr(t, logPath)
	}
	var id string
	for ph := int32(1); ph <= 2; ph++ {
		phase.Store(ph)
		p, base := start()
		if ph == 1 {
			fileID, err := apiUpload(base, []byte(in))
			if err != nil {
				t.Fatal(err)
			}
			if id, err = apiCreate(base, fileID); err != nil {
				t.Fatal(err)
			}
		}
		awaitPoison(t, seen, ph, logPath)
		p.signal(t, syscall.SIGABRT)
	}
	phase.Store(3)
	_, base := start()
	o, err := apiWait(base, id)
	if err != nil {
		t.Fatalf("%v\n%s", err, logTail(logPath))
	}
	if o.Status != pipeline.StatusCompleted || o.RequestCounts != (pipeline.RequestCounts{Total: 21, Completed: 20, Failed: 1}) || o.ErrorFileID == nil {
		t.Fatalf("after two crashes: %s %+v, want completed with the poison failed", o.Status, o.RequestCounts)
	}
	errs := fetch(t, base+"/v1/files/"+*o.ErrorFileID+"/content")
	if !strings.Contains(errs, `"custom_id":"r10"`) || !strings.Contains(errs, `"code":"engine_crashed"`) || strings.Count(errs, "\n") != 1 {
		t.Fatalf("error file: %s", errs)
	}
	sentBefore := others[3].Load()
	if poisons[3].Load() != 0 {
		t.Fatal("the poison reached the engine a third time before the retry")
	}

	if code, err := apiCall(base, "POST", "/v1/batches/"+id+"/retry", "", nil, nil); err != nil || code != http.StatusOK {
		t.Fatalf("retry: %d %v\n%s", code, err, logTail(logPath))
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var cur pipeline.BatchObject
		if _, err := apiCall(base, "GET", "/v1/batches/"+id, "", nil, &cur); err != nil {
			t.Fatal(err)
		}
		// Ended again, nothing failed, once the retry sent the poison.
		if poisons[3].Load() > 0 && pipeline.Terminal(cur.Status) && cur.RequestCounts.Failed == 0 {
			if cur.Status != pipeline.StatusCompleted || cur.RequestCounts != (pipeline.RequestCounts{Total: 21, Completed: 21}) {
				t.Fatalf("after the retry: %s %+v", cur.Status, cur.RequestCounts)
			}
			o = &cur
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retry did not end within two minutes: %s %+v\n%s", cur.Status, cur.RequestCounts, logTail(logPath))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := poisons[3].Load(); n != 1 {
		t.Fatalf("the retry sent the poison %d times, want once", n)
	}
	if n := others[3].Load(); n != sentBefore {
		t.Fatalf("the retry sent %d completed requests again", n-sentBefore)
	}
	if o.OutputFileID == nil {
		t.Fatal("no output file after the retry")
	}
	out := fetch(t, base+"/v1/files/"+*o.OutputFileID+"/content")
	if got := strings.Count(out, "\n"); got != 21 || strings.Count(out, `"custom_id":"r10"`) != 1 {
		t.Fatalf("output file after the retry: %d lines, r10 %d times", got, strings.Count(out, `"custom_id":"r10"`))
	}
}

// fetch GETs url and returns its body, failing t unless it is a 200.
func fetch(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v: %s", url, resp.StatusCode, err, raw)
	}
	return string(raw)
}

// poisonInput is 21 chat lines r0..r20; r10's content is POISON, the one
// the crash tests' stand-ins hang on.
func poisonInput() string {
	var in strings.Builder
	for i := range 21 {
		content := fmt.Sprintf("hello %d", i)
		if i == 10 {
			content = "POISON"
		}
		fmt.Fprintf(&in, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":%q}],"max_tokens":5}}`+"\n", i, content)
	}
	return in.String()
}

// awaitPoison waits for the poison to reach the stand-in from process ph
// (seen says which process sent it).
func awaitPoison(t *testing.T, seen <-chan int32, ph int32, logPath string) {
	t.Helper()
	select {
	case got := <-seen:
		if got != ph {
			t.Fatalf("process %d: the poison arrived from process %d", ph, got)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("process %d: the poison request did not reach the engine within two minutes\n%s", ph, logTail(logPath))
	}
}
