package main

import (
	"bytes"
	"fmt"
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
	var in strings.Builder
	for i := range 21 {
		content := fmt.Sprintf("hello %d", i)
		if i == 10 {
			content = "POISON"
		}
		fmt.Fprintf(&in, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":%q}],"max_tokens":5}}`+"\n", i, content)
	}
	data := filepath.Join(root, "data")
	placeInput(t, filepath.Join(data, "inbox"), "loop.jsonl", []byte(in.String()))
	logPath := filepath.Join(root, "batchd.log")
	for ph := int32(1); ph <= 4; ph++ {
		phase.Store(ph)
		p := startBatchd(t, bin, data, cfgPath, srv.URL(), logPath)
		select {
		case got := <-seen:
			if got != ph {
				t.Fatalf("process %d: the poison arrived from process %d", ph, got)
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("process %d: the poison request did not reach the engine within two minutes\n%s", ph, logTail(logPath))
		}
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
