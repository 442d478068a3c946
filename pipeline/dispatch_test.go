package pipeline

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"

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

// With one worker and two batches waiting, requests alternate between the
// batches: neither starves the other, whichever queued first.
func TestDispatcherSharesFairly(t *testing.T) {
	eng := &recordingEngine{}
	d := newDispatcher(eng, slog.Default(), nil, 1, 64)
	a, b := d.addQueue(), d.addQueue()
	var wg sync.WaitGroup
	ctx := context.Background()
	// Fill both queues before any worker runs, a's first.
	for _, q := range []struct {
		q    *queue
		name string
	}{{a, "a"}, {b, "b"}} {
		for range 10 {
			wg.Add(1)
			if err := d.submit(ctx, q.q, task{ctx: ctx, req: &engine.Request{CustomID: q.name}, done: func(*engine.Response, error) { wg.Done() }}); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.start()
	wg.Wait()
	d.stop()
	if len(eng.order) != 20 {
		t.Fatalf("%d requests ran, want 20", len(eng.order))
	}
	for i := 1; i < len(eng.order); i++ {
		if eng.order[i] == eng.order[i-1] {
			t.Fatalf("batch %s ran twice in a row at %d while the other waited: %v", eng.order[i], i, eng.order)
		}
	}
}

// A full queue blocks submit (backpressure) until the context ends.
func TestDispatcherBackpressure(t *testing.T) {
	d := newDispatcher(&recordingEngine{}, slog.Default(), nil, 1, 2)
	q := d.addQueue()
	ctx, cancel := context.WithCancel(context.Background())
	noop := task{ctx: ctx, req: &engine.Request{}, done: func(*engine.Response, error) {}}
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
	q := d.addQueue()
	d.start()
	defer d.stop()
	ctx := context.Background()
	got := map[string]*engine.Response{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range []string{"a", "boom", "b"} {
		wg.Add(1)
		err := d.submit(ctx, q, task{ctx: ctx, req: &engine.Request{CustomID: id}, done: func(resp *engine.Response, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("%s: %v", id, err)
			}
			mu.Lock()
			got[id] = resp
			mu.Unlock()
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if r := got["boom"]; r == nil || r.StatusCode != 500 || !bytes.Contains(r.Body, []byte(`"code":"engine_error"`)) || !bytes.Contains(r.Body, []byte("index out of range")) {
		t.Fatalf("panicking request answered %+v, want a 500 engine_error naming the panic", r)
	}
	for _, id := range []string{"a", "b"} {
		if r := got[id]; r == nil || r.StatusCode != 200 {
			t.Fatalf("request %s answered %+v, want 200", id, r)
		}
	}
}
