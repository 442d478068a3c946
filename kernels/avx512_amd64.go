//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// avx512 is the AVX-512 (F, BW, DQ, VL) backend. Its matmul uses the
// assembly tiles (and VNNI for Q8_0 where the CPU has it); avx512Go is the
// same backend with only archsimd tiles, kept as the fallback's reference:
// the two must agree bit for bit.
var (
	avx512   = newAVX512("avx512", true, archsimd.X86.AVX512VNNI())
	avx512Go = newAVX512("avx512-go", false, false)
)

func newAVX512(name string, asm, vnni bool) *backend {
	k := avx512Tiles{f32x4: f32Tile4x4, f16x1: f16Tile4x1, bf16x1: bf16Tile4x1, cvtF16: cvtF16Row512, q8x4: q8Tile4x4, q8x1: q8Tile4x1}
	if asm {
		k.f32x4, k.cvtF16 = f32Tile4x4asm, cvtF16RowAsm
		k.f16r1, k.bf16r1 = f16Row1asm, bf16Row1asm
		if vnni {
			k.q8x4, k.q8r1 = q8VNNITile4x4, q8VNNIRow1
		}
	}
	return &backend{
		name:        name,
		matmul:      k.matmul,
		quantizeAct: avx512QuantizeAct,
		mmLanes:     16,
		dot:         avx512Dot,
		rmsnorm:     avx512RMSNorm,
		rope:        avx512RoPE,
		siluMul:     avx512SiLUMul,
		attention:   avx512Attention,
		softmax:     avx512Softmax,
		add:         avx512Add,
		argmax:      avx512Argmax,
	}
}

// avx512Tiles is the set of matmul tiles one AVX-512 backend runs.
type avx512Tiles struct {
	f32x4  func(res *[16]float32, w0, w1, w2, w3, x unsafe.Pointer, ldx, cols int)
	f16x1  func(res *[16]float32, w0, w1, w2, w3, x unsafe.Pointer, cols int)
	bf16x1 func(res *[16]float32, w0, w1, w2, w3, x unsafe.Pointer, cols int)
	// f16r1 and bf16r1, when set, are the one-row single-token tiles the
	// assembly backend uses instead of the 4-row ones (same results).
	f16r1, bf16r1 func(res *float32, w, x unsafe.Pointer, cols int)
	q8r1          func(res *float32, w, qs, xs unsafe.Pointer, nb int)
	cvtF16        func(dst []float32, src unsafe.Pointer, n int)
	q8x4          func(res *[16]float32, w0, w1, w2, w3, qs unsafe.Pointer, qStride int, xs unsafe.Pointer, sStride, nb int)
	q8x1          func(res *[16]float32, w0, w1, w2, w3, qs, xs unsafe.Pointer, nb int)
}

func (k *avx512Tiles) matmul(a *mmArgs, w *worker, r0, r1, t0, t1 int) {
	m := a.w
	switch m.Type {
	case F32:
		k.f32Block(a, w, bptr(m.Data), a.rb, 0, r0, r1, t0, t1)
	case F16, BF16:
		if t1-t0 >= 4 {
			// Convert the rows once, then run the float32 tiles over them:
			// the products and their order are exactly those of the direct
			// kernels below, since the conversion is exact.
			conv := k.cvtF16
			if m.Type == BF16 {
				conv = cvtBF16Row512
			}
			w.f32 = growF32(w.f32, (r1-r0)*m.Cols)
			packRows(w.f32, m, a.rb, r0, r1, conv)
			k.f32Block(a, w, f32ptr(w.f32), 4*m.Cols, r0, r0, r1, t0, t1)
			return
		}
		k.halfBlock(a, w, m.Type == BF16, r0, r1, t0, t1)
	case Q8_0:
		k.q8Block(a, w, r0, r1, t0, t1)
	}
}

// f32Block runs the float32 tiles over rows [r0,r1) and tokens [t0,t1);
// row r's data is at base + (r-baseRow)·rb.
func (k *avx512Tiles) f32Block(a *mmArgs, wk *worker, base unsafe.Pointer, rb, baseRow, r0, r1, t0, t1 int) {
	rows, cols := a.w.Rows, a.w.Cols
	xp := f32ptr(a.x)
	// The tiles are called through function values, so a local result
	// array would escape; the worker's does not allocate.
	res := &wk.res
	t := t0
	for ; t+4 <= t1; t += 4 {
		x := unsafe.Add(xp, 4*t*cols)
		for r := r0; r < r1; r += 4 {
			p0, p1, p2, p3 := rowPtrs(base, rb, r-baseRow, r1-baseRow)
			k.f32x4(res, p0, p1, p2, p3, x, 4*cols, cols)
			storeTile(a.out, rows, r, r1, t, 4, res)
		}
	}
	for ; t < t1; t++ {
		x := unsafe.Add(xp, 4*t*cols)
		for r := r0; r < r1; r += 4 {
			p0, p1, p2, p3 := rowPtrs(base, rb, r-baseRow, r1-baseRow)
			f32Tile4x1(res, p0, p1, p2, p3, x, cols)
			storeTile(a.out, rows, r, r1, t, 1, res)
		}
	}
}

// storeTile writes res[tt*4+i] (token t+tt, row r+i) for the rows below r1.
func storeTile(out []float32, rows, r, r1, t, nt int, res *[16]float32) {
	nr := min(4, r1-r)
	for tt := range nt {
		o := out[(t+tt)*rows+r:][:nr]
		for i := range o {
			o[i] = res[tt*4+i]
		}
	}
}

// f32Tile4x4: 4 weight rows (float32, as bytes) × 4 tokens (stride ldx bytes).
func f32Tile4x4(res *[16]float32, w0, w1, w2, w3, x unsafe.Pointer, ldx, cols int) {
	var a00, a01, a02, a03, a10, a11, a12, a13 archsimd.Float32x16
	var a20, a21, a22, a23, a30, a31, a32, a33 archsimd.Float32x16
	x0, x1, x2, x3 := x, unsafe.Add(x, ldx), unsafe.Add(x, 2*ldx), unsafe.Add(x, 3*ldx)
	for c := 0; c < cols; c += 16 {
		// The last partial chunk loads masked: zero-padded.
		m := tailMask16(min(16, cols-c))
		v0, v1, v2, v3 := loadMasked16(w0, c, m), loadMasked16(w1, c, m), loadMasked16(w2, c, m), loadMasked16(w3, c, m)
		u := loadMasked16(x0, c, m)
		a00, a01, a02, a03 = v0.MulAdd(u, a00), v1.MulAdd(u, a01), v2.MulAdd(u, a02), v3.MulAdd(u, a03)
		u = loadMasked16(x1, c, m)
		a10, a11, a12, a13 = v0.MulAdd(u, a10), v1.MulAdd(u, a11), v2.MulAdd(u, a12), v3.MulAdd(u, a13)
		u = loadMasked16(x2, c, m)
		a20, a21, a22, a23 = v0.MulAdd(u, a20), v1.MulAdd(u, a21), v2.MulAdd(u, a22), v3.MulAdd(u, a23)
		u = loadMasked16(x3, c, m)
		a30, a31, a32, a33 = v0.MulAdd(u, a30), v1.MulAdd(u, a31), v2.MulAdd(u, a32), v3.MulAdd(u, a33)
	}
	storeSums4(res, 0, a00, a01, a02, a03)
	storeSums4(res, 4, a10, a11, a12, a13)
	storeSums4(res, 8, a20, a21, a22, a23)
	storeSums4(res, 12, a30, a31, a32, a33)
	archsimd.ClearAVXUpperBits() // the caller copies res with scalar code
}

// storeSums4 stores the sums of four accumulators at res[i:i+4].
func storeSums4(res *[16]float32, i int, a, b, c, d archsimd.Float32x16) {
	hsum4x16(a, b, c, d).Store((*[4]float32)(res[i : i+4]))
}

// f32Tile4x1: 4 weight rows × 1 token.
func f32Tile4x1(res *[16]float32, w0, w1, w2, w3, x unsafe.Pointer, cols int) {
	var a0, a1, a2, a3 archsimd.Float32x16
	c := 0
	for ; c+16 <= cols; c += 16 {
		u := archsimd.LoadFloat32x16(f32At(x, c))
		a0 = archsimd.LoadUint8x64(bytesAt(w0, 4*c)).AsFloat32x16().MulAdd(u, a0)
		a1 = archsimd.LoadUint8x64(bytesAt(w1, 4*c)).AsFloat32x16().MulAdd(u, a1)
		a2 = archsimd.LoadUint8x64(bytesAt(w2, 4*c)).AsFloat32x16().MulAdd(u, a2)
		a3 = archsimd.LoadUint8x64(bytesAt(w3, 4*c)).AsFloat32x16().MulAdd(u, a3)
	}
	if n := cols - c; n > 0 {
		u := loadF32x16Tail(unsafe.Slice((*float32)(unsafe.Add(x, 4*c)), n))
		a0 = loadF32Part(w0, c, n).MulAdd(u, a0)
		a1 = loadF32Part(w1, c, n).MulAdd(u, a1)
		a2 = loadF32Part(w2, c, n).MulAdd(u, a2)
		a3 = loadF32Part(w3, c, n).MulAdd(u, a3)
	}
	storeSums4(res, 0, a0, a1, a2, a3)
	archsimd.ClearAVXUpperBits()
}

// loadF32Part loads n < 16 float32 weights from row bytes at column c, zero-padded.
func loadF32Part(w unsafe.Pointer, c, n int) archsimd.Float32x16 {
	return loadMasked16(w, c, tailMask16(n))
}

// halfBlock is the direct F16/BF16 kernel for fewer than 4 tokens:
// weights are converted in registers, 16 at a time.
func (k *avx512Tiles) halfBlock(a *mmArgs, wk *worker, bf bool, r0, r1, t0, t1 int) {
	rows, cols := a.w.Rows, a.w.Cols
	base, xp := bptr(a.w.Data), f32ptr(a.x)
	res := &wk.res
	if row1 := k.f16r1; row1 != nil {
		if bf {
			row1 = k.bf16r1
		}
		for t := t0; t < t1; t++ {
			x := unsafe.Add(xp, 4*t*cols)
			out := a.out[t*rows:]
			for r := r0; r < r1; r++ {
				row1(&out[r], unsafe.Add(base, r*a.rb), x, cols)
			}
		}
		return
	}
	for t := t0; t < t1; t++ {
		x := unsafe.Add(xp, 4*t*cols)
		for r := r0; r < r1; r += 4 {
			p0, p1, p2, p3 := rowPtrs(base, a.rb, r, r1)
			if bf {
				k.bf16x1(res, p0, p1, p2, p3, x, cols)
			} else {
				k.f16x1(res, p0, p1, p2, p3, x, cols)
			}
			storeTile(a.out, rows, r, r1, t, 1, res)
		}
	}
}

func loadHalf(p unsafe.Pointer, c int) archsimd.Uint16x16 {
	return archsimd.LoadUint8x32(bytes32At(p, 2*c)).AsUint16x16()
}

// loadHalfPart loads n < 16 halves at column c, zero-padded (a masked
// load: a copy to a buffer would run legacy SSE between vector code).
//
//go:nocheckptr
func loadHalfPart(p unsafe.Pointer, c, n int) archsimd.Uint16x16 {
	return archsimd.LoadMaskedUint16x32((*[32]uint16)(unsafe.Add(p, 2*c)), archsimd.Mask16x32FromBits(uint32(1)<<n-1)).GetLo()
}

// f16to32x16 converts 16 halves exactly: the sign-extended half shifted left
// by 13 with bits 28-30 cleared is sign | exponent·mantissa in float32
// position; scaling by 2^112 rebiases normals and normalizes subnormals.
// Inf/NaN (|h| >= 0x7c00) come out as ±2^16·1.m and get their exponent set.
// (NaN payloads are kept but not quieted.)
func f16to32x16(h archsimd.Uint16x16) archsimd.Float32x16 {
	v := h.AsInt16x16().ExtendToInt32().ShiftAllLeft(13).And(archsimd.BroadcastInt32x16(-0x70000001))
	f := v.AsFloat32x16().Mul(archsimd.BroadcastFloat32x16(0x1p112))
	bits := f.AsUint32x16()
	big := bits.And(archsimd.BroadcastUint32x16(0x7fffffff)).GreaterEqual(archsimd.BroadcastUint32x16(0x47800000))
	return bits.Or(archsimd.BroadcastUint32x16(0x7f800000)).Merge(bits, big).AsFloat32x16()
}

func bf16to32x16(h archsimd.Uint16x16) archsimd.Float32x16 {
	return h.ExtendToUint32().ShiftAllLeft(16).AsFloat32x16()
}

func f16Tile4x1(res *[16]float32, w0, w1, w2, w3, x unsafe.Pointer, cols int) {
	var a0, a1, a2, a3 archsimd.Float32x16
	c := 0
	for ; c+16 <= cols; c += 16 {
		u := archsimd.LoadFloat32x16(f32At(x, c))
		a0 = f16to32x16(loadHalf(w0, c)).MulAdd(u, a0)
		a1 = f16to32x16(loadHalf(w1, c)).MulAdd(u, a1)
		a2 = f16to32x16(loadHalf(w2, c)).MulAdd(u, a2)
		a3 = f16to32x16(loadHalf(w3, c)).MulAdd(u, a3)
	}
	if n := cols - c; n > 0 {
		u := loadF32x16Tail(unsafe.Slice((*float32)(unsafe.Add(x, 4*c)), n))
		a0 = f16to32x16(loadHalfPart(w0, c, n)).MulAdd(u, a0)
		a1 = f16to32x16(loadHalfPart(w1, c, n)).MulAdd(u, a1)
		a2 = f16to32x16(loadHalfPart(w2, c, n)).MulAdd(u, a2)
		a3 = f16to32x16(loadHalfPart(w3, c, n)).MulAdd(u, a3)
	}
	storeSums4(res, 0, a0, a1, a2, a3)
	archsimd.ClearAVXUpperBits()
}

func bf16Tile4x1(res *[16]float32, w0, w1, w2, w3, x unsafe.Pointer, cols int) {
	var a0, a1, a2, a3 archsimd.Float32x16
	c := 0
	for ; c+16 <= cols; c += 16 {
		u := archsimd.LoadFloat32x16(f32At(x, c))
		a0 = bf16to32x16(loadHalf(w0, c)).MulAdd(u, a0)
		a1 = bf16to32x16(loadHalf(w1, c)).MulAdd(u, a1)
		a2 = bf16to32x16(loadHalf(w2, c)).MulAdd(u, a2)
		a3 = bf16to32x16(loadHalf(w3, c)).MulAdd(u, a3)
	}
	if n := cols - c; n > 0 {
		u := loadF32x16Tail(unsafe.Slice((*float32)(unsafe.Add(x, 4*c)), n))
		a0 = bf16to32x16(loadHalfPart(w0, c, n)).MulAdd(u, a0)
		a1 = bf16to32x16(loadHalfPart(w1, c, n)).MulAdd(u, a1)
		a2 = bf16to32x16(loadHalfPart(w2, c, n)).MulAdd(u, a2)
		a3 = bf16to32x16(loadHalfPart(w3, c, n)).MulAdd(u, a3)
	}
	storeSums4(res, 0, a0, a1, a2, a3)
	archsimd.ClearAVXUpperBits()
}

// cvtF16Row512 / cvtBF16Row512 convert n halves at src to float32.
func cvtF16Row512(dst []float32, src unsafe.Pointer, n int) {
	d := f32ptr(dst)
	c := 0
	for ; c+16 <= n; c += 16 {
		f16to32x16(loadHalf(src, c)).Store(f32At(d, c))
	}
	if c < n {
		storeF32x16Tail(f16to32x16(loadHalfPart(src, c, n-c)), dst[c:n])
	}
	archsimd.ClearAVXUpperBits()
}

func cvtBF16Row512(dst []float32, src unsafe.Pointer, n int) {
	d := f32ptr(dst)
	c := 0
	for ; c+16 <= n; c += 16 {
		bf16to32x16(loadHalf(src, c)).Store(f32At(d, c))
	}
	if c < n {
		storeF32x16Tail(bf16to32x16(loadHalfPart(src, c, n-c)), dst[c:n])
	}
	archsimd.ClearAVXUpperBits()
}

// q8Block runs the Q8_0 tiles (weights × quantized activations).
func (k *avx512Tiles) q8Block(a *mmArgs, wk *worker, r0, r1, t0, t1 int) {
	rows := a.w.Rows
	base := bptr(a.w.Data)
	q := a.act
	qp, sp := bptr(q.qs), f32ptr(q.xs)
	res := &wk.res
	t := t0
	for ; t+4 <= t1; t += 4 {
		qt, st := unsafe.Add(qp, t*q.qStride), unsafe.Add(sp, 4*t*q.sStride)
		for r := r0; r < r1; r += 4 {
			p0, p1, p2, p3 := rowPtrs(base, a.rb, r, r1)
			k.q8x4(res, p0, p1, p2, p3, qt, q.qStride, st, 4*q.sStride, q.nb)
			storeTile(a.out, rows, r, r1, t, 4, res)
		}
	}
	for ; t < t1; t++ {
		qt, st := unsafe.Add(qp, t*q.qStride), unsafe.Add(sp, 4*t*q.sStride)
		if k.q8r1 != nil {
			out := a.out[t*rows:]
			for r := r0; r < r1; r++ {
				k.q8r1(&out[r], unsafe.Add(base, r*a.rb), qt, st, q.nb)
			}
			continue
		}
		for r := r0; r < r1; r += 4 {
			p0, p1, p2, p3 := rowPtrs(base, a.rb, r, r1)
			k.q8x1(res, p0, p1, p2, p3, qt, st, q.nb)
			storeTile(a.out, rows, r, r1, t, 1, res)
		}
	}
}

// q8Pair loads weight blocks 2p and 2p+1 (zero if past nb) of a row as one
// vector, and their scales as [d0 ×8, d1 ×8].
func q8Pair(w unsafe.Pointer, p, nb int) (archsimd.Int8x64, archsimd.Float32x16) {
	off := 2 * p * Q8BlockBytes
	var v archsimd.Int8x64
	v = v.SetLo(archsimd.LoadInt8x32(i8x32At(w, off+2)))
	// The scales are broadcast straight from the table (a scalar float
	// variable would cost legacy-SSE moves between the vector code).
	s := archsimd.BroadcastFloat32x16(f16Table[u16At(w, off)])
	lo := archsimd.Mask32x16FromBits(0x00ff)
	if 2*p+1 < nb {
		v = v.SetHi(archsimd.LoadInt8x32(i8x32At(w, off+Q8BlockBytes+2)))
		return v, s.Merge(archsimd.BroadcastFloat32x16(f16Table[u16At(w, off+Q8BlockBytes)]), lo)
	}
	return v, s.Masked(lo)
}

// q8Dot16 is the 16-lane partial sums of |w|·(sign(w)·x) for one block pair:
// VPMADDUBSW takes unsigned × signed bytes, so the sign moves onto x
// (|w| <= 128, |x| <= 127: the int16 pair sums cannot saturate).
func q8Dot16(aw archsimd.Uint8x64, neg archsimd.Mask8x64, x, nx archsimd.Int8x64) archsimd.Float32x16 {
	return aw.DotProductPairsSaturated(nx.Merge(x, neg)).DotProductPairs(archsimd.BroadcastInt16x32(1)).ConvertToFloat32()
}

func q8Tile4x4(res *[16]float32, w0, w1, w2, w3, qs unsafe.Pointer, qStride int, xs unsafe.Pointer, sStride, nb int) {
	var a00, a01, a02, a03, a10, a11, a12, a13 archsimd.Float32x16
	var a20, a21, a22, a23, a30, a31, a32, a33 archsimd.Float32x16
	var zero archsimd.Int8x64
	q1, q2, q3 := unsafe.Add(qs, qStride), unsafe.Add(qs, 2*qStride), unsafe.Add(qs, 3*qStride)
	s1, s2, s3 := unsafe.Add(xs, sStride), unsafe.Add(xs, 2*sStride), unsafe.Add(xs, 3*sStride)
	pairs := (nb + 1) / 2
	for p := range pairs {
		v0, d0 := q8Pair(w0, p, nb)
		v1, d1 := q8Pair(w1, p, nb)
		v2, d2 := q8Pair(w2, p, nb)
		v3, d3 := q8Pair(w3, p, nb)
		aw0, n0 := v0.Abs().AsUint8x64(), v0.Less(zero)
		aw1, n1 := v1.Abs().AsUint8x64(), v1.Less(zero)
		aw2, n2 := v2.Abs().AsUint8x64(), v2.Less(zero)
		aw3, n3 := v3.Abs().AsUint8x64(), v3.Less(zero)

		x := archsimd.LoadInt8x64(i8At(qs, 64*p))
		nx := zero.Sub(x)
		dx := archsimd.LoadFloat32x16(f32At(xs, 16*p))
		a00 = q8Dot16(aw0, n0, x, nx).MulAdd(d0.Mul(dx), a00)
		a01 = q8Dot16(aw1, n1, x, nx).MulAdd(d1.Mul(dx), a01)
		a02 = q8Dot16(aw2, n2, x, nx).MulAdd(d2.Mul(dx), a02)
		a03 = q8Dot16(aw3, n3, x, nx).MulAdd(d3.Mul(dx), a03)

		x = archsimd.LoadInt8x64(i8At(q1, 64*p))
		nx = zero.Sub(x)
		dx = archsimd.LoadFloat32x16(f32At(s1, 16*p))
		a10 = q8Dot16(aw0, n0, x, nx).MulAdd(d0.Mul(dx), a10)
		a11 = q8Dot16(aw1, n1, x, nx).MulAdd(d1.Mul(dx), a11)
		a12 = q8Dot16(aw2, n2, x, nx).MulAdd(d2.Mul(dx), a12)
		a13 = q8Dot16(aw3, n3, x, nx).MulAdd(d3.Mul(dx), a13)

		x = archsimd.LoadInt8x64(i8At(q2, 64*p))
		nx = zero.Sub(x)
		dx = archsimd.LoadFloat32x16(f32At(s2, 16*p))
		a20 = q8Dot16(aw0, n0, x, nx).MulAdd(d0.Mul(dx), a20)
		a21 = q8Dot16(aw1, n1, x, nx).MulAdd(d1.Mul(dx), a21)
		a22 = q8Dot16(aw2, n2, x, nx).MulAdd(d2.Mul(dx), a22)
		a23 = q8Dot16(aw3, n3, x, nx).MulAdd(d3.Mul(dx), a23)

		x = archsimd.LoadInt8x64(i8At(q3, 64*p))
		nx = zero.Sub(x)
		dx = archsimd.LoadFloat32x16(f32At(s3, 16*p))
		a30 = q8Dot16(aw0, n0, x, nx).MulAdd(d0.Mul(dx), a30)
		a31 = q8Dot16(aw1, n1, x, nx).MulAdd(d1.Mul(dx), a31)
		a32 = q8Dot16(aw2, n2, x, nx).MulAdd(d2.Mul(dx), a32)
		a33 = q8Dot16(aw3, n3, x, nx).MulAdd(d3.Mul(dx), a33)
	}
	storeSums4(res, 0, a00, a01, a02, a03)
	storeSums4(res, 4, a10, a11, a12, a13)
	storeSums4(res, 8, a20, a21, a22, a23)
	storeSums4(res, 12, a30, a31, a32, a33)
	archsimd.ClearAVXUpperBits() // the caller copies res with scalar code
}

func q8Tile4x1(res *[16]float32, w0, w1, w2, w3, qs, xs unsafe.Pointer, nb int) {
	var a0, a1, a2, a3 archsimd.Float32x16
	var zero archsimd.Int8x64
	pairs := (nb + 1) / 2
	for p := range pairs {
		x := archsimd.LoadInt8x64(i8At(qs, 64*p))
		nx := zero.Sub(x)
		dx := archsimd.LoadFloat32x16(f32At(xs, 16*p))
		v0, d0 := q8Pair(w0, p, nb)
		a0 = q8Dot16(v0.Abs().AsUint8x64(), v0.Less(zero), x, nx).MulAdd(d0.Mul(dx), a0)
		v1, d1 := q8Pair(w1, p, nb)
		a1 = q8Dot16(v1.Abs().AsUint8x64(), v1.Less(zero), x, nx).MulAdd(d1.Mul(dx), a1)
		v2, d2 := q8Pair(w2, p, nb)
		a2 = q8Dot16(v2.Abs().AsUint8x64(), v2.Less(zero), x, nx).MulAdd(d2.Mul(dx), a2)
		v3, d3 := q8Pair(w3, p, nb)
		a3 = q8Dot16(v3.Abs().AsUint8x64(), v3.Less(zero), x, nx).MulAdd(d3.Mul(dx), a3)
	}
	storeSums4(res, 0, a0, a1, a2, a3)
	archsimd.ClearAVXUpperBits()
}

// avx512QuantizeAct is genericQuantizeAct vectorized; the result is
// identical (same block max, same products, same rounding).
func avx512QuantizeAct(qs []byte, xs []float32, x []float32) {
	nb := len(x) / Q8BlockSize
	xp, qp, sp := f32ptr(x), bptr(qs), f32ptr(xs)
	absMask := archsimd.BroadcastUint32x16(0x7fffffff)
	var zero archsimd.Float32x16
	one, c127 := archsimd.BroadcastFloat32x16(1), archsimd.BroadcastFloat32x16(127)
	for b := range nb {
		v0 := archsimd.LoadFloat32x16(f32At(xp, 32*b))
		v1 := archsimd.LoadFloat32x16(f32At(xp, 32*b+16))
		m := v0.AsUint32x16().And(absMask).AsFloat32x16().Max(v1.AsUint32x16().And(absMask).AsFloat32x16())
		// q8Scale in lanes: d = amax/127, id = 1/d (0 where d == 0).
		dv := bcastMax16(m).Div(c127)
		idv := zero.Merge(one.Div(dv), dv.Equal(zero))
		// |q| <= 127, so the saturating narrowing is exact.
		v0.Mul(idv).RoundToEvenScaled(0).ConvertToInt32().SaturateToInt8().AsUint8x16().Store((*[16]uint8)(unsafe.Add(qp, 32*b)))
		v1.Mul(idv).RoundToEvenScaled(0).ConvertToInt32().SaturateToInt8().AsUint8x16().Store((*[16]uint8)(unsafe.Add(qp, 32*b+16)))
		dv.GetLo().Store(f32x8At(sp, (b>>1)*16+(b&1)*8))
	}
	archsimd.ClearAVXUpperBits()
	if nb&1 == 1 {
		clear(qs[nb*Q8BlockSize : (nb+1)*Q8BlockSize])
		clear(xs[(nb>>1)*16+8 : (nb>>1)*16+16])
	}
}

func avx512Dot(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	pa, pb := f32ptr(a), f32ptr(b)
	var acc archsimd.Float32x16
	i := 0
	for ; i+16 <= n; i += 16 {
		acc = archsimd.LoadFloat32x16(f32At(pa, i)).MulAdd(archsimd.LoadFloat32x16(f32At(pb, i)), acc)
	}
	if i < n {
		acc = loadF32x16Tail(a[i:]).MulAdd(loadF32x16Tail(b[i:]), acc)
	}
	return hsum16(acc)
}

func avx512RMSNorm(out, x, weight []float32, eps float32) {
	rmsNorm512(out, x, weight, archsimd.BroadcastFloat32x16(eps))
}

// rmsNorm512 is avx512RMSNorm with eps in lanes: a float32 argument kept
// across the vector loop would be spilled with legacy MOVSS. It is not
// inlined so that the broadcast stays in its caller, before any vector
// code. rmsScale is computed in lanes, each step the same IEEE operation.
//
//go:noinline
func rmsNorm512(out, x, weight []float32, eps archsimd.Float32x16) {
	n := len(x)
	out, weight = out[:n], weight[:n]
	px, po, pw := f32ptr(x), f32ptr(out), f32ptr(weight)
	var acc archsimd.Float32x16
	i := 0
	for ; i+16 <= n; i += 16 {
		v := archsimd.LoadFloat32x16(f32At(px, i))
		acc = v.MulAdd(v, acc)
	}
	if i < n {
		v := loadMasked16(px, i, tailMask16(n-i))
		acc = v.MulAdd(v, acc)
	}
	// rmsScale: float32(1 / math.Sqrt(float64(ss/float32(n)+eps))).
	t := hsumBcast16(acc).Div(archsimd.BroadcastInt32x16(int32(n)).ConvertToFloat32()).Add(eps)
	sv := archsimd.BroadcastFloat64x4(1).Div(t.GetLo().GetLo().ConvertToFloat64().Sqrt()).ConvertToFloat32().Broadcast1To16()
	i = 0
	for ; i+16 <= n; i += 16 {
		archsimd.LoadFloat32x16(f32At(px, i)).Mul(sv).Mul(archsimd.LoadFloat32x16(f32At(pw, i))).Store(f32At(po, i))
	}
	if i < n {
		m := tailMask16(n - i)
		storeMasked16(loadMasked16(px, i, m).Mul(sv).Mul(loadMasked16(pw, i, m)), po, i, m)
	}
	archsimd.ClearAVXUpperBits()
}

// swapPairs16: see swapPairs8.
var swapPairs16 = [16]uint32{1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14}

func avx512RoPE(x []float32, heads, headDim, pairs int, c, s []float32, neox bool) {
	pc, ps := f32ptr(c), f32ptr(s)
	for h := range heads {
		v := x[h*headDim : (h+1)*headDim]
		pv := f32ptr(v)
		if neox {
			half := pairs
			i := 0
			for ; i+16 <= pairs; i += 16 {
				x0 := archsimd.LoadFloat32x16(f32At(pv, i))
				x1 := archsimd.LoadFloat32x16(f32At(pv, i+half))
				cv, sv := archsimd.LoadFloat32x16(f32At(pc, i)), archsimd.LoadFloat32x16(f32At(ps, i))
				x0.Mul(cv).Sub(x1.Mul(sv)).Store(f32At(pv, i))
				x0.Mul(sv).Add(x1.Mul(cv)).Store(f32At(pv, i+half))
			}
			if i < pairs {
				m := tailMask16(pairs - i)
				x0, x1 := loadMasked16(pv, i, m), loadMasked16(pv, i+half, m)
				cv, sv := loadMasked16(pc, i, m), loadMasked16(ps, i, m)
				storeMasked16(x0.Mul(cv).Sub(x1.Mul(sv)), pv, i, m)
				storeMasked16(x0.Mul(sv).Add(x1.Mul(cv)), pv, i+half, m)
			}
			continue
		}
		// Interleaved: out = x·(c,c) + swap(x)·(-s,s), pair by pair.
		n := 2 * pairs
		j := 0
		for ; j+16 <= n; j += 16 {
			xv := archsimd.LoadFloat32x16(f32At(pv, j))
			sw := xv.Permute(archsimd.LoadUint32x16(&swapPairs16))
			xv.Mul(archsimd.LoadFloat32x16(f32At(pc, j))).Add(sw.Mul(archsimd.LoadFloat32x16(f32At(ps, j)))).Store(f32At(pv, j))
		}
		if j < n {
			// The same products and sums as the scalar pair update
			// (s holds -sin, sin): a masked chunk, pairs never split.
			m := tailMask16(n - j)
			xv := loadMasked16(pv, j, m)
			sw := xv.Permute(archsimd.LoadUint32x16(&swapPairs16))
			storeMasked16(xv.Mul(loadMasked16(pc, j, m)).Add(sw.Mul(loadMasked16(ps, j, m))), pv, j, m)
		}
	}
	archsimd.ClearAVXUpperBits()
}

// exp512 is e^x in float32 (Cephes' expf polynomial, ~1 ulp), inputs
// clamped to [-87.34, 88.38] so 2^n stays a normal float. Below that range
// (-Inf included) it is 0 and a NaN stays NaN, as math.Exp has them: the
// clamp alone would turn both into numbers, and Softmax's rule for ±Inf and
// NaN (doc.go) rests on these two.
func exp512(x archsimd.Float32x16) archsimd.Float32x16 {
	in := x
	x = x.Max(archsimd.BroadcastFloat32x16(expLo)).Min(archsimd.BroadcastFloat32x16(expHi))
	n := x.Mul(archsimd.BroadcastFloat32x16(log2e)).RoundToEvenScaled(0)
	r := n.MulAdd(archsimd.BroadcastFloat32x16(-ln2Hi), x)
	r = n.MulAdd(archsimd.BroadcastFloat32x16(-ln2Lo), r)
	p := archsimd.BroadcastFloat32x16(expC5)
	p = p.MulAdd(r, archsimd.BroadcastFloat32x16(expC4))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x16(expC3))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x16(expC2))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x16(expC1))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x16(expC0))
	p = p.MulAdd(r.Mul(r), r).Add(archsimd.BroadcastFloat32x16(1))
	pow := n.ConvertToInt32().Add(archsimd.BroadcastInt32x16(127)).ShiftAllLeft(23).AsFloat32x16()
	e := p.Mul(pow).Masked(in.GreaterEqual(archsimd.BroadcastFloat32x16(expLo)))
	return in.Merge(e, in.IsNaN())
}

func avx512SiLUMul(gate, up []float32) {
	n := len(gate)
	up = up[:n]
	pg, pu := f32ptr(gate), f32ptr(up)
	one := archsimd.BroadcastFloat32x16(1)
	var zero archsimd.Float32x16
	i := 0
	for ; i+16 <= n; i += 16 {
		g := archsimd.LoadFloat32x16(f32At(pg, i))
		e := exp512(zero.Sub(g))
		g.Div(one.Add(e)).Mul(archsimd.LoadFloat32x16(f32At(pu, i))).Store(f32At(pg, i))
	}
	if i < n {
		g := loadF32x16Tail(gate[i:])
		e := exp512(zero.Sub(g))
		storeF32x16Tail(g.Div(one.Add(e)).Mul(loadF32x16Tail(up[i:])), gate[i:])
	}
	archsimd.ClearAVXUpperBits()
}

// avx512Softmax: max, e^(x-max) and their 16-lane sum, then scale by 1/sum.
func avx512Softmax(x []float32) {
	n := len(x)
	if n == 0 {
		return
	}
	mv, _ := maxBcast512(x)
	inv := archsimd.BroadcastFloat32x16(1).Div(expSumBcast512(x, mv))
	px := f32ptr(x)
	i := 0
	for ; i+16 <= n; i += 16 {
		archsimd.LoadFloat32x16(f32At(px, i)).Mul(inv).Store(f32At(px, i))
	}
	if i < n {
		m := tailMask16(n - i)
		storeMasked16(loadMasked16(px, i, m).Mul(inv), px, i, m)
	}
	archsimd.ClearAVXUpperBits()
}

// maxBcast512 is the largest of x (len >= 1) in every lane, and whether
// x holds a NaN (then the "largest" is meaningless: VMAXPS does not
// propagate NaNs). A tail of fewer than 16 re-reads the last 16 (or, when
// x is shorter, fills the missing lanes with x[0]), so no scalar
// instruction runs.
func maxBcast512(x []float32) (archsimd.Float32x16, bool) {
	n := len(x)
	px := f32ptr(x)
	mv := archsimd.BroadcastFloat32x16(x[0])
	var nan uint16
	i := 0
	for ; i+16 <= n; i += 16 {
		v := archsimd.LoadFloat32x16(f32At(px, i))
		nan |= v.IsNaN().ToBits()
		mv = mv.Max(v)
	}
	if i < n {
		var v archsimd.Float32x16
		if n >= 16 {
			v = archsimd.LoadFloat32x16(f32At(px, n-16))
		} else {
			m := tailMask16(n)
			v = loadMasked16(px, 0, m).Merge(mv, m)
		}
		nan |= v.IsNaN().ToBits()
		mv = mv.Max(v)
	}
	return bcastMax16(mv), nan != 0
}

// bcastMax16 is the largest lane of v in every lane (no NaNs).
func bcastMax16(v archsimd.Float32x16) archsimd.Float32x16 {
	h := v.GetLo().Max(v.GetHi())
	q := h.GetLo().Max(h.GetHi())
	q = q.Max(q.SelectFromPair(2, 3, 0, 1, q))
	q = q.Max(q.SelectFromPair(1, 0, 3, 2, q))
	return q.Broadcast1To16()
}

// expSumBcast512 replaces x[i] by e^(x[i]-m) (m broadcast) and returns
// their sum in every lane, summed in 16 lanes in index order (zero-padded
// tail) then in the order of hsum16.
func expSumBcast512(x []float32, mv archsimd.Float32x16) archsimd.Float32x16 {
	n := len(x)
	px := f32ptr(x)
	var acc archsimd.Float32x16
	i := 0
	for ; i+16 <= n; i += 16 {
		e := exp512(archsimd.LoadFloat32x16(f32At(px, i)).Sub(mv))
		e.Store(f32At(px, i))
		acc = acc.Add(e)
	}
	if i < n {
		m := tailMask16(n - i)
		e := exp512(loadMasked16(px, i, m).Sub(mv)).Masked(m)
		storeMasked16(e, px, i, m)
		acc = acc.Add(e)
	}
	return hsumBcast16(acc)
}

func avx512Add(dst, src []float32) {
	n := len(dst)
	src = src[:n]
	pd, ps := f32ptr(dst), f32ptr(src)
	i := 0
	for ; i+16 <= n; i += 16 {
		archsimd.LoadFloat32x16(f32At(pd, i)).Add(archsimd.LoadFloat32x16(f32At(ps, i))).Store(f32At(pd, i))
	}
	if i < n {
		m := tailMask16(n - i)
		storeMasked16(loadMasked16(pd, i, m).Add(loadMasked16(ps, i, m)), pd, i, m)
	}
	archsimd.ClearAVXUpperBits()
}

func avx512Argmax(x []float32) int {
	n := len(x)
	px := f32ptr(x)
	mv, nan := maxBcast512(x)
	i := 0
	for ; i+16 <= n && !nan; i += 16 {
		if bits := archsimd.LoadFloat32x16(f32At(px, i)).Equal(mv).ToBits(); bits != 0 {
			archsimd.ClearAVXUpperBits()
			return i + trailingZeros16(bits)
		}
	}
	if i < n && !nan {
		m := tailMask16(n - i)
		if bits := loadMasked16(px, i, m).Equal(mv).ToBits() & (uint16(1)<<(n-i) - 1); bits != 0 {
			archsimd.ClearAVXUpperBits()
			return i + trailingZeros16(bits)
		}
	}
	archsimd.ClearAVXUpperBits()
	return genericArgmax(x) // NaNs: no element equals the max
}

// attnBlock is how many positions the head-group attention kernel handles
// per pass, so the K or V rows it streams stay in L1 for all the heads.
const attnBlock = 64

// avx512Attention computes token i's heads [h0,h1) (one kv group). Per head
// the arithmetic is: scores by the canonical dot product (four positions at
// a time; a headDim that is not a multiple of 16, such as 8, ends in a
// masked chunk), scaled; softmax with the max
// subtracted, its sum by the order of hsum16; then Σ_p e_p·v_p in position
// order by fused multiply-add, times 1/Σe. Blocking positions across the
// heads changes where intermediate values live, never the operations.
//
// No scalar float instruction runs between its first vector instruction
// and the VZEROUPPER that ends it: Go encodes scalar float code as legacy
// SSE, which costs a state transition of hundreds of cycles on many x86
// CPUs while the upper vector halves are dirty (measured: a 16-float max
// that returned a scalar took 632 ns, 58 ns kept in vectors). So the
// buffers are cleared first, the max and sum stay broadcast in vectors,
// and a tail of fewer than four positions is scored with a masked store.
func avx512Attention(a *attnArgs, w *worker, i, h0, h1 int) {
	hd := a.headDim
	n := a.start + i + 1
	nh := h1 - h0
	g := h0 / (a.nHeads / a.nKV)
	// Each head's accumulators are hp wide, headDim rounded up to 16
	// lanes; a partial last chunk loads V masked and stores masked.
	hp := (hd + 15) &^ 15
	w.acc = growF32(w.acc, nh*hp)
	acc := w.acc[:nh*hp]
	clear(acc)
	var inv [attnHeadsPerItem]archsimd.Float32x16
	scale := a.scale
	rows, vrows := a.kvRows(a.k, g), a.kvRows(a.v, g)
	// (A Float32x4 kept across calls or loops is spilled with legacy
	// MOVUPS: the scale travels as 16 lanes.)
	sv := archsimd.BroadcastFloat32x16(scale)
	// A window scores from its first group of four (the scores before lo
	// go unread) and sums from lo. Each head's scores are sn apart: room
	// for a sink after them, which the softmax takes as one more score
	// and the sum of values does not.
	lo := a.first(n)
	sn := n + 1
	sink := 0
	if a.sinks != nil {
		sink = 1
	}
	for p0 := lo &^ 3; p0 < n; p0 += attnBlock {
		p1 := min(p0+attnBlock, n)
		j := 0
		for ; j+2 <= nh; j += 2 {
			qa, qb := a.q[(i*a.nHeads+h0+j)*hd:][:hd], a.q[(i*a.nHeads+h0+j+1)*hd:][:hd]
			attnScores2x512(f32ptr(w.scores[j*sn:]), f32ptr(w.scores[(j+1)*sn:]), qa, qb, &rows, p0, p1, sv)
		}
		for ; j < nh; j++ {
			q := a.q[(i*a.nHeads+h0+j)*hd:][:hd]
			attnScores512(f32ptr(w.scores[j*sn:]), q, &rows, p0, p1, sv)
		}
	}
	if a.capped { // a byte test: a float compare would be legacy SSE
		archsimd.ClearAVXUpperBits()
		for j := range nh {
			a.capScores(w.scores[j*sn+lo : j*sn+n])
		}
	}
	for j := range nh * sink { // copied as integers: a float move would be legacy SSE
		*(*uint32)(unsafe.Pointer(&w.scores[j*sn+n])) = *(*uint32)(unsafe.Pointer(&a.sinks[h0+j]))
	}
	one := archsimd.BroadcastFloat32x16(1)
	for j := range nh {
		s := w.scores[j*sn+lo : j*sn+n+sink]
		mv, _ := maxBcast512(s)
		inv[j] = one.Div(expSumBcast512(s, mv))
	}
	ap, sp := f32ptr(acc), f32ptr(w.scores)
	for p0 := lo; p0 < n; p0 += attnBlock {
		p1 := min(p0+attnBlock, n)
		j := 0
		for ; j+2 <= nh && hd < 16; j += 2 {
			attnAccumulateNarrow2x512(f32ptr(acc[j*hp:]), f32ptr(acc[(j+1)*hp:]), unsafe.Add(sp, 4*j*sn), unsafe.Add(sp, 4*(j+1)*sn), &vrows, tailMask16(hd), p0, p1)
		}
		for ; j+2 <= nh && hd%64 == 0; j += 2 {
			attnAccumulate2x512(f32ptr(acc[j*hp:]), f32ptr(acc[(j+1)*hp:]), unsafe.Add(sp, 4*j*sn), unsafe.Add(sp, 4*(j+1)*sn), &vrows, hd, p0, p1)
		}
		for ; j < nh; j++ {
			attnAccumulate512(f32ptr(acc[j*hp:]), unsafe.Add(sp, 4*j*sn), &vrows, hd, p0, p1)
		}
	}
	for j := range nh {
		op := f32ptr(a.out[(i*a.nHeads+h0+j)*hd:][:hd])
		iv := inv[j]
		d := 0
		for ; d+16 <= hd; d += 16 {
			archsimd.LoadFloat32x16(f32At(ap, j*hp+d)).Mul(iv).Store(f32At(op, d))
		}
		if d < hd {
			storeMasked16(archsimd.LoadFloat32x16(f32At(ap, j*hp+d)).Mul(iv), op, d, tailMask16(hd-d))
		}
	}
	archsimd.ClearAVXUpperBits()
}

// kvRows locates one kv head's K (or V) rows: stride apart from base, or
// paged through a block table of 1<<sh positions per block, stride apart
// from base+block·bstride. (A head-major block layout, [nKV][bs][hd] per
// block, measured about 15% slower here.)
// Runs of rows never split a group of four positions from a multiple of 4
// (blocks hold at least 4).
type kvRows struct {
	base    unsafe.Pointer
	stride  int
	bstride int
	blocks  []int32
	sh      uint
}

func (a *attnArgs) kvRows(x []float32, g int) kvRows {
	hd := a.headDim
	if a.blocks == nil {
		return kvRows{base: unsafe.Add(f32ptr(x), 4*g*hd), stride: a.nKV * hd}
	}
	return kvRows{base: unsafe.Add(f32ptr(x), 4*g*hd), stride: a.nKV * hd, bstride: (a.nKV * hd) << a.bsShift, blocks: a.blocks, sh: a.bsShift}
}

// runEnd is the end of the run of consecutive rows from p, at most p1.
func (r *kvRows) runEnd(p, p1 int) int {
	if r.blocks == nil {
		return p1
	}
	return min(p1, (p>>r.sh+1)<<r.sh)
}

func (r *kvRows) at(p int) unsafe.Pointer {
	if r.blocks == nil {
		return unsafe.Add(r.base, 4*p*r.stride)
	}
	return unsafe.Add(r.base, 4*(int(r.blocks[p>>r.sh])*r.bstride+(p&(1<<r.sh-1))*r.stride))
}

// attnScores512 sets s[p] = dot(q, k_p)·scale for p in [p0,p1), p0 a
// multiple of 4: four positions at a time, each the canonical dot product
// (16-lane chunks, a partial last chunk zero-padded by a masked load). A
// last group of fewer than four positions repeats its last row and stores
// only its own lanes. s points at the head's n scores.
func attnScores512(s unsafe.Pointer, q []float32, rows *kvRows, p0, p1 int, sv archsimd.Float32x16) {
	hd := len(q)
	full, tm := hd&^15, tailMask16(hd&15)
	stride := rows.stride
	qp := f32ptr(q)
	var qt, qq archsimd.Float32x16
	if full < hd {
		qt = loadMasked16(qp, full, tm)
	}
	if hd == 8 {
		qq = dup8(qp)
	}
	for p := p0; p < p1; {
		end, rb, r0 := rows.runEnd(p, p1), rows.at(p), p
		for ; hd == 8 && p+16 <= end; p += 16 {
			scores16x8(s, p, qq, unsafe.Add(rb, 4*(p-r0)*stride), stride, sv)
		}
		for ; p < end; p += 4 {
			k0 := unsafe.Add(rb, 4*(p-r0)*stride)
			last := min(3, end-1-p)
			k1, k2, k3 := unsafe.Add(k0, 4*min(1, last)*stride), unsafe.Add(k0, 4*min(2, last)*stride), unsafe.Add(k0, 4*last*stride)
			var c0, c1, c2, c3 archsimd.Float32x16
			for d := 0; d < full; d += 16 {
				qv := archsimd.LoadFloat32x16(f32At(qp, d))
				c0 = qv.MulAdd(archsimd.LoadFloat32x16(f32At(k0, d)), c0)
				c1 = qv.MulAdd(archsimd.LoadFloat32x16(f32At(k1, d)), c1)
				c2 = qv.MulAdd(archsimd.LoadFloat32x16(f32At(k2, d)), c2)
				c3 = qv.MulAdd(archsimd.LoadFloat32x16(f32At(k3, d)), c3)
			}
			if full < hd {
				c0 = qt.MulAdd(loadMasked16(k0, full, tm), c0)
				c1 = qt.MulAdd(loadMasked16(k1, full, tm), c1)
				c2 = qt.MulAdd(loadMasked16(k2, full, tm), c2)
				c3 = qt.MulAdd(loadMasked16(k3, full, tm), c3)
			}
			storeScores4(hsum4x16(c0, c1, c2, c3), sv, s, p, last)
		}
	}
	archsimd.ClearAVXUpperBits()
}

// Heads of 8 (stories260K's) are scored 16 positions at a time with the
// positions in lanes instead of one position per 16-lane vector: two
// positions' products share a vector, and three rounds of two-vector
// permutes and adds sum them, lane by lane, in exactly the order of the
// canonical dot product's hsum16 (its first step adds zero lanes: exact),
// leaving the 16 scores in position order. The lane indices of the rounds:
var (
	// round 1: lanes 0-3 and 4-7 of each position's 8 products.
	sc8lo = [16]uint32{0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27}
	sc8hi = [16]uint32{4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31}
	// rounds 2 and 3: even and odd lanes of the two vectors.
	scEven = [16]uint32{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}
	scOdd  = [16]uint32{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31}
)

// dup8 is the 8 floats at p in both halves of a vector.
func dup8(p unsafe.Pointer) archsimd.Float32x16 {
	q := archsimd.LoadFloat32x8(f32x8At(p, 0))
	var v archsimd.Float32x16
	return v.SetLo(q).SetHi(q)
}

// scores16x8 sets s[p+i] = dot(q, k_i)·scale for the 16 rows k_i = k +
// i·stride floats of a head of 8 (qq: q in both halves).
func scores16x8(s unsafe.Pointer, p int, qq archsimd.Float32x16, k unsafe.Pointer, stride int, scale archsimd.Float32x16) {
	var zero archsimd.Float32x16
	pair := func(j int) archsimd.Float32x16 {
		r := unsafe.Add(k, 8*j*stride)
		kv := zero.SetLo(archsimd.LoadFloat32x8(f32x8At(r, 0))).SetHi(archsimd.LoadFloat32x8(f32x8At(r, stride)))
		// As the canonical dot product: a fused multiply-add onto zero.
		return qq.MulAdd(kv, zero)
	}
	lo, hi := archsimd.LoadUint32x16(&sc8lo), archsimd.LoadUint32x16(&sc8hi)
	// Round 1: positions 4i..4i+3, lanes p_l+p_{l+4} (l < 4).
	z0 := pair(0).ConcatPermute(pair(1), lo)
	z0 = z0.Add(pair(0).ConcatPermute(pair(1), hi))
	z1 := pair(2).ConcatPermute(pair(3), lo)
	z1 = z1.Add(pair(2).ConcatPermute(pair(3), hi))
	z2 := pair(4).ConcatPermute(pair(5), lo)
	z2 = z2.Add(pair(4).ConcatPermute(pair(5), hi))
	z3 := pair(6).ConcatPermute(pair(7), lo)
	z3 = z3.Add(pair(6).ConcatPermute(pair(7), hi))
	ev, od := archsimd.LoadUint32x16(&scEven), archsimd.LoadUint32x16(&scOdd)
	// Round 2: (a+b, c+d) per position; round 3: (a+b)+(c+d).
	w0 := z0.ConcatPermute(z1, ev).Add(z0.ConcatPermute(z1, od))
	w1 := z2.ConcatPermute(z3, ev).Add(z2.ConcatPermute(z3, od))
	w0.ConcatPermute(w1, ev).Add(w0.ConcatPermute(w1, od)).Mul(scale).Store(f32At(s, p))
	archsimd.ClearAVXUpperBits()
}

// storeScores4 stores lanes 0..last of v·scale at s[p:].
func storeScores4(v archsimd.Float32x4, scale archsimd.Float32x16, s unsafe.Pointer, p, last int) {
	v = v.Mul(scale.GetLo().GetLo())
	if last == 3 {
		v.Store((*[4]float32)(unsafe.Add(s, 4*p)))
		return
	}
	storeMasked4(v, s, p, archsimd.Mask32x4FromBits(uint8(2)<<last-1))
}

// attnScores2x512 scores two heads four positions at a time from p0 to
// p1, as attnScores512 does, sharing the K loads.
func attnScores2x512(sa, sb unsafe.Pointer, qa, qb []float32, rows *kvRows, p0, p1 int, sv archsimd.Float32x16) {
	hd := len(qa)
	full, tm := hd&^15, tailMask16(hd&15)
	stride := rows.stride
	pa, pb := f32ptr(qa), f32ptr(qb)
	var qat, qbt, qqa, qqb archsimd.Float32x16
	if full < hd {
		qat, qbt = loadMasked16(pa, full, tm), loadMasked16(pb, full, tm)
	}
	if hd == 8 {
		qqa, qqb = dup8(pa), dup8(pb)
	}
	for p := p0; p < p1; {
		end, rb, r0 := rows.runEnd(p, p1), rows.at(p), p
		for ; hd == 8 && p+16 <= end; p += 16 {
			k := unsafe.Add(rb, 4*(p-r0)*stride)
			scores16x8(sa, p, qqa, k, stride, sv)
			scores16x8(sb, p, qqb, k, stride, sv)
		}
		for ; p < end; p += 4 {
			k0 := unsafe.Add(rb, 4*(p-r0)*stride)
			last := min(3, end-1-p)
			k1, k2, k3 := unsafe.Add(k0, 4*min(1, last)*stride), unsafe.Add(k0, 4*min(2, last)*stride), unsafe.Add(k0, 4*last*stride)
			var a0, a1, a2, a3, b0, b1, b2, b3 archsimd.Float32x16
			for d := 0; d < full; d += 16 {
				qav, qbv := archsimd.LoadFloat32x16(f32At(pa, d)), archsimd.LoadFloat32x16(f32At(pb, d))
				kv := archsimd.LoadFloat32x16(f32At(k0, d))
				a0, b0 = qav.MulAdd(kv, a0), qbv.MulAdd(kv, b0)
				kv = archsimd.LoadFloat32x16(f32At(k1, d))
				a1, b1 = qav.MulAdd(kv, a1), qbv.MulAdd(kv, b1)
				kv = archsimd.LoadFloat32x16(f32At(k2, d))
				a2, b2 = qav.MulAdd(kv, a2), qbv.MulAdd(kv, b2)
				kv = archsimd.LoadFloat32x16(f32At(k3, d))
				a3, b3 = qav.MulAdd(kv, a3), qbv.MulAdd(kv, b3)
			}
			if full < hd {
				kv := loadMasked16(k0, full, tm)
				a0, b0 = qat.MulAdd(kv, a0), qbt.MulAdd(kv, b0)
				kv = loadMasked16(k1, full, tm)
				a1, b1 = qat.MulAdd(kv, a1), qbt.MulAdd(kv, b1)
				kv = loadMasked16(k2, full, tm)
				a2, b2 = qat.MulAdd(kv, a2), qbt.MulAdd(kv, b2)
				kv = loadMasked16(k3, full, tm)
				a3, b3 = qat.MulAdd(kv, a3), qbt.MulAdd(kv, b3)
			}
			storeScores4(hsum4x16(a0, a1, a2, a3), sv, sa, p, last)
			storeScores4(hsum4x16(b0, b1, b2, b3), sv, sb, p, last)
		}
	}
	archsimd.ClearAVXUpperBits()
}

// attnAccumulate512 adds Σ_{p0<=p<p1} e_p·v_p to the hd accumulators at acc
// (hd rounded up to a multiple of 16 of them), in position order.
func attnAccumulate512(acc, e unsafe.Pointer, rows *kvRows, hd, p0, p1 int) {
	stride := rows.stride
	d := 0
	for ; d+64 <= hd; d += 64 {
		o0, o1 := archsimd.LoadFloat32x16(f32At(acc, d)), archsimd.LoadFloat32x16(f32At(acc, d+16))
		o2, o3 := archsimd.LoadFloat32x16(f32At(acc, d+32)), archsimd.LoadFloat32x16(f32At(acc, d+48))
		for p := p0; p < p1; {
			end, rb, r0 := rows.runEnd(p, p1), unsafe.Add(rows.at(p), 4*d), p
			for ; p < end; p++ {
				vp := unsafe.Add(rb, 4*(p-r0)*stride)
				ev := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(e, 4*p)))
				o0 = archsimd.LoadFloat32x16(f32At(vp, 0)).MulAdd(ev, o0)
				o1 = archsimd.LoadFloat32x16(f32At(vp, 16)).MulAdd(ev, o1)
				o2 = archsimd.LoadFloat32x16(f32At(vp, 32)).MulAdd(ev, o2)
				o3 = archsimd.LoadFloat32x16(f32At(vp, 48)).MulAdd(ev, o3)
			}
		}
		o0.Store(f32At(acc, d))
		o1.Store(f32At(acc, d+16))
		o2.Store(f32At(acc, d+32))
		o3.Store(f32At(acc, d+48))
	}
	for ; d < hd; d += 16 {
		// A partial last chunk loads V masked: its padding lanes stay 0.
		tm := tailMask16(min(16, hd-d))
		o := archsimd.LoadFloat32x16(f32At(acc, d))
		for p := p0; p < p1; {
			end, rb, r0 := rows.runEnd(p, p1), unsafe.Add(rows.at(p), 4*d), p
			for ; p < end; p++ {
				vp := unsafe.Add(rb, 4*(p-r0)*stride)
				ev := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(e, 4*p)))
				o = loadMasked16(vp, 0, tm).MulAdd(ev, o)
			}
		}
		o.Store(f32At(acc, d))
	}
	archsimd.ClearAVXUpperBits()
}

// attnAccumulateNarrow2x512 is attnAccumulate512 for two heads narrower
// than a vector (m masks their headDim lanes): each masked v_p load serves
// both, and the two chains interleave, each the same as alone (one
// head's chain is latency-bound: a fused multiply-add per position).
func attnAccumulateNarrow2x512(accA, accB, eA, eB unsafe.Pointer, rows *kvRows, m archsimd.Mask32x16, p0, p1 int) {
	stride := rows.stride
	a, b := archsimd.LoadFloat32x16(f32At(accA, 0)), archsimd.LoadFloat32x16(f32At(accB, 0))
	for p := p0; p < p1; {
		end, rb, r0 := rows.runEnd(p, p1), rows.at(p), p
		for ; p < end; p++ {
			v := loadMasked16(unsafe.Add(rb, 4*(p-r0)*stride), 0, m)
			a = v.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(eA, 4*p))), a)
			b = v.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(eB, 4*p))), b)
		}
	}
	a.Store(f32At(accA, 0))
	b.Store(f32At(accB, 0))
	archsimd.ClearAVXUpperBits()
}

// attnAccumulate2x512 is attnAccumulate512 for two heads at once (hd a
// multiple of 64): each v_p load serves both, and the two heads' chains
// interleave; each chain is the same as alone.
func attnAccumulate2x512(accA, accB, eA, eB unsafe.Pointer, rows *kvRows, hd, p0, p1 int) {
	stride := rows.stride
	for d := 0; d < hd; d += 32 {
		a0, a1 := archsimd.LoadFloat32x16(f32At(accA, d)), archsimd.LoadFloat32x16(f32At(accA, d+16))
		b0, b1 := archsimd.LoadFloat32x16(f32At(accB, d)), archsimd.LoadFloat32x16(f32At(accB, d+16))
		for p := p0; p < p1; {
			end, rb, r0 := rows.runEnd(p, p1), unsafe.Add(rows.at(p), 4*d), p
			for ; p < end; p++ {
				vp := unsafe.Add(rb, 4*(p-r0)*stride)
				ea := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(eA, 4*p)))
				eb := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(eB, 4*p)))
				v0, v1 := archsimd.LoadFloat32x16(f32At(vp, 0)), archsimd.LoadFloat32x16(f32At(vp, 16))
				a0, a1 = v0.MulAdd(ea, a0), v1.MulAdd(ea, a1)
				b0, b1 = v0.MulAdd(eb, b0), v1.MulAdd(eb, b1)
			}
		}
		a0.Store(f32At(accA, d))
		a1.Store(f32At(accA, d+16))
		b0.Store(f32At(accB, d))
		b1.Store(f32At(accB, d+16))
	}
	archsimd.ClearAVXUpperBits()
}

// hsumBcast16 is hsum16(v) in every lane: the same additions, kept in a
// vector register (see avx512Attention on why).
func hsumBcast16(v archsimd.Float32x16) archsimd.Float32x16 {
	return hsumLanes(v).Broadcast1To16()
}

// storeMasked16 stores the lanes of m at the 16 floats at p+4i.
//
//go:nocheckptr
func storeMasked16(v archsimd.Float32x16, p unsafe.Pointer, i int, m archsimd.Mask32x16) {
	v.StoreMasked((*[16]float32)(unsafe.Add(p, 4*i)), m)
}

// storeMasked4 stores the lanes of m at the 4 floats at p+4i.
//
//go:nocheckptr
func storeMasked4(v archsimd.Float32x4, p unsafe.Pointer, i int, m archsimd.Mask32x4) {
	v.StoreMasked((*[4]float32)(unsafe.Add(p, 4*i)), m)
}
