package kernels

import "math"

// backend is one code path's set of kernels. The CPU type does validation,
// scratch management and the parallel split; a backend does the arithmetic
// on the pieces it is handed. Every function must compute each output
// element in an order that depends only on the shapes, never on which piece
// (rows, tokens, heads) it was handed together with: that is what makes
// MatMul and Attention batch-invariant.
type backend struct {
	name string

	// matmul computes out[t*Rows+r] for r in [r0,r1), t in [t0,t1).
	matmul func(a *mmArgs, w *worker, r0, r1, t0, t1 int)
	// quantizeAct encodes one activation row (len(x) a multiple of 32) into
	// the q8Act layout: qs gets the int8 values padded to whole block pairs,
	// xs each block's float32 scale repeated 8 times (see q8Act).
	quantizeAct func(qs []byte, xs []float32, x []float32)
	// floatQ8 says matmul multiplies Q8_0 weights with the float32
	// activations (dequantized exactly) instead of quantized ones: MatMul
	// then skips quantizeAct. (A qitems path for Q8_0 comes first: avx2
	// keeps floatQ8 for its matmul's planning but runs Q8_0 on its 8-row
	// integer kernels.)
	floatQ8 bool
	// packAct, if set, lays out the T activation rows of a MatMul for the
	// backend's multi-token tiles (T > 1), items of chunk tokens apart; it
	// returns dst grown to what it wrote (mmArgs.xpk).
	packAct func(dst, x []float32, T, cols, chunk int) []float32
	// qtiles are the backend's tiles for the registered quant formats
	// (quant.go), by DType; a nil entry runs the portable genericQTile.
	qtiles [numDTypes]qTileFn
	// qrows, where set, take whole work items (4 rows × all its tokens)
	// instead of qtiles' 4×4 tiles (quant.go, qRowsFn).
	qrows [numDTypes]qRowsFn
	// qitems, where set, take whole work items (quant.go, qItemsFn); qoff
	// is then the offset o of the format's unsigned quants (value u - o)
	// whose -o·Σy per activation block they read from mmArgs.qsum (0:
	// none needed).
	qitems [numDTypes]qItemsFn
	qoff   [numDTypes]int32
	// qpack, where set, lays a matrix of the type out for the backend's
	// kernels (CPU.Pack).
	qpack [numDTypes]func(m *Matrix) *packedMatrix
	// qItemToks, where set, is the most tokens a quant work item takes
	// (else 64): the AMX kernels unpack a row group once for more of them.
	qItemToks int
	// quantAct, if set, replaces the portable activation quantizers
	// (quantizeActRow) with ones giving the same bytes.
	quantAct func(k actKind, dst []byte, x []float32)
	// mmLanes names matmul's reduction order: backends with the same
	// value (and floatQ8) compute MatMul bit for bit alike.
	mmLanes int

	dot     func(a, b []float32) float32
	rmsnorm func(out, x, weight []float32, eps float32) // one row of len(x)
	// rope rotates one token's heads. Neox: c, s hold cos, sin per pair.
	// Interleaved: c holds each cos twice, s holds (-sin, +sin) per pair.
	rope    func(x []float32, heads, headDim, pairs int, c, s []float32, neox bool)
	siluMul func(gate, up []float32)
	// attention computes token i's heads [h0,h1), which share one kv head;
	// w.scores holds at least (h1-h0)·(start+i+1) floats.
	attention func(a *attnArgs, w *worker, i, h0, h1 int)
	softmax   func(x []float32)
	add       func(dst, src []float32)
	argmax    func(x []float32) int
}

// mmArgs is one MatMul call.
type mmArgs struct {
	out, x []float32
	T      int
	w      *Matrix
	rb     int       // bytes per weight row
	act    *q8Act    // quantized x, for Q8_0
	xpk    []float32 // x packed by the backend's packAct
	// qact holds x's T rows quantized to the weight format's activation
	// kind, qactStride bytes apart (registered quant formats).
	qact       []byte
	qactStride int
	// qsum holds, for backends whose qitems need it (backend.qoff), -o·Σy
	// of each activation block: token t's nb at qsum[t*nb:].
	qsum []int32
}

// q8Act holds T activation rows quantized to Q8_0 with float32 scales. Row t
// has its int8 values at qs[t*qStride:], zero-padded to a whole number of
// block pairs (64 bytes), and at xs[t*sStride:] 16 floats per block pair:
// the even block's scale 8 times, then the odd block's (0 past the end).
// This is the shape the SIMD kernels consume directly: one 512-bit vector
// holds a pair of blocks and its 16 lanes of partial sums.
type q8Act struct {
	qs               []byte
	xs               []float32
	nb               int // blocks per row
	qStride, sStride int
}

func (q *q8Act) row(t int) ([]byte, []float32) {
	return q.qs[t*q.qStride : (t+1)*q.qStride], q.xs[t*q.sStride : (t+1)*q.sStride]
}

// attnArgs is one Attention call.
type attnArgs struct {
	out, q, k, v                      []float32
	nTok, start, nHeads, nKV, headDim int
	scale                             float32
	groupChunk, chunks                int // heads per work item, items per kv head
	// Paged K/V: blocks is the sequence's block table, 1<<bsShift
	// positions per block; nil for one contiguous cache.
	blocks  []int32
	bsShift uint
	// window > 0 limits each query to its last window positions (itself
	// included); softCap > 0 maps each score s to softCap·tanh(s/softCap)
	// before the softmax (AttnOpts).
	window  int
	softCap float32
	capped  bool // softCap > 0
	// sinks, when not nil, holds each query head's sink logit: one more
	// score in its softmax that adds no value (AttnOpts.Sinks).
	sinks []float32
}

// first is the first position a query at position n-1 attends to.
func (a *attnArgs) first(n int) int {
	if a.window > 0 && n > a.window {
		return n - a.window
	}
	return 0
}

// capScores soft-caps a query's scores in place when the call asks for it.
func (a *attnArgs) capScores(s []float32) {
	if c := a.softCap; c > 0 {
		for i, x := range s {
			s[i] = c * float32(math.Tanh(float64(x/c)))
		}
	}
}

// rowOff is the offset in k and v of position p's row of kv head g:
// contiguous caches are [pos][nKV][headDim], paged pools
// [block][1<<bsShift][nKV][headDim] (a block is a contiguous cache of its
// positions).
func (a *attnArgs) rowOff(p, g int) int {
	if a.blocks != nil {
		p = int(a.blocks[p>>a.bsShift])<<a.bsShift | p&(1<<a.bsShift-1)
	}
	return (p*a.nKV + g) * a.headDim
}

// kRow and vRow are position p's key and value rows of kv head g.
func (a *attnArgs) kRow(p, g int) []float32 { return a.k[a.rowOff(p, g):][:a.headDim] }

func (a *attnArgs) vRow(p, g int) []float32 { return a.v[a.rowOff(p, g):][:a.headDim] }

// worker is one thread's scratch, grown on demand and then reused.
type worker struct {
	f32    []float32   // dequantized / packed weight rows
	scores []float32   // attention scores of one token's head group
	acc    []float32   // attention output accumulators of a head group; avx2 matmul accumulators
	res    [16]float32 // one tile's results
	// qbuf and qacc are a backend's qrows scratch (quant.go): unpacked
	// weight blocks and, for avx512, one accumulator set per 4-token group.
	qbuf []byte
	qacc [][256]float32
	// r16acc and r16pad are the avx512 16-row path's accumulators (16 per
	// token) and padded copy of a partial group of rows.
	r16acc []float32
	r16pad []byte
}

func growF32(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

func growI32(b []int32, n int) []int32 {
	if cap(b) < n {
		return make([]int32, n)
	}
	return b[:n]
}

func growBytes(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// qToks is the most tokens a quant work item takes.
func (b *backend) qToks() int {
	if b.qItemToks > 0 {
		return b.qItemToks
	}
	return 64
}
