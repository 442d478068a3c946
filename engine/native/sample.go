package native

import (
	"math"
	"sort"
)

// sampling holds one sequence's sampling parameters.
type sampling struct {
	temperature float64 // 0: greedy
	topP        float64 // 1: off
	topK        int     // 0: off
	seed        uint64
}

// counterUniform returns a uniform draw in [0,1) that depends only on the
// request's seed and the position being sampled: the same seed gives the
// same draws whatever else runs in the batch, and after a restart.
func counterUniform(seed uint64, pos int) float64 {
	x := seed ^ (uint64(pos)+1)*0x9e3779b97f4a7c15
	// splitmix64 finalizer, twice, for a well-mixed 64-bit value.
	for range 2 {
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		x ^= x >> 31
	}
	return float64(x>>11) / (1 << 53)
}

// sample picks the next token from one row of logits. scratch is reused
// between calls. Greedy picks the first maximum, so ties break the same way
// everywhere.
func sample(logits []float32, p sampling, pos int, scratch *[]candidate) int32 {
	if p.temperature <= 0 {
		return int32(argmax(logits))
	}
	if p.topK <= 0 && (p.topP <= 0 || p.topP >= 1) {
		// Plain temperature: no ordering needed, draw over ids in order.
		maxL := logits[argmax(logits)]
		var sum float64
		for _, l := range logits {
			sum += math.Exp(float64(l-maxL) / p.temperature)
		}
		u := counterUniform(p.seed, pos) * sum
		for i, l := range logits {
			u -= math.Exp(float64(l-maxL) / p.temperature)
			if u < 0 {
				return int32(i)
			}
		}
		return int32(len(logits) - 1)
	}
	cands := (*scratch)[:0]
	for i, l := range logits {
		cands = append(cands, candidate{id: int32(i), logit: l})
	}
	*scratch = cands
	// Highest logit first; ties by id so the order is total.
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].logit != cands[j].logit {
			return cands[i].logit > cands[j].logit
		}
		return cands[i].id < cands[j].id
	})
	if p.topK > 0 && p.topK < len(cands) {
		cands = cands[:p.topK]
	}
	maxL := float64(cands[0].logit)
	var sum float64
	probs := make([]float64, len(cands))
	for i, c := range cands {
		probs[i] = math.Exp((float64(c.logit) - maxL) / p.temperature)
		sum += probs[i]
	}
	n := len(cands)
	if p.topP > 0 && p.topP < 1 {
		var acc float64
		for i := range cands {
			acc += probs[i] / sum
			if acc >= p.topP {
				n = i + 1
				break
			}
		}
		sum = 0
		for i := range n {
			sum += probs[i]
		}
	}
	u := counterUniform(p.seed, pos) * sum
	for i := range n {
		u -= probs[i]
		if u < 0 {
			return cands[i].id
		}
	}
	return cands[n-1].id
}

type candidate struct {
	id    int32
	logit float32
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
