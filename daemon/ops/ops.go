// Package ops owns batchd's operator view: Prometheus metrics, a sampler of
// token throughput and a self-refreshing status page. It reads the daemon's
// state only through State (the daemon implements it and mounts the
// handlers); of the rest of batchd it uses only the pipeline's status names.
package ops

import "github.com/batchd/batchd/pipeline"

// statuses lists every batch status, so that metrics report zeros instead of
// letting a series vanish when no batch has that status.
var statuses = []string{
	pipeline.StatusValidating, pipeline.StatusFailed, pipeline.StatusInProgress, pipeline.StatusFinalizing,
	pipeline.StatusCompleted, pipeline.StatusExpired, pipeline.StatusCancelling, pipeline.StatusCancelled,
}

// BatchView is one batch as the operator sees it.
type BatchView struct {
	ID, Name, Status, Endpoint       string // Status is one of validating, failed, in_progress, finalizing, completed, expired, cancelling, cancelled
	Total, Completed, Failed         int
	InputTokens, OutputTokens        int64
	CreatedAt, InProgressAt, EndedAt int64   // unix seconds, 0 if not yet
	Rate                             float64 // requests per second while it runs, 0 otherwise
}

// EngineView is the engine's state now.
type EngineView struct {
	Name                      string
	InFlight, Queued          int
	Paused                    bool
	Hung                      bool    // requests sent, nothing answered for a while
	PrefixCacheHitRate        float64 // 0..1; negative when unknown
	KVBytesUsed, KVBytesTotal int64   // 0 when unknown
	Retries                   int64   // remote-engine retries so far
	Kernels                   KernelsView
	// Spec is speculative decoding per model (nil: an engine that does
	// not speculate).
	Spec []SpecView
	// Dispatch is what the pipeline holds for the engine.
	Dispatch DispatchView
}

// DispatchView is the requests between the pipeline and the engine now.
type DispatchView struct {
	InFlight int // handed to the engine, not answered (running or waiting inside it)
	Waiting  int // validated, waiting in the pipeline for room in the engine's window
	Window   int // how many the engine takes at once
}

// SpecView is one model's speculative decoding so far.
type SpecView struct {
	Model                 string
	DraftTokens, Accepted int64 // draft tokens verified, and of those kept
}

// KernelsView is the CPU code path an in-process engine runs; the zero value
// for an engine that runs none (a remote one).
type KernelsView struct {
	Backend  string   // amx, avx512, avx2, neon or generic
	Arch     string   // GOARCH: amd64, arm64, ...
	Features []string // the CPU features found, /proc/cpuinfo spelling
}

// IntakeView is whether the daemon takes new batches now.
type IntakeView struct {
	// DiskFull is true while intake is paused because a write failed with
	// ENOSPC; DiskFullSince is when that pause began (unix seconds, 0 if
	// not paused).
	DiskFull      bool
	DiskFullSince int64
	// DiskFullPauses counts those pauses since the daemon started.
	DiskFullPauses int64
	// InboxWaiting is the inputs waiting in each source's inbox, by source
	// ("dir", "bucket", "api"): for dir and api, inputs delivered to this
	// daemon that no batch runner has started yet; for bucket, the input
	// objects in the bucket's inbox at the latest listing, waiting or
	// running on any daemon (an input leaves the inbox once done), so that
	// every daemon on the bucket reports the same backlog. A source the
	// daemon does not have is absent; a bucket not listed yet too.
	InboxWaiting map[string]int
	// Uploads is the POST /v1/files bodies being read now; UploadsRefused
	// counts those answered 429 because api.max_concurrent_uploads were
	// (since the daemon started), BodiesTooSlow the request bodies cut off
	// with a 408 for coming too slowly (api.body_timeout, body_min_rate).
	Uploads        int
	UploadsRefused int64
	BodiesTooSlow  int64
}

// State is the daemon's state as package ops reads it. Its methods are
// called from HTTP handlers and the sampler's goroutine, concurrently, so
// implementations must be safe for concurrent use and should return quickly.
type State interface {
	// Batches lists the batches the daemon knows, in any order.
	Batches() ([]BatchView, error)
	// Engine reports the engine's state now.
	Engine() EngineView
	// Intake reports whether new batches start now.
	Intake() IntakeView
}

// totalTokens sums prompt and completion tokens over batches, saturating
// at math.MaxInt64 (each batch's own totals saturate there too).
func totalTokens(batches []BatchView) int64 {
	var n int64
	for _, b := range batches {
		n = pipeline.AddTokens(pipeline.AddTokens(n, b.InputTokens), b.OutputTokens)
	}
	return n
}
