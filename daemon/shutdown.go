package daemon

import (
	"context"
	"net/http"
	"strconv"
	"strings"
)

// retryAfterShutdown is the Retry-After (seconds) of the 503 that new work
// gets while the daemon shuts down: about a restart's time.
const retryAfterShutdown = 10

// DrainReport is what a graceful stop (Drain) found and left.
type DrainReport struct {
	// Batches were running when intake stopped.
	Batches int
	// InFlight requests were at the engine when intake stopped; Dropped
	// were waiting in the pipeline for room at the engine, and are left
	// for the restart.
	InFlight, Dropped int
	// Abandoned requests were still at the engine when ctx ended; they
	// are not done and run again on the restart (0 when Done).
	Abandoned int
	// Done: every running batch stopped at a commit point before ctx ended.
	Done bool
}

// Finished is how many of the requests in flight at the start of the drain
// were answered and written before it ended.
func (r DrainReport) Finished() int { return max(0, r.InFlight-r.Abandoned) }

// Drain stops intake for a graceful shutdown and waits, until ctx ends, for
// the requests in flight to finish: the watchers' new events are ignored
// (the inputs stay where they are, for the restart), the API answers new
// work with 503 and Retry-After, /readyz turns not ready, no queued batch
// starts, and each running batch stops reading, has the requests the
// engine holds answered and committed, and stops at that commit point.
// Close follows either way; what did not finish is not done, and runs on
// the restart.
func (d *Daemon) Drain(ctx context.Context) DrainReport {
	d.notifyStopping() // systemd: shutdown begins with the drain
	d.draining.Store(true)
	rep := DrainReport{Batches: d.runs.close()}
	if d.pipe != nil {
		st := d.pipe.Drain()
		rep.InFlight, rep.Dropped = st.InFlight, st.Waiting
	}
	d.log.Info("shutting down: intake stopped; waiting for the requests in flight",
		"batches", rep.Batches, "in_flight", rep.InFlight, "dropped_waiting", rep.Dropped)
	done := make(chan struct{})
	go func() {
		d.runners.Wait()
		close(done)
	}()
	select {
	case <-done:
		rep.Done = true
	case <-ctx.Done():
		if d.pipe != nil {
			rep.Abandoned = d.pipe.Dispatch().InFlight
		}
	}
	return rep
}

// intake wraps the API: while the daemon drains, a POST (new files,
// batches, retries and online requests; a cancel still works) is answered
// 503 with Retry-After, so that a client retries here after the restart
// or on another instance.
func (d *Daemon) intake(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.draining.Load() && r.Method == http.MethodPost && !strings.HasSuffix(r.URL.Path, "/cancel") {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfterShutdown))
			writeAPIError(w, http.StatusServiceUnavailable, "shutting_down", "",
				"batchd is shutting down and takes no new work; retry in %d seconds.", retryAfterShutdown)
			return
		}
		h.ServeHTTP(w, r)
	})
}
