package pipeline_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// A request in flight when the daemon crashes (here: the in-flight table
// and the crash report as a crashed process leaves them) runs alone after
// the restart; in flight at a second crash, it fails with engine_crashed
// and never reaches the engine again, while every other line completes. A
// kill (no crash report) and an operator's SIGQUIT (a report that is a
// stack dump, not a crash) hold nothing against the requests in flight.
func TestRequestInFlightAtTwoCrashesIsNotRunAThirdTime(t *testing.T) {
	var (
		mu       sync.Mutex
		block    chan struct{} // the poison hangs until this closes
		inPoison = make(chan struct{}, 1)
		phase    atomic.Int32 // 1: first run, 2: second run
		alone    atomic.Bool  // the second run's poison is at the engine
		beside   atomic.Int32 // requests that reached the engine meanwhile
		poisons  atomic.Int32
	)
	block = make(chan struct{})
	e := newEnv(t, func(c *pipeline.Config, o *openaitest.Options) {
		c.Workers = 4
		o.Fault = func(n int64, r *http.Request, body []byte) openaitest.Fault {
			if !bytes.Contains(body, []byte("POISON")) {
				if alone.Load() {
					beside.Add(1)
				}
				return openaitest.Fault{}
			}
			poisons.Add(1)
			if phase.Load() == 3 {
				return openaitest.Fault{} // fixed: the retry's run answers
			}
			if phase.Load() == 2 {
				alone.Store(true)
				defer alone.Store(false)
			}
			mu.Lock()
			b := block
			mu.Unlock()
			select {
			case inPoison <- struct{}{}:
			default:
			}
			<-b
			return openaitest.Fault{}
		}
	})
	t.Cleanup(func() {
		mu.Lock()
		close(block)
		mu.Unlock()
	})
	content := chatLines(10, "a") + `{"custom_id":"poison","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"POISON"}],"max_tokens":5}}` + "\n" + chatLines(10, "b")
	job := e.drop("crashy", "jsonl", content, "")
	table := filepath.Join(e.dir, "state", "inflight")

	// crash runs the batch until the poison is in flight, keeps the
	// in-flight table as it is at that moment, stops the pipeline and puts
	// the table back: what a kill -9 leaves behind; with a report, also
	// what the Go runtime writes to the crash output as the process dies.
	crash := func(report string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { _, err := e.pipe.Run(ctx, job); ran <- err }()
		select {
		case <-inPoison:
		case <-time.After(time.Minute):
			t.Fatal("the poison request did not reach the engine within a minute")
		}
		snap, err := os.ReadFile(table)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		mu.Lock()
		close(block)
		block = make(chan struct{})
		mu.Unlock()
		<-ran
		e.reopenWith(func() {
			if err := os.WriteFile(table, snap, 0o644); err != nil {
				t.Fatal(err)
			}
			if report != "" {
				if err := os.WriteFile(filepath.Join(e.dir, "state", "crash.log"), []byte(report), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	// Killed (no crash report) with the poison in flight: nothing is held
	// against it, and it runs with the others again.
	crash("")
	if got := poisons.Load(); got != 1 {
		t.Fatalf("poison sent %d times", got)
	}
	// Stopped twice by an operator's SIGQUIT (the runtime's stack dump in
	// the crash output) with the poison in flight: no crash either.
	const sigquit = "SIGQUIT: quit\nPC=0x47b0e1 m=0 sigcode=0\n\ngoroutine 0 gp=0x8a6b40 m=0 mp=0x8a7ae0 [idle]:\n"
	crash(sigquit)
	crash(sigquit)
	if got := poisons.Load(); got != 3 {
		t.Fatalf("poison sent %d times after two SIGQUIT stops, want 3", got)
	}
	if b, err := e.pipe.Ledger().ByName("crashy"); err != nil {
		t.Fatal(err)
	} else if s, err := e.pipe.Ledger().Suspects(b.ID); err != nil || len(s) != 0 {
		t.Fatalf("after two SIGQUIT stops the suspects are %v (%v), want none", s, err)
	}
	// What the Go runtime writes there when the process dies of a fatal
	// error.
	const fatal = "fatal error: fault\n[signal SIGBUS]\n"
	phase.Store(1)
	crash(fatal) // the poison in flight with others
	phase.Store(2)
	crash(fatal) // the poison alone
	if n := beside.Load(); n != 0 {
		t.Fatalf("%d requests reached the engine while the suspect ran: it should run alone", n)
	}
	o := e.run(job)
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 20 || o.RequestCounts.Failed != 1 {
		t.Fatalf("after two crashes: %s %+v\n%s", o.Status, o.RequestCounts, strings.Join(readLines(t, filepath.Join(e.outbox, "crashy.errors.jsonl")), "\n"))
	}
	if n := poisons.Load(); n != 5 {
		t.Fatalf("the poison reached the engine %d times, want 5 (killed, SIGQUIT twice, crashed, crashed alone)", n)
	}
	errs := parseLines(t, filepath.Join(e.outbox, "crashy.errors.jsonl"))
	if len(errs) != 1 || *errs[0].CustomID != "poison" || errs[0].Error == nil || errs[0].Error.Code != pipeline.CodeEngineCrashed ||
		!strings.Contains(errs[0].Error.Message, "not run again") || errs[0].Line != 11 {
		t.Fatalf("errors file: %+v", errs)
	}
	e.check("crashy", "jsonl")

	// A retry (POST /v1/batches/{id}/retry) runs it once more, alone.
	phase.Store(3)
	retry := e.drop("crashy", "jsonl", content, "")
	retry.RetryFailed = true
	if o := e.run(retry); o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 21 || o.RequestCounts.Failed != 0 {
		t.Fatalf("retry: %s %+v", o.Status, o.RequestCounts)
	}
	if n := poisons.Load(); n != 6 {
		t.Fatalf("the retry sent the poison %d times in all, want 6", n)
	}
	e.check("crashy", "jsonl")
}
