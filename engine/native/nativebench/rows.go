package nativebench

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batchd/batchd/engine/native"
)

// RowCostOptions configures RowCosts.
type RowCostOptions struct {
	Threads int
	Kernels string
	Context int   // positions each sequence holds before the timed passes
	Seqs    []int // sequence counts
	Rows    []int // rows per sequence per pass: 1 a decode step, 1+k a step verifying k drafts
	Passes  int   // timed passes per run; a figure is the best of 5 runs
}

// RowCostResult is what RowCosts measured: Pass[i][j] is one forward pass
// of Seqs[i] sequences with Rows[j] rows each.
type RowCostResult struct {
	Model, Kernels string
	Context        int
	Seqs, Rows     []int
	Pass           [][]time.Duration
}

// RowCosts times forward passes (logits for every row, as when verifying
// drafts) of sequences that hold o.Context positions, for each sequence
// count and rows per sequence: what a step of speculative decoding costs
// beside a decode step, the engine's compute alone. The timed passes
// rewrite the same positions, so the context stays o.Context.
func RowCosts(path string, o RowCostOptions) (*RowCostResult, error) {
	if len(o.Seqs) == 0 || len(o.Rows) == 0 {
		return nil, fmt.Errorf("bench: row costs need sequence counts and row counts")
	}
	if o.Context < 1 {
		return nil, fmt.Errorf("bench: row costs need a context of at least 1 position, got %d", o.Context)
	}
	for _, r := range o.Rows {
		if r < 1 {
			return nil, fmt.Errorf("bench: rows per sequence must be at least 1, got %d", r)
		}
	}
	pr, err := openProber(path, BenchOptions{Threads: o.Threads, Kernels: o.Kernels, PromptTokens: o.Context + slices.Max(o.Rows), Seqs: o.Seqs})
	if err != nil {
		return nil, err
	}
	defer pr.p.Close()
	passes := max(o.Passes, 1)
	res := &RowCostResult{Model: path, Kernels: pr.p.Kernels(), Context: o.Context, Seqs: o.Seqs, Rows: o.Rows}
	for _, n := range o.Seqs {
		seqs := pr.newSeqs(n, noAdapter)
		for i := range seqs {
			for done := 0; done < o.Context; done += 512 {
				pr.run(seqs[i:i+1], min(512, o.Context-done), i*97+done)
			}
		}
		line := make([]time.Duration, len(o.Rows))
		for j, r := range o.Rows {
			batch := make([]native.ProbeSeq, n)
			for i, c := range seqs {
				toks := make([]int32, r)
				for t := range toks {
					toks[t] = pr.tok(i*31 + t)
				}
				batch[i] = native.ProbeSeq{Table: c.table, Start: o.Context, Tokens: toks, AllLogits: true}
			}
			pr.p.Forward(batch) // untimed
			best := time.Duration(1<<63 - 1)
			for range 5 {
				start := time.Now()
				for range passes {
					pr.p.Forward(batch)
				}
				best = min(best, time.Since(start)/time.Duration(passes))
			}
			line[j] = best
		}
		res.Pass = append(res.Pass, line)
	}
	return res, nil
}

func (r *RowCostResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "model %s (kernels %s), forward passes after %d positions, logits for every row; best of 5 runs\n", r.Model, r.Kernels, r.Context)
	fmt.Fprintf(&b, "a row beyond the first of each sequence is what verifying one more draft costs\n")
	for i, n := range r.Seqs {
		for j, rows := range r.Rows {
			pass := r.Pass[i][j]
			fmt.Fprintf(&b, "  x%-3d seqs, %2d row(s) each: %9.1f µs a pass", n, rows, us(pass))
			if k := slices.Index(r.Rows, 1); k >= 0 && rows > 1 {
				// Beside a sequence's share of a decode step.
				row := float64(pass-r.Pass[i][k]) / float64(n*(rows-1))
				fmt.Fprintf(&b, ", %7.1f µs per extra row (%.2f of a sequence's share of a decode step)", row/1e3, row*float64(n)/float64(r.Pass[i][k]))
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
