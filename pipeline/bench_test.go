package pipeline_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/store/folder"
)

// instantQueue is a benchmark double at the engine boundary: an
// engine.Queue that answers every request at once from goroutines it owns,
// so a benchmark measures the pipeline's own cost per request.
type instantQueue struct {
	window int
	in     chan queued
	stop   chan struct{}
}

type queued struct {
	req  *engine.Request
	done func(*engine.Response, error)
}

func newInstantQueue(window, answerers int) *instantQueue {
	// Room for the whole window: the pipeline keeps no more outstanding,
	// so Submit never waits.
	e := &instantQueue{window: window, in: make(chan queued, window), stop: make(chan struct{})}
	for range answerers {
		go func() {
			for {
				select {
				case q := <-e.in:
					q.done(&engine.Response{StatusCode: 200, RequestID: "r", Body: okBody}, nil)
				case <-e.stop:
					return
				}
			}
		}()
	}
	return e
}

func (e *instantQueue) Open(context.Context) error  { return nil }
func (e *instantQueue) Close(context.Context) error { close(e.stop); return nil }
func (e *instantQueue) Window() int                 { return e.window }
func (e *instantQueue) Do(ctx context.Context, req *engine.Request) (*engine.Response, error) {
	panic("Do called on an engine.Queue")
}
func (e *instantQueue) Submit(ctx context.Context, req *engine.Request, done func(*engine.Response, error)) {
	e.in <- queued{req, done}
}

// instantDo is a benchmark double at the engine boundary: an engine
// without Queue that answers every Do at once (the worker pool's path).
type instantDo struct{}

func (instantDo) Open(context.Context) error  { return nil }
func (instantDo) Close(context.Context) error { return nil }
func (instantDo) Do(ctx context.Context, req *engine.Request) (*engine.Response, error) {
	return &engine.Response{StatusCode: 200, RequestID: "r", Body: okBody}, nil
}

// benchRun runs one batch of b.N chat lines through a pipeline on eng with
// a real bbolt ledger and real files in a temporary directory, and reports
// the pipeline's time per request (reading, validating, dispatching,
// writing, group commits, publishing).
func benchRun(b *testing.B, eng engine.Engine, workers int) {
	dir := b.TempDir()
	inbox, outbox, done := filepath.Join(dir, "inbox"), filepath.Join(dir, "outbox"), filepath.Join(dir, "done")
	for _, d := range []string{inbox, outbox, done} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	input := filepath.Join(inbox, "bench.jsonl")
	if err := os.WriteFile(input, []byte(chatLines(b.N, "q")), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg := pipeline.DefaultConfig(filepath.Join(dir, "state"))
	cfg.Workers = workers
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	p := pipeline.New(cfg, eng)
	if err := p.Open(ctx); err != nil {
		b.Fatal(err)
	}
	defer p.Close(ctx)
	defer eng.Close(ctx)
	b.ResetTimer()
	bt, err := p.Run(ctx, pipeline.Job{Name: "bench", Format: "jsonl", Store: folder.New("bench", input, outbox, done)})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if bt.Completed != b.N {
		b.Fatalf("%d of %d requests completed", bt.Completed, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
}

// BenchmarkDispatchQueue: an engine.Queue with a window of 256, fed by one
// goroutine.
func BenchmarkDispatchQueue(b *testing.B) {
	benchRun(b, newInstantQueue(256, 2), 64)
}

// BenchmarkDispatchWorkers: the worker pool (an engine without Queue), 64
// workers as by default and 256 for the same width as the window.
func BenchmarkDispatchWorkers(b *testing.B) {
	for _, w := range []int{64, 256} {
		b.Run(map[int]string{64: "64", 256: "256"}[w], func(b *testing.B) { benchRun(b, instantDo{}, w) })
	}
}
