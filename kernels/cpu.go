package kernels

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
)

// CPU runs the kernels on this machine's cores: a persistent worker pool
// (threads-1 helper goroutines started by NewCPU, fed per call, plus the
// calling goroutine) and the fastest code path the CPU supports.
//
// Calls are serialized by an internal mutex, so a CPU may be shared, but one
// call at a time uses all its threads; slices passed in must not be modified
// concurrently. Steady-state calls do not allocate. Close stops the helpers;
// a closed CPU still works, on the calling goroutine alone.
type CPU struct {
	mu      sync.Mutex
	be      *backend
	threads int
	pool    *pool
	workers []worker

	// The call in progress, read by the workers.
	mm              mmArgs
	mmRows, mmToks  int // rows and tokens per work item
	mmRowItems      int // work items across the rows
	act             q8Act
	qact            []byte // activations quantized for a quant format
	qtile           qTileFn
	qrows           qRowsFn
	qitems          qItemsFn
	qkind           actKind
	qoff            int32     // for quantItems: fill mm.qsum with -qoff·Σy
	qsum            []int32   // its storage
	xpk             []float32 // activations packed for the backend's tiles
	actX            []float32
	actCols         int
	att             attnArgs
	norm            normArgs
	rope            ropeArgs
	ropeTab         ropeTable
	silu            [2][]float32
	glu             func(gate, up []float32) // gluMul's activation, for siluItems
	fnMatMul        func(worker, lo, hi int)
	fnQuant         func(worker, lo, hi int)
	fnAttn          func(worker, lo, hi int)
	fnNorm          func(worker, lo, hi int)
	fnRoPE          func(worker, lo, hi int)
	fnSiLU          func(worker, lo, hi int)
	parallelMinWork int
}

type normArgs struct {
	out, x, weight []float32
	dim            int
	eps            float32
}

type ropeArgs struct {
	x                   []float32
	heads, headDim      int
	pos                 []int32
	invFreq             []float32
	neox                bool
	tokenStride, ropeN2 int
	fill                bool // compute the cos/sin rows into ropeTab (else they are there)
}

// ropeTable keeps the cos/sin rows of the last RoPE call: a forward pass
// rotates q and k of every layer at the same positions with the same
// frequencies, so the rows are computed once a pass instead of twice a
// layer (the same values: math.Sincos of the same arguments).
type ropeTable struct {
	invFreq []float32 // a copy, compared by value
	pos     []int32
	neox    bool
	ok      bool      // cs and sn hold the rows of invFreq, pos and neox
	cs, sn  []float32 // [T][2·len(invFreq)], as backend.rope takes them
}

// prepare reports whether t holds the rows of pos, invFreq and neox;
// otherwise it takes them as its key, sized, not yet filled.
func (t *ropeTable) prepare(pos []int32, invFreq []float32, neox bool) bool {
	if t.ok && t.neox == neox && slices.Equal(t.pos, pos) && slices.EqualFunc(t.invFreq, invFreq, func(a, b float32) bool {
		return math.Float32bits(a) == math.Float32bits(b)
	}) {
		return true
	}
	t.ok, t.neox = false, neox
	t.pos = append(t.pos[:0], pos...)
	t.invFreq = append(t.invFreq[:0], invFreq...)
	n := len(pos) * 2 * len(invFreq)
	t.cs, t.sn = growF32(t.cs, n), growF32(t.sn, n)
	return false
}

// NewCPU starts a CPU with threads threads (runtime.NumCPU() if threads <= 0)
// on the best code path for this machine.
func NewCPU(threads int) *CPU { return newCPU(threads, best) }

func newCPU(threads int, be *backend) *CPU {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	c := &CPU{be: be, threads: threads, pool: newPool(threads), workers: make([]worker, threads)}
	c.fnMatMul = c.matmulItems
	c.fnQuant = c.quantItems
	c.fnAttn = c.attnItems
	c.fnNorm = c.normItems
	c.fnRoPE = c.ropeItems
	c.fnSiLU = c.siluItems
	// Below this many elements of simple work a call runs on one thread:
	// waking helpers would cost more than it saves.
	c.parallelMinWork = 1 << 15
	return c
}

// Close stops the worker goroutines. Later calls run single-threaded.
func (c *CPU) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pool.close()
}

// Name describes the code path and thread count, e.g. "cpu avx512 x2".
func (c *CPU) Name() string { return fmt.Sprintf("cpu %s x%d", c.be.name, c.threads) }

// Threads is the number of threads a call runs on.
func (c *CPU) Threads() int { return c.threads }

// MatMul computes out[t*w.Rows+r] = Σ_c x[t*w.Cols+c]·W[r][c] for t in
// [0,T). len(x) must be at least T·Cols and len(out) at least T·Rows; out
// must not overlap x.
//
// Each output element is reduced in the same order whatever T is and however
// the work is split, so a token's row is bit-identical alone or batched. F32,
// F16 and BF16 accumulate exact products in float32. Q8_0 quantizes each x
// row to Q8_0 first (see the package doc for the resulting error bound).
func (c *CPU) MatMul(out, x []float32, T int, w *Matrix) {
	rb := w.check()
	if T < 0 || len(x) < T*w.Cols || len(out) < T*w.Rows {
		panic(fmt.Sprintf("kernels: MatMul T=%d with %dx%d weights: len(x)=%d len(out)=%d", T, w.Rows, w.Cols, len(x), len(out)))
	}
	if T == 0 || w.Rows == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mm = mmArgs{out: out, x: x, T: T, w: w, rb: rb}
	if f := quantFormatOf(w.Type); f != nil {
		c.quantMatMulCall(f, x, T, rb)
		c.mm = mmArgs{}
		return
	}
	if w.Type == Q8_0 && c.be.qitems[Q8_0] != nil {
		c.quantMatMulCall(&q8x32Format, x, T, rb)
		c.mm = mmArgs{}
		return
	}
	if w.Type == Q8_0 && !c.be.floatQ8 {
		c.quantizeActs(x, T, w.Cols)
		c.mm.act = &c.act
	}
	c.planMatMul(w.Rows, T, rb)
	if c.be.packAct != nil && T > 1 {
		c.mm.xpk = c.be.packAct(c.xpk[:0], x, T, w.Cols, c.mmToks)
		c.xpk = c.mm.xpk
	}
	tokItems := (T + c.mmToks - 1) / c.mmToks
	if T*w.Rows*w.Cols < c.parallelMinWork {
		// A few thousand multiply-adds: handing half to a helper costs
		// more than it saves (the items and their results are the same).
		c.matmulItems(0, 0, c.mmRowItems*tokItems)
	} else {
		c.pool.run(c.mmRowItems*tokItems, 1, c.fnMatMul)
	}
	c.mm = mmArgs{}
}

// planMatMul cuts a MatMul into work items of mmRows rows × mmToks tokens:
// the rows of an item stay in L2 while its tokens stream past them, and
// there are enough items for the threads to balance.
func (c *CPU) planMatMul(rows, T, rb int) {
	toks := min(T, 64)
	if c.be.floatQ8 {
		toks = min(T, 120) // avx2: whole 12-token groups (see avx2MatMul)
	}
	budget := 512 << 10 // weight bytes per item
	if T > 1 {
		budget = 128 << 10
		if c.be.floatQ8 {
			// avx2 keeps a 384-byte accumulator block per row and token
			// group of the item: keep those, the rows and the activations
			// in L2.
			budget = 64 << 10
		}
	}
	c.cutItems(rows, T, toks, budget/max(rb, 1))
}

// cutItems sets items of toks tokens and about per rows (a multiple of 4,
// at least 4), with rows cut finer when that leaves the threads too few
// items to balance.
func (c *CPU) cutItems(rows, T, toks, per int) {
	per = max(per, 4)
	tokItems := (T + toks - 1) / toks
	if want := 4 * c.threads; c.threads > 1 && ((rows+per-1)/per)*tokItems < want {
		per = max((rows*tokItems+want-1)/want, 4)
	}
	per = (per + 3) &^ 3
	c.mmRows, c.mmToks = per, toks
	c.mmRowItems = (rows + per - 1) / per
}

// Pack lays m's rows out for this CPU's kernels where they have a layout of
// their own for its type (the block formats of 32 values on avx512 and amx:
// 16 rows' blocks side by side; on avx2 those and Q4_K, Q5_K and Q6_K, 8
// rows), so that MatMul streams the weights in one run instead of gathering
// them from a group's rows at every call; MatMul on m then
// reads the packed copy, with the same results to the bit, and everything
// else (row lookups, other devices) still reads Data. It returns the bytes
// the copy takes (as many as Data's; Q6_K's blocks of 210 bytes take 212),
// 0 where there is no layout or m is
// packed already. Call it before m is shared: it sets m's packed copy
// without locking.
func (c *CPU) Pack(m *Matrix) int {
	m.check()
	p := c.be.qpack[m.Type]
	if p == nil || m.pk != nil || m.Rows == 0 {
		return 0
	}
	m.pk = p(m)
	return len(m.pk.data)
}

// quantMatMulCall runs c.mm over a registered quant format: each x row is
// quantized to the format's activation kind once, then the backend's tiles
// (or the portable ones) take items of rows × tokens.
func (c *CPU) quantMatMulCall(f *quantFormat, x []float32, T, rb int) {
	w := c.mm.w
	stride := actRowBytes(f.act, w.Cols)
	c.qact = growBytes(c.qact, T*stride)
	c.qkind = f.act
	c.actX, c.actCols = x, w.Cols
	c.qitems, c.qoff = c.be.qitems[w.Type], 0
	c.mm.qsum = nil
	if c.qitems != nil && c.be.qoff[w.Type] != 0 {
		c.qoff = c.be.qoff[w.Type]
		c.qsum = growI32(c.qsum, T*(w.Cols/f.block))
		c.mm.qsum = c.qsum
	}
	if T*w.Cols >= c.parallelMinWork {
		c.pool.run(T, 1, c.fnQuant)
	} else {
		c.quantItems(0, 0, T)
	}
	c.actX, c.qkind, c.qoff = nil, 0, 0
	c.mm.qact, c.mm.qactStride = c.qact, stride
	c.qtile, c.qrows = c.be.qtiles[w.Type], c.be.qrows[w.Type]
	if c.qtile == nil {
		c.qtile = f.tile
	}
	c.planQuant(w.Rows, T, rb, c.qitems != nil)
	tokItems := (T + c.mmToks - 1) / c.mmToks
	if T*w.Rows*w.Cols < c.parallelMinWork {
		c.matmulItems(0, 0, c.mmRowItems*tokItems)
	} else {
		c.pool.run(c.mmRowItems*tokItems, 1, c.fnMatMul)
	}
	c.qtile, c.qrows, c.qitems = nil, nil, nil
}

// planQuant is planMatMul for the quant formats: items of whole 4-row,
// 4-token tiles (whole 16-row groups for a qItemsFn), their weights within
// L2.
func (c *CPU) planQuant(rows, T, rb int, r16 bool) {
	c.cutItems(rows, T, min(T, c.be.qToks()), (256<<10)/max(rb, 1))
	if r16 && c.mmRows%qItemRows != 0 {
		c.mmRows = (c.mmRows + qItemRows - 1) &^ (qItemRows - 1)
		c.mmRowItems = (rows + c.mmRows - 1) / c.mmRows
	}
}

func (c *CPU) matmulItems(wk, lo, hi int) {
	rows := c.mm.w.Rows
	if c.qtile != nil {
		for it := lo; it < hi; it++ {
			rc, tc := it%c.mmRowItems, it/c.mmRowItems
			r0, t0 := rc*c.mmRows, tc*c.mmToks
			quantMatMul(&c.mm, &c.workers[wk], c.qtile, c.qrows, c.qitems, r0, min(r0+c.mmRows, rows), t0, min(t0+c.mmToks, c.mm.T))
		}
		return
	}
	for it := lo; it < hi; it++ {
		rc, tc := it%c.mmRowItems, it/c.mmRowItems
		r0, t0 := rc*c.mmRows, tc*c.mmToks
		c.be.matmul(&c.mm, &c.workers[wk], r0, min(r0+c.mmRows, rows), t0, min(t0+c.mmToks, c.mm.T))
	}
}

// quantizeActs fills c.act with x's T rows quantized to Q8_0.
func (c *CPU) quantizeActs(x []float32, T, cols int) {
	nb := cols / Q8BlockSize
	pairs := (nb + 1) / 2
	a := &c.act
	a.nb, a.qStride, a.sStride = nb, pairs*64, pairs*16
	a.qs = growBytes(a.qs, T*a.qStride)
	a.xs = growF32(a.xs, T*a.sStride)
	c.actX, c.actCols = x, cols
	if T*cols >= c.parallelMinWork {
		c.pool.run(T, 1, c.fnQuant)
	} else {
		c.quantItems(0, 0, T)
	}
	c.actX = nil
}

func (c *CPU) quantItems(_, lo, hi int) {
	if c.qkind != 0 {
		q := quantizeActRow
		if c.be.quantAct != nil {
			q = c.be.quantAct
		}
		stride := actRowBytes(c.qkind, c.actCols)
		nb := c.actCols / ActQ8x32Block
		for t := lo; t < hi; t++ {
			q(c.qkind, c.qact[t*stride:(t+1)*stride], c.actX[t*c.actCols:(t+1)*c.actCols])
			if c.qoff != 0 {
				actBlockSums(c.qsum[t*nb:(t+1)*nb], c.qact[t*stride:], c.qoff)
			}
		}
		return
	}
	for t := lo; t < hi; t++ {
		qs, xs := c.act.row(t)
		c.be.quantizeAct(qs, xs, c.actX[t*c.actCols:(t+1)*c.actCols])
	}
}

// RMSNorm normalizes each row of dim values: out = x/sqrt(mean(x²)+eps)·weight,
// over len(x)/dim rows (len(x) must be a multiple of dim). out may alias x.
func (c *CPU) RMSNorm(out, x, weight []float32, dim int, eps float32) {
	if dim <= 0 || len(x)%dim != 0 || len(out) < len(x) || len(weight) < dim {
		panic(fmt.Sprintf("kernels: RMSNorm dim=%d len(x)=%d len(out)=%d len(weight)=%d", dim, len(x), len(out), len(weight)))
	}
	rows := len(x) / dim
	c.mu.Lock()
	defer c.mu.Unlock()
	c.norm = normArgs{out: out, x: x, weight: weight[:dim], dim: dim, eps: eps}
	if len(x) >= c.parallelMinWork && rows > 1 {
		c.pool.run(rows, max(1, rows/(4*c.threads)), c.fnNorm)
	} else {
		c.normItems(0, 0, rows)
	}
	c.norm = normArgs{}
}

func (c *CPU) normItems(_, lo, hi int) {
	a := &c.norm
	for r := lo; r < hi; r++ {
		c.be.rmsnorm(a.out[r*a.dim:(r+1)*a.dim], a.x[r*a.dim:(r+1)*a.dim], a.weight, a.eps)
	}
}

// RoPE rotates x, laid out [T][heads][headDim], in place: token t at position
// pos[t], pair i by the angle pos[t]·invFreq[i]. Only the first
// 2·len(invFreq) dimensions of each head rotate. neox=false rotates adjacent
// pairs (x[2i], x[2i+1]) (GGUF llama, llama2.c); neox=true rotates
// (x[i], x[i+ropeDim/2]) (Hugging Face, qwen2). The angle is the float32
// product, as Hugging Face computes it; its cosine and sine are computed in
// float64 and rounded.
func (c *CPU) RoPE(x []float32, T, heads, headDim int, pos []int32, invFreq []float32, neox bool) {
	if T < 0 || heads < 0 || headDim < 0 || 2*len(invFreq) > headDim || len(pos) < T || len(x) < T*heads*headDim {
		panic(fmt.Sprintf("kernels: RoPE T=%d heads=%d headDim=%d len(invFreq)=%d len(pos)=%d len(x)=%d",
			T, heads, headDim, len(invFreq), len(pos), len(x)))
	}
	if T == 0 || len(invFreq) == 0 || heads == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fill := !c.ropeTab.prepare(pos[:T], invFreq, neox)
	c.rope = ropeArgs{x: x, heads: heads, headDim: headDim, pos: pos, invFreq: invFreq, neox: neox,
		tokenStride: heads * headDim, ropeN2: 2 * len(invFreq), fill: fill}
	if T*heads*headDim >= c.parallelMinWork && T > 1 {
		c.pool.run(T, max(1, T/(4*c.threads)), c.fnRoPE)
	} else {
		c.ropeItems(0, 0, T)
	}
	c.ropeTab.ok = true
	c.rope = ropeArgs{}
}

func (c *CPU) ropeItems(_, lo, hi int) {
	a := &c.rope
	n := len(a.invFreq)
	for t := lo; t < hi; t++ {
		cs, sn := c.ropeTab.cs[t*2*n:(t+1)*2*n], c.ropeTab.sn[t*2*n:(t+1)*2*n]
		if a.fill {
			p := float32(a.pos[t])
			for i, f := range a.invFreq {
				s, co := math.Sincos(float64(p * f))
				if a.neox {
					cs[i], sn[i] = float32(co), float32(s)
				} else {
					cs[2*i], cs[2*i+1] = float32(co), float32(co)
					sn[2*i], sn[2*i+1] = -float32(s), float32(s)
				}
			}
		}
		c.be.rope(a.x[t*a.tokenStride:(t+1)*a.tokenStride], a.heads, a.headDim, n, cs, sn, a.neox)
	}
}

// SiLUMul sets gate[i] = silu(gate[i])·up[i], silu(g) = g/(1+e^-g).
func (c *CPU) SiLUMul(gate, up []float32) { c.gluMul("SiLUMul", gate, up, c.be.siluMul) }

// GELUMul sets gate[i] = gelu(gate[i])·up[i] with GELU's tanh
// approximation, 0.5·g·(1+tanh(√(2/π)·(g+0.044715·g³))), evaluated in
// float64 and rounded once to float32 (Gemma's GeGLU, as transformers'
// gelu_pytorch_tanh computes it in float32, to within its rounding).
func (c *CPU) GELUMul(gate, up []float32) { c.gluMul("GELUMul", gate, up, geluMul) }

// gluMul runs a gated activation fn over gate and up, in chunks across
// the pool when they are long.
func (c *CPU) gluMul(name string, gate, up []float32, fn func(gate, up []float32)) {
	if len(up) < len(gate) {
		panic(fmt.Sprintf("kernels: %s len(gate)=%d len(up)=%d", name, len(gate), len(up)))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(gate) < c.parallelMinWork {
		fn(gate, up)
		return
	}
	c.silu, c.glu = [2][]float32{gate, up}, fn
	const chunk = 4096
	c.pool.run((len(gate)+chunk-1)/chunk, 1, c.fnSiLU)
	c.silu, c.glu = [2][]float32{}, nil
}

func (c *CPU) siluItems(_, lo, hi int) {
	const chunk = 4096
	g := c.silu[0]
	a, b := lo*chunk, min(hi*chunk, len(g))
	c.glu(g[a:b], c.silu[1][a:b])
}

// GELU returns GELU(x) in its tanh approximation, as GELUMul computes it.
func GELU(x float32) float32 {
	g := float64(x)
	return float32(0.5 * g * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g+0.044715*g*g*g))))
}

// SwiGLUOAI is gpt-oss's clamped SwiGLU of one gate and up value, as
// llama.cpp's swiglu_oai computes it in float32: g = min(gate, limit),
// u = clamp(up, -limit, limit), g·σ(alpha·g)·(u+1), σ(x) = 1/(1+e^-x).
func SwiGLUOAI(gate, up, alpha, limit float32) float32 {
	g := min(gate, limit)
	u := max(min(up, limit), -limit)
	return g / (1 + float32(math.Exp(float64(-alpha*g)))) * (u + 1)
}

func geluMul(gate, up []float32) {
	up = up[:len(gate)]
	for i, g := range gate {
		gate[i] = GELU(g) * up[i]
	}
}

// Attention is causal grouped-query attention over one sequence. q holds
// nTok tokens' queries [nTok][nHeads][headDim] at positions start..start+nTok-1;
// k and v are the sequence's cache [>= start+nTok][nKVHeads][headDim] (row p is
// position p); out gets [nTok][nHeads][headDim]. Query head h reads kv head
// h/(nHeads/nKVHeads); token i attends to positions 0..start+i with weights
// softmax(scale·q·k) computed in float32 with the max subtracted. out must
// not overlap q, k or v.
//
// A token's result depends only on its query and the cache rows it attends
// to, reduced in position order: prefilling a prompt in one call, in chunks
// or token by token gives bit-identical outputs.
func (c *CPU) Attention(out, q, k, v []float32, nTok, start, nHeads, nKVHeads, headDim int, scale float32) {
	if nTok < 0 || start < 0 || nHeads <= 0 || nKVHeads <= 0 || headDim <= 0 || nHeads%nKVHeads != 0 {
		panic(fmt.Sprintf("kernels: Attention nTok=%d start=%d heads=%d kvHeads=%d headDim=%d", nTok, start, nHeads, nKVHeads, headDim))
	}
	qn, kvn := nTok*nHeads*headDim, (start+nTok)*nKVHeads*headDim
	if len(q) < qn || len(out) < qn || len(k) < kvn || len(v) < kvn {
		panic(fmt.Sprintf("kernels: Attention needs len(q), len(out) >= %d and len(k), len(v) >= %d; have %d, %d, %d, %d",
			qn, kvn, len(q), len(out), len(k), len(v)))
	}
	if nTok == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attention(out, q, k, v, nTok, start, nHeads, nKVHeads, headDim, scale, nil, 0, AttnOpts{})
}

// attention runs a checked Attention or PagedAttention call (c.mu held).
func (c *CPU) attention(out, q, k, v []float32, nTok, start, nHeads, nKVHeads, headDim int, scale float32, blocks []int32, bsShift uint, o AttnOpts) {
	n := start + nTok
	// A work item is one token's query heads that share a kv head (up to 4
	// of them), so the K/V rows it streams are read once for all of them.
	group := nHeads / nKVHeads
	chunk := min(group, attnHeadsPerItem)
	for i := range c.workers {
		c.workers[i].scores = growF32(c.workers[i].scores, chunk*(n+1)) // each head's n scores and a sink
	}
	c.att = attnArgs{out: out, q: q, k: k, v: v, nTok: nTok, start: start, nHeads: nHeads, nKV: nKVHeads, headDim: headDim, scale: scale,
		groupChunk: chunk, chunks: (group + chunk - 1) / chunk, blocks: blocks, bsShift: bsShift,
		window: o.Window, softCap: o.SoftCap, capped: o.SoftCap > 0, sinks: o.Sinks}
	items := nTok * nKVHeads * c.att.chunks
	if items > 1 && n*headDim*nTok*nHeads >= c.parallelMinWork/4 {
		c.pool.run(items, 1, c.fnAttn)
	} else {
		c.attnItems(0, 0, items)
	}
	c.att = attnArgs{}
}

// attnHeadsPerItem caps the query heads of one attention work item.
const attnHeadsPerItem = 4

func (c *CPU) attnItems(wk, lo, hi int) {
	a := &c.att
	w := &c.workers[wk]
	group := a.nHeads / a.nKV
	perTok := a.nKV * a.chunks
	for it := lo; it < hi; it++ {
		i, rem := it/perTok, it%perTok
		g, ch := rem/a.chunks, rem%a.chunks
		h0 := g*group + ch*a.groupChunk
		c.be.attention(a, w, i, h0, min(h0+a.groupChunk, (g+1)*group))
	}
}

// The package-level kernels run on the calling goroutine with the best code
// path for this machine.

// Add sets dst[i] += src[i] for i < len(dst); src must be at least as long.
func Add(dst, src []float32) { (*CPU)(nil).Add(dst, src) }

// Softmax replaces x by softmax(x), in float32 with the max subtracted.
func Softmax(x []float32) { (*CPU)(nil).Softmax(x) }

// Argmax returns the first index of the largest value (-1 for an empty slice).
func Argmax(x []float32) int { return (*CPU)(nil).Argmax(x) }

// Dot returns Σ a[i]·b[i] over len(a) (b must be at least as long), reduced
// in an order fixed by len(a).
func Dot(a, b []float32) float32 {
	if len(b) < len(a) {
		panic(fmt.Sprintf("kernels: Dot len(a)=%d len(b)=%d", len(a), len(b)))
	}
	return best.dot(a, b[:len(a)])
}

// The vector helpers below run on the calling goroutine with c's code path
// (the best one for a nil *CPU), without taking c's lock: they touch no
// shared state.

func (c *CPU) vec() *backend {
	if c == nil {
		return best
	}
	return c.be
}

// Add is the package-level Add on c's code path.
func (c *CPU) Add(dst, src []float32) {
	if len(src) < len(dst) {
		panic(fmt.Sprintf("kernels: Add len(dst)=%d len(src)=%d", len(dst), len(src)))
	}
	c.vec().add(dst, src)
}

// Softmax is the package-level Softmax on c's code path.
func (c *CPU) Softmax(x []float32) { c.vec().softmax(x) }

// Argmax is the package-level Argmax on c's code path.
func (c *CPU) Argmax(x []float32) int {
	if len(x) == 0 {
		return -1
	}
	return c.vec().argmax(x)
}
