package nativebench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"

	"github.com/batchd/batchd/engine/native"
)

// OfflineOptions configures BenchOffline: Requests completions of random
// token prompts (lengths uniform in [MinPrompt, MaxPrompt], drawn from
// Seed) generating Output tokens each (greedy, EOS ignored), all submitted
// at once: an offline batch, measured end to end through the whole engine.
type OfflineOptions struct {
	Device                         string // native.device ("": auto)
	Threads                        int
	Kernels                        string
	Requests, MinPrompt, MaxPrompt int
	Output                         int
	Seed                           uint64
	MaxSeqs, MaxBatchTokens        int   // 0: the defaults
	KVCacheBytes                   int64 // 0: the default
}

// OfflineRequest is one request of the synthetic batch.
type OfflineRequest struct {
	Prompt    []int32
	MaxTokens int
}

// OfflineBatch is the batch o describes for a vocabulary of vocab tokens:
// the same for the same options, so that a peer engine can run exactly
// these requests (WriteOfflineBatch).
func OfflineBatch(vocab int, o OfflineOptions) []OfflineRequest {
	r := rand.New(rand.NewPCG(o.Seed, 0x6261746368))
	lo, hi := max(o.MinPrompt, 1), max(o.MaxPrompt, o.MinPrompt, 1)
	reqs := make([]OfflineRequest, o.Requests)
	for i := range reqs {
		n := lo + r.IntN(hi-lo+1)
		p := make([]int32, n)
		for j := range p {
			p[j] = int32(3 + r.IntN(max(vocab-3, 1)))
		}
		reqs[i] = OfflineRequest{Prompt: p, MaxTokens: o.Output}
	}
	return reqs
}

// WriteOfflineBatch writes reqs as an OpenAI batch file (JSONL, one
// /v1/completions request a line with token-id prompts, greedy, EOS
// ignored): what batchd itself accepts and what a peer reads.
func WriteOfflineBatch(w io.Writer, reqs []OfflineRequest, model string) error {
	bw := bufio.NewWriter(w)
	for i, r := range reqs {
		line, err := json.Marshal(map[string]any{
			"custom_id": fmt.Sprintf("req-%d", i), "method": "POST", "url": "/v1/completions",
			"body": map[string]any{"model": model, "prompt": r.Prompt, "max_tokens": r.MaxTokens, "temperature": 0, "ignore_eos": true},
		})
		if err != nil {
			return err
		}
		bw.Write(line)
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// OfflineResult is what BenchOffline measured.
type OfflineResult struct {
	Model, Device              string
	Options                    OfflineOptions
	PromptTokens, OutputTokens int
	Seconds                    float64
	OutputTPS, TotalTPS        float64 // generated (and prompt+generated) tokens per second
	Cache                      native.CacheStats
}

// BenchOffline runs the batch o describes through the engine once, all
// requests submitted at the start, and times it to the last result.
func BenchOffline(path string, o OfflineOptions) (*OfflineResult, error) {
	if o.Requests < 1 || o.Output < 1 {
		return nil, fmt.Errorf("bench: offline: requests and output tokens must be at least 1")
	}
	vocab, err := vocabSize(path)
	if err != nil {
		return nil, err
	}
	reqs := OfflineBatch(vocab, o)
	cfg := engineConfig(path, o.Device, o.Threads, o.Kernels, o.KVCacheBytes, o.MaxSeqs, o.MaxBatchTokens)
	ctx := context.Background()
	e, err := openQuiet(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer e.Close(ctx)
	res := &OfflineResult{Model: path, Device: e.DeviceName(), Options: o}
	prompts := make([][]int32, len(reqs))
	for i, r := range reqs {
		prompts[i] = r.Prompt
		res.PromptTokens += len(r.Prompt)
		res.OutputTokens += r.MaxTokens
	}
	if res.Seconds, err = greedyAll(ctx, e, prompts, o.Output); err != nil {
		return nil, err
	}
	res.OutputTPS = float64(res.OutputTokens) / res.Seconds
	res.TotalTPS = float64(res.PromptTokens+res.OutputTokens) / res.Seconds
	res.Cache = e.CacheStats()
	return res, nil
}

func (r *OfflineResult) String() string {
	var b strings.Builder
	o := r.Options
	fmt.Fprintf(&b, "model %s (device %s)\n", r.Model, r.Device)
	fmt.Fprintf(&b, "  offline batch: %d requests, prompts %d..%d tokens (seed %d; %d in all), %d output tokens each\n",
		o.Requests, max(o.MinPrompt, 1), max(o.MaxPrompt, o.MinPrompt, 1), o.Seed, r.PromptTokens, o.Output)
	fmt.Fprintf(&b, "  %.1fs: %.1f output tok/s, %.1f tok/s prompt+output; %d preemptions, KV peak %d of %d blocks\n",
		r.Seconds, r.OutputTPS, r.TotalTPS, r.Cache.Preemptions, r.Cache.BlocksPeak, r.Cache.Blocks)
	return b.String()
}
