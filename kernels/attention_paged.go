package kernels

import (
	"fmt"
	"math"
	"math/bits"
)

// PagedAttention is Attention over a paged KV cache. k and v are one
// layer's block pools, laid out [block][blockSize][nKVHeads][headDim] (each
// block a small contiguous cache); blockSize must be a power of two, at
// least 4. blocks is the sequence's block table: position p
// lives in block blocks[p/blockSize] at row p%blockSize. The other arguments are as for
// Attention, and so is the arithmetic: each position's score, the softmax
// and the position-ordered sum of values are the same operations in the same
// order, so the result is bit-identical to
// Attention over the same rows stored contiguously (and therefore
// independent of chunking and of which blocks hold the rows).
func (c *CPU) PagedAttention(out, q, k, v []float32, blocks []int32, blockSize, nTok, start, nHeads, nKVHeads, headDim int, scale float32) {
	c.PagedAttentionOpts(out, q, k, v, blocks, blockSize, nTok, start, nHeads, nKVHeads, headDim, scale, AttnOpts{})
}

// AttnOpts are the attention variants of the families beyond Llama's. The
// zero value is plain causal attention.
type AttnOpts struct {
	// Window > 0 is sliding-window attention: the query at position p
	// attends to positions max(0, p-Window+1)..p, Window of them (Mistral,
	// Gemma's local layers, gpt-oss), as llama.cpp and transformers mask.
	Window int
	// SoftCap > 0 caps each scaled score s to SoftCap·tanh(s/SoftCap)
	// before the softmax (Gemma 2).
	SoftCap float32
	// Sinks, when not nil, are attention sinks (gpt-oss): one logit per
	// query head that joins the head's softmax as one more score (its
	// max and its sum) but adds no value, so a head may attend to
	// nothing. In host memory, len nHeads; a device copies them.
	Sinks []float32
}

// Plain reports whether o asks for plain causal attention.
func (o AttnOpts) Plain() bool { return o.Window == 0 && o.SoftCap == 0 && o.Sinks == nil }

// PagedAttentionOpts is PagedAttention with the variants o asks for. A
// windowed query's result is bit-identical to PagedAttention of the same
// query over just its window's rows (stored from position 0); a sink is
// a score that no row has (the softmax over the scores and the sink, the
// rows weighted by their part of it).
func (c *CPU) PagedAttentionOpts(out, q, k, v []float32, blocks []int32, blockSize, nTok, start, nHeads, nKVHeads, headDim int, scale float32, o AttnOpts) {
	if o.Window < 0 || !(o.SoftCap >= 0) || math.IsInf(float64(o.SoftCap), 0) || (o.Sinks != nil && len(o.Sinks) != nHeads) {
		panic(fmt.Sprintf("kernels: PagedAttention window %d, soft cap %g, %d sinks for %d heads", o.Window, o.SoftCap, len(o.Sinks), nHeads))
	}
	if nTok < 0 || start < 0 || nHeads <= 0 || nKVHeads <= 0 || headDim <= 0 || nHeads%nKVHeads != 0 || blockSize < 4 || blockSize&(blockSize-1) != 0 {
		panic(fmt.Sprintf("kernels: PagedAttention nTok=%d start=%d heads=%d kvHeads=%d headDim=%d blockSize=%d", nTok, start, nHeads, nKVHeads, headDim, blockSize))
	}
	n := start + nTok
	qn, stride := nTok*nHeads*headDim, nKVHeads*headDim
	nb := (n + blockSize - 1) / blockSize
	if len(q) < qn || len(out) < qn || len(blocks) < nb || len(k) != len(v) || len(k)%(blockSize*stride) != 0 {
		panic(fmt.Sprintf("kernels: PagedAttention needs len(q), len(out) >= %d, %d blocks and k, v of whole blocks; have %d, %d, %d, %d, %d",
			qn, nb, len(q), len(out), len(blocks), len(k), len(v)))
	}
	pool := int32(len(k) / (blockSize * stride))
	for _, b := range blocks[:nb] {
		if b < 0 || b >= pool {
			panic(fmt.Sprintf("kernels: PagedAttention block %d outside the pool of %d", b, pool))
		}
	}
	if nTok == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attention(out, q, k, v, nTok, start, nHeads, nKVHeads, headDim, scale, blocks[:nb], uint(bits.TrailingZeros(uint(blockSize))), o)
}
