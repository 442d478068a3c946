package ops

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/batchd/batchd/pipeline"
)

// Metrics exposes batchd's state in Prometheus text format. It reads State
// at scrape time, so it holds no state of its own to keep in sync.
type Metrics struct {
	collector *collector
	handler   http.Handler
}

// NewMetrics returns metrics for src on a registry of their own, with the Go
// runtime and process collectors beside them. batchd_tokens_per_second is
// reported once a sampler is attached with WithSampler.
func NewMetrics(src State) *Metrics {
	log := slog.Default().With("component", "ops")
	reg := prometheus.NewRegistry()
	c := newCollector(src)
	reg.MustRegister(
		c,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: promLogger{log},
		// A failing State loses its own families, not the engine's or the
		// runtime's: the rest of the scrape is still worth having.
		ErrorHandling: promhttp.ContinueOnError,
	})
	return &Metrics{collector: c, handler: h}
}

// WithSampler makes the metrics report s's latest rate as
// batchd_tokens_per_second, and returns m. It is safe to call at any time.
func (m *Metrics) WithSampler(s *Sampler) *Metrics {
	m.collector.sampler.Store(s)
	return m
}

// Handler serves the metrics; mount it at /metrics.
func (m *Metrics) Handler() http.Handler { return m.handler }

// promLogger adapts slog to promhttp's error log.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) {
	l.log.Warn("serving metrics", "err", fmt.Sprint(v...))
}

// collector is a prometheus.Collector that reads State on every Collect.
type collector struct {
	src     State
	sampler atomic.Pointer[Sampler]

	batches, requests, tokens, tokensPerSecond             *prometheus.Desc
	inFlight, queueDepth, paused, hung, prefixHit, kvBytes *prometheus.Desc
	retries, kernelsInfo                                   *prometheus.Desc
	dispatchInFlight, dispatchWaiting, dispatchWindow      *prometheus.Desc
	diskFull, diskFullPauses                               *prometheus.Desc
	inboxWaiting, requestsWaiting                          *prometheus.Desc
	uploads, uploadsRefused, bodiesTooSlow                 *prometheus.Desc
	specDraft, specAccepted                                *prometheus.Desc
}

var _ prometheus.Collector = (*collector)(nil)

func newCollector(src State) *collector {
	d := prometheus.NewDesc
	return &collector{
		src:     src,
		batches: d("batchd_batches", "Batches the daemon knows, by status.", []string{"status"}, nil),
		// Sums over the batches the daemon knows rather than true counters:
		// they drop if a batch is forgotten, so they are exposed as gauges.
		requests: d("batchd_requests_total",
			"Requests finished, summed over the batches the daemon knows (a gauge: it drops if a batch is forgotten).",
			[]string{"result"}, nil),
		tokens: d("batchd_tokens_total",
			"Tokens used, summed over the batches the daemon knows (a gauge: it drops if a batch is forgotten).",
			[]string{"kind"}, nil),
		tokensPerSecond: d("batchd_tokens_per_second",
			"Prompt plus completion tokens per second between the sampler's two latest samples.", nil, nil),
		inFlight:   d("batchd_engine_in_flight", "Requests the engine is running now.", nil, nil),
		queueDepth: d("batchd_engine_queue_depth", "Inputs (batch files) delivered to this daemon and waiting for a batch runner, all sources together (despite the name, not requests: see batchd_requests_waiting, and batchd_inbox_waiting by source).", nil, nil),
		paused:     d("batchd_engine_paused", "1 while the engine is paused, else 0.", nil, nil),
		hung:       d("batchd_engine_hung", "1 while requests are in flight but the engine has answered nothing for hang_after, else 0.", nil, nil),
		prefixHit: d("batchd_prefix_cache_hit_ratio",
			"Share of prompt tokens served from the prefix cache, 0..1; absent when the engine does not know.", nil, nil),
		kvBytes: d("batchd_kv_cache_bytes",
			"KV cache memory, used and total; absent when the engine does not know.", []string{"state"}, nil),
		retries: d("batchd_engine_retries_total", "Requests to a remote engine retried so far.", nil, nil),
		dispatchInFlight: d("batchd_dispatch_in_flight",
			"Requests the pipeline has handed to the engine and not had answered yet (running, or waiting inside the engine).", nil, nil),
		dispatchWaiting: d("batchd_dispatch_waiting",
			"Validated requests waiting in the pipeline for room in the engine's window.", nil, nil),
		dispatchWindow: d("batchd_dispatch_window",
			"How many requests the engine takes at once: the native engine's own window, or pipeline.workers for a remote engine.", nil, nil),
		kernelsInfo: d("batchd_kernels_info",
			"1, labelled with the CPU kernels the native engine runs, the architecture and the CPU features found (comma-separated); absent for other engines.",
			[]string{"backend", "arch", "features"}, nil),
		diskFull: d("batchd_disk_full",
			"1 while intake is paused because a write of the data directory failed with ENOSPC (no new batch starts; running ones stopped at their last commit), else 0.", nil, nil),
		diskFullPauses: d("batchd_disk_full_pauses_total", "Times intake was paused for a full disk since the daemon started.", nil, nil),
		inboxWaiting: d("batchd_inbox_waiting",
			"Input files waiting, by source: dir and api, inputs this daemon has not started yet; bucket, input objects in the bucket's inbox at the latest listing (waiting or running on any daemon: the shared backlog, the same on every daemon). The metric to autoscale on.",
			[]string{"source"}, nil),
		requestsWaiting: d("batchd_requests_waiting",
			"Requests of unfinished batches not dispatched to the engine yet: their lines not done as of the latest commit, less those in flight.", nil, nil),
		uploads: d("batchd_api_uploads_in_progress", "POST /v1/files bodies being received now (at most api.max_concurrent_uploads).", nil, nil),
		uploadsRefused: d("batchd_api_uploads_refused_total",
			"Uploads answered 429 because api.max_concurrent_uploads were being received, since the daemon started.", nil, nil),
		bodiesTooSlow: d("batchd_api_bodies_too_slow_total",
			"Request bodies cut off with a 408 for coming slower than api.body_min_rate over api.body_timeout, since the daemon started.", nil, nil),
		specDraft: d("batchd_spec_draft_tokens_total",
			"Draft tokens speculative decoding verified, per model; absent for an engine that does not speculate.", []string{"model"}, nil),
		specAccepted: d("batchd_spec_accepted_tokens_total",
			"Draft tokens speculative decoding kept in the output, per model (acceptance rate: this over batchd_spec_draft_tokens_total).", []string{"model"}, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.batches, c.requests, c.tokens, c.tokensPerSecond,
		c.inFlight, c.queueDepth, c.paused, c.hung, c.prefixHit, c.kvBytes, c.retries, c.kernelsInfo,
		c.dispatchInFlight, c.dispatchWaiting, c.dispatchWindow,
		c.diskFull, c.diskFullPauses, c.specDraft, c.specAccepted,
		c.inboxWaiting, c.requestsWaiting, c.uploads, c.uploadsRefused, c.bodiesTooSlow,
	} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	undone, err := c.collectBatches(ch)
	e := c.collectEngine(ch)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.requestsWaiting, err)
	} else {
		ch <- prometheus.MustNewConstMetric(c.requestsWaiting, prometheus.GaugeValue, float64(max(0, undone-e.Dispatch.InFlight)))
	}
	c.collectIntake(ch)
	if s := c.sampler.Load(); s != nil {
		ch <- prometheus.MustNewConstMetric(c.tokensPerSecond, prometheus.GaugeValue, s.Rate())
	}
}

// collectBatches reports the batches and returns how many requests of the
// unfinished ones are not done yet.
func (c *collector) collectBatches(ch chan<- prometheus.Metric) (undone int, err error) {
	batches, err := c.src.Batches()
	if err != nil {
		err = fmt.Errorf("listing batches: %w", err)
		for _, d := range []*prometheus.Desc{c.batches, c.requests, c.tokens} {
			ch <- prometheus.NewInvalidMetric(d, err)
		}
		return 0, err
	}
	byStatus := make(map[string]int, len(statuses))
	for _, s := range statuses {
		byStatus[s] = 0
	}
	var completed, failed int
	var prompt, completion int64
	for _, b := range batches {
		byStatus[b.Status]++
		completed += b.Completed
		failed += b.Failed
		prompt = pipeline.AddTokens(prompt, b.InputTokens)
		completion = pipeline.AddTokens(completion, b.OutputTokens)
		if unfinished(b.Status) {
			undone += max(0, b.Total-b.Completed-b.Failed)
		}
	}
	for status, n := range byStatus {
		ch <- prometheus.MustNewConstMetric(c.batches, prometheus.GaugeValue, float64(n), status)
	}
	ch <- prometheus.MustNewConstMetric(c.requests, prometheus.GaugeValue, float64(completed), "completed")
	ch <- prometheus.MustNewConstMetric(c.requests, prometheus.GaugeValue, float64(failed), "failed")
	ch <- prometheus.MustNewConstMetric(c.tokens, prometheus.GaugeValue, float64(prompt), "prompt")
	ch <- prometheus.MustNewConstMetric(c.tokens, prometheus.GaugeValue, float64(completion), "completion")
	return undone, nil
}

// unfinished tells whether a batch of status still has requests to run.
func unfinished(status string) bool {
	return status == pipeline.StatusValidating || status == pipeline.StatusInProgress
}

func (c *collector) collectEngine(ch chan<- prometheus.Metric) EngineView {
	e := c.src.Engine()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.inFlight, float64(e.InFlight))
	gauge(c.queueDepth, float64(e.Queued))
	gauge(c.dispatchInFlight, float64(e.Dispatch.InFlight))
	gauge(c.dispatchWaiting, float64(e.Dispatch.Waiting))
	gauge(c.dispatchWindow, float64(e.Dispatch.Window))
	paused := 0.0
	if e.Paused {
		paused = 1
	}
	gauge(c.paused, paused)
	hung := 0.0
	if e.Hung {
		hung = 1
	}
	gauge(c.hung, hung)
	if e.PrefixCacheHitRate >= 0 {
		gauge(c.prefixHit, e.PrefixCacheHitRate)
	}
	if e.KVBytesTotal > 0 {
		gauge(c.kvBytes, float64(e.KVBytesUsed), "used")
		gauge(c.kvBytes, float64(e.KVBytesTotal), "total")
	}
	ch <- prometheus.MustNewConstMetric(c.retries, prometheus.CounterValue, float64(e.Retries))
	if k := e.Kernels; k.Backend != "" {
		gauge(c.kernelsInfo, 1, k.Backend, k.Arch, strings.Join(k.Features, ","))
	}
	for _, s := range e.Spec {
		ch <- prometheus.MustNewConstMetric(c.specDraft, prometheus.CounterValue, float64(s.DraftTokens), s.Model)
		ch <- prometheus.MustNewConstMetric(c.specAccepted, prometheus.CounterValue, float64(s.Accepted), s.Model)
	}
	return e
}

func (c *collector) collectIntake(ch chan<- prometheus.Metric) {
	in := c.src.Intake()
	full := 0.0
	if in.DiskFull {
		full = 1
	}
	ch <- prometheus.MustNewConstMetric(c.diskFull, prometheus.GaugeValue, full)
	ch <- prometheus.MustNewConstMetric(c.diskFullPauses, prometheus.CounterValue, float64(in.DiskFullPauses))
	ch <- prometheus.MustNewConstMetric(c.uploads, prometheus.GaugeValue, float64(in.Uploads))
	ch <- prometheus.MustNewConstMetric(c.uploadsRefused, prometheus.CounterValue, float64(in.UploadsRefused))
	ch <- prometheus.MustNewConstMetric(c.bodiesTooSlow, prometheus.CounterValue, float64(in.BodiesTooSlow))
	for source, n := range in.InboxWaiting {
		ch <- prometheus.MustNewConstMetric(c.inboxWaiting, prometheus.GaugeValue, float64(n), source)
	}
}
