package pipeline

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
)

// recordingEngine is a test double at the engine boundary: it records the
// order in which requests reach it.
type recordingEngine struct {
	mu    sync.Mutex
	order []string
}

func (e *recordingEngine) Open(context.Context) error  { return nil }
func (e *recordingEngine) Close(context.Context) error { return nil }
func (e *recordingEngine) Do(ctx context.Context, req *engine.Request) (*engine.Response, error) {
	e.mu.Lock()
	e.order = append(e.order, req.CustomID)
	e.mu.Unlock()
	return &engine.Response{StatusCode: 200, Body: []byte(`{}`)}, nil
}

// collectN collects n answers from qs, as the batches' writers do, and
// returns them by custom id. It fails t when they do not come within a
// minute.
func collectN(t *testing.T, d *dispatcher, n int, qs ...*queue) map[string][]outcome {
	t.Helper()
	got := map[string][]outcome{}
	deadline := time.After(time.Minute)
	var buf []outcome
	for seen := 0; seen < n; {
		took := false
		for _, q := range qs {
			select {
			case <-q.ready:
				took = true
				buf = d.collect(q, buf)
				for _, o := range buf {
					got[o.cid] = append(got[o.cid], o)
				}
				seen += len(buf)
			default:
			}
		}
		if took {
			continue
		}
		select {
		case <-deadline:
			t.Fatalf("%d of %d answers after a minute", seen, n)
		case <-time.After(time.Millisecond): // a poll; nothing is asserted about time
		}
	}
	return got
}

// With one worker and two batches waiting, requests alternate between the
// batches: neither starves the other, whichever queued first.
func TestDispatcherSharesFairly(t *testing.T) {
	eng := &recordingEngine{}
	checkFair(t, eng, &eng.order)
}

// checkFair fills two queues (a's first) before the dispatcher on eng
// starts, and fails t unless the requests that reach eng, recorded in
// order, alternate between them.
func checkFair(t *testing.T, eng engine.Engine, order *[]string) {
	t.Helper()
	d := newDispatcher(eng, slog.Default(), nil, 1, 64)
	a, b := d.addQueue(nil), d.addQueue(nil)
	ctx := context.Background()
	for _, q := range []struct {
		q    *queue
		name string
	}{{a, "a"}, {b, "b"}} {
		for range 10 {
			if err := d.submit(ctx, q.q, task{ctx: ctx, req: &engine.Request{CustomID: q.name}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.start()
	collectN(t, d, 20, a, b)
	d.stop()
	if len(*order) != 20 {
		t.Fatalf("%d requests ran, want 20", len(*order))
	}
	for i := 1; i < len(*order); i++ {
		if (*order)[i] == (*order)[i-1] {
			t.Fatalf("batch %s went twice in a row at %d while the other waited: %v", (*order)[i], i, *order)
		}
	}
}

// A full queue blocks submit (backpressure) until the context ends.
func TestDispatcherBackpressure(t *testing.T) {
	d := newDispatcher(&recordingEngine{}, slog.Default(), nil, 1, 2)
	q := d.addQueue(nil)
	ctx, cancel := context.WithCancel(context.Background())
	noop := task{ctx: ctx, req: &engine.Request{}}
	for range 2 {
		if err := d.submit(ctx, q, noop); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := d.submit(ctx, q, noop); err == nil {
		t.Fatal("submit on a full queue returned without waiting for room")
	}
}

// panickyEngine is a test double at the engine boundary standing for an
// engine with a bug: it panics on the request named "boom".
type panickyEngine struct{ recordingEngine }

func (e *panickyEngine) Do(ctx context.Context, req *engine.Request) (*engine.Response, error) {
	if req.CustomID == "boom" {
		var rows []int
		_ = rows[99999999] // index out of range, as a kernel bug would
	}
	return e.recordingEngine.Do(ctx, req)
}

// An engine that panics fails that request with a 500 (engine_error) and
// the worker goes on with the next one: no request takes the daemon down.
func TestDispatcherSurvivesAPanickingEngine(t *testing.T) {
	d := newDispatcher(&panickyEngine{}, slog.New(slog.NewTextHandler(t.Output(), nil)), nil, 1, 4)
	q := d.addQueue(nil)
	d.start()
	defer d.stop()
	ctx := context.Background()
	for _, id := range []string{"a", "boom", "b"} {
		if err := d.submit(ctx, q, task{ctx: ctx, req: &engine.Request{CustomID: id}}); err != nil {
			t.Fatal(err)
		}
	}
	got := collectN(t, d, 3, q)
	checkPanicAnswered(t, got, "boom", "a", "b")
}

// checkPanicAnswered fails t unless request boom was answered once with a
// 500 engine_error naming the panic, and each of ok once with a 200.
func checkPanicAnswered(t *testing.T, got map[string][]outcome, boom string, ok ...string) {
	t.Helper()
	if os := got[boom]; len(os) != 1 || os[0].err != nil || os[0].resp.StatusCode != 500 ||
		!bytes.Contains(os[0].resp.Body, []byte(`"code":"engine_error"`)) || !bytes.Contains(os[0].resp.Body, []byte("index out of range")) {
		t.Fatalf("panicking request answered %+v, want one 500 engine_error naming the panic", os)
	}
	for _, id := range ok {
		if os := got[id]; len(os) != 1 || os[0].err != nil || os[0].resp.StatusCode != 200 {
			t.Fatalf("request %s answered %+v, want one 200", id, os)
		}
	}
}

// syncQueue is a test double at the engine boundary: an engine.Queue with a
// window of one that answers inside Submit, recording the order.
type syncQueue struct{ recordingEngine }

func (e *syncQueue) Window() int { return 1 }
func (e *syncQueue) Submit(ctx context.Context, req *engine.Request, done func(*engine.Response, error)) {
	done(e.Do(ctx, req))
}

// The feeder of an engine.Queue takes the batches in turn, as the workers
// do.
func TestFeederSharesFairly(t *testing.T) {
	eng := &syncQueue{}
	checkFair(t, eng, &eng.order)
}
