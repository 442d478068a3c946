package daemon_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// get sends GET url and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func TestReadinessFollowsAnOutageOfServerErrors(t *testing.T) {
	// The remote engine answers every request with a 503 while its GET
	// /v1/models probe still answers 200. The probe lets the held requests
	// try again, but until one of them is answered batches stay paused and
	// /readyz stays unready: here every request is resent after the probe
	// and held unanswered at the server, which only the probe can have let
	// through, and /readyz must still say paused. Once the server answers,
	// /readyz is ready and the batch completes with no error line.
	const n = 4
	const (
		failing = iota
		holding
		serving
	)
	var phase atomic.Int32
	held := make(chan struct{}, 64)
	release := make(chan struct{})
	e := newEnv(t, openaitest.Options{Fault: func(_ int64, r *http.Request, _ []byte) openaitest.Fault {
		switch {
		case r.Header.Get(openai.HealthCheckHeader) != "":
			return openaitest.Fault{Status: http.StatusServiceUnavailable}
		case phase.Load() == failing:
			return openaitest.Fault{Status: http.StatusServiceUnavailable}
		case phase.Load() == holding:
			held <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		return openaitest.Fault{}
	}})
	cfg := e.config()
	cfg.Listen = "127.0.0.1:0"
	readyz := "http://" + e.open(cfg).HTTPAddr() + "/readyz"
	if code, body := get(t, readyz); code != http.StatusOK {
		t.Fatalf("/readyz before the outage: %d %q", code, body)
	}
	e.drop("five.jsonl", chatBatch(n, "f"))
	waitFor(t, 30*time.Second, "/readyz to report the pause", func() bool {
		code, _ := get(t, readyz)
		return code == http.StatusServiceUnavailable
	})
	phase.Store(holding)
	for i := range n {
		select {
		case <-held:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d requests resent after the probe answered", i, n)
		}
	}
	if code, body := get(t, readyz); code != http.StatusServiceUnavailable || !strings.Contains(body, "batches paused") {
		t.Errorf("/readyz with the probe answered and no request yet: %d %q, want 503 batches paused", code, body)
	}
	phase.Store(serving)
	close(release)
	waitFor(t, 30*time.Second, "/readyz to recover", func() bool {
		code, _ := get(t, readyz)
		return code == http.StatusOK
	})
	if o := e.waitEnded("five", "jsonl"); o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != n {
		t.Fatalf("after the outage: %s %+v\n%s", o.Status, o.RequestCounts, strings.Join(e.lines("five.errors.jsonl"), "\n"))
	}
	e.check("five", "jsonl")
	if logs := e.logs.String(); strings.Count(logs, "batches paused, probing") != 1 || strings.Count(logs, "remote engine back; resuming") != 1 {
		t.Errorf("want the pause and the resume logged once each:\n%s", logs)
	}
}
