// Package echo is a stand-in OpenAI-compatible server: `batchd
// echo-server` serves it for trying batchd without a model, and `batchd
// bench pipeline` measures the pipeline against it. It is not a model: its
// answers are deterministic echoes ("echo: " and the last user message),
// hash-derived ids and unit-vector embeddings, so outputs can be compared
// byte for byte.
//
// It serves POST /v1/chat/completions, /v1/completions and /v1/embeddings
// and GET /v1/models, and can stop and restart on the same address to
// simulate an outage. Tests inject faults through engine/openai/openaitest,
// which wraps its handler (Options.Wrap).
//
// Of batchd it imports only wire, the shapes it answers with.
package echo

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// DefaultCreated is the "created" time of every answer unless Options.Now is
// set, so outputs are reproducible.
const DefaultCreated = 1700000000

// DefaultModel is the model name answered when a request names none.
const DefaultModel = "stand-in"

// Options configures a Server.
type Options struct {
	// Addr is the address Start listens on; empty means 127.0.0.1:0.
	Addr string
	// Now gives the "created" time; nil means DefaultCreated.
	Now func() time.Time
	// Wrap, when set, wraps the handler the server serves (and Handler
	// returns): tests inject faults with it.
	Wrap func(http.Handler) http.Handler
}

// Server is the stand-in. Create it with NewServer, then Start it, or serve
// its Handler yourself.
type Server struct {
	opts    Options
	handler http.Handler
	done    chan struct{} // closed by Close

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
	if opts.Wrap != nil {
		s.handler = opts.Wrap(s.handler)
	}
	return s
}

// Handler returns the stand-in's HTTP handler, for serving it elsewhere.
func (s *Server) Handler() http.Handler { return s.handler }

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

// Close stops the server for good and closes Done.
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

// Done is closed by Close: a wrapping handler that holds a request
// (Options.Wrap) lets it go then.
func (s *Server) Done() <-chan struct{} { return s.done }
