package cuda

import (
	"errors"
	"runtime"
	"sync"
)

// errDriverClosed is what a call on a closed Driver returns.
var errDriverClosed = errors.New("cuda driver closed")

// osThread runs functions on one goroutine locked to one OS thread.
//
// A CUDA context is current per OS thread, and a stream captured in
// CU_STREAM_CAPTURE_MODE_THREAD_LOCAL mode records only what that thread
// queues; goroutines, though, move between threads at any call. So the
// real Driver makes its context current once on this thread and hands
// every CUDA call to it: no cuCtxSetCurrent per call, no call on a thread
// that lacks the context, and a capture that sees exactly the Driver's own
// launches.
type osThread struct {
	mu     sync.Mutex // one call at a time; held while it runs
	req    chan func()
	done   chan any // nil, or the value the call panicked with
	closed bool
}

func newOSThread() *osThread {
	t := &osThread{req: make(chan func()), done: make(chan any)}
	go t.loop()
	return t
}

func (t *osThread) loop() {
	// Never unlocked: when the loop ends the goroutine exits locked and
	// the runtime ends its thread, taking the thread's CUDA state along.
	runtime.LockOSThread()
	for f := range t.req {
		t.done <- run(f)
	}
}

func run(f func()) (panicked any) {
	defer func() { panicked = recover() }()
	f()
	return nil
}

// do runs f on the thread and returns its error; a panic in f is raised
// again in the caller. f must not call do.
func (t *osThread) do(f func() error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errDriverClosed
	}
	var err error
	t.req <- func() { err = f() }
	if p := <-t.done; p != nil {
		panic(p)
	}
	return err
}

// stop runs last on the thread, then ends it; later calls return
// errDriverClosed. It reports whether this call stopped it.
func (t *osThread) stop(last func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.req <- last
	p := <-t.done
	t.closed = true
	close(t.req)
	if p != nil {
		panic(p)
	}
	return true
}
