//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// avx2 is the AVX2+FMA+F16C backend. Its matmul is the assembly in
// avx2_amd64.s; everything else follows the AVX-512 backend's reduction
// order with each 16-lane accumulator kept as two 8-lane halves (lo = lanes
// 0-7, hi = lanes 8-15), and agrees with it bit for bit.
//
// Its matmul sums each output in 8 lanes (see avx2_amd64.s), so it agrees
// with the AVX-512 one within float32 rounding, not bit for bit: with 16
// registers, one accumulator per output is what lets one widened weight
// vector serve 12 tokens. Q8_0 and the block formats do not come here:
// they run the 8-row integer kernels (quant_r8_avx2_amd64.go), Q8_0 with
// quantized activations as on the other paths. The Q8_0 kernels below
// (float32 activations times the exactly dequantized weights, floatQ8)
// serve only a copy of this backend without those (qitems[Q8_0] nil); the
// integer route measured 1.4-1.6× faster batched (8 to 32 tokens) and 1.1× for
// one token.
var avx2 = &backend{
	name:        "avx2",
	matmul:      avx2MatMul,
	quantizeAct: genericQuantizeAct,
	quantAct:    avx2QuantAct,
	floatQ8:     true,
	packAct:     avx2PackActs,
	mmLanes:     8,
	dot:         avx2Dot,
	rmsnorm:     avx2RMSNorm,
	rope:        avx2RoPE,
	siluMul:     avx2SiLUMul,
	attention:   avx2Attention,
	softmax:     avx2Softmax,
	add:         avx2Add,
	argmax:      avx2Argmax,
}

type acc16 struct{ lo, hi archsimd.Float32x8 }

// The archsimd kernels below end with archsimd.ClearAVXUpperBits
// (VZEROUPPER) before they return or do scalar float work: Go compiles
// scalar float32 code, struct zeroing and small copies to legacy SSE, which
// on some CPUs costs a state transition of hundreds of cycles while the
// upper halves of the YMM registers are dirty. So scalar setup comes before
// the first vector instruction, tails are masked vector loads and stores,
// and a scalar result is read from a Float32x4 after the VZEROUPPER.

// Assembly kernels (avx2_amd64.s). n counts Q8_0 blocks or 8-column groups.

//go:noescape
func avx2Q8Rows4(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)

//go:noescape
func avx2F32Rows4(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)

//go:noescape
func avx2F16Rows4(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)

//go:noescape
func avx2BF16Rows4(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)

//go:noescape
func avx2Q8Tile12(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)

//go:noescape
func avx2Q8Tile8(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)

//go:noescape
func avx2Q8Tile4(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)

//go:noescape
func avx2F32Tile12(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)

//go:noescape
func avx2F32Tile8(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)

//go:noescape
func avx2F32Tile4(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)

//go:noescape
func avx2F16Tile12(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)

//go:noescape
func avx2F16Tile8(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)

//go:noescape
func avx2F16Tile4(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)

//go:noescape
func avx2BF16Tile12(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)

//go:noescape
func avx2BF16Tile8(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)

//go:noescape
func avx2BF16Tile4(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)

//go:noescape
func avx2Q8Unpack(dst *float32, w unsafe.Pointer, nb, pf int)

//go:noescape
func avx2CvtF16(dst *float32, src unsafe.Pointer, n8, pf int)

// avx2Kernels is one weight type's set of assembly kernels.
type avx2Kernels struct {
	rows4       func(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)
	tiles       [3]func(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int) // 12, 8, 4 tokens
	colsPerStep int                                                               // columns per n
	stepBytes   int                                                               // weight bytes per n
}

var avx2ByType = [...]avx2Kernels{
	F32:  {avx2F32Rows4, [3]func(*[96]float32, unsafe.Pointer, unsafe.Pointer, int, int, int){avx2F32Tile12, avx2F32Tile8, avx2F32Tile4}, 8, 32},
	F16:  {avx2F16Rows4, [3]func(*[96]float32, unsafe.Pointer, unsafe.Pointer, int, int, int){avx2F16Tile12, avx2F16Tile8, avx2F16Tile4}, 8, 16},
	BF16: {avx2BF16Rows4, [3]func(*[96]float32, unsafe.Pointer, unsafe.Pointer, int, int, int){avx2BF16Tile12, avx2BF16Tile8, avx2BF16Tile4}, 8, 16},
	Q8_0: {avx2Q8Rows4, [3]func(*[96]float32, unsafe.Pointer, unsafe.Pointer, int, int, int){avx2Q8Tile12, avx2Q8Tile8, avx2Q8Tile4}, Q8BlockSize, Q8BlockBytes},
}

// avx2Panel is how many columns a tile covers before the next row takes
// the token group: the group's packed activations for a panel (24 KiB for
// 12 tokens) stay in L1 while the item's rows go by, with half the tile
// calls and accumulator loads and stores of 256 columns.
const avx2Panel = 512

// Tile flags (avx2_amd64.s).
const (
	avx2Resume = 1 // start from the stored raw accumulators
	avx2Reduce = 2 // last panel: write the reduced results
)

func avx2MatMul(a *mmArgs, w *worker, r0, r1, t0, t1 int) {
	m := a.w
	if m.Cols%8 != 0 {
		avx2MatMulGo(a, w, r0, r1, t0, t1)
		return
	}
	k := &avx2ByType[m.Type]
	if t1-t0 == 1 {
		avx2Rows(a, w, k, r0, r1, t0)
		return
	}
	rows, cols := m.Rows, m.Cols
	base := bptr(m.Data)
	// Token groups of 12, then 8, then at most 4 (a short last group
	// repeats its last token).
	nt := t1 - t0
	groups := nt/12 + (nt%12)/8 + (nt%12%8+3)/4
	nr := r1 - r0
	w.acc = growF32(w.acc, groups*nr*96)
	panel := avx2Panel
	for p0 := 0; p0 < cols; p0 += panel {
		pc := min(panel, cols-p0)
		flags := 0
		if p0 > 0 {
			flags |= avx2Resume
		}
		if p0+pc == cols {
			flags |= avx2Reduce
		}
		n, woff := pc/k.colsPerStep, p0/k.colsPerStep*k.stepBytes
		// With several token groups, widen the panel of every row once
		// (the float32 tiles then do the same products in the same order).
		// The tiles read a panel row after row: prefetch the rows ahead.
		// Row r's panel is at wbase + (r-wrow)·wstride.
		tk, wbase, wrow, wstride, pf := k, unsafe.Add(base, woff), 0, a.rb, avx2PrefetchPanelRows*a.rb
		if groups > 1 && m.Type != F32 {
			w.f32 = growF32(w.f32, nr*pc)
			for r := r0; r < r1; r++ {
				avx2Widen(w.f32[(r-r0)*pc:(r-r0+1)*pc], m.Type, unsafe.Add(base, r*a.rb+woff), pf)
			}
			tk, wbase, wrow, wstride, n, pf = &avx2ByType[F32], f32ptr(w.f32), r0, 4*pc, pc/8, 0
		}
		for t, g := t0, 0; t < t1; g++ {
			size, which := avx2Group(t1 - t)
			xpk := unsafe.Add(f32ptr(a.xpk), 4*(t*cols+p0*size))
			for r := r0; r < r1; r++ {
				acc := (*[96]float32)(w.acc[(g*nr+r-r0)*96:])
				tk.tiles[which](acc, unsafe.Add(wbase, (r-wrow)*wstride), xpk, n, flags, pf)
				if flags&avx2Reduce != 0 {
					for i := range min(size, t1-t) {
						a.out[(t+i)*rows+r] = acc[i]
					}
				}
			}
			t += size
		}
	}
}

// avx2Group is the size of the next token group when rest tokens remain,
// and its tile (12, 8, then 4 with repeats: avx2ByType.tiles).
func avx2Group(rest int) (size, tile int) {
	switch {
	case rest >= 12:
		return 12, 0
	case rest >= 8:
		return 8, 1
	}
	return 4, 2
}

// avx2PackActs lays out x's T rows for the tiles: in each chunk of tokens
// (an item's), groups as avx2Group makes them; group of size s at token t
// at dst[t·cols:], for each 8-column group its s tokens' 8 values in turn.
// A short last group repeats its last token.
func avx2PackActs(dst, x []float32, T, cols, chunk int) []float32 {
	if cols%8 != 0 {
		return dst[:0] // avx2MatMulGo reads x itself
	}
	dst = growF32(dst, (T+3)*cols)
	dp, xp := f32ptr(dst), f32ptr(x)
	for c0 := 0; c0 < T; c0 += chunk {
		c1 := min(c0+chunk, T)
		for t := c0; t < c1; {
			size, _ := avx2Group(c1 - t)
			for c := 0; c < cols; c += 8 {
				d := t*cols + c*size
				for i := range size {
					src := min(t+i, c1-1)*cols + c
					archsimd.LoadFloat32x8(f32x8At(xp, src)).Store(f32x8At(dp, d+8*i))
				}
			}
			t += size
		}
	}
	archsimd.ClearAVXUpperBits()
	return dst
}

// avx2Widen converts len(dst) weights of type dt at src to float32, exactly.
func avx2Widen(dst []float32, dt DType, src unsafe.Pointer, pf int) {
	switch dt {
	case F16:
		avx2CvtF16(&dst[0], src, len(dst)/8, pf)
	case BF16:
		cvtBF16Row2(dst, src, len(dst))
	case Q8_0:
		avx2Q8Unpack(&dst[0], src, len(dst)/Q8BlockSize, pf)
	}
}

// avx2PrefetchRows: the single-token matvec prefetches each row's columns
// this many rows ahead (two calls on): 20 → 35 tok/s single-sequence decode
// of the Qwen2.5-0.5B-shaped Q8_0 model here, where 2 KiB ahead of each row
// mostly fetched the rows of the same call.
const avx2PrefetchRows = 8

// avx2PrefetchPanelRows: the tiles and the widening go through a panel row
// by row, and prefetch the same columns this many rows ahead.
const avx2PrefetchPanelRows = 2

// avx2Rows is the single-token matvec: four rows at a time, straight from
// the weights. The results go through the worker's scratch: a local array
// handed to the indirect k.rows4 would escape to the heap on every call.
func avx2Rows(a *mmArgs, w *worker, k *avx2Kernels, r0, r1, t int) {
	m := a.w
	base := bptr(m.Data)
	x := unsafe.Add(f32ptr(a.x), 4*t*m.Cols)
	out := a.out[t*m.Rows:]
	n := m.Cols / k.colsPerStep
	pf := avx2PrefetchRows * a.rb
	res := (*[4]float32)(w.res[:4])
	for r := r0; r < r1; r += 4 {
		p0, p1, p2, p3 := rowPtrs(base, a.rb, r, r1)
		k.rows4(res, p0, p1, p2, p3, x, n, pf)
		copy(out[r:min(r+4, r1)], res[:])
	}
}

// avx2MatMulGo is the archsimd path for float weights whose rows are not
// whole 16-column chunks (same arithmetic as the assembly, zero-padded
// tail). Q8_0 rows are always whole chunks.
func avx2MatMulGo(a *mmArgs, w *worker, r0, r1, t0, t1 int) {
	m := a.w
	rows, cols := m.Rows, m.Cols
	var res [16]float32
	base, rb, baseRow := bptr(m.Data), a.rb, 0
	kind := m.Type
	if m.Type != F32 && t1-t0 >= 4 {
		conv := cvtF16Row2
		if m.Type == BF16 {
			conv = cvtBF16Row2
		}
		w.f32 = growF32(w.f32, (r1-r0)*cols)
		packRows(w.f32, m, a.rb, r0, r1, conv)
		base, rb, baseRow, kind = f32ptr(w.f32), 4*cols, r0, F32
	}
	xp := f32ptr(a.x)
	for t := t0; t < t1; t++ {
		x := unsafe.Add(xp, 4*t*cols)
		for r := r0; r < r1; r += 4 {
			p0, p1, p2, p3 := rowPtrs(base, rb, r-baseRow, r1-baseRow)
			switch kind {
			case F32:
				f32Tile4x1x2(&res, p0, p1, p2, p3, x, cols)
			case F16:
				f16Tile4x1x2(&res, p0, p1, p2, p3, x, cols)
			case BF16:
				bf16Tile4x1x2(&res, p0, p1, p2, p3, x, cols)
			}
			storeTile(a.out, rows, r, r1, t, 1, &res)
		}
	}
}

func (a acc16) fma(w0, w1, x0, x1 archsimd.Float32x8) acc16 {
	return acc16{w0.MulAdd(x0, a.lo), w1.MulAdd(x1, a.hi)}
}

// sum4 is hsum16's additions on the accumulator (lo+hi first): lane 0 is
// the sum.
func (a acc16) sum4() archsimd.Float32x4 {
	h := a.lo.Add(a.hi)
	q := h.GetLo().Add(h.GetHi())
	q = q.AddPairs(q)
	return q.AddPairs(q)
}

// avx2Leave stores q to r and clears the upper halves of the vector
// registers (VZEROUPPER), in that order: the compiler orders VZEROUPPER
// with memory operations only, so scalar code after it must read what the
// vector code left in memory (a value kept in a register may be computed
// after the VZEROUPPER, or spilled and reloaded around it as 256 bits).
func avx2Leave(q archsimd.Float32x4, r *[4]float32) {
	q.Store(r)
	archsimd.ClearAVXUpperBits()
}

// tail16 describes the partial last 16-lane chunk of a vector, m < 16
// floats, as two 8-lane masks for its halves.
type tail16 struct {
	m      int
	lo, hi archsimd.Mask32x8
}

func newTail16(m int) tail16 {
	return tail16{m: m, lo: tailMask8(min(m, 8)), hi: tailMask8(max(m-8, 0))}
}

// load is the chunk at p+4i, zero-padded.
func (t tail16) load(p unsafe.Pointer, i int) acc16 {
	var v acc16
	v.lo = loadMasked8(p, i, t.lo)
	if t.m > 8 {
		v.hi = loadMasked8(p, i+8, t.hi)
	}
	return v
}

// fmaTail is a.fma with the zero-padded chunks q and (at x+4i) x. When the
// high half is all padding its product is skipped: adding 0·0 to a lane
// changes nothing (the lanes are never -0, starting from +0).
func (a acc16) fmaTail(q acc16, x unsafe.Pointer, i int, t tail16) acc16 {
	a.lo = q.lo.MulAdd(loadMasked8(x, i, t.lo), a.lo)
	if t.m > 8 {
		a.hi = q.hi.MulAdd(loadMasked8(x, i+8, t.hi), a.hi)
	}
	return a
}

// hsum4acc16 is lane 0 of a.sum4(), b.sum4(), c.sum4() and d.sum4(), the
// same additions with the horizontal adds shared (as hsum4x16).
func hsum4acc16(a, b, c, d acc16) archsimd.Float32x4 {
	q := func(v acc16) archsimd.Float32x4 {
		h := v.lo.Add(v.hi)
		return h.GetLo().Add(h.GetHi())
	}
	return q(a).AddPairs(q(b)).AddPairs(q(c).AddPairs(q(d)))
}

func loadF32x8(p unsafe.Pointer, i int) archsimd.Float32x8 {
	return archsimd.LoadUint8x32(bytes32At(p, 4*i)).AsFloat32x8()
}

func f32Tile4x1x2(res *[16]float32, w0, w1, w2, w3, x unsafe.Pointer, cols int) {
	// The zero-padded tail is copied first, while the vector state is clean.
	c := cols &^ 15
	var xt [16]float32
	var wt [4][16]float32
	n := cols - c
	if n > 0 {
		copy(xt[:], unsafe.Slice((*float32)(unsafe.Add(x, 4*c)), n))
		for i, p := range [4]unsafe.Pointer{w0, w1, w2, w3} {
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&wt[i])), 64), unsafe.Slice((*byte)(unsafe.Add(p, 4*c)), 4*n))
		}
	}
	var a0, a1, a2, a3 acc16
	c = 0
	for ; c+16 <= cols; c += 16 {
		u0 := archsimd.LoadFloat32x8(f32x8At(x, c))
		u1 := archsimd.LoadFloat32x8(f32x8At(x, c+8))
		a0 = a0.fma(loadF32x8(w0, c), loadF32x8(w0, c+8), u0, u1)
		a1 = a1.fma(loadF32x8(w1, c), loadF32x8(w1, c+8), u0, u1)
		a2 = a2.fma(loadF32x8(w2, c), loadF32x8(w2, c+8), u0, u1)
		a3 = a3.fma(loadF32x8(w3, c), loadF32x8(w3, c+8), u0, u1)
	}
	if n > 0 {
		u0, u1 := archsimd.LoadFloat32x8Slice(xt[:8]), archsimd.LoadFloat32x8Slice(xt[8:])
		a0 = a0.fma(archsimd.LoadFloat32x8Slice(wt[0][:8]), archsimd.LoadFloat32x8Slice(wt[0][8:]), u0, u1)
		a1 = a1.fma(archsimd.LoadFloat32x8Slice(wt[1][:8]), archsimd.LoadFloat32x8Slice(wt[1][8:]), u0, u1)
		a2 = a2.fma(archsimd.LoadFloat32x8Slice(wt[2][:8]), archsimd.LoadFloat32x8Slice(wt[2][8:]), u0, u1)
		a3 = a3.fma(archsimd.LoadFloat32x8Slice(wt[3][:8]), archsimd.LoadFloat32x8Slice(wt[3][8:]), u0, u1)
	}
	hsum4acc16(a0, a1, a2, a3).Store((*[4]float32)(res[:4]))
	archsimd.ClearAVXUpperBits()
}

func loadHalf8(p unsafe.Pointer, c int) archsimd.Uint16x8 {
	return archsimd.LoadUint8x16((*[16]uint8)(unsafe.Add(p, 2*c))).AsUint16x8()
}

// f16to32x8 is f16to32x16 on 8 lanes (same arithmetic).
func f16to32x8(h archsimd.Uint16x8) archsimd.Float32x8 {
	v := h.AsInt16x8().ExtendToInt32().ShiftAllLeft(13).And(archsimd.BroadcastInt32x8(-0x70000001))
	f := v.AsFloat32x8().Mul(archsimd.BroadcastFloat32x8(0x1p112))
	bits := f.AsInt32x8()
	big := bits.And(archsimd.BroadcastInt32x8(0x7fffffff)).Greater(archsimd.BroadcastInt32x8(0x477fffff))
	return bits.Or(archsimd.BroadcastInt32x8(0x7f800000)).Merge(bits, big).AsFloat32x8()
}

func bf16to32x8(h archsimd.Uint16x8) archsimd.Float32x8 {
	return h.ExtendToUint32().ShiftAllLeft(16).AsFloat32x8()
}

// halfTileTail is the zero-padded tail of the F16 and BF16 tiles, columns
// c..cols-1 of x and the four rows (n of them), copied before the first
// vector instruction.
func halfTileTail(w0, w1, w2, w3, x unsafe.Pointer, c, cols int) (xt [16]float32, wt [4][16]uint16, n int) {
	n = cols - c
	if n > 0 {
		copy(xt[:], unsafe.Slice((*float32)(unsafe.Add(x, 4*c)), n))
		for i, p := range [4]unsafe.Pointer{w0, w1, w2, w3} {
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&wt[i])), 32), unsafe.Slice((*byte)(unsafe.Add(p, 2*c)), 2*n))
		}
	}
	return xt, wt, n
}

// f16Tile4x1x2 and bf16Tile4x1x2 differ only in the conversion (kept
// apart so it inlines).
func f16Tile4x1x2(res *[16]float32, w0, w1, w2, w3, x unsafe.Pointer, cols int) {
	c := cols &^ 15
	xt, wt, n := halfTileTail(w0, w1, w2, w3, x, c, cols)
	var a0, a1, a2, a3 acc16
	c = 0
	for ; c+16 <= cols; c += 16 {
		u0 := archsimd.LoadFloat32x8(f32x8At(x, c))
		u1 := archsimd.LoadFloat32x8(f32x8At(x, c+8))
		a0 = a0.fma(f16to32x8(loadHalf8(w0, c)), f16to32x8(loadHalf8(w0, c+8)), u0, u1)
		a1 = a1.fma(f16to32x8(loadHalf8(w1, c)), f16to32x8(loadHalf8(w1, c+8)), u0, u1)
		a2 = a2.fma(f16to32x8(loadHalf8(w2, c)), f16to32x8(loadHalf8(w2, c+8)), u0, u1)
		a3 = a3.fma(f16to32x8(loadHalf8(w3, c)), f16to32x8(loadHalf8(w3, c+8)), u0, u1)
	}
	if n > 0 {
		u0, u1 := archsimd.LoadFloat32x8Slice(xt[:8]), archsimd.LoadFloat32x8Slice(xt[8:])
		t := func(i, h int) archsimd.Float32x8 { return f16to32x8(archsimd.LoadUint16x8Slice(wt[i][8*h:])) }
		a0 = a0.fma(t(0, 0), t(0, 1), u0, u1)
		a1 = a1.fma(t(1, 0), t(1, 1), u0, u1)
		a2 = a2.fma(t(2, 0), t(2, 1), u0, u1)
		a3 = a3.fma(t(3, 0), t(3, 1), u0, u1)
	}
	hsum4acc16(a0, a1, a2, a3).Store((*[4]float32)(res[:4]))
	archsimd.ClearAVXUpperBits()
}

func bf16Tile4x1x2(res *[16]float32, w0, w1, w2, w3, x unsafe.Pointer, cols int) {
	c := cols &^ 15
	xt, wt, n := halfTileTail(w0, w1, w2, w3, x, c, cols)
	var a0, a1, a2, a3 acc16
	c = 0
	for ; c+16 <= cols; c += 16 {
		u0 := archsimd.LoadFloat32x8(f32x8At(x, c))
		u1 := archsimd.LoadFloat32x8(f32x8At(x, c+8))
		a0 = a0.fma(bf16to32x8(loadHalf8(w0, c)), bf16to32x8(loadHalf8(w0, c+8)), u0, u1)
		a1 = a1.fma(bf16to32x8(loadHalf8(w1, c)), bf16to32x8(loadHalf8(w1, c+8)), u0, u1)
		a2 = a2.fma(bf16to32x8(loadHalf8(w2, c)), bf16to32x8(loadHalf8(w2, c+8)), u0, u1)
		a3 = a3.fma(bf16to32x8(loadHalf8(w3, c)), bf16to32x8(loadHalf8(w3, c+8)), u0, u1)
	}
	if n > 0 {
		u0, u1 := archsimd.LoadFloat32x8Slice(xt[:8]), archsimd.LoadFloat32x8Slice(xt[8:])
		t := func(i, h int) archsimd.Float32x8 { return bf16to32x8(archsimd.LoadUint16x8Slice(wt[i][8*h:])) }
		a0 = a0.fma(t(0, 0), t(0, 1), u0, u1)
		a1 = a1.fma(t(1, 0), t(1, 1), u0, u1)
		a2 = a2.fma(t(2, 0), t(2, 1), u0, u1)
		a3 = a3.fma(t(3, 0), t(3, 1), u0, u1)
	}
	hsum4acc16(a0, a1, a2, a3).Store((*[4]float32)(res[:4]))
	archsimd.ClearAVXUpperBits()
}

func cvtF16Row2(dst []float32, src unsafe.Pointer, n int) {
	for c := 0; c < n; c++ {
		dst[c] = f16Table[u16At(src, 2*c)]
	}
}

func cvtBF16Row2(dst []float32, src unsafe.Pointer, n int) {
	d := f32ptr(dst)
	c := 0
	for ; c+8 <= n; c += 8 {
		bf16to32x8(loadHalf8(src, c)).Store(f32x8At(d, c))
	}
	archsimd.ClearAVXUpperBits()
	for ; c < n; c++ {
		dst[c] = BF16ToF32(u16At(src, 2*c))
	}
}

func avx2Dot(a, b []float32) float32 {
	var r [4]float32
	n := len(a)
	b = b[:n]
	pa, pb := f32ptr(a), f32ptr(b)
	var acc acc16
	i := 0
	for ; i+16 <= n; i += 16 {
		acc = acc.fma(archsimd.LoadFloat32x8(f32x8At(pa, i)), archsimd.LoadFloat32x8(f32x8At(pa, i+8)),
			archsimd.LoadFloat32x8(f32x8At(pb, i)), archsimd.LoadFloat32x8(f32x8At(pb, i+8)))
	}
	if i < n {
		t := newTail16(n - i)
		acc = acc.fmaTail(t.load(pa, i), pb, i, t)
	}
	avx2Leave(acc.sum4(), &r)
	return r[0]
}

func avx2RMSNorm(out, x, weight []float32, eps float32) {
	var r [5]float32
	r[4] = eps // kept in memory, not spilled with legacy SSE in the vector code
	n := len(x)
	out, weight = out[:n], weight[:n]
	px, po, pw := f32ptr(x), f32ptr(out), f32ptr(weight)
	var acc acc16
	i := 0
	for ; i+16 <= n; i += 16 {
		v0, v1 := archsimd.LoadFloat32x8(f32x8At(px, i)), archsimd.LoadFloat32x8(f32x8At(px, i+8))
		acc = acc.fma(v0, v1, v0, v1)
	}
	if i < n {
		// Zero-padded: the padding adds 0·0 (the high half only when loaded).
		v := newTail16(n-i).load(px, i)
		acc = acc.fma(v.lo, v.hi, v.lo, v.hi)
	}
	avx2Leave(acc.sum4(), (*[4]float32)(r[:4]))
	scale := avx2RMSScale(&r, n)
	sv := archsimd.BroadcastFloat32x8(scale)
	i = 0
	for ; i+8 <= n; i += 8 {
		archsimd.LoadFloat32x8(f32x8At(px, i)).Mul(sv).Mul(archsimd.LoadFloat32x8(f32x8At(pw, i))).Store(f32x8At(po, i))
	}
	if i < n {
		storeF32x8Tail(loadF32x8Tail(x[i:]).Mul(sv).Mul(loadF32x8Tail(weight[i:])), out[i:])
	}
	archsimd.ClearAVXUpperBits()
}

// avx2RMSScale is rmsScale(r[0], n, r[4]) behind a call, so that none of
// its scalar code (float32(n) included) is scheduled before avx2Leave's
// VZEROUPPER.
//
//go:noinline
func avx2RMSScale(r *[5]float32, n int) float32 { return rmsScale(r[0], n, r[4]) }

// swapPairs8 are the lane indices that swap adjacent pairs. A plain array:
// a vector built at package initialisation would run AVX2 before the CPU
// is known (see TestNoSIMDAtInit).
var swapPairs8 = [8]uint32{1, 0, 3, 2, 5, 4, 7, 6}

func avx2RoPE(x []float32, heads, headDim, pairs int, c, s []float32, neox bool) {
	pc, ps := f32ptr(c), f32ptr(s)
	for h := range heads {
		v := x[h*headDim : (h+1)*headDim]
		pv := f32ptr(v)
		if neox {
			half := pairs
			i := 0
			for ; i+8 <= pairs; i += 8 {
				x0 := archsimd.LoadFloat32x8(f32x8At(pv, i))
				x1 := archsimd.LoadFloat32x8(f32x8At(pv, i+half))
				cv, sv := archsimd.LoadFloat32x8(f32x8At(pc, i)), archsimd.LoadFloat32x8(f32x8At(ps, i))
				x0.Mul(cv).Sub(x1.Mul(sv)).Store(f32x8At(pv, i))
				x0.Mul(sv).Add(x1.Mul(cv)).Store(f32x8At(pv, i+half))
			}
			if i < pairs {
				// The same lane arithmetic, masked.
				m := tailMask8(pairs - i)
				x0, x1 := loadMasked8(pv, i, m), loadMasked8(pv, i+half, m)
				cv, sv := loadMasked8(pc, i, m), loadMasked8(ps, i, m)
				storeF32x8Tail(x0.Mul(cv).Sub(x1.Mul(sv)), v[i:pairs])
				storeF32x8Tail(x0.Mul(sv).Add(x1.Mul(cv)), v[i+half:i+half+pairs-i])
			}
			continue
		}
		n := 2 * pairs
		j := 0
		for ; j+8 <= n; j += 8 {
			xv := archsimd.LoadFloat32x8(f32x8At(pv, j))
			sw := xv.Permute(archsimd.LoadUint32x8(&swapPairs8))
			xv.Mul(archsimd.LoadFloat32x8(f32x8At(pc, j))).Add(sw.Mul(archsimd.LoadFloat32x8(f32x8At(ps, j)))).Store(f32x8At(pv, j))
		}
		if j < n {
			// Whole pairs, so the swap stays inside the loaded lanes; with
			// s[j] = -s[j+1] (RoPE's table) this is x0·c - x1·s, x1·c + x0·s.
			m := tailMask8(n - j)
			xv := loadMasked8(pv, j, m)
			sw := xv.Permute(archsimd.LoadUint32x8(&swapPairs8))
			storeF32x8Tail(xv.Mul(loadMasked8(pc, j, m)).Add(sw.Mul(loadMasked8(ps, j, m))), v[j:n])
		}
	}
	archsimd.ClearAVXUpperBits()
}

// exp8 is exp512 on 8 lanes (same arithmetic, same 0 below the range and
// NaN kept).
func exp8(x archsimd.Float32x8) archsimd.Float32x8 {
	in := x
	x = x.Max(archsimd.BroadcastFloat32x8(expLo)).Min(archsimd.BroadcastFloat32x8(expHi))
	n := x.Mul(archsimd.BroadcastFloat32x8(log2e)).RoundToEven()
	r := n.MulAdd(archsimd.BroadcastFloat32x8(-ln2Hi), x)
	r = n.MulAdd(archsimd.BroadcastFloat32x8(-ln2Lo), r)
	p := archsimd.BroadcastFloat32x8(expC5)
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(expC4))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(expC3))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(expC2))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(expC1))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x8(expC0))
	p = p.MulAdd(r.Mul(r), r).Add(archsimd.BroadcastFloat32x8(1))
	pow := n.ConvertToInt32().Add(archsimd.BroadcastInt32x8(127)).ShiftAllLeft(23).AsFloat32x8()
	e := p.Mul(pow).Masked(in.GreaterEqual(archsimd.BroadcastFloat32x8(expLo)))
	return in.Merge(e, in.IsNaN())
}

func avx2SiLUMul(gate, up []float32) {
	n := len(gate)
	up = up[:n]
	pg, pu := f32ptr(gate), f32ptr(up)
	one := archsimd.BroadcastFloat32x8(1)
	var zero archsimd.Float32x8
	i := 0
	for ; i+8 <= n; i += 8 {
		g := archsimd.LoadFloat32x8(f32x8At(pg, i))
		g.Div(one.Add(exp8(zero.Sub(g)))).Mul(archsimd.LoadFloat32x8(f32x8At(pu, i))).Store(f32x8At(pg, i))
	}
	if i < n {
		g := loadF32x8Tail(gate[i:])
		storeF32x8Tail(g.Div(one.Add(exp8(zero.Sub(g)))).Mul(loadF32x8Tail(up[i:])), gate[i:])
	}
	archsimd.ClearAVXUpperBits()
}

func avx2Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	// Both return with the vector state clean.
	sum := avx2ExpSum(x, avx2Max(x))
	inv := 1 / sum
	px := f32ptr(x)
	sv := archsimd.BroadcastFloat32x8(inv)
	i := 0
	for ; i+8 <= len(x); i += 8 {
		archsimd.LoadFloat32x8(f32x8At(px, i)).Mul(sv).Store(f32x8At(px, i))
	}
	if i < len(x) {
		storeF32x8Tail(loadF32x8Tail(x[i:]).Mul(sv), x[i:])
	}
	archsimd.ClearAVXUpperBits()
}

func avx2Max(x []float32) float32 {
	var q [4]float32
	n := len(x)
	px := f32ptr(x)
	mv := archsimd.BroadcastFloat32x8(x[0])
	i := 0
	for ; i+8 <= n; i += 8 {
		mv = mv.Max(archsimd.LoadFloat32x8(f32x8At(px, i)))
	}
	// Go's max (NaN and signed zero as the scalar code has them) on clean
	// vector state.
	avx2Leave(mv.GetLo().Max(mv.GetHi()), &q)
	m := max(max(q[0], q[1]), max(q[2], q[3]))
	for ; i < n; i++ {
		m = max(m, x[i])
	}
	return m
}

// avx2ExpSum is avx512ExpSum in two halves (same values, same sum order).
func avx2ExpSum(x []float32, m float32) float32 {
	var r [4]float32
	n := len(x)
	px := f32ptr(x)
	mv := archsimd.BroadcastFloat32x8(m)
	var acc acc16
	i := 0
	for ; i+16 <= n; i += 16 {
		e0 := exp8(archsimd.LoadFloat32x8(f32x8At(px, i)).Sub(mv))
		e1 := exp8(archsimd.LoadFloat32x8(f32x8At(px, i+8)).Sub(mv))
		e0.Store(f32x8At(px, i))
		e1.Store(f32x8At(px, i+8))
		acc.lo, acc.hi = acc.lo.Add(e0), acc.hi.Add(e1)
	}
	if i < n {
		// The padding lanes add +0, as a zero-padded chunk's would.
		t := newTail16(n - i)
		e0 := exp8(loadMasked8(px, i, t.lo).Sub(mv)).Masked(t.lo)
		storeF32x8Tail(e0, x[i:])
		acc.lo = acc.lo.Add(e0)
		if t.m > 8 {
			e1 := exp8(loadMasked8(px, i+8, t.hi).Sub(mv)).Masked(t.hi)
			storeF32x8Tail(e1, x[i+8:])
			acc.hi = acc.hi.Add(e1)
		}
	}
	avx2Leave(acc.sum4(), &r)
	return r[0]
}

func avx2Add(dst, src []float32) {
	n := len(dst)
	src = src[:n]
	pd, ps := f32ptr(dst), f32ptr(src)
	i := 0
	for ; i+8 <= n; i += 8 {
		archsimd.LoadFloat32x8(f32x8At(pd, i)).Add(archsimd.LoadFloat32x8(f32x8At(ps, i))).Store(f32x8At(pd, i))
	}
	if i < n {
		storeF32x8Tail(loadF32x8Tail(dst[i:]).Add(loadF32x8Tail(src[i:])), dst[i:])
	}
	archsimd.ClearAVXUpperBits()
}

// avx2Argmax finds the max in vectors, then its first index. A NaN sends
// it to genericArgmax, whose scan is the rule (doc.go): VMAXPS drops or
// keeps NaNs by operand order, so the vector max means nothing then.
func avx2Argmax(x []float32) int {
	m, nan := avx2MaxNaN(x) // returns with the vector state clean
	if !nan {
		for i, v := range x {
			if v == m {
				return i
			}
		}
	}
	return genericArgmax(x)
}

// avx2MaxNaN is avx2Max and whether x holds a NaN.
func avx2MaxNaN(x []float32) (float32, bool) {
	var q [4]float32
	n := len(x)
	px := f32ptr(x)
	mv := archsimd.BroadcastFloat32x8(x[0])
	var nan uint8
	i := 0
	for ; i+8 <= n; i += 8 {
		v := archsimd.LoadFloat32x8(f32x8At(px, i))
		nan |= v.IsNaN().ToBits()
		mv = mv.Max(v)
	}
	avx2Leave(mv.GetLo().Max(mv.GetHi()), &q)
	m := max(max(q[0], q[1]), max(q[2], q[3]))
	for ; i < n; i++ {
		m = max(m, x[i]) // Go's max: a NaN in the tail makes m NaN
	}
	return m, nan != 0 || m != m
}

// avx2Attention is avx512Attention with 16-lane accumulators in halves,
// one head at a time.
func avx2Attention(a *attnArgs, w *worker, i, h0, h1 int) {
	// avx2AttentionHead scores positions four at a time into whole groups.
	w.scores = growF32(w.scores, (a.start+i+2+3)&^3) // and a sink's slot
	for h := h0; h < h1; h++ {
		avx2AttentionHead(a, w, i, h)
	}
}

func avx2AttentionHead(a *attnArgs, w *worker, i, h int) {
	hd := a.headDim
	n := a.start + i + 1
	g := h / (a.nHeads / a.nKV)
	q := a.q[(i*a.nHeads+h)*hd:][:hd]
	// Scoring starts at the window's first group of four; the scores
	// before lo go unread.
	lo := a.first(n)
	scores := w.scores[lo:n]
	sp := f32ptr(w.scores)
	p := lo &^ 3
	// Four positions at a time share the query loads; each position's dot
	// product is avx2Dot's, chunk by chunk, a partial last chunk masked.
	full := hd &^ 15
	qp, kp := f32ptr(q), f32ptr(a.k)
	t := newTail16(hd - full)
	var qt acc16
	if full < hd {
		qt = t.load(qp, full)
	}
	// A short last group repeats position n-1; w.scores has room for
	// the whole group (avx2Attention) and the extra scores go unread.
	last := n - 1
	for ; p < n; p += 4 {
		k0, k1 := unsafe.Add(kp, 4*a.rowOff(p, g)), unsafe.Add(kp, 4*a.rowOff(min(p+1, last), g))
		k2, k3 := unsafe.Add(kp, 4*a.rowOff(min(p+2, last), g)), unsafe.Add(kp, 4*a.rowOff(min(p+3, last), g))
		var c0, c1, c2, c3 acc16
		for d := 0; d < full; d += 16 {
			q0, q1 := archsimd.LoadFloat32x8(f32x8At(qp, d)), archsimd.LoadFloat32x8(f32x8At(qp, d+8))
			c0 = c0.fma(q0, q1, archsimd.LoadFloat32x8(f32x8At(k0, d)), archsimd.LoadFloat32x8(f32x8At(k0, d+8)))
			c1 = c1.fma(q0, q1, archsimd.LoadFloat32x8(f32x8At(k1, d)), archsimd.LoadFloat32x8(f32x8At(k1, d+8)))
			c2 = c2.fma(q0, q1, archsimd.LoadFloat32x8(f32x8At(k2, d)), archsimd.LoadFloat32x8(f32x8At(k2, d+8)))
			c3 = c3.fma(q0, q1, archsimd.LoadFloat32x8(f32x8At(k3, d)), archsimd.LoadFloat32x8(f32x8At(k3, d+8)))
		}
		if full < hd {
			c0, c1 = c0.fmaTail(qt, k0, full, t), c1.fmaTail(qt, k1, full, t)
			c2, c3 = c2.fmaTail(qt, k2, full, t), c3.fmaTail(qt, k3, full, t)
		}
		hsum4acc16(c0, c1, c2, c3).Mul(archsimd.BroadcastFloat32x4(a.scale)).Store((*[4]float32)(unsafe.Add(sp, 4*p)))
	}
	if a.capped { // a byte test: a float compare would be legacy SSE
		archsimd.ClearAVXUpperBits()
		a.capScores(scores)
	}
	// A sink is one more score after the last, in the softmax only
	// (copied as an integer: a float move would be legacy SSE).
	soft := scores
	if a.sinks != nil {
		*(*uint32)(unsafe.Pointer(&w.scores[n])) = *(*uint32)(unsafe.Pointer(&a.sinks[h]))
		soft = w.scores[lo : n+1]
	}
	// avx2Max and avx2ExpSum return with the vector state clean, so 1/sum
	// is on clean state too.
	sum := avx2ExpSum(soft, avx2Max(soft))
	inv := archsimd.BroadcastFloat32x8(1 / sum)
	o := a.out[(i*a.nHeads+h)*hd:][:hd]
	d := 0
	if hd%32 == 0 {
		// Four independent 8-lane chains per pass over the positions.
		po, vp := f32ptr(o), f32ptr(a.v)
		for ; d < hd; d += 32 {
			var a0, a1, a2, a3 archsimd.Float32x8
			for p, e := range scores {
				row := unsafe.Add(vp, 4*(a.rowOff(lo+p, g)+d))
				ev := archsimd.BroadcastFloat32x8(e)
				a0 = archsimd.LoadFloat32x8(f32x8At(row, 0)).MulAdd(ev, a0)
				a1 = archsimd.LoadFloat32x8(f32x8At(row, 8)).MulAdd(ev, a1)
				a2 = archsimd.LoadFloat32x8(f32x8At(row, 16)).MulAdd(ev, a2)
				a3 = archsimd.LoadFloat32x8(f32x8At(row, 24)).MulAdd(ev, a3)
			}
			a0.Mul(inv).Store(f32x8At(po, d))
			a1.Mul(inv).Store(f32x8At(po, d+8))
			a2.Mul(inv).Store(f32x8At(po, d+16))
			a3.Mul(inv).Store(f32x8At(po, d+24))
		}
		archsimd.ClearAVXUpperBits()
		return
	}
	vp := f32ptr(a.v)
	for ; d+8 <= hd; d += 8 {
		var acc archsimd.Float32x8
		for p, e := range scores {
			acc = archsimd.LoadFloat32x8(f32x8At(vp, a.rowOff(lo+p, g)+d)).MulAdd(archsimd.BroadcastFloat32x8(e), acc)
		}
		acc.Mul(inv).Store(f32x8At(f32ptr(o), d))
	}
	if d < hd {
		tm := tailMask8(hd - d)
		var acc archsimd.Float32x8
		for p, e := range scores {
			acc = loadMasked8(vp, a.rowOff(lo+p, g)+d, tm).MulAdd(archsimd.BroadcastFloat32x8(e), acc)
		}
		storeF32x8Tail(acc.Mul(inv), o[d:])
	}
	archsimd.ClearAVXUpperBits()
}
