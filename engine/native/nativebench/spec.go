package nativebench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/native/weights"
)

// SpecBenchOptions configures BenchSpec: each case (off, ngram, draft) runs
// Seqs concurrent requests of OutputTokens generated tokens each through
// the whole engine, Rounds times, the cases alternated round by round.
type SpecBenchOptions struct {
	Threads int
	Kernels string   // auto ("" too), amx, avx512, avx2, generic
	Cases   []string // native.SpecOff, SpecNgram, SpecDraft; the first is the baseline
	K       int      // native.speculative.k (0: the default)
	// NgramMin, NgramMax: native.speculative's n-gram bounds (0: defaults).
	NgramMin, NgramMax int
	Seqs               []int
	Rounds             int
	// Workload is repetitive (greedy; text prompts that a story model
	// continues with repeated phrases), openings (greedy; plain story
	// openings, less repetitive) or random (temperature 1,
	// a seed per request, token prompts: drafts mostly wrong on a
	// random-weight model). Both ignore EOS.
	Workload     string
	OutputTokens int
}

// Speculative bench workloads.
const (
	SpecWorkloadRepetitive = "repetitive"
	SpecWorkloadOpenings   = "openings"
	SpecWorkloadRandom     = "random"
)

// specBenchPrompts are prompts whose greedy continuations on stories260K
// repeat their own phrases (picked so, as issue 13 asks: of 24 candidate
// openings, the 8 whose outputs prompt lookup drafted best).
var specBenchPrompts = []string{
	"The ball was red. The ball was big. The ball",
	"He wanted to play with his toys. He wanted to play with his toys.",
	"\"Can I play with you?\" \"Yes, you can play with me.\" \"Can I play",
	"She was very happy. She was very happy. She",
	"The sun was hot. The sun was big. The sun",
	"Anna and Ben are friends. They like to play with their toys.",
	"They did not want to play with the box. They did not",
	"Tom and Sam were friends. Tom said to Sam, \"Sam, let's play.\" Sam said to Tom,",
}

// specOpeningPrompts are plain story openings, not picked for repetition:
// stories260K's continuations repeat names and phrases less.
var specOpeningPrompts = []string{
	"Once upon a time there was a little girl named Lily. Lily liked to play. Lily",
	"Tom and Sam were friends. Tom said to Sam, \"Sam, let's play.\" Sam said to Tom,",
	"The cat sat on the mat. The dog sat on the mat. The bird",
	"Once upon a time",
	"Once upon a time there was a boy named Tim. Tim had a red ball. Tim",
	"One day, Lily and her mom went to the park. Lily saw a big tree. Lily",
	"Ben liked to play with his toy car. Ben said, \"I love my car.\" Ben",
	"Once upon a time, there was a little dog named Max. Max",
}

// SpecBenchResult is what BenchSpec measured.
type SpecBenchResult struct {
	Model   string
	Kernels string
	Options SpecBenchOptions
	// TPS by sequence count: [case][round] completion tokens per second,
	// all sequences together, end to end (short prompts).
	TPS map[int][][]float64
	// Drafts and Accepted by sequence count: [case] draft tokens verified
	// and kept, over all rounds (the engine's CacheStats).
	Drafts, Accepted map[int][]int64
	// Tokens by sequence count: [case] completion tokens over all rounds.
	Tokens map[int][]int64
}

// BenchSpec loads the model at path once, as a model that drafts for
// itself when a case is draft (native.models[].draft naming it: every
// greedy draft is accepted, the verify path's ceiling), and measures
// completion tokens per second of each case through engine.Do: the real
// scheduler, sampler and verify path. A request's speculative field picks
// the case, so all cases share one engine and one machine state.
func BenchSpec(path string, o SpecBenchOptions) (*SpecBenchResult, error) {
	if len(o.Cases) == 0 || len(o.Seqs) == 0 {
		return nil, fmt.Errorf("bench: speculative: no cases or no sequence counts")
	}
	draft := false
	for _, c := range o.Cases {
		switch c {
		case native.SpecOff, native.SpecNgram:
		case native.SpecDraft:
			draft = true
		default:
			return nil, fmt.Errorf("bench: speculative case %q: must be off, ngram or draft", c)
		}
	}
	if o.Workload != SpecWorkloadRepetitive && o.Workload != SpecWorkloadOpenings && o.Workload != SpecWorkloadRandom {
		return nil, fmt.Errorf("bench: workload %q: must be %s, %s or %s", o.Workload, SpecWorkloadRepetitive, SpecWorkloadOpenings, SpecWorkloadRandom)
	}
	o.Rounds = max(o.Rounds, 1)
	if o.OutputTokens < 1 {
		o.OutputTokens = 128
	}
	w, err := weights.Load(path)
	if err != nil {
		return nil, err
	}
	vocab := w.Config.VocabSize
	w.Close()
	cfg := native.DefaultConfig()
	mc := native.ModelConfig{Name: "bench", Path: path}
	if draft {
		mc.Draft = "bench"
	}
	cfg.Models = []native.ModelConfig{mc}
	cfg.Threads, cfg.Kernels = o.Threads, o.Kernels
	cfg.Speculative.Method = native.SpecNgram
	if o.K > 0 {
		cfg.Speculative.K = o.K
	}
	if o.NgramMin > 0 {
		cfg.Speculative.NgramMin = o.NgramMin
	}
	if o.NgramMax > 0 {
		cfg.Speculative.NgramMax = o.NgramMax
	}
	ctx := context.Background()
	e, err := openQuiet(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer e.Close(ctx)
	res := &SpecBenchResult{Model: path, Kernels: e.Kernels(), Options: o,
		TPS: map[int][][]float64{}, Drafts: map[int][]int64{}, Accepted: map[int][]int64{}, Tokens: map[int][]int64{}}
	for _, n := range o.Seqs {
		res.TPS[n] = make([][]float64, len(o.Cases))
		res.Drafts[n] = make([]int64, len(o.Cases))
		res.Accepted[n] = make([]int64, len(o.Cases))
		res.Tokens[n] = make([]int64, len(o.Cases))
	}
	body := func(c string, i, round int, maxTokens int) []byte {
		b := map[string]any{"max_tokens": maxTokens, "ignore_eos": true}
		switch c {
		case native.SpecOff:
			b["speculative"] = false
		default:
			b["speculative"] = c
		}
		switch o.Workload {
		case SpecWorkloadRepetitive:
			b["prompt"] = specBenchPrompts[i%len(specBenchPrompts)]
		case SpecWorkloadOpenings:
			b["prompt"] = specOpeningPrompts[i%len(specOpeningPrompts)]
		default:
			// Token prompts: 32 ids, a different run for each sequence.
			p := make([]int32, 32)
			for j := range p {
				p[j] = int32(3 + ((i*31+j)*7919+13)%(vocab-3))
			}
			b["prompt"] = p
		}
		if o.Workload == SpecWorkloadRandom {
			b["temperature"], b["seed"] = 1.0, 1000*round+i
		} else {
			b["temperature"] = 0
		}
		raw, _ := json.Marshal(b)
		return raw
	}
	// run sends n requests of case c at once and returns their completion
	// tokens and the wall time.
	run := func(c string, n, round, maxTokens int) (int64, float64, error) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var tokens int64
		var first error
		start := time.Now()
		for i := range n {
			wg.Go(func() {
				resp, err := e.Do(ctx, &engine.Request{CustomID: fmt.Sprint(i), Endpoint: engine.EndpointCompletions, Body: body(c, i, round, maxTokens)})
				if err == nil && resp.StatusCode != 200 {
					err = fmt.Errorf("case %s: status %d: %s", c, resp.StatusCode, resp.Body)
				}
				var u struct {
					Usage struct {
						CompletionTokens int64 `json:"completion_tokens"`
					} `json:"usage"`
				}
				if err == nil {
					err = json.Unmarshal(resp.Body, &u)
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil && first == nil {
					first = err
				}
				tokens += u.Usage.CompletionTokens
			})
		}
		wg.Wait()
		return tokens, time.Since(start).Seconds(), first
	}
	// Warm-up, untimed: every case once.
	for _, c := range o.Cases {
		if _, _, err := run(c, 1, -1, 8); err != nil {
			return nil, err
		}
	}
	for r := range o.Rounds {
		for _, n := range o.Seqs {
			for k := range o.Cases {
				c := (k + r) % len(o.Cases) // a different case first each round
				before := e.CacheStats()
				toks, secs, err := run(o.Cases[c], n, r, o.OutputTokens)
				if err != nil {
					return nil, err
				}
				after := e.CacheStats()
				res.TPS[n][c] = append(res.TPS[n][c], float64(toks)/secs)
				res.Tokens[n][c] += toks
				res.Drafts[n][c] += after.SpecDraftTokens - before.SpecDraftTokens
				res.Accepted[n][c] += after.SpecAcceptedTokens - before.SpecAcceptedTokens
			}
		}
	}
	return res, nil
}

// Acceptance is the share of draft tokens kept for sequence count n and
// case c (0 when none were drafted).
func (r *SpecBenchResult) Acceptance(n, c int) float64 {
	if r.Drafts[n][c] == 0 {
		return 0
	}
	return float64(r.Accepted[n][c]) / float64(r.Drafts[n][c])
}

func (r *SpecBenchResult) String() string {
	var b strings.Builder
	o := r.Options
	fmt.Fprintf(&b, "model %s (kernels %s), workload %s, k %d, %d output tokens per request, %d rounds alternated\n",
		r.Model, r.Kernels, o.Workload, max(o.K, native.DefaultSpeculativeConfig().K), o.OutputTokens, o.Rounds)
	fmt.Fprintf(&b, "completion tok/s, all sequences, end to end (prompts <= 40 tokens): median (speed-up vs %s) [min-max of rounds]; acceptance = drafts kept / drafted\n", o.Cases[0])
	for _, n := range o.Seqs {
		base := median(r.TPS[n][0])
		for c, name := range o.Cases {
			xs := r.TPS[n][c]
			m := median(xs)
			fmt.Fprintf(&b, "  x%-3d %-6s %8.1f tok/s (%.2fx) [%.1f-%.1f]", n, name, m, m/base, slices.Min(xs), slices.Max(xs))
			if r.Drafts[n][c] > 0 {
				fmt.Fprintf(&b, "  acceptance %5.1f%% (%d of %d drafts; %.2f drafts kept per output token)",
					100*r.Acceptance(n, c), r.Accepted[n][c], r.Drafts[n][c], float64(r.Accepted[n][c])/float64(max(r.Tokens[n][c], 1)))
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}
