package ops

import (
	"encoding/json"
	"errors"
	"github.com/batchd/batchd/pipeline"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec
}

func TestStatusJSON(t *testing.T) {
	src := &fakeState{
		batches: testBatches(),
		engine: EngineView{Name: "native", InFlight: 3, Queued: 9, PrefixCacheHitRate: -1, Hung: true,
			Dispatch: DispatchView{InFlight: 300, Waiting: 40, Window: 512}},
		intake: IntakeView{DiskFull: true, DiskFullSince: 4990, DiskFullPauses: 1},
	}
	s := NewSampler(src, 10*time.Second, time.Hour)
	t0 := time.Unix(5000, 0)
	mustSample(t, s, t0)
	src.mu.Lock()
	src.batches[1].OutputTokens += 120
	src.mu.Unlock()
	mustSample(t, s, t0.Add(10*time.Second))

	page := NewStatusPage(src, s)
	page.now = func() time.Time { return time.Unix(5010, 0) }
	rec := get(t, page.Handler(), "/status.json")
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /status.json: %d\n%s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var st Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("decoding status: %v\n%s", err, rec.Body)
	}

	if st.Now != 5010 {
		t.Errorf("now = %d, want 5010", st.Now)
	}
	var ids []string
	for _, b := range st.Batches {
		ids = append(ids, b.ID)
	}
	if got, want := strings.Join(ids, ","), "b3,b2,b1"; got != want {
		t.Errorf("batch order = %s, want newest first %s", got, want)
	}
	byID := map[string]BatchStatus{}
	for _, b := range st.Batches {
		byID[b.ID] = b
	}
	// b2: 42 of 100 finished at 4 req/s: 58 left, 14.5 s.
	if b := byID["b2"]; b.Progress != 0.42 || b.Rate != 4 || b.ETASeconds == nil || *b.ETASeconds != 14.5 {
		t.Errorf("b2 = progress %v, rate %v, eta %v; want 0.42, 4, 14.5", b.Progress, b.Rate, deref(b.ETASeconds))
	}
	if b := byID["b2"]; b.Completed != 40 || b.Failed != 2 || b.Total != 100 || b.Name != "running" || b.OutputTokens != 420 {
		t.Errorf("b2 = %+v", b)
	}
	// b1 is done and b3 has no rate yet: neither has an ETA.
	if b := byID["b1"]; b.Progress != 1 || b.ETASeconds != nil {
		t.Errorf("b1 = progress %v, eta %v; want 1, none", b.Progress, deref(b.ETASeconds))
	}
	if b := byID["b3"]; b.Progress != 0 || b.ETASeconds != nil {
		t.Errorf("b3 = progress %v, eta %v; want 0, none", b.Progress, deref(b.ETASeconds))
	}

	e := st.Engine
	if e.Name != "native" || e.InFlight != 3 || e.Queued != 9 || e.PrefixCacheHitRate != nil || e.KVBytesTotal != nil || !e.Hung ||
		e.Handed != 300 || e.Waiting != 40 || e.Window != 512 {
		t.Errorf("engine = %+v", e)
	}
	if st.TokensPerSecond != 12 {
		t.Errorf("tokens_per_second = %v, want 12", st.TokensPerSecond)
	}
	if len(st.History) != 1 || st.History[0] != (Point{Unix: 5010, TokensPerSecond: 12}) {
		t.Errorf("history = %v", st.History)
	}

	// The raw document spells unknowns as null and has the documented keys.
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	engine := raw["engine"].(map[string]any)
	if v, ok := engine["prefix_cache_hit_rate"]; !ok || v != nil {
		t.Errorf("engine.prefix_cache_hit_rate = %v (present %v), want null", v, ok)
	}
	if v, ok := engine["hung"]; !ok || v != true {
		t.Errorf("engine.hung = %v (present %v), want true", v, ok)
	}
	if v, ok := raw["disk_full"]; !ok || v != true {
		t.Errorf("disk_full = %v (present %v), want true", v, ok)
	}
	if v, ok := raw["disk_full_since"]; !ok || v != 4990.0 {
		t.Errorf("disk_full_since = %v (present %v), want 4990", v, ok)
	}
	batch := raw["batches"].([]any)[0].(map[string]any)
	for _, key := range []string{"id", "progress", "rate", "eta_seconds", "completed", "total", "failed"} {
		if _, ok := batch[key]; !ok {
			t.Errorf("batch has no %q", key)
		}
	}
}

func TestStatusJSONWithoutSampler(t *testing.T) {
	src := &fakeState{engine: EngineView{KVBytesUsed: 10, KVBytesTotal: 100}}
	rec := get(t, NewStatusPage(src, nil).Handler(), "/status.json")
	body := rec.Body.String()
	// Empty lists, not null: the page iterates them.
	for _, want := range []string{`"batches":[]`, `"history":[]`, `"disk_full":false`, `"kv_bytes_used":10`, `"kv_bytes_total":100`} {
		if !strings.Contains(body, want) {
			t.Errorf("status.json lacks %s:\n%s", want, body)
		}
	}
}

func TestStatusJSONSourceError(t *testing.T) {
	src := &fakeState{}
	src.fail(errors.New("ledger closed"))
	rec := get(t, NewStatusPage(src, nil).Handler(), "/status.json")
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("status = %d, want 503", rec.Code)
	}
	var body struct{ Error string }
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || !strings.Contains(body.Error, "ledger closed") {
		t.Errorf("body = %s (%v), want the error", rec.Body, err)
	}
}

func TestStatusPageAssets(t *testing.T) {
	h := NewStatusPage(&fakeState{}, nil).Handler()
	tests := []struct {
		path, contentType, contains string
	}{
		{"/", "text/html; charset=utf-8", `<script src="app.js"`},
		{"/app.js", "text/javascript; charset=utf-8", `fetch("status.json"`},
		{"/style.css", "text/css; charset=utf-8", `.bar-fill`},
		{"/favicon.svg", "image/svg+xml", `<svg`},
	}
	for _, tt := range tests {
		rec := get(t, h, tt.path)
		if rec.Code != http.StatusOK {
			t.Errorf("GET %s: %d", tt.path, rec.Code)
			continue
		}
		if ct := rec.Header().Get("Content-Type"); ct != tt.contentType {
			t.Errorf("GET %s: Content-Type %q, want %q", tt.path, ct, tt.contentType)
		}
		if !strings.Contains(rec.Body.String(), tt.contains) {
			t.Errorf("GET %s: body lacks %q", tt.path, tt.contains)
		}
	}
	// No external resources: the machine may have no network.
	for _, path := range []string{"/", "/app.js", "/style.css"} {
		if body := get(t, h, path).Body.String(); strings.Contains(body, "http://") || strings.Contains(body, "https://") {
			t.Errorf("GET %s refers to an absolute URL", path)
		}
	}
	for _, path := range []string{"/nope", "/index.html"} {
		if rec := get(t, h, path); rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/status.json", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /status.json: %d, want 405", rec.Code)
	}
}

func TestBatchStatusProgress(t *testing.T) {
	tests := []struct {
		name string
		b    BatchView
		prog float64
		eta  float64 // -1: none
	}{
		{"empty and done", BatchView{Status: pipeline.StatusCompleted}, 1, -1},
		{"empty, validating", BatchView{Status: pipeline.StatusValidating}, 0, -1},
		{"finalizing", BatchView{Status: pipeline.StatusFinalizing, Total: 4, Completed: 4, Rate: 2}, 1, -1},
		{"running, failures count as finished", BatchView{Status: pipeline.StatusInProgress, Total: 10, Completed: 3, Failed: 2, Rate: 0.5}, 0.5, 10},
		{"running, no rate yet", BatchView{Status: pipeline.StatusInProgress, Total: 10}, 0, -1},
		{"cancelling", BatchView{Status: pipeline.StatusCancelling, Total: 10, Completed: 1, Rate: 1}, 0.1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := batchStatus(tt.b)
			if s.Progress != tt.prog {
				t.Errorf("progress = %v, want %v", s.Progress, tt.prog)
			}
			if got := deref(s.ETASeconds); got != tt.eta {
				t.Errorf("eta = %v, want %v", got, tt.eta)
			}
		})
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return -1
	}
	return *p
}
