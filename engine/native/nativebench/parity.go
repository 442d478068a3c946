package nativebench

import (
	"fmt"
	"math"
	"strings"

	"github.com/batchd/batchd/engine/native"
)

// ParityOptions configures Parity: a Prompt-token prompt, then Tokens
// greedy steps, on two devices.
type ParityOptions struct {
	Devices        [2]string // native.device names; the first leads
	Threads        int
	Kernels        string
	Prompt, Tokens int
}

// ParityResult compares two devices' logits over one greedy continuation:
// the first device chooses each token (its argmax) and both compute the
// logits of the same sequence, so a step where the second device's argmax
// differs is a token it would have chosen differently.
type ParityResult struct {
	Model      string
	Names      [2]string // the devices' descriptions
	Steps      int       // logit rows compared (the prompt's last, then each generated token's)
	MinCosine  float64   // of the logit rows
	MaxRelDiff float64   // max |a−b| / max |a| over a row, worst row
	Mismatches int       // steps whose argmaxes differ
	FirstDiff  int       // the first such step, -1 if none
	Tokens     []int32   // the first device's greedy tokens
}

// Equal is whether the two devices choose the same greedy tokens.
func (r *ParityResult) Equal() bool { return r.Mismatches == 0 }

// Parity loads the model at path on both devices and compares them.
func Parity(path string, o ParityOptions) (*ParityResult, error) {
	if o.Prompt < 1 || o.Tokens < 0 {
		return nil, fmt.Errorf("bench: parity: a prompt of at least one token and no negative token count")
	}
	const bs = 32
	blocks := (o.Prompt + o.Tokens + bs) / bs
	var probes [2]*native.ComputeProbe
	res := &ParityResult{Model: path, MinCosine: 1, FirstDiff: -1}
	for i, dev := range o.Devices {
		p, err := native.OpenComputeProbe(path, dev, o.Threads, o.Kernels, blocks)
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", dev, err)
		}
		defer p.Close()
		if p.BlockSize() != bs {
			return nil, fmt.Errorf("bench: the engine's block size is %d, not %d", p.BlockSize(), bs)
		}
		probes[i] = p
		res.Names[i] = p.Kernels()
	}
	vocab := probes[0].VocabSize()
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32(i)
	}
	toks := make([]int32, o.Prompt)
	for i := range toks {
		toks[i] = int32(3 + (i*7919+13)%(vocab-3))
	}
	start := 0
	for step := 0; step <= o.Tokens; step++ {
		var rows [2][]float32
		for i, p := range probes {
			l := p.Forward([]native.ProbeSeq{{Table: table, Start: start, Tokens: toks}})
			rows[i] = append([]float32(nil), l[:vocab]...)
		}
		a, b := rows[0], rows[1]
		var dot, na, nb, maxA, maxD float64
		for j := range a {
			x, y := float64(a[j]), float64(b[j])
			dot += x * y
			na += x * x
			nb += y * y
			maxA = max(maxA, math.Abs(x))
			maxD = max(maxD, math.Abs(x-y))
		}
		cos := dot / math.Sqrt(na*nb)
		if na == 0 || nb == 0 || math.IsNaN(cos) {
			cos = 0
		}
		res.MinCosine = min(res.MinCosine, cos)
		if maxA > 0 {
			res.MaxRelDiff = max(res.MaxRelDiff, maxD/maxA)
		}
		ta, tb := argmax(a), argmax(b)
		if ta != tb {
			res.Mismatches++
			if res.FirstDiff < 0 {
				res.FirstDiff = step
			}
		}
		res.Steps++
		start += len(toks)
		toks = []int32{ta}
		if step < o.Tokens {
			res.Tokens = append(res.Tokens, ta)
		}
	}
	return res, nil
}

// argmax is the first maximum.
func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

func (r *ParityResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "model %s: %s vs %s, %d logit rows (prompt, then greedy)\n", r.Model, r.Names[0], r.Names[1], r.Steps)
	verdict := "equal"
	if !r.Equal() {
		verdict = fmt.Sprintf("DIFFERENT at %d of %d steps (first at step %d)", r.Mismatches, r.Steps, r.FirstDiff)
	}
	fmt.Fprintf(&b, "  greedy tokens: %s\n  logits: min cosine %.7f, max |diff|/max|logit| %.2e\n", verdict, r.MinCosine, r.MaxRelDiff)
	return b.String()
}
