// Package goroutines counts the goroutines running given code, for tests
// that check a component leaves none behind. It imports nothing of batchd.
package goroutines

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// Count is how many goroutines have a stack frame whose text contains any
// of funcs (such as "watcher/dir.(*Watcher)").
func Count(funcs ...string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		for _, fn := range funcs {
			if strings.Contains(g, fn) {
				count++
				break
			}
		}
	}
	return count
}

// WaitGone waits until no goroutine runs any of funcs, polling; it fails t
// if some are still there after timeout, which should be generous: it
// bounds a leak, it does not time anything.
func WaitGone(t testing.TB, timeout time.Duration, funcs ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for n := Count(funcs...); n > 0; n = Count(funcs...) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines running %s left after %v", n, strings.Join(funcs, " or "), timeout)
		}
		time.Sleep(10 * time.Millisecond) // polling, not synchronisation
	}
}
