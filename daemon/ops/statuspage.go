package ops

import (
	"cmp"
	"embed"
	"encoding/json"
	"fmt"
	"github.com/batchd/batchd/pipeline"
	"log/slog"
	"net/http"
	"slices"
	"time"
)

//go:embed static
var static embed.FS

// StatusPage serves the operator's status page and the JSON it refreshes
// itself from.
type StatusPage struct {
	src     State
	sampler *Sampler
	now     func() time.Time
	log     *slog.Logger
}

// NewStatusPage returns a status page for src. s supplies the tokens-per-second
// chart; with a nil s the chart stays empty.
func NewStatusPage(src State, s *Sampler) *StatusPage {
	return &StatusPage{
		src:     src,
		sampler: s,
		now:     time.Now,
		log:     slog.Default().With("component", "ops"),
	}
}

// Handler serves GET / (the page), its script, style and icon, and GET
// /status.json.
// The page refers to them by relative URLs, so it can be mounted under a
// prefix with http.StripPrefix.
func (p *StatusPage) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", staticFile("static/index.html", "text/html; charset=utf-8"))
	mux.Handle("GET /app.js", staticFile("static/app.js", "text/javascript; charset=utf-8"))
	mux.Handle("GET /style.css", staticFile("static/style.css", "text/css; charset=utf-8"))
	mux.Handle("GET /favicon.svg", staticFile("static/favicon.svg", "image/svg+xml"))
	mux.HandleFunc("GET /status.json", p.serveStatus)
	return mux
}

func staticFile(name, contentType string) http.Handler {
	body, err := static.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("ops: embedded %s: %v", name, err)) // a build mistake, not a runtime condition
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Set("Cache-Control", "no-cache")
		// Everything the page needs is served from here; nothing inline.
		h.Set("Content-Security-Policy", "default-src 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		w.Write(body)
	})
}

// Status is the document served at /status.json.
type Status struct {
	Now             int64         `json:"now"` // unix seconds
	Batches         []BatchStatus `json:"batches"`
	Engine          EngineStatus  `json:"engine"`
	TokensPerSecond float64       `json:"tokens_per_second"` // the sampler's latest
	History         []Point       `json:"history"`           // oldest first
	// DiskFull is true while intake is paused because a write failed with
	// ENOSPC; DiskFullSince is when (unix seconds; 0 when not paused).
	DiskFull      bool  `json:"disk_full"`
	DiskFullSince int64 `json:"disk_full_since"`
}

// BatchStatus is one batch in Status.
type BatchStatus struct {
	ID           string  `json:"id"`
	Name         string  `json:"name"`
	Status       string  `json:"status"`
	Endpoint     string  `json:"endpoint"`
	Total        int     `json:"total"`
	Completed    int     `json:"completed"`
	Failed       int     `json:"failed"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CreatedAt    int64   `json:"created_at"`
	InProgressAt int64   `json:"in_progress_at"`
	EndedAt      int64   `json:"ended_at"`
	Rate         float64 `json:"rate"`     // requests per second
	Progress     float64 `json:"progress"` // finished (completed or failed) over total, 0..1
	// ETASeconds is the remaining requests over Rate while the batch is in
	// progress at a known rate; null otherwise.
	ETASeconds *float64 `json:"eta_seconds"`
}

// EngineStatus is the engine in Status; unknown values are null.
type EngineStatus struct {
	Name               string   `json:"name"`
	InFlight           int      `json:"in_flight"`
	Queued             int      `json:"queued"`
	Paused             bool     `json:"paused"`
	Hung               bool     `json:"hung"`
	PrefixCacheHitRate *float64 `json:"prefix_cache_hit_rate"`
	KVBytesUsed        *int64   `json:"kv_bytes_used"`
	KVBytesTotal       *int64   `json:"kv_bytes_total"`
	Retries            int64    `json:"retries"`
	// Handed, Waiting and Window are the pipeline's side: requests handed
	// to the engine and not answered, requests waiting for room, and how
	// many the engine takes at once.
	Handed  int `json:"handed"`
	Waiting int `json:"waiting"`
	Window  int `json:"window"`
}

func (p *StatusPage) serveStatus(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	st, err := p.status()
	if err != nil {
		p.log.Warn("serving status", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encoding status: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(body)
}

func (p *StatusPage) status() (Status, error) {
	batches, err := p.src.Batches()
	if err != nil {
		return Status{}, fmt.Errorf("listing batches: %w", err)
	}
	st := Status{
		Now:     p.now().Unix(),
		Batches: make([]BatchStatus, 0, len(batches)),
		Engine:  engineStatus(p.src.Engine()),
		History: []Point{},
	}
	in := p.src.Intake()
	st.DiskFull, st.DiskFullSince = in.DiskFull, in.DiskFullSince
	for _, b := range batches {
		st.Batches = append(st.Batches, batchStatus(b))
	}
	slices.SortFunc(st.Batches, func(a, b BatchStatus) int {
		return cmp.Or(cmp.Compare(b.CreatedAt, a.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	if p.sampler != nil {
		st.TokensPerSecond = p.sampler.Rate()
		st.History = p.sampler.History()
	}
	return st, nil
}

func batchStatus(b BatchView) BatchStatus {
	s := BatchStatus{
		ID: b.ID, Name: b.Name, Status: b.Status, Endpoint: b.Endpoint,
		Total: b.Total, Completed: b.Completed, Failed: b.Failed,
		InputTokens: b.InputTokens, OutputTokens: b.OutputTokens,
		CreatedAt: b.CreatedAt, InProgressAt: b.InProgressAt, EndedAt: b.EndedAt,
		Rate: b.Rate,
	}
	finished := b.Completed + b.Failed
	switch {
	case b.Total > 0:
		s.Progress = min(1, float64(finished)/float64(b.Total))
	case b.Status == pipeline.StatusCompleted:
		s.Progress = 1 // an empty batch that is done
	}
	if b.Status == pipeline.StatusInProgress && b.Rate > 0 && b.Total > 0 {
		eta := float64(max(0, b.Total-finished)) / b.Rate
		s.ETASeconds = &eta
	}
	return s
}

func engineStatus(e EngineView) EngineStatus {
	s := EngineStatus{
		Name: e.Name, InFlight: e.InFlight, Queued: e.Queued,
		Paused: e.Paused, Hung: e.Hung, Retries: e.Retries,
		Handed: e.Dispatch.InFlight, Waiting: e.Dispatch.Waiting, Window: e.Dispatch.Window,
	}
	if e.PrefixCacheHitRate >= 0 {
		hit := e.PrefixCacheHitRate
		s.PrefixCacheHitRate = &hit
	}
	if e.KVBytesTotal > 0 {
		used, total := e.KVBytesUsed, e.KVBytesTotal
		s.KVBytesUsed, s.KVBytesTotal = &used, &total
	}
	return s
}
