package openai

import (
	"bytes"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/batchd/batchd/engine/openai/openaitest"
)

func TestLastRequestWaitsOutAnOutage(t *testing.T) {
	// The last request of a batch is cut off as the server dies (a reset
	// after the others were answered: a strike), then finds the server
	// gone. A refused connection never reached the server and says nothing
	// about the request: it must wait for the engine to come back, not give
	// up after MaxRetries refusals. (The soak found this: the last line of
	// a batch became an engine_unavailable error line when the engine was
	// killed under it.)
	othersDone := make(chan struct{})
	var lastPOSTs atomic.Int64
	var srv *openaitest.Server
	srv = startServer(t, openaitest.Options{Fault: func(_ int64, r *http.Request, body []byte) openaitest.Fault {
		if !bytes.Contains(body, []byte("last")) || lastPOSTs.Add(1) > 1 {
			return openaitest.Fault{}
		}
		select {
		case <-othersDone:
		case <-r.Context().Done():
		}
		go srv.Stop() // the server dies with this request in flight
		return openaitest.Fault{Close: true}
	}})
	cfg := testConfig(srv.URL())
	e, logs := newTestEngine(t, cfg)
	paused := logs.waitFor("remote engine unreachable; batches paused, probing")

	errc := make(chan error, 1)
	go func() {
		_, err := do(t, e, chatRequest("last", "last"))
		errc <- err
	}()
	waitUntil(t, "the last request to reach the server", func() bool { return lastPOSTs.Load() == 1 })
	for i, err := range sendAll(t, e, 5, "before") {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	close(othersDone)
	select {
	case err := <-errc:
		t.Fatalf("the last request ended while the server was down: %v", err)
	case <-paused:
	}
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("the last request after the restart: %v", err)
	}
}
