package daemon

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// Slow clients. A request body must keep coming: in every window of
// api.body_timeout it must bring api.body_min_rate × body_timeout bytes
// (at least one), or it is cut off with a 408 and an upload's partial file
// removed. The headers have http.Server's ReadHeaderTimeout. And at most
// api.max_concurrent_uploads POST /v1/files bodies are read at once: one
// more is answered 429 before anything is written. So clients dripping
// bodies hold a bounded number of connections and files, for a bounded
// time, and /healthz, new batches and the other routes keep answering.

// errBodyTooSlow is what a request body's Read returns once the body
// brought too little in a window (see paceBodies).
var errBodyTooSlow = errors.New("request body too slow")

// bodyLimits counts what the body limits refused, for the metrics.
type bodyLimits struct {
	uploads  chan struct{} // a slot per upload being read
	refused  atomic.Int64  // uploads answered 429
	tooSlow  atomic.Int64  // bodies answered 408
	window   time.Duration
	minBytes int64 // per window
}

func newBodyLimits(api APIConfig) *bodyLimits {
	return &bodyLimits{uploads: make(chan struct{}, api.MaxConcurrentUploads), window: api.BodyTimeout,
		minBytes: max(1, int64(float64(api.BodyMinRate)*api.BodyTimeout.Seconds()))}
}

// retryAfterUploads is the Retry-After of a 429 for too many uploads: an
// upload slot frees when one ends, which a client cannot see.
const retryAfterUploads = 1

// uploadSlot takes a slot for an upload, or answers 429 and returns false.
// The caller calls the returned release when the upload ends.
func (l *bodyLimits) uploadSlot(w http.ResponseWriter) (release func(), ok bool) {
	select {
	case l.uploads <- struct{}{}:
		return func() { <-l.uploads }, true
	default:
		l.refused.Add(1)
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterUploads))
		writeAPIError(w, http.StatusTooManyRequests, "too_many_uploads", "",
			"%d uploads are being received already (config api.max_concurrent_uploads); retry in %d second.", cap(l.uploads), retryAfterUploads)
		return nil, false
	}
}

// paceBodies wraps every request body in a pacedBody.
func (l *bodyLimits) paceBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			// On a copy: the server, once the handler returns, looks at
			// its own request's body to decide what to do with any part
			// left unread (discard it, or close the connection).
			paced := &pacedBody{ReadCloser: r.Body, rc: http.NewResponseController(w), l: l}
			r = r.WithContext(r.Context())
			r.Body = paced
		}
		h.ServeHTTP(w, r)
	})
}

// pacedBody is a request body under a read deadline: the end of its
// current window, moved to a window later each time the window has
// brought l.minBytes. It is cleared at the end of the body, so that
// nothing the server reads after it (to see the client go away while a
// handler runs) times out.
type pacedBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	l        *bodyLimits
	started  bool
	got      int64 // bytes in this window
	timedOut bool
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if b.timedOut {
		return 0, errBodyTooSlow
	}
	if !b.started {
		b.started = true
		b.newWindow()
	}
	n, err := b.ReadCloser.Read(p)
	b.got += int64(n)
	if b.got >= b.l.minBytes {
		b.newWindow()
	}
	switch {
	case errors.Is(err, io.EOF):
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.timedOut = true
		b.l.tooSlow.Add(1)
		err = fmt.Errorf("%w: under %d bytes in %s (config api.body_timeout, api.body_min_rate)", errBodyTooSlow, b.l.minBytes, b.l.window)
	}
	return n, err
}

func (b *pacedBody) newWindow() {
	b.got = 0
	// Without a deadline to set (a connection that is not a net.Conn),
	// the body is read unpaced.
	_ = b.rc.SetReadDeadline(time.Now().Add(b.l.window))
}

// writeBodyError answers a request whose body could not be read: 408 when
// it came too slowly, 413 when it was over limit (bytes), else 400.
func writeBodyError(w http.ResponseWriter, err error, code, param string) {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, errBodyTooSlow):
		w.Header().Set("Connection", "close")
		writeAPIError(w, http.StatusRequestTimeout, "request_timeout", param, "reading the body: %v", err)
	case errors.As(err, &mbe):
		writeAPIError(w, http.StatusRequestEntityTooLarge, code, param, "the body is larger than the limit of %d bytes", mbe.Limit)
	default:
		writeAPIError(w, http.StatusBadRequest, "invalid_request", param, "reading the body: %v", err)
	}
}
