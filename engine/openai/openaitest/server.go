// Package openaitest is a loopback stand-in for an OpenAI-compatible server,
// for tests and benchmarks of batchd. It is not a model: its answers are
// deterministic echoes ("echo: " and the last user message), hash-derived
// ids and unit-vector embeddings, so outputs can be compared byte for byte.
//
// It serves POST /v1/chat/completions, /v1/completions and /v1/embeddings
// and GET /v1/models, counts POSTs, injects faults on request, and can stop
// and restart on the same address to simulate an outage.
//
// Of batchd it imports only wire, the shapes it answers with.
package openaitest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultCreated is the "created" time of every answer unless Options.Now is
// set, so outputs are reproducible.
const DefaultCreated = 1700000000

// DefaultModel is the model name answered when a request names none.
const DefaultModel = "stand-in"

// Fault is what the stand-in does with one POST instead of answering it.
// The zero value answers normally.
type Fault struct {
	// Status, when not zero, answers with this status and Body (an OpenAI
	// error object naming the status when Body is empty).
	Status int
	// Header is added to the answer, faulty or not.
	Header http.Header
	// Body is the body sent with Status.
	Body string
	// Hang blocks until the client goes away or the server closes.
	Hang bool
	// Close hijacks the connection and closes it without an answer.
	Close bool
	// Truncate answers 200 with the first half of the normal answer's
	// bytes, its Content-Length matching what is sent: well-formed HTTP,
	// a JSON body cut short.
	Truncate bool
	// Delay waits this long (or until the client goes away or the server
	// closes) before doing the rest.
	Delay time.Duration
}

// Options configures a Server.
type Options struct {
	// Addr is the address Start listens on; empty means 127.0.0.1:0.
	Addr string
	// Now gives the "created" time; nil means DefaultCreated.
	Now func() time.Time
	// Fault, when set, is called for every POST with n, the 1-based count of
	// POSTs the server has seen, the request and its body. It is called
	// concurrently.
	Fault func(n int64, r *http.Request, body []byte) Fault
}

// Server is the stand-in. Create it with NewServer, then Start it, or serve
// its Handler yourself.
type Server struct {
	opts     Options
	handler  http.Handler
	requests atomic.Int64
	done     chan struct{} // closed by Close: releases hanging handlers

	mu      sync.Mutex
	addr    string // fixed by the first Start, reused by Restart
	srv     *http.Server
	serving sync.WaitGroup
	closed  bool
}

// NewServer returns a stand-in server that is not listening yet.
func NewServer(opts Options) *Server {
	s := &Server{opts: opts, done: make(chan struct{})}
	s.handler = s.routes()
	return s
}

// Handler returns the stand-in's HTTP handler, for serving it elsewhere.
func (s *Server) Handler() http.Handler { return s.handler }

// Requests returns the number of POSTs the server has seen.
func (s *Server) Requests() int64 { return s.requests.Load() }

// Start listens on Options.Addr (default 127.0.0.1:0) and serves.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return errors.New("start stand-in: closed")
	case s.srv != nil:
		return errors.New("start stand-in: already started")
	}
	addr := s.opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	return s.listenLocked(addr)
}

func (s *Server) listenLocked(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	s.addr = ln.Addr().String()
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	s.srv = srv
	s.serving.Go(func() { _ = srv.Serve(ln) })
	return nil
}

// URL returns the base URL, ending in /v1, as given to OpenAI clients.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "http://" + s.addr + "/v1"
}

// Stop closes the listener and every connection, so clients get
// "connection refused" until Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if s.srv == nil {
		return
	}
	_ = s.srv.Close()
	s.srv = nil
	s.serving.Wait()
}

// Restart listens again on the address of the first Start.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return errors.New("restart stand-in: closed")
	case s.addr == "":
		return errors.New("restart stand-in: never started")
	}
	s.stopLocked()
	return s.listenLocked(s.addr)
}

// Close stops the server for good and releases hanging requests.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	close(s.done)
	s.stopLocked()
}

// hang blocks until the client goes away or the server closes.
func (s *Server) hang(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-s.done:
	}
}

// delay waits d, or until the client goes away or the server closes, and
// reports whether it waited the whole time.
func (s *Server) delay(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.done:
	}
	return false
}
