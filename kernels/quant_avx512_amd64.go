//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// AVX-512 integer tiles for the block quantizations (quant_avx512_amd64.s).
//
// A tile decodes each weight block of its rows once, into a small scratch
// buffer in a layout the format family shares, and multiplies that with
// every token of the tile (llama.cpp's vec_dot decodes per token). Sums are
// exact int32 per block, as in the portable dot products; VPDPBUSD and
// VPDPWSSD (AVX512-VNNI) do them where the CPU has them, VPMADDUBSW and
// VPMADDWD (AVX-512BW) otherwise, with the same integer results.

// Unpackers: n blocks of four weight rows into scratch (kRow bytes per row
// and block, block-major).
//
//go:noescape
func unpackQ4K(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func unpackQ6K(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func unpackQ5K(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func unpackQ3K(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func unpackQ2K(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)

// 32-value block unpackers: n blocks of four rows, two blocks per fRow
// chunk.
//
//go:noescape
func unpackQ4_0(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func unpackQ4_1(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func unpackQ5_0(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func unpackQ5_1(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func unpackIQ4NL(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func unpackMXFP4(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)

// 32-value block dot kernels: n chunks (block pairs) against 4 tokens (the
// fDot1 ones: x0 only) with quant offset o; the M variants add the
// minimum times the activation sum instead (o = 0).
//
//go:noescape
func fDot4V(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)

//go:noescape
func fDot4B(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)

//go:noescape
func fDot4MV(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)

//go:noescape
func fDot4MB(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)

//go:noescape
func fDot1V(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)

//go:noescape
func fDot1B(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)

//go:noescape
func fDot1MV(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)

//go:noescape
func fDot1MB(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)

// Fused one-token kernels: n block pairs of four rows decoded in registers
// and multiplied with token x, adding to acc's first four accumulators
// (rows 0-3) exactly as unpacking and fDot1V/fDot1B would (o as there).
//
//go:noescape
func fuQ4_0V(acc *[256]float32, w0, w1, w2, w3, x unsafe.Pointer, n, o, pf int)

//go:noescape
func fuQ4_0B(acc *[256]float32, w0, w1, w2, w3, x unsafe.Pointer, n, o, pf int)

//go:noescape
func fuQ5_0V(acc *[256]float32, w0, w1, w2, w3, x unsafe.Pointer, n, o, pf int)

//go:noescape
func fuQ5_0B(acc *[256]float32, w0, w1, w2, w3, x unsafe.Pointer, n, o, pf int)

// Fused one-token K kernels (VNNI): n blocks of four rows decoded in
// registers and multiplied with token x, as unpacking and kDot1VNNI would.
//
//go:noescape
func kfuQ4K(acc *[256]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)

//go:noescape
func kfuQ6K(acc *[256]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)

// IQ4_XS: n super-blocks of four rows unpacked to the 32-value layout
// (four chunks each), and their dot kernels (VNNI only, o = 128).
//
//go:noescape
func unpackIQ4XS(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func xsDot4V(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)

//go:noescape
func xsDot1V(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)

// K-family dot kernels: n unpacked blocks against 4 tokens (or 1), adding
// to the 16-lane accumulators acc[16·(4j+i):] of token j, row i.
//
//go:noescape
func kDot4VNNI(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n int)

//go:noescape
func kDot4BW(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n int)

//go:noescape
func kDot1VNNI(acc *[256]float32, s *byte, x0 unsafe.Pointer, n int)

//go:noescape
func kDot1BW(acc *[256]float32, s *byte, x0 unsafe.Pointer, n int)

// qHsum16 sets res[k] to the sum of acc[16k:16k+16], in a fixed order.
//
//go:noescape
func qHsum16(res *[16]float32, acc *[256]float32)

const (
	kRow   = 512 // scratch bytes per row and block (see the .s file)
	kChunk = 4   // blocks unpacked per call: 8 KiB of scratch, in L1
	fRow   = 192 // scratch bytes per row and block pair
	fChunk = 16  // 32-value blocks unpacked per call: 6 KiB
)

func init() {
	installQuant512(avx512, archsimd.X86.AVX512VNNI())
}

// installQuant512 sets b's quant tiles; vnni says the CPU has AVX512-VNNI.
// (A test installs the AVX-512BW ones on a second backend.) Only method
// values are stored here: nothing runs at init.
func installQuant512(b *backend, vnni bool) {
	for _, k := range []tiler512{{t: Q2_K, bb: q2KBytes}, {t: Q3_K, bb: q3KBytes}, {t: Q4_K, bb: q4KBytes}, {t: Q5_K, bb: q5KBytes}, {t: Q6_K, bb: q6KBytes}} {
		k.vnni = vnni
		b.qtiles[k.t], b.qrows[k.t] = (&k).kTile, (&k).kRows
	}
	if vnni {
		// IQ4_XS: as IQ4_NL.
		xs := &tiler512{t: IQ4_XS, bb: iq4XSBytes, o: 128, vnni: true}
		b.qtiles[IQ4_XS], b.qrows[IQ4_XS] = xs.xsTile, xs.xsRows
	}
	for _, k := range []tiler512{
		{t: Q4_0, bb: q4_0Bytes, o: 8}, {t: Q5_0, bb: q5_0Bytes, o: 16},
		{t: Q4_1, bb: q4_1Bytes, min: true}, {t: Q5_1, bb: q5_1Bytes, min: true},
		{t: IQ4_NL, bb: iq4nlBytes, o: 128}, {t: MXFP4, bb: mxfp4Bytes, o: 12},
	} {
		// IQ4_NL's u = value+128 reaches 241: VPMADDUBSW's pair sums
		// could saturate, so without VNNI it keeps the portable tile.
		if k.t == IQ4_NL && !vnni {
			continue
		}
		k.vnni = vnni
		b.qtiles[k.t], b.qrows[k.t] = (&k).fTile, (&k).fRows
	}
	installR16(b, vnni)
}

// tiler512 holds what a format's tile needs to know: its type, block bytes
// (not read from quantFormats: the formats register from their own inits,
// which may run after this one) and whether to use VNNI.
type tiler512 struct {
	t    DType
	bb   int
	vnni bool
	o    int  // 32-value blocks: the value is u - o
	min  bool // 32-value blocks: the value is d·u + m
}

// kTile is the qTileFn of a K format (actQ8K activations).
func (k *tiler512) kTile(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	// The assembly reads whole blocks of rows < nr and tokens < nt.
	_ = w[(nr-1)*rb+nb*k.bb-1]
	_ = act[(nt-1)*actStride+nb*ActQ8KBytes-1]
	var buf [4*kChunk*kRow + 64]byte
	var acc [256]float32
	s := (*byte)(alignUp64(unsafe.Pointer(&buf[0])))
	ws, xs := quadPtrs(w, rb, nr), quadPtrs(act, actStride, nt)
	for b := 0; b < nb; b += kChunk {
		n := min(kChunk, nb-b)
		k.unpackK(s, &ws, b*k.bb, n)
		k.dotK(&acc, s, &xs, b*ActQ8KBytes, n, nt)
	}
	qHsum16(res, &acc)
}

// quadPtrs points at rows 0..3 of p, n ≤ 4 of them stride bytes apart;
// missing rows repeat the last one (the kernels compute them, their
// results are not read).
func quadPtrs(p []byte, stride, n int) [4]unsafe.Pointer {
	b := bptr(p)
	return [4]unsafe.Pointer{b, unsafe.Add(b, min(1, n-1)*stride), unsafe.Add(b, min(2, n-1)*stride), unsafe.Add(b, min(3, n-1)*stride)}
}

// unpackK unpacks n K blocks of the four rows from byte off on into s.
func (k *tiler512) unpackK(s *byte, w *[4]unsafe.Pointer, off, n int) {
	w0, w1, w2, w3 := unsafe.Add(w[0], off), unsafe.Add(w[1], off), unsafe.Add(w[2], off), unsafe.Add(w[3], off)
	switch k.t {
	case Q4_K:
		unpackQ4K(s, w0, w1, w2, w3, n)
	case Q6_K:
		unpackQ6K(s, w0, w1, w2, w3, n)
	case Q5_K:
		unpackQ5K(s, w0, w1, w2, w3, n)
	case Q3_K:
		unpackQ3K(s, w0, w1, w2, w3, n)
	case Q2_K:
		unpackQ2K(s, w0, w1, w2, w3, n)
	}
}

// dotK adds n unpacked K blocks times the tokens' activation blocks from
// byte off on to acc (nt tokens; 1 runs the one-token kernel).
func (k *tiler512) dotK(acc *[256]float32, s *byte, x *[4]unsafe.Pointer, off, n, nt int) {
	x0 := unsafe.Add(x[0], off)
	switch {
	case nt == 1 && k.vnni:
		kDot1VNNI(acc, s, x0, n)
	case nt == 1:
		kDot1BW(acc, s, x0, n)
	case k.vnni:
		kDot4VNNI(acc, s, x0, unsafe.Add(x[1], off), unsafe.Add(x[2], off), unsafe.Add(x[3], off), n)
	default:
		kDot4BW(acc, s, x0, unsafe.Add(x[1], off), unsafe.Add(x[2], off), unsafe.Add(x[3], off), n)
	}
}

// fTile is the qTileFn of a 32-value block format (actQ8x32 activations).
func (k *tiler512) fTile(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	_ = w[(nr-1)*rb+nb*k.bb-1]
	_ = act[(nt-1)*actStride+nb*ActQ8x32Bytes-1]
	var buf [fChunk/2*4*fRow + 64]byte
	var acc [256]float32
	s := (*byte)(alignUp64(unsafe.Pointer(&buf[0])))
	ws, xs := quadPtrs(w, rb, nr), quadPtrs(act, actStride, nt)
	for b := 0; b < nb; b += fChunk {
		n := min(fChunk, nb-b)
		k.unpackF(s, &ws, b*k.bb, n)
		k.dotFChunk(&acc, s, &xs, b*ActQ8x32Bytes, n, nt)
	}
	qHsum16(res, &acc)
}

// dotFChunk adds n unpacked 32-value blocks (as unpackF left them in s)
// times the tokens' activations from byte off on to acc. An odd last block
// pairs with a zero one: its activations are copied to a zero-padded pair,
// as the kernels read whole pairs.
func (k *tiler512) dotFChunk(acc *[256]float32, s *byte, x *[4]unsafe.Pointer, off, n, nt int) {
	if pairs := n / 2; pairs > 0 {
		k.dotF(acc, s, unsafe.Add(x[0], off), unsafe.Add(x[1], off), unsafe.Add(x[2], off), unsafe.Add(x[3], off), pairs, nt)
	}
	if n%2 == 0 {
		return
	}
	var tail [4][2 * ActQ8x32Bytes]byte
	last := off + (n-1)*ActQ8x32Bytes
	for j := range min(nt, 4) {
		copy(tail[j][:ActQ8x32Bytes], unsafe.Slice((*byte)(unsafe.Add(x[j], last)), ActQ8x32Bytes))
	}
	t0 := unsafe.Pointer(&tail[0])
	t1, t2, t3 := unsafe.Pointer(&tail[min(1, nt-1)]), unsafe.Pointer(&tail[min(2, nt-1)]), unsafe.Pointer(&tail[min(3, nt-1)])
	k.dotF(acc, (*byte)(unsafe.Add(unsafe.Pointer(s), n/2*4*fRow)), t0, t1, t2, t3, 1, nt)
}

func (k *tiler512) unpackF(s *byte, w *[4]unsafe.Pointer, off, n int) {
	w0, w1, w2, w3 := unsafe.Add(w[0], off), unsafe.Add(w[1], off), unsafe.Add(w[2], off), unsafe.Add(w[3], off)
	switch k.t {
	case Q4_0:
		unpackQ4_0(s, w0, w1, w2, w3, n)
	case Q4_1:
		unpackQ4_1(s, w0, w1, w2, w3, n)
	case Q5_0:
		unpackQ5_0(s, w0, w1, w2, w3, n)
	case Q5_1:
		unpackQ5_1(s, w0, w1, w2, w3, n)
	case IQ4_NL:
		unpackIQ4NL(s, w0, w1, w2, w3, n)
	case MXFP4:
		unpackMXFP4(s, w0, w1, w2, w3, n)
	}
}

func (k *tiler512) dotF(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, nt int) {
	switch {
	case nt == 1 && k.min && k.vnni:
		fDot1MV(acc, s, x0, x1, x2, x3, n, 0)
	case nt == 1 && k.min:
		fDot1MB(acc, s, x0, x1, x2, x3, n, 0)
	case nt == 1 && k.vnni:
		fDot1V(acc, s, x0, x1, x2, x3, n, k.o)
	case nt == 1:
		fDot1B(acc, s, x0, x1, x2, x3, n, k.o)
	case k.min && k.vnni:
		fDot4MV(acc, s, x0, x1, x2, x3, n, 0)
	case k.min:
		fDot4MB(acc, s, x0, x1, x2, x3, n, 0)
	case k.vnni:
		fDot4V(acc, s, x0, x1, x2, x3, n, k.o)
	default:
		fDot4B(acc, s, x0, x1, x2, x3, n, k.o)
	}
}

// xsChunk is the IQ4_XS tile's super-blocks per unpack: 6 KiB.
const xsChunk = 2

// xsTile is IQ4_XS's qTileFn (VNNI only).
func (k *tiler512) xsTile(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	_ = w[(nr-1)*rb+nb*iq4XSBytes-1]
	_ = act[(nt-1)*actStride+nb*ActQ8KBytes-1]
	var buf [xsChunk*4*4*fRow + 64]byte
	var acc [256]float32
	s := (*byte)(alignUp64(unsafe.Pointer(&buf[0])))
	ws, xs := quadPtrs(w, rb, nr), quadPtrs(act, actStride, nt)
	for b := 0; b < nb; b += xsChunk {
		n := min(xsChunk, nb-b)
		k.unpackXS(s, &ws, b*iq4XSBytes, n)
		k.dotXS(&acc, s, &xs, b*ActQ8KBytes, n, nt)
	}
	qHsum16(res, &acc)
}

func (k *tiler512) unpackXS(s *byte, w *[4]unsafe.Pointer, off, n int) {
	unpackIQ4XS(s, unsafe.Add(w[0], off), unsafe.Add(w[1], off), unsafe.Add(w[2], off), unsafe.Add(w[3], off), n)
}

func (k *tiler512) dotXS(acc *[256]float32, s *byte, x *[4]unsafe.Pointer, off, n, nt int) {
	if nt == 1 {
		xsDot1V(acc, s, unsafe.Add(x[0], off), nil, nil, nil, n, k.o)
		return
	}
	xsDot4V(acc, s, unsafe.Add(x[0], off), unsafe.Add(x[1], off), unsafe.Add(x[2], off), unsafe.Add(x[3], off), n, k.o)
}

// The qrows paths unpack a larger chunk of each 4-row block than a tile
// (per-worker scratch, not zeroed per call) and run every 4-token group of
// the item over it before moving on: the unpacked chunk stays in L1 while
// the groups' accumulators (1 KiB each) and activations stream. Each
// product's instruction sequence is the tile's, so its results are too.
const (
	kRowsChunk  = 8  // K blocks: 16 KiB
	fRowsChunk  = 32 // 32-value blocks: 12 KiB
	xsRowsChunk = 4  // IQ4_XS super-blocks: 12 KiB
)

// qScratch returns wk's unpack buffer of n bytes, 64-byte aligned, and its
// accumulators for ng token groups, zeroed.
func qScratch(wk *worker, n, ng int) (*byte, [][256]float32) {
	wk.qbuf = growBytes(wk.qbuf, n+64)
	if cap(wk.qacc) < ng {
		wk.qacc = make([][256]float32, max(ng, 16))
	}
	acc := wk.qacc[:ng]
	clear(acc)
	return (*byte)(alignUp64(unsafe.Pointer(&wk.qbuf[0]))), acc
}

// qRowsOut writes the groups' horizontal sums to out: token j, row i at
// out[j*outStride+i].
func qRowsOut(acc [][256]float32, out []float32, outStride, nr, nt int) {
	var res [16]float32
	for g := range acc {
		qHsum16(&res, &acc[g])
		for j := range min(4, nt-4*g) {
			o := out[(4*g+j)*outStride:][:nr]
			for i := range o {
				o[i] = res[j*4+i]
			}
		}
	}
}

// qGroupPtrs points at the tokens of 4-token group g of nt, and says how
// many there are.
func qGroupPtrs(act []byte, actStride, nt, g int) ([4]unsafe.Pointer, int) {
	n := min(4, nt-4*g)
	return quadPtrs(act[4*g*actStride:], actStride, n), n
}

// kRows is the qRowsFn of a K format.
func (k *tiler512) kRows(wk *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	_ = w[(nr-1)*rb+nb*k.bb-1]
	_ = act[(nt-1)*actStride+nb*ActQ8KBytes-1]
	_ = out[(nt-1)*outStride+nr-1]
	s, acc := qScratch(wk, kRowsChunk*4*kRow, (nt+3)/4)
	ws := quadPtrs(w, rb, nr)
	if fu := k.fusedK(); nt == 1 && fu != nil {
		fu(&acc[0], ws[0], ws[1], ws[2], ws[3], bptr(act), nb, fusedPrefetchRows*rb)
		qRowsOut(acc, out, outStride, nr, nt)
		return
	}
	for b := 0; b < nb; b += kRowsChunk {
		n := min(kRowsChunk, nb-b)
		k.unpackK(s, &ws, b*k.bb, n)
		for g := range acc {
			xs, n4 := qGroupPtrs(act, actStride, nt, g)
			k.dotK(&acc[g], s, &xs, b*ActQ8KBytes, n, n4)
		}
	}
	qRowsOut(acc, out, outStride, nr, nt)
}

// fRows is the qRowsFn of a 32-value block format.
func (k *tiler512) fRows(wk *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	_ = w[(nr-1)*rb+nb*k.bb-1]
	_ = act[(nt-1)*actStride+nb*ActQ8x32Bytes-1]
	_ = out[(nt-1)*outStride+nr-1]
	s, acc := qScratch(wk, fRowsChunk/2*4*fRow, (nt+3)/4)
	ws := quadPtrs(w, rb, nr)
	if fu := k.fused(); nt == 1 && fu != nil {
		x := quadPtrs(act, actStride, 1)
		if pairs := nb / 2; pairs > 0 {
			fu(&acc[0], ws[0], ws[1], ws[2], ws[3], x[0], pairs, k.o, fusedPrefetchRows*rb)
		}
		if nb%2 == 1 {
			// The odd last block as the tile does it.
			k.unpackF(s, &ws, (nb-1)*k.bb, 1)
			k.dotFChunk(&acc[0], s, &x, (nb-1)*ActQ8x32Bytes, 1, 1)
		}
		qRowsOut(acc, out, outStride, nr, nt)
		return
	}
	for b := 0; b < nb; b += fRowsChunk {
		n := min(fRowsChunk, nb-b)
		k.unpackF(s, &ws, b*k.bb, n)
		for g := range acc {
			xs, n4 := qGroupPtrs(act, actStride, nt, g)
			k.dotFChunk(&acc[g], s, &xs, b*ActQ8x32Bytes, n, n4)
		}
	}
	qRowsOut(acc, out, outStride, nr, nt)
}

// fusedK is the K format's one-token kernel that decodes in registers,
// nil where it has none.
func (k *tiler512) fusedK() func(acc *[256]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int) {
	switch {
	case k.t == Q4_K && k.vnni:
		return kfuQ4K
	case k.t == Q6_K && k.vnni:
		return kfuQ6K
	}
	return nil
}

// fusedPrefetchRows: the one-token kernels prefetch each row's columns
// this many rows ahead (the rows of a later call): streaming the weights
// from memory, not the arithmetic, bounds a decode step.
const fusedPrefetchRows = 8

// fused is the format's one-token kernel that decodes in registers, nil
// where it has none.
func (k *tiler512) fused() func(acc *[256]float32, w0, w1, w2, w3, x unsafe.Pointer, n, o, pf int) {
	switch {
	case k.t == Q4_0 && k.vnni:
		return fuQ4_0V
	case k.t == Q4_0:
		return fuQ4_0B
	case k.t == Q5_0 && k.vnni:
		return fuQ5_0V
	case k.t == Q5_0:
		return fuQ5_0B
	}
	return nil
}

// xsRows is IQ4_XS's qRowsFn (VNNI only).
func (k *tiler512) xsRows(wk *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	_ = w[(nr-1)*rb+nb*iq4XSBytes-1]
	_ = act[(nt-1)*actStride+nb*ActQ8KBytes-1]
	_ = out[(nt-1)*outStride+nr-1]
	s, acc := qScratch(wk, xsRowsChunk*4*4*fRow, (nt+3)/4)
	ws := quadPtrs(w, rb, nr)
	for b := 0; b < nb; b += xsRowsChunk {
		n := min(xsRowsChunk, nb-b)
		k.unpackXS(s, &ws, b*iq4XSBytes, n)
		for g := range acc {
			xs, n4 := qGroupPtrs(act, actStride, nt, g)
			k.dotXS(&acc[g], s, &xs, b*ActQ8KBytes, n, n4)
		}
	}
	qRowsOut(acc, out, outStride, nr, nt)
}

// alignUp64 rounds p up to a multiple of 64 bytes (a cache line).
func alignUp64(p unsafe.Pointer) unsafe.Pointer {
	return unsafe.Add(p, (64-uintptr(p)&63)&63)
}
