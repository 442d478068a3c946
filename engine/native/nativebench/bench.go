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
	Device       string // native.device ("": auto)
	Threads      int
	Kernels      string // CPU code path: auto ("" too), amx, avx512, avx2, generic
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
	pr, err := openProber(path, o)
	if err != nil {
		return nil, err
	}
	defer pr.p.Close()
	res := &BenchResult{Model: path, Kernels: pr.p.Kernels(), WeightBytes: pr.p.WeightBytes(), DecodeTPS: map[int]float64{}}
	res.PrefillTPS = pr.prefill(o.PromptTokens, "")
	for _, n := range o.Seqs {
		res.DecodeTPS[n] = pr.decode(n, o.DecodeSteps, noAdapter)
	}
	res.PeakRSS = peakRSS()
	return res, nil
}

// prober lays out sequences for a ComputeProbe and times passes over them.
type prober struct {
	p      *native.ComputeProbe
	perSeq int // KV blocks of each sequence
	vocab  int
	batch  []native.ProbeSeq
}

// benchSeq is one sequence of a measurement: its blocks and length.
type benchSeq struct {
	table   []int32
	n       int
	adapter string
}

func noAdapter(int) string { return "" }

// openProber loads the model with a KV pool in which each of the most
// sequences o measures gets its own run of blocks, sized for the longest
// measurement, and runs one untimed pass.
func openProber(path string, o BenchOptions) (*prober, error) {
	maxSeqs := 1
	for _, n := range o.Seqs {
		maxSeqs = max(maxSeqs, n)
	}
	const bs = 32 // the engine's block size; checked below
	perSeq := (max(o.PromptTokens, 32+o.DecodeSteps) + 16 + bs - 1) / bs
	p, err := native.OpenComputeProbe(path, o.Device, o.Threads, o.Kernels, maxSeqs*perSeq)
	if err != nil {
		return nil, err
	}
	if p.BlockSize() != bs {
		p.Close()
		return nil, fmt.Errorf("bench: the engine's block size is %d, not %d", p.BlockSize(), bs)
	}
	pr := &prober{p: p, perSeq: perSeq, vocab: p.VocabSize()}
	pr.run(pr.newSeqs(1, noAdapter), 16, 0)
	return pr, nil
}

func (pr *prober) tok(i int) int32 { return int32((i*7919 + 13) % pr.vocab) }

// newSeqs returns n empty sequences, sequence i with adapter(i).
func (pr *prober) newSeqs(n int, adapter func(int) string) []*benchSeq {
	out := make([]*benchSeq, n)
	for i := range out {
		out[i] = &benchSeq{table: make([]int32, pr.perSeq), adapter: adapter(i)}
		for j := range pr.perSeq {
			out[i].table[j] = int32(i*pr.perSeq + j)
		}
	}
	return out
}

// run computes per tokens of each of seqs in one pass.
func (pr *prober) run(seqs []*benchSeq, per int, first int) {
	pr.batch = pr.batch[:0]
	for si, c := range seqs {
		toks := make([]int32, per)
		for i := range per {
			toks[i] = pr.tok(first + si*31 + i)
		}
		pr.batch = append(pr.batch, native.ProbeSeq{Table: c.table, Start: c.n, Tokens: toks, Adapter: c.adapter})
	}
	pr.p.Forward(pr.batch)
	for _, c := range seqs {
		c.n += per
	}
}

// prefill times a prompt of tokens tokens, in chunks of 512, of one
// sequence with adapter, and returns tokens per second.
func (pr *prober) prefill(tokens int, adapter string) float64 {
	one := pr.newSeqs(1, func(int) string { return adapter })
	start := time.Now()
	for done := 0; done < tokens; {
		n := min(512, tokens-done)
		pr.run(one, n, done)
		done += n
	}
	return float64(tokens) / time.Since(start).Seconds()
}

// decode gives n sequences a short untimed prompt each, then times steps
// decode steps of all of them together and returns their tokens per
// second.
func (pr *prober) decode(n, steps int, adapter func(int) string) float64 {
	seqs := pr.newSeqs(n, adapter)
	for i := range seqs {
		pr.run(seqs[i:i+1], 32, i*97)
	}
	start := time.Now()
	for step := range steps {
		pr.run(seqs, 1, step)
	}
	return float64(n*steps) / time.Since(start).Seconds()
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
