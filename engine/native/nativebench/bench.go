// Package nativebench measures the native engine: its forward pass alone
// (Bench) and a shared-prefix workload through the whole engine
// (BenchPrefix). `batchd bench engine` prints what it measures.
//
// It imports the native engine and never the pipeline or the daemon.
package nativebench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/batchd/batchd/engine/native"
)

// BenchOptions configures Bench.
type BenchOptions struct {
	Threads      int
	Kernels      string // CPU code path: auto ("" too), avx512, avx2, generic
	PromptTokens int    // prefill length
	DecodeSteps  int    // decode steps measured per run
	Seqs         []int  // sequence counts for aggregate decode
}

// BenchResult is what Bench measured.
type BenchResult struct {
	Model       string
	Kernels     string
	WeightBytes int64           // bytes of weights read per token
	PrefillTPS  float64         // prompt tokens per second, one sequence
	DecodeTPS   map[int]float64 // generated tokens per second, all sequences together, by sequence count
	PeakRSS     int64
}

// Bench loads a model and measures prefill and decode speed with the
// model's forward pass directly (no scheduler), so the numbers are the
// engine's compute alone.
func Bench(path string, o BenchOptions) (*BenchResult, error) {
	// Each sequence gets its own run of blocks in one pool, sized for the
	// longest measurement.
	maxSeqs := 1
	for _, n := range o.Seqs {
		maxSeqs = max(maxSeqs, n)
	}
	const bs = 32 // the engine's block size; checked below
	perSeq := (max(o.PromptTokens, 32+o.DecodeSteps) + 16 + bs - 1) / bs
	p, err := native.OpenComputeProbe(path, o.Threads, o.Kernels, maxSeqs*perSeq)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if p.BlockSize() != bs {
		return nil, fmt.Errorf("bench: the engine's block size is %d, not %d", p.BlockSize(), bs)
	}
	res := &BenchResult{Model: path, Kernels: p.Kernels(), WeightBytes: p.WeightBytes(), DecodeTPS: map[int]float64{}}
	vocab := p.VocabSize()
	tok := func(i int) int32 { return int32((i*7919 + 13) % vocab) }
	type benchSeq struct {
		table []int32
		n     int
	}
	newSeqs := func(n int) []*benchSeq {
		out := make([]*benchSeq, n)
		for i := range out {
			out[i] = &benchSeq{table: make([]int32, perSeq)}
			for j := range perSeq {
				out[i].table[j] = int32(i*perSeq + j)
			}
		}
		return out
	}
	var batch []native.ProbeSeq
	// run computes per tokens of each of seqs.
	run := func(seqs []*benchSeq, per int, first int) {
		batch = batch[:0]
		for si, c := range seqs {
			toks := make([]int32, per)
			for i := range per {
				toks[i] = tok(first + si*31 + i)
			}
			batch = append(batch, native.ProbeSeq{Table: c.table, Start: c.n, Tokens: toks})
		}
		p.Forward(batch)
		for _, c := range seqs {
			c.n += per
		}
	}
	run(newSeqs(1), 16, 0)

	one := newSeqs(1)
	start := time.Now()
	for done := 0; done < o.PromptTokens; {
		n := min(512, o.PromptTokens-done)
		run(one, n, done)
		done += n
	}
	res.PrefillTPS = float64(o.PromptTokens) / time.Since(start).Seconds()

	for _, n := range o.Seqs {
		seqs := newSeqs(n)
		for i := range seqs {
			run(seqs[i:i+1], 32, i*97) // a short prompt each, not timed
		}
		start := time.Now()
		for step := range o.DecodeSteps {
			run(seqs, 1, step)
		}
		res.DecodeTPS[n] = float64(n*o.DecodeSteps) / time.Since(start).Seconds()
	}
	res.PeakRSS = peakRSS()
	return res, nil
}

// peakRSS reads the process's peak resident set size (Linux; 0 elsewhere).
func peakRSS() int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func (r *BenchResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "model %s (kernels %s, %.0f MB of weights per token)\n", r.Model, r.Kernels, float64(r.WeightBytes)/1e6)
	fmt.Fprintf(&b, "  prefill:           %8.1f tok/s\n", r.PrefillTPS)
	for _, n := range sortedKeys(r.DecodeTPS) {
		fmt.Fprintf(&b, "  decode x%-3d seqs:  %8.1f tok/s aggregate\n", n, r.DecodeTPS[n])
	}
	fmt.Fprintf(&b, "  peak RSS:          %8.0f MB\n", float64(r.PeakRSS)/(1<<20))
	return b.String()
}

func sortedKeys(m map[int]float64) []int {
	var k []int
	for x := range m {
		k = append(k, x)
	}
	for i := 1; i < len(k); i++ {
		for j := i; j > 0 && k[j] < k[j-1]; j-- {
			k[j], k[j-1] = k[j-1], k[j]
		}
	}
	return k
}
