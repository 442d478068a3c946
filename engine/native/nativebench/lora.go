package nativebench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/native/weights"
)

// LoRABenchOptions configures BenchLoRA: Bench's figures, each measured
// with no adapter, with one rank-Rank adapter on every projection for every
// sequence, and with two such adapters alternating over the sequences of
// one step, Rounds times in turn.
type LoRABenchOptions struct {
	BenchOptions
	Rank   int
	Rounds int
}

// The cases BenchLoRA measures, in LoRABenchResult's order.
var loraCases = []string{"base", "1 adapter", "2 adapters mixed"}

// LoRABenchResult is what BenchLoRA measured: per case (loraCases' order),
// each round's figure.
type LoRABenchResult struct {
	Model   string
	Kernels string
	Options LoRABenchOptions
	Prefill [][]float64         // [case][round] prompt tokens per second, one sequence
	Decode  map[int][][]float64 // by sequence count: [case][round] aggregate tokens per second
}

// BenchLoRA writes two random rank-o.Rank adapters on all seven projections
// of the model at path (alpha = rank) to a temporary directory and
// measures the forward pass with and without them, alternating the cases
// round by round so that all see the same machine.
func BenchLoRA(path string, o LoRABenchOptions) (*LoRABenchResult, error) {
	if o.Rank < 1 {
		return nil, fmt.Errorf("bench: LoRA rank %d: must be at least 1", o.Rank)
	}
	o.Rounds = max(o.Rounds, 1)
	dir, err := os.MkdirTemp("", "batchd-lora-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	files, err := writeBenchAdapters(path, dir, o.Rank, 2)
	if err != nil {
		return nil, err
	}
	pr, err := openProber(path, o.BenchOptions)
	if err != nil {
		return nil, err
	}
	defer pr.p.Close()
	for i, f := range files {
		if err := pr.p.LoadAdapter(strconv.Itoa(i), f); err != nil {
			return nil, err
		}
	}
	adapters := []func(int) string{
		noAdapter,
		func(int) string { return "0" },
		func(i int) string { return strconv.Itoa(i % 2) },
	}
	res := &LoRABenchResult{Model: path, Kernels: pr.p.Kernels(), Options: o, Prefill: make([][]float64, len(loraCases)), Decode: map[int][][]float64{}}
	for _, n := range o.Seqs {
		res.Decode[n] = make([][]float64, len(loraCases))
	}
	for r := range o.Rounds {
		for k := range loraCases {
			c := (k + r) % len(loraCases) // a different case first each round
			if c < 2 {                    // one sequence has one adapter
				res.Prefill[c] = append(res.Prefill[c], pr.prefill(o.PromptTokens, adapters[c](0)))
			}
			for _, n := range o.Seqs {
				if c == 2 && n < 2 {
					continue
				}
				res.Decode[n][c] = append(res.Decode[n][c], pr.decode(n, o.DecodeSteps, adapters[c]))
			}
		}
	}
	return res, nil
}

// writeBenchAdapters writes n random rank-r adapters for the model at path
// into dir as .safetensors files and returns their paths.
func writeBenchAdapters(path, dir string, r, n int) ([]string, error) {
	w, err := weights.Load(path)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	rng := demomodel.Rand(7)
	var files []string
	for a := range n {
		ts := map[string]weights.SafeTensor{}
		for li := range w.Config.Layers {
			for _, t := range weights.LoRATargets {
				m := w.Matrices[weights.BlockName(li, t.Suffix)]
				if m == nil {
					return nil, fmt.Errorf("bench: %s has no %s", path, weights.BlockName(li, t.Suffix))
				}
				block := "self_attn"
				if strings.HasPrefix(t.Suffix, "ffn_") {
					block = "mlp"
				}
				name := fmt.Sprintf("base_model.model.model.layers.%d.%s.%s.lora_", li, block, t.Module)
				ts[name+"A.weight"] = weights.SafeTensor{DType: "F32", Shape: []int{r, m.Cols}, Data: rng.NormalF32(r*m.Cols, 0.05)}
				ts[name+"B.weight"] = weights.SafeTensor{DType: "F32", Shape: []int{m.Rows, r}, Data: rng.NormalF32(m.Rows*r, 0.01)}
			}
		}
		f := filepath.Join(dir, fmt.Sprintf("adapter%d.safetensors", a))
		if err := weights.WriteSafetensors(f, ts); err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// median of xs (0 when empty).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// figure formats one case's rounds: the median, its cost against the
// base's median, and the rounds' range.
func figure(xs []float64, base float64, isBase bool) string {
	if len(xs) == 0 {
		return "-"
	}
	m := median(xs)
	s := fmt.Sprintf("%.1f", m)
	if !isBase && base > 0 {
		s += fmt.Sprintf(" (%+.1f%%)", 100*(m/base-1))
	}
	if len(xs) > 1 {
		s += fmt.Sprintf(" [%.1f-%.1f]", slices.Min(xs), slices.Max(xs))
	}
	return s
}

func (r *LoRABenchResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "model %s (kernels %s), LoRA rank %d on all 7 projections, %d rounds alternated\n", r.Model, r.Kernels, r.Options.Rank, r.Options.Rounds)
	fmt.Fprintf(&b, "tok/s: median (change vs base) [min-max of rounds]\n")
	fmt.Fprintf(&b, "  %-18s", "")
	for _, c := range loraCases {
		fmt.Fprintf(&b, " | %-32s", c)
	}
	b.WriteString("\n")
	row := func(label string, xs [][]float64) {
		fmt.Fprintf(&b, "  %-18s", label)
		for c := range loraCases {
			fmt.Fprintf(&b, " | %-32s", figure(xs[c], median(xs[0]), c == 0))
		}
		b.WriteString("\n")
	}
	row(fmt.Sprintf("prefill %d:", r.Options.PromptTokens), r.Prefill)
	for _, n := range r.Options.Seqs {
		row(fmt.Sprintf("decode x%d seqs:", n), r.Decode[n])
	}
	return b.String()
}
