package cuda

import (
	"errors"
	"sync"
	"syscall"
	"testing"
)

// TestOSThreadOneThread: calls from many goroutines all run on the same OS
// thread, which is what keeps a CUDA context current for every call.
func TestOSThreadOneThread(t *testing.T) {
	th := newOSThread()
	var first int
	if err := th.do(func() error { first = syscall.Gettid(); return nil }); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for range 50 {
				errs <- th.do(func() error {
					if tid := syscall.Gettid(); tid != first {
						return errors.New("a call ran on another thread")
					}
					return nil
				})
			}
		})
	}
	go func() { wg.Wait(); close(errs) }()
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !th.stop(func() {}) {
		t.Fatal("stop did not stop")
	}
}

func TestOSThreadErrorsPanicsAndStop(t *testing.T) {
	th := newOSThread()
	want := errors.New("boom")
	if err := th.do(func() error { return want }); err != want {
		t.Fatalf("got %v, want the call's error", err)
	}
	func() {
		defer func() {
			if p := recover(); p != "kaboom" {
				t.Fatalf("recovered %v, want the call's panic", p)
			}
		}()
		_ = th.do(func() error { panic("kaboom") })
	}()
	ran := false
	if !th.stop(func() { ran = true }) || !ran {
		t.Fatal("stop did not run its last call")
	}
	if th.stop(func() {}) {
		t.Fatal("a second stop stopped again")
	}
	if err := th.do(func() error { return nil }); !errors.Is(err, errDriverClosed) {
		t.Fatalf("call after stop: %v, want errDriverClosed", err)
	}
}
