package ops

import (
	"errors"
	"github.com/batchd/batchd/pipeline"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape fetches h's metrics and parses them.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", rec.Code, rec.Body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parsing metrics: %v", err)
	}
	return fams
}

// value is the value of the family's sample whose labels include want
// (name=value pairs); ok is false when there is none.
func value(fams map[string]*dto.MetricFamily, name string, want ...string) (v float64, ok bool) {
	fam := fams[name]
	if fam == nil {
		return 0, false
	}
next:
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if labels[want[i]] != want[i+1] {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

func testBatches() []BatchView {
	return []BatchView{
		{ID: "b1", Name: "old", Status: pipeline.StatusCompleted, Total: 10, Completed: 9, Failed: 1,
			InputTokens: 100, OutputTokens: 50, CreatedAt: 1000, EndedAt: 1100},
		{ID: "b2", Name: "running", Status: pipeline.StatusInProgress, Total: 100, Completed: 40, Failed: 2,
			InputTokens: 400, OutputTokens: 300, CreatedAt: 2000, InProgressAt: 2001, Rate: 4},
		{ID: "b3", Name: "also running", Status: pipeline.StatusInProgress, Total: 5,
			CreatedAt: 3000, InProgressAt: 3001},
	}
}

func TestMetrics(t *testing.T) {
	src := &fakeState{
		batches: testBatches(),
		engine: EngineView{Name: "native", InFlight: 7, Queued: 30, Paused: true, Hung: true,
			PrefixCacheHitRate: 0.25, KVBytesUsed: 1 << 20, KVBytesTotal: 4 << 20, Retries: 3,
			Kernels:  KernelsView{Backend: "avx2", Arch: "amd64", Features: []string{"avx", "avx2", "fma", "f16c"}},
			Dispatch: DispatchView{InFlight: 500, Waiting: 256, Window: 512},
			Spec:     []SpecView{{Model: "m", DraftTokens: 40, Accepted: 30}}},
		intake: IntakeView{DiskFull: true, DiskFullSince: 2000, DiskFullPauses: 2},
	}
	fams := scrape(t, NewMetrics(src).Handler())

	tests := []struct {
		name   string
		labels []string
		want   float64
		typ    dto.MetricType
	}{
		{"batchd_batches", []string{"status", "in_progress"}, 2, dto.MetricType_GAUGE},
		{"batchd_batches", []string{"status", "completed"}, 1, dto.MetricType_GAUGE},
		{"batchd_batches", []string{"status", "cancelled"}, 0, dto.MetricType_GAUGE},
		{"batchd_requests_total", []string{"result", "completed"}, 49, dto.MetricType_GAUGE},
		{"batchd_requests_total", []string{"result", "failed"}, 3, dto.MetricType_GAUGE},
		{"batchd_tokens_total", []string{"kind", "prompt"}, 500, dto.MetricType_GAUGE},
		{"batchd_tokens_total", []string{"kind", "completion"}, 350, dto.MetricType_GAUGE},
		{"batchd_engine_in_flight", nil, 7, dto.MetricType_GAUGE},
		{"batchd_engine_queue_depth", nil, 30, dto.MetricType_GAUGE},
		{"batchd_engine_paused", nil, 1, dto.MetricType_GAUGE},
		{"batchd_engine_hung", nil, 1, dto.MetricType_GAUGE},
		{"batchd_prefix_cache_hit_ratio", nil, 0.25, dto.MetricType_GAUGE},
		{"batchd_kv_cache_bytes", []string{"state", "used"}, 1 << 20, dto.MetricType_GAUGE},
		{"batchd_kv_cache_bytes", []string{"state", "total"}, 4 << 20, dto.MetricType_GAUGE},
		{"batchd_engine_retries_total", nil, 3, dto.MetricType_COUNTER},
		{"batchd_dispatch_in_flight", nil, 500, dto.MetricType_GAUGE},
		{"batchd_dispatch_waiting", nil, 256, dto.MetricType_GAUGE},
		{"batchd_dispatch_window", nil, 512, dto.MetricType_GAUGE},
		{"batchd_kernels_info", []string{"backend", "avx2", "arch", "amd64", "features", "avx,avx2,fma,f16c"}, 1, dto.MetricType_GAUGE},
		{"batchd_disk_full", nil, 1, dto.MetricType_GAUGE},
		{"batchd_disk_full_pauses_total", nil, 2, dto.MetricType_COUNTER},
		{"batchd_spec_draft_tokens_total", []string{"model", "m"}, 40, dto.MetricType_COUNTER},
		{"batchd_spec_accepted_tokens_total", []string{"model", "m"}, 30, dto.MetricType_COUNTER},
	}
	for _, tt := range tests {
		got, ok := value(fams, tt.name, tt.labels...)
		if !ok {
			t.Errorf("%s%v: missing", tt.name, tt.labels)
			continue
		}
		if got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
		if typ := fams[tt.name].GetType(); typ != tt.typ {
			t.Errorf("%s: type %v, want %v", tt.name, typ, tt.typ)
		}
		if fams[tt.name].GetHelp() == "" {
			t.Errorf("%s: no HELP text", tt.name)
		}
	}
	if n := len(fams["batchd_batches"].GetMetric()); n != len(statuses) {
		t.Errorf("batchd_batches has %d series, want one per status (%d)", n, len(statuses))
	}
	// Without a sampler there is no rate to report.
	if _, ok := fams["batchd_tokens_per_second"]; ok {
		t.Error("batchd_tokens_per_second reported without a sampler")
	}
	// The runtime and process collectors are registered too.
	for _, name := range []string{"go_goroutines", "process_start_time_seconds"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("%s: missing", name)
		}
	}
}

func TestMetricsOmitUnknownEngineValues(t *testing.T) {
	src := &fakeState{engine: EngineView{Name: "openai", PrefixCacheHitRate: -1}}
	fams := scrape(t, NewMetrics(src).Handler())
	for _, name := range []string{"batchd_prefix_cache_hit_ratio", "batchd_kv_cache_bytes", "batchd_kernels_info", "batchd_spec_draft_tokens_total"} {
		if _, ok := fams[name]; ok {
			t.Errorf("%s reported though the engine does not know it", name)
		}
	}
	for _, name := range []string{"batchd_engine_paused", "batchd_disk_full"} {
		if v, ok := value(fams, name); !ok || v != 0 {
			t.Errorf("%s = %v (present %v), want 0", name, v, ok)
		}
	}
}

func TestMetricsTokensPerSecond(t *testing.T) {
	src := &fakeState{batches: testBatches()}
	s := NewSampler(src, time.Second, time.Minute)
	t0 := time.Unix(10_000, 0)
	if err := s.Sample(t0); err != nil {
		t.Fatal(err)
	}
	src.mu.Lock()
	src.batches[1].OutputTokens += 250
	src.mu.Unlock()
	if err := s.Sample(t0.Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, NewMetrics(src).WithSampler(s).Handler())
	if v, ok := value(fams, "batchd_tokens_per_second"); !ok || v != 50 {
		t.Errorf("batchd_tokens_per_second = %v (present %v), want 50", v, ok)
	}
}

// A failing State costs the scrape its batch families, not the rest.
func TestMetricsSourceError(t *testing.T) {
	src := &fakeState{engine: EngineView{InFlight: 2, PrefixCacheHitRate: -1}}
	src.fail(errors.New("ledger closed"))
	rec := httptest.NewRecorder()
	NewMetrics(src).Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d, want 200 with the families that could be read", rec.Code)
	}
	body := rec.Body.String()
	if strings.Contains(body, "batchd_batches") {
		t.Errorf("batchd_batches reported though listing batches failed:\n%s", body)
	}
	if !strings.Contains(body, "batchd_engine_in_flight 2") {
		t.Errorf("engine metrics missing after a batch listing error:\n%s", body)
	}
}

// Token totals over batches saturate like each batch's own: two batches at
// the ceiling never read as a negative number of tokens.
func TestTokenTotalsSaturate(t *testing.T) {
	batches := []BatchView{{InputTokens: math.MaxInt64, OutputTokens: 5}, {InputTokens: math.MaxInt64 - 1, OutputTokens: math.MaxInt64}}
	if got := totalTokens(batches); got != math.MaxInt64 {
		t.Fatalf("totalTokens = %d, want %d", got, int64(math.MaxInt64))
	}
}
