package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/pipeline"
)

// queueEngine is a test double at the engine boundary: an engine.Queue
// standing for the native engine's scheduler. It holds what it is handed
// and answers from a goroutine it owns: each request at once, or (with
// answerAt) only once that many are held, or (manual) never. A request
// whose context ends is answered with its error at once, as the contract
// asks.
type queueEngine struct {
	window int
	// onSubmit, when set, runs first in Submit, outside the double's lock.
	onSubmit func(req *engine.Request)
	// answerThenPanic names a request Submit answers and then panics on.
	answerThenPanic string
	// startOnly, when positive, is how many requests the double starts
	// (calls Request.Started for), the first ones submitted; the rest
	// only wait. Zero starts every request as it is submitted.
	startOnly int
	startedN  int

	mu       sync.Mutex
	answerAt int
	manual   bool
	held     []*heldRequest
	most     int            // most held at once
	over     int            // requests handed past the window
	submits  map[string]int // by custom id
	events   []submitEvent  // with trace: what was held at each submit
	trace    bool
	wake     chan struct{}
	stop     chan struct{}
	wg       sync.WaitGroup
}

type heldRequest struct {
	req    *engine.Request
	done   func(*engine.Response, error)
	cancel func() bool // stops the context watch
}

type submitEvent struct {
	cid  string
	held []string
}

var _ engine.Queue = (*queueEngine)(nil)

// okBody is every answer's body.
var okBody = []byte(`{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)

func newQueueEngine(t *testing.T, window int) *queueEngine {
	e := &queueEngine{window: window, submits: map[string]int{}, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	e.wg.Add(1)
	go e.answerLoop()
	t.Cleanup(func() {
		close(e.stop)
		e.wg.Wait()
	})
	return e
}

func (e *queueEngine) Open(context.Context) error  { return nil }
func (e *queueEngine) Close(context.Context) error { return nil }
func (e *queueEngine) Window() int                 { return e.window }

// Do is there for engine.Engine; the pipeline must not call it.
func (e *queueEngine) Do(ctx context.Context, req *engine.Request) (*engine.Response, error) {
	panic("Do called on an engine.Queue")
}

func (e *queueEngine) Submit(ctx context.Context, req *engine.Request, done func(*engine.Response, error)) {
	if e.onSubmit != nil {
		e.onSubmit(req)
	}
	if req.CustomID == e.answerThenPanic && e.answerThenPanic != "" {
		e.mu.Lock()
		e.submits[req.CustomID]++
		e.mu.Unlock()
		done(&engine.Response{StatusCode: 200, Body: okBody}, nil)
		panic("after answering")
	}
	h := &heldRequest{req: req, done: done}
	e.mu.Lock()
	e.submits[req.CustomID]++
	if len(e.held) >= e.window {
		e.over++
	}
	if e.trace {
		ev := submitEvent{cid: req.CustomID}
		for _, x := range e.held {
			ev.held = append(ev.held, x.req.CustomID)
		}
		e.events = append(e.events, ev)
	}
	e.held = append(e.held, h)
	e.most = max(e.most, len(e.held))
	if req.Started != nil && (e.startOnly == 0 || e.startedN < e.startOnly) {
		e.startedN++
		req.Started()
	}
	// Under the lock: a context done already runs the func at once, and
	// it must find h held.
	h.cancel = context.AfterFunc(ctx, func() {
		if e.take(h) {
			done(nil, ctx.Err())
		}
	})
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// take removes h from what is held; it reports false when h was answered
// already.
func (e *queueEngine) take(h *heldRequest) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, x := range e.held {
		if x == h {
			e.held = append(e.held[:i], e.held[i+1:]...)
			return true
		}
	}
	return false
}

func (e *queueEngine) answerLoop() {
	defer e.wg.Done()
	for {
		select {
		case <-e.wake:
		case <-e.stop:
			return
		}
		e.mu.Lock()
		var out []*heldRequest
		if !e.manual && len(e.held) >= e.answerAt {
			out, e.held = e.held, nil
		}
		e.mu.Unlock()
		answer(out)
	}
}

func answer(hs []*heldRequest) {
	for _, h := range hs {
		h.cancel()
		h.done(&engine.Response{StatusCode: 200, RequestID: "req-" + h.req.CustomID, Body: okBody}, nil)
	}
}

// setMode sets when the double answers (see queueEngine) and whether it
// traces submits.
func (e *queueEngine) setMode(manual bool, answerAt int, trace bool) {
	e.mu.Lock()
	e.manual, e.answerAt, e.trace = manual, answerAt, trace
	e.mu.Unlock()
}

// waitHeld waits until the double holds n requests.
func (e *queueEngine) waitHeld(t *testing.T, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("the engine to hold %d requests", n), func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.held) == n
	})
}

// waitFor polls cond until it holds, failing t after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // a poll; nothing is asserted about time
	}
}

// submitted checks that each of n lines of prefix reached the engine once.
func (e *queueEngine) submittedOnce(t *testing.T, prefix string, n int) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range n {
		if got := e.submits[fmt.Sprint(prefix, i)]; got != 1 {
			t.Fatalf("%s%d reached the engine %d times, want once", prefix, i, got)
		}
	}
}

// The pipeline fills an engine.Queue's window (the double answers nothing
// until it holds all 500, so the batch ends only if every window is
// filled) and never goes past it; every request reaches the engine once and
// is written once.
func TestQueueEngineGetsItsWholeWindow(t *testing.T) {
	eng := newQueueEngine(t, 500)
	eng.setMode(false, 500, false)
	e := newEnvOn(t, eng, nil)
	job := e.drop("deep", "jsonl", chatLines(2000, "r"), "")
	o := e.run(job)
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 2000 || o.RequestCounts.Failed != 0 {
		t.Fatalf("batch: %s %+v", o.Status, o.RequestCounts)
	}
	eng.mu.Lock()
	most, over := eng.most, eng.over
	eng.mu.Unlock()
	if most != 500 || over != 0 {
		t.Fatalf("the engine held at most %d requests (%d past the window), want 500 and none past it", most, over)
	}
	eng.submittedOnce(t, "r", 2000)
	e.check("deep", "jsonl")
}

// A cancelled batch's requests held by the engine end with their context,
// those waiting in the pipeline never reach it, and every line is written
// once as batch_cancelled. Dispatch reports what is held meanwhile.
func TestQueueEngineCancel(t *testing.T) {
	eng := newQueueEngine(t, 10)
	eng.setMode(true, 0, false)
	e := newEnvOn(t, eng, func(c *pipeline.Config) { c.QueuePerBatch = 16 })
	job := e.drop("stop", "jsonl", chatLines(100, "c"), "")
	ran := make(chan error, 1)
	go func() { _, err := e.pipe.Run(context.Background(), job); ran <- err }()
	eng.waitHeld(t, 10)
	waitFor(t, "16 requests waiting in the pipeline", func() bool { return e.pipe.Dispatch().Waiting == 16 })
	if st := e.pipe.Dispatch(); st.InFlight != 10 || st.Window != 10 {
		t.Fatalf("Dispatch: %+v, want 10 in flight and a window of 10", st)
	}
	if !e.pipe.Cancel("stop") {
		t.Fatal("Cancel: the batch is not running")
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	o := e.object("stop")
	if o.Status != pipeline.StatusCancelled || o.RequestCounts.Completed != 0 || o.RequestCounts.Failed != 100 {
		t.Fatalf("batch: %s %+v", o.Status, o.RequestCounts)
	}
	if c := codes(parseLines(t, filepath.Join(e.outbox, "stop.errors.jsonl"))); c[pipeline.CodeBatchCancelled] != 100 {
		t.Fatalf("error codes %v, want 100 batch_cancelled", c)
	}
	eng.mu.Lock()
	n := 0
	for _, c := range eng.submits {
		n += c
	}
	eng.mu.Unlock()
	if n != 10 {
		t.Fatalf("%d requests reached the engine, want the 10 it held when the batch was cancelled", n)
	}
	if st := e.pipe.Dispatch(); st.InFlight != 0 || st.Waiting != 0 || st.Answered != 0 {
		t.Fatalf("after the batch: %+v, want nothing held", st)
	}
	e.check("stop", "jsonl")
}

// A panic in Submit fails that request alone with a 500 engine_error; a
// panic after the engine answered keeps its answer, written once.
func TestQueueEnginePanicInSubmit(t *testing.T) {
	eng := newQueueEngine(t, 4)
	eng.onSubmit = func(req *engine.Request) {
		if req.CustomID == "boom" {
			var rows []int
			_ = rows[99999999] // index out of range, as a tokenizer bug would
		}
	}
	eng.answerThenPanic = "late"
	e := newEnvOn(t, eng, nil)
	content := chatLines(5, "a") + strings.ReplaceAll(chatLines(1, "boom"), "boom0", "boom") +
		strings.ReplaceAll(chatLines(1, "late"), "late0", "late") + chatLines(5, "b")
	o := e.run(e.drop("panicky", "jsonl", content, ""))
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 11 || o.RequestCounts.Failed != 1 {
		t.Fatalf("batch: %s %+v", o.Status, o.RequestCounts)
	}
	errs := parseLines(t, filepath.Join(e.outbox, "panicky.errors.jsonl"))
	if len(errs) != 1 || *errs[0].CustomID != "boom" || errs[0].Response == nil || errs[0].Response.StatusCode != 500 ||
		!strings.Contains(string(errs[0].Response.Body), `"code":"engine_error"`) || !strings.Contains(string(errs[0].Response.Body), "index out of range") {
		t.Fatalf("errors file: %+v", errs)
	}
	e.check("panicky", "jsonl")
}

// The in-flight table holds every request an engine.Queue holds (more
// than workers); after a crash each of them runs alone: nothing else is
// at the engine when it is handed over, and nothing is handed over while
// it runs.
func TestQueueEngineSuspectsRunAlone(t *testing.T) {
	eng := newQueueEngine(t, 8)
	eng.setMode(true, 0, false)
	eng.startOnly = 3 // of the 8 it holds, 3 run; 5 only wait
	e := newEnvOn(t, eng, func(c *pipeline.Config) { c.Workers = 2 })
	job := e.drop("crashy", "jsonl", chatLines(20, "s"), "")
	table := filepath.Join(e.dir, "state", "inflight")

	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { _, err := e.pipe.Run(ctx, job); ran <- err }()
	eng.waitHeld(t, 8)
	// The table lists a request while Submit runs; once Submit returns,
	// only the started ones stay.
	var snap []byte
	waitFor(t, "the in-flight table to list only the started requests", func() bool {
		b, err := os.ReadFile(table)
		if err != nil {
			t.Fatal(err)
		}
		snap = b
		return tableRows(b) <= 3
	})
	eng.mu.Lock()
	suspects := map[string]bool{}
	for _, h := range eng.held[:3] {
		suspects[h.req.CustomID] = true
	}
	eng.mu.Unlock()
	if rows := tableRows(snap); rows != 3 {
		t.Fatalf("the in-flight table lists %d requests, want the 3 the engine started of the 8 it holds", rows)
	}
	cancel()
	<-ran
	e.reopenWith(func() {
		if err := os.WriteFile(table, snap, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(e.dir, "state", "crash.log"), []byte("fatal error: fault\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	})

	eng.setMode(false, 0, true)
	o := e.run(job)
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 20 {
		t.Fatalf("batch: %s %+v", o.Status, o.RequestCounts)
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	ran8 := 0
	for _, ev := range eng.events {
		if suspects[ev.cid] {
			ran8++
			if len(ev.held) > 0 {
				t.Fatalf("suspect %s was handed over while the engine held %v", ev.cid, ev.held)
			}
		}
		for _, h := range ev.held {
			if suspects[h] {
				t.Fatalf("%s was handed over while suspect %s ran", ev.cid, h)
			}
		}
	}
	if ran8 != 3 {
		t.Fatalf("%d suspects ran after the crash, want the 3 that had started", ran8)
	}
	e.check("crashy", "jsonl")
}

// A large file streams through an engine.Queue with bounded memory: the
// requests waiting in the pipeline stay within QueuePerBatch, those at the
// engine within the window, and the answers waiting for the writer within
// their bound, however long the file.
func TestQueueEngineStreamsALargeFileBounded(t *testing.T) {
	n := 200_000
	if testing.Short() || raceEnabled {
		n = 50_000 // still 40 times what the pipeline may hold
	}
	const window, perBatch = 256, 256
	eng := newQueueEngine(t, window)
	var (
		mu   sync.Mutex
		most pipeline.DispatchStats
		pipe *pipeline.Pipeline
	)
	eng.onSubmit = func(*engine.Request) {
		st := pipe.Dispatch()
		mu.Lock()
		most.InFlight = max(most.InFlight, st.InFlight)
		most.Waiting = max(most.Waiting, st.Waiting)
		most.Answered = max(most.Answered, st.Answered)
		mu.Unlock()
	}
	e := newEnvOn(t, eng, func(c *pipeline.Config) {
		c.QueuePerBatch = perBatch
		c.CommitEvery, c.CommitInterval = 4096, 200*time.Millisecond
	})
	pipe = e.pipe
	job := e.drop("big", "jsonl", chatLines(n, "x"), "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := e.pipe.Run(ctx, job); err != nil {
		t.Fatal(err)
	}
	o := e.object("big")
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != n {
		t.Fatalf("batch: %s %+v", o.Status, o.RequestCounts)
	}
	mu.Lock()
	defer mu.Unlock()
	eng.mu.Lock()
	held, over := eng.most, eng.over
	eng.mu.Unlock()
	t.Logf("%d lines: most held by the engine %d, most seen in the pipeline %+v", n, held, most)
	if held > window || over != 0 || most.InFlight > window {
		t.Fatalf("the engine held %d requests (%d past the window; pipeline saw %d in flight), want at most %d", held, over, most.InFlight, window)
	}
	if most.Waiting > perBatch {
		t.Fatalf("%d requests waited in the pipeline, want at most %d", most.Waiting, perBatch)
	}
	if most.Answered > pipeline.MaxAnswered+window {
		t.Fatalf("%d answers waited for the writer, want at most %d", most.Answered, pipeline.MaxAnswered+window)
	}
	e.check("big", "jsonl")
}

// tableRows counts the requests an in-flight table file lists.
func tableRows(b []byte) int {
	rows := 0
	for off := 0; off+128 <= len(b); off += 128 {
		if b[off] == 'R' {
			rows++
		}
	}
	return rows
}
