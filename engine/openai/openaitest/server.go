// Package openaitest is the stand-in OpenAI-compatible server of package
// echo with faults on request, for tests of batchd: it counts POSTs and,
// as Options.Fault or a seeded Chaos says, answers one with an error
// status, closes its connection, hangs, truncates the answer or delays it.
//
// Of batchd it imports only engine/openai/echo.
package openaitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/engine/openai/echo"
)

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
	// Now gives the "created" time; nil means echo.DefaultCreated.
	Now func() time.Time
	// Fault, when set, is called for every POST with n, the 1-based count of
	// POSTs the server has seen, the request and its body. It is called
	// concurrently.
	Fault func(n int64, r *http.Request, body []byte) Fault
}

// Server is the stand-in: an echo.Server (Start, URL, Stop, Restart,
// Close, Handler) whose POSTs are counted and get Options.Fault's faults.
type Server struct {
	*echo.Server
	fault    func(n int64, r *http.Request, body []byte) Fault
	requests atomic.Int64
}

// NewServer returns a stand-in server that is not listening yet.
func NewServer(opts Options) *Server {
	s := &Server{fault: opts.Fault}
	s.Server = echo.NewServer(echo.Options{Addr: opts.Addr, Now: opts.Now, Wrap: s.inject})
	return s
}

// Requests returns the number of POSTs the server has seen.
func (s *Server) Requests() int64 { return s.requests.Load() }

// posts are the routes whose requests are counted and get faults.
var posts = map[string]bool{"/v1/chat/completions": true, "/v1/completions": true, "/v1/embeddings": true}

// inject wraps the echo handler: it reads the body of each POST, counts
// it, applies its fault and hands the rest to next.
func (s *Server) inject(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !posts[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, echo.MaxBody))
		if err != nil {
			echo.WriteError(w, http.StatusBadRequest, fmt.Sprintf("read body: %v", err))
			return
		}
		n := s.requests.Add(1)
		var f Fault
		if s.fault != nil {
			f = s.fault(n, r, body)
		}
		for k, vs := range f.Header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		if f.Delay > 0 && !s.delay(r.Context(), f.Delay) {
			return
		}
		switch {
		case f.Close:
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
					return
				}
			}
			panic(http.ErrAbortHandler) // not hijackable (HTTP/2): abort instead
		case f.Hang:
			s.hang(r.Context())
			return
		case f.Status != 0:
			if f.Body == "" {
				echo.WriteError(w, f.Status, fmt.Sprintf("injected fault: %d %s", f.Status, http.StatusText(f.Status)))
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(f.Status)
			_, _ = io.WriteString(w, f.Body)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !f.Truncate {
			next.ServeHTTP(w, r)
			return
		}
		rec := &recorder{header: http.Header{}}
		next.ServeHTTP(rec, r)
		for k, vs := range rec.header {
			w.Header()[k] = vs
		}
		if rec.status != http.StatusOK {
			w.WriteHeader(rec.status)
			_, _ = w.Write(rec.body.Bytes())
			return
		}
		// Half of the answer object's JSON, without its final newline.
		b := bytes.TrimSuffix(rec.body.Bytes(), []byte("\n"))
		w.Header().Set("Content-Length", strconv.Itoa(len(b)/2))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b[:len(b)/2])
	})
}

// recorder keeps an answer to truncate it.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// hang blocks until the client goes away or the server closes.
func (s *Server) hang(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-s.Done():
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
	case <-s.Done():
	}
	return false
}
