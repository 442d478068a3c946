package nativebench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/native/weights"
)

// PrefixBenchOptions configures BenchPrefix: Requests completions that share
// a SystemTokens-token prefix, each with its own UserTokens-token suffix and
// OutputTokens generated tokens (greedy, EOS ignored).
type PrefixBenchOptions struct {
	Threads                                          int
	Kernels                                          string // auto ("" too), amx, avx512, avx2, generic
	Requests, SystemTokens, UserTokens, OutputTokens int
	MaxSeqs, MaxBatchTokens                          int   // 0: the defaults
	KVCacheBytes                                     int64 // 0: the default
}

// PrefixBenchRun is one pass of the workload.
type PrefixBenchRun struct {
	PrefixCache bool
	Seconds     float64
	OutputTPS   float64 // generated tokens per second, end to end
	Cache       native.CacheStats
}

// PrefixBenchResult compares the workload with and without prefix caching.
type PrefixBenchResult struct {
	Model   string
	Kernels string
	Options PrefixBenchOptions
	Runs    []PrefixBenchRun // with the cache, then without
}

// BenchPrefix runs a shared-system-prompt workload through the whole engine
// (scheduler, paged KV cache, sampler) twice: with prefix caching and
// without.
func BenchPrefix(path string, o PrefixBenchOptions) (*PrefixBenchResult, error) {
	vocab, err := vocabSize(path)
	if err != nil {
		return nil, err
	}
	res := &PrefixBenchResult{Model: path, Options: o}
	for _, cache := range []bool{true, false} {
		cfg := engineConfig(path, "", o.Threads, o.Kernels, o.KVCacheBytes, o.MaxSeqs, o.MaxBatchTokens)
		cfg.DisablePrefixCache = !cache
		ctx := context.Background()
		e, err := openQuiet(ctx, cfg)
		if err != nil {
			return nil, err
		}
		res.Kernels = e.Kernels()
		tok := func(i int) int32 { return int32(3 + (i*7919+13)%(vocab-3)) }
		system := make([]int32, o.SystemTokens)
		for i := range system {
			system[i] = tok(i)
		}
		prompts := make([][]int32, o.Requests)
		for r := range prompts {
			prompt := append([]int32(nil), system...)
			for i := range o.UserTokens {
				prompt = append(prompt, tok(1_000_003*(r+1)+i))
			}
			prompts[r] = prompt
		}
		secs, err := greedyAll(ctx, e, prompts, o.OutputTokens)
		run := PrefixBenchRun{PrefixCache: cache, Seconds: secs, OutputTPS: float64(o.Requests*o.OutputTokens) / secs, Cache: e.CacheStats()}
		e.Close(ctx)
		if err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, run)
	}
	return res, nil
}

func (r *PrefixBenchResult) String() string {
	var b strings.Builder
	o := r.Options
	fmt.Fprintf(&b, "model %s (kernels %s)\n", r.Model, r.Kernels)
	fmt.Fprintf(&b, "  workload: %d requests, %d-token shared prefix + %d-token suffix, %d output tokens each\n",
		o.Requests, o.SystemTokens, o.UserTokens, o.OutputTokens)
	for _, run := range r.Runs {
		c := run.Cache
		name := "prefix cache off"
		if run.PrefixCache {
			name = "prefix cache on "
		}
		fmt.Fprintf(&b, "  %s: %6.1fs, %7.1f output tok/s, hit rate %5.1f%%, prefill computed %d of %d prompt tokens, "+
			"%d preemptions, KV peak %.1f of %.1f MB (%d of %d blocks of %d)\n",
			name, run.Seconds, run.OutputTPS, 100*c.HitRate(), c.PrefillTokens, c.PromptTokens, c.Preemptions,
			float64(c.PeakBytes)/1e6, float64(c.BudgetBytes)/1e6, c.BlocksPeak, c.Blocks, c.BlockSize)
	}
	if len(r.Runs) == 2 && r.Runs[0].Cache.PrefillTokens > 0 {
		fmt.Fprintf(&b, "  prefill tokens computed: %.2fx fewer with the cache; end to end %.2fx faster\n",
			float64(r.Runs[1].Cache.PrefillTokens)/float64(r.Runs[0].Cache.PrefillTokens), r.Runs[1].Seconds/r.Runs[0].Seconds)
	}
	return b.String()
}

// vocabSize is the vocabulary size of the model at path.
func vocabSize(path string) (int, error) {
	w, err := weights.Load(path)
	if err != nil {
		return 0, err
	}
	defer w.Close()
	return w.Config.VocabSize, nil
}

// openQuiet opens an engine on cfg whose logs go nowhere: a benchmark
// prints its own figures.
func openQuiet(ctx context.Context, cfg native.Config) (*native.Engine, error) {
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := native.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := e.Open(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// engineConfig is the engine configuration of a benchmark: one model,
// the defaults where a size is 0.
func engineConfig(path, device string, threads int, kernels string, kvBytes int64, maxSeqs, maxBatchTokens int) native.Config {
	cfg := native.DefaultConfig()
	cfg.Models = []native.ModelConfig{{Path: path}}
	cfg.Device, cfg.Threads, cfg.Kernels, cfg.KVCacheBytes = device, threads, kernels, kvBytes
	if maxSeqs > 0 {
		cfg.MaxSeqs = maxSeqs
	}
	if maxBatchTokens > 0 {
		cfg.MaxBatchTokens = maxBatchTokens
	}
	return cfg
}

// greedyAll submits a completion of maxTokens greedy tokens (EOS ignored)
// for every prompt at once, waits for them all and returns the seconds
// that took; the first failure, if any, is the error.
func greedyAll(ctx context.Context, e *native.Engine, prompts [][]int32, maxTokens int) (float64, error) {
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(prompts))
	for i, p := range prompts {
		body, _ := json.Marshal(map[string]any{"prompt": p, "max_tokens": maxTokens, "ignore_eos": true, "temperature": 0})
		wg.Go(func() {
			resp, err := e.Do(ctx, &engine.Request{CustomID: fmt.Sprint(i), Endpoint: engine.EndpointCompletions, Body: body})
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("request %d: status %d: %s", i, resp.StatusCode, resp.Body)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	select {
	case err := <-errs:
		return secs, err
	default:
		return secs, nil
	}
}
