package nativebench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/engine"
)

// OnlineBenchOptions configures BenchOnline: a large batch keeps the
// engine's window full of requests of Prompt random tokens and Output
// generated tokens, while Requests online requests of OnlinePrompt tokens
// and OnlineOutput generated tokens run one after another.
type OnlineBenchOptions struct {
	Threads                    int
	Kernels                    string
	Requests                   int
	Prompt, Output             int
	OnlinePrompt, OnlineOutput int
	MaxSeqs, MaxBatchTokens    int   // 0: the defaults
	KVCacheBytes               int64 // 0: the default
}

// OnlineBenchRun is one pass: online requests at online priority, or at
// the batch's.
type OnlineBenchRun struct {
	Priority       bool
	P50, P99, Max  time.Duration
	BatchDone      int     // batch requests answered while the online ones ran
	BatchOutputTPS float64 // their generated tokens per second
	OnlineSeconds  float64 // how long the online requests took in all
	Window         int     // the batch requests the engine held at once
}

// OnlineBenchResult compares online latency under a batch with and
// without online priority.
type OnlineBenchResult struct {
	Model   string
	Kernels string
	Options OnlineBenchOptions
	Runs    []OnlineBenchRun
}

// BenchOnline measures the latency of online requests while a batch
// fills the engine, twice: with the online requests at
// engine.PriorityOnline (what the daemon gives them), then at the batch's
// priority (api.online_priority: false).
func BenchOnline(path string, o OnlineBenchOptions) (*OnlineBenchResult, error) {
	vocab, err := vocabSize(path)
	if err != nil {
		return nil, err
	}
	res := &OnlineBenchResult{Model: path, Options: o}
	for _, prio := range []bool{true, false} {
		run, kernels, err := benchOnlineOnce(path, o, vocab, prio)
		if err != nil {
			return nil, err
		}
		res.Kernels = kernels
		res.Runs = append(res.Runs, run)
	}
	return res, nil
}

func benchOnlineOnce(path string, o OnlineBenchOptions, vocab int, prio bool) (OnlineBenchRun, string, error) {
	cfg := engineConfig(path, "", o.Threads, o.Kernels, o.KVCacheBytes, o.MaxSeqs, o.MaxBatchTokens)
	e, err := openQuiet(context.Background(), cfg)
	if err != nil {
		return OnlineBenchRun{}, "", err
	}
	defer e.Close(context.Background())
	tokens := func(seed, n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(3 + (seed*1_000_003+i*7919)%(vocab-3))
		}
		return p
	}
	body := func(prompt []int32, maxTokens int) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTokens, "ignore_eos": true, "temperature": 0})
		return b
	}
	// The batch: as the pipeline feeds a queue engine, Window requests
	// outstanding, a new one as each is answered.
	ctx, stop := context.WithCancel(context.Background())
	window := e.Window()
	slots := make(chan struct{}, window)
	var outstanding sync.WaitGroup
	var batchDone atomic.Int64
	var feedErr atomic.Value
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		for i := 0; ; i++ {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			outstanding.Add(1)
			req := &engine.Request{CustomID: fmt.Sprint("batch-", i), Endpoint: engine.EndpointCompletions, Body: body(tokens(i, o.Prompt), o.Output)}
			e.Submit(ctx, req, func(resp *engine.Response, err error) {
				defer outstanding.Done()
				<-slots
				switch {
				case err == nil && resp.StatusCode == 200:
					batchDone.Add(1)
				case err == nil:
					feedErr.Store(fmt.Errorf("batch request: status %d: %s", resp.StatusCode, resp.Body))
				case ctx.Err() == nil:
					feedErr.Store(fmt.Errorf("batch request: %w", err))
				}
			})
		}
	}()
	p := engine.PriorityNormal
	if prio {
		p = engine.PriorityOnline
	}
	lat := make([]time.Duration, 0, o.Requests)
	start := time.Now()
	before := batchDone.Load()
	for i := range o.Requests {
		req := &engine.Request{CustomID: fmt.Sprint("online-", i), Endpoint: engine.EndpointCompletions,
			Body: body(tokens(1<<20+i, o.OnlinePrompt), o.OnlineOutput), Priority: p}
		t0 := time.Now()
		resp, err := e.Do(context.Background(), req)
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("status %d: %s", resp.StatusCode, resp.Body)
		}
		if err != nil {
			stop()
			return OnlineBenchRun{}, "", fmt.Errorf("online request %d: %w", i, err)
		}
		lat = append(lat, time.Since(t0))
	}
	secs := time.Since(start).Seconds()
	done := int(batchDone.Load() - before)
	stop()
	<-fed
	outstanding.Wait()
	if err, _ := feedErr.Load().(error); err != nil {
		return OnlineBenchRun{}, "", err
	}
	slices.Sort(lat)
	q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
	return OnlineBenchRun{Priority: prio, P50: q(0.50), P99: q(0.99), Max: lat[len(lat)-1], BatchDone: done,
		BatchOutputTPS: float64(done*o.Output) / secs, OnlineSeconds: secs, Window: window}, e.Kernels(), nil
}

func (r *OnlineBenchResult) String() string {
	var b strings.Builder
	o := r.Options
	fmt.Fprintf(&b, "model %s (kernels %s)\n", r.Model, r.Kernels)
	fmt.Fprintf(&b, "  workload: a batch keeping the engine's window full (%d-token prompts, %d output tokens each); %d online requests one after another (%d-token prompts, %d output tokens)\n",
		o.Prompt, o.Output, o.Requests, o.OnlinePrompt, o.OnlineOutput)
	for _, run := range r.Runs {
		name := "online priority on "
		if !run.Priority {
			name = "online priority off"
		}
		fmt.Fprintf(&b, "  %s: online latency p50 %s, p99 %s, max %s; batch %d requests (%.1f output tok/s) meanwhile, window %d\n",
			name, run.P50.Round(time.Millisecond), run.P99.Round(time.Millisecond), run.Max.Round(time.Millisecond),
			run.BatchDone, run.BatchOutputTPS, run.Window)
	}
	return b.String()
}
