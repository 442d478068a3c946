// Package syncbuf is a bytes.Buffer safe for concurrent writers: the log
// sink of tests that read what a running daemon logged.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer collects writes; the zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
