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
		b.qtiles[k.t] = (&k).kTile
	}
	if vnni {
		// IQ4_XS: as IQ4_NL.
		b.qtiles[IQ4_XS] = (&tiler512{t: IQ4_XS, bb: iq4XSBytes, o: 128, vnni: true}).xsTile
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
		b.qtiles[k.t] = (&k).fTile
	}
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
	bb := k.bb
	// The assembly reads whole blocks of rows < nr and tokens < nt.
	_ = w[(nr-1)*rb+nb*bb-1]
	_ = act[(nt-1)*actStride+nb*ActQ8KBytes-1]
	var buf [4*kChunk*kRow + 64]byte
	var acc [256]float32
	s := (*byte)(alignUp64(unsafe.Pointer(&buf[0])))
	// Missing rows and tokens repeat the last one; their results are not
	// read.
	wp, ap := bptr(w), bptr(act)
	w0, w1, w2, w3 := wp, unsafe.Add(wp, min(1, nr-1)*rb), unsafe.Add(wp, min(2, nr-1)*rb), unsafe.Add(wp, min(3, nr-1)*rb)
	x0, x1, x2, x3 := ap, unsafe.Add(ap, min(1, nt-1)*actStride), unsafe.Add(ap, min(2, nt-1)*actStride), unsafe.Add(ap, min(3, nt-1)*actStride)
	for b := 0; b < nb; b += kChunk {
		n := min(kChunk, nb-b)
		wo, ao := b*bb, b*ActQ8KBytes
		switch k.t {
		case Q4_K:
			unpackQ4K(s, unsafe.Add(w0, wo), unsafe.Add(w1, wo), unsafe.Add(w2, wo), unsafe.Add(w3, wo), n)
		case Q6_K:
			unpackQ6K(s, unsafe.Add(w0, wo), unsafe.Add(w1, wo), unsafe.Add(w2, wo), unsafe.Add(w3, wo), n)
		case Q5_K:
			unpackQ5K(s, unsafe.Add(w0, wo), unsafe.Add(w1, wo), unsafe.Add(w2, wo), unsafe.Add(w3, wo), n)
		case Q3_K:
			unpackQ3K(s, unsafe.Add(w0, wo), unsafe.Add(w1, wo), unsafe.Add(w2, wo), unsafe.Add(w3, wo), n)
		case Q2_K:
			unpackQ2K(s, unsafe.Add(w0, wo), unsafe.Add(w1, wo), unsafe.Add(w2, wo), unsafe.Add(w3, wo), n)
		}
		switch {
		case nt == 1 && k.vnni:
			kDot1VNNI(&acc, s, unsafe.Add(x0, ao), n)
		case nt == 1:
			kDot1BW(&acc, s, unsafe.Add(x0, ao), n)
		case k.vnni:
			kDot4VNNI(&acc, s, unsafe.Add(x0, ao), unsafe.Add(x1, ao), unsafe.Add(x2, ao), unsafe.Add(x3, ao), n)
		default:
			kDot4BW(&acc, s, unsafe.Add(x0, ao), unsafe.Add(x1, ao), unsafe.Add(x2, ao), unsafe.Add(x3, ao), n)
		}
	}
	qHsum16(res, &acc)
}

// fTile is the qTileFn of a 32-value block format (actQ8x32 activations).
func (k *tiler512) fTile(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	bb := k.bb
	_ = w[(nr-1)*rb+nb*bb-1]
	_ = act[(nt-1)*actStride+nb*ActQ8x32Bytes-1]
	var buf [fChunk/2*4*fRow + 64]byte
	var acc [256]float32
	// An odd last block pairs with a zero one: its activations are copied
	// here, zero-padded, as the kernels read whole pairs.
	var tail [4][2 * ActQ8x32Bytes]byte
	s := (*byte)(alignUp64(unsafe.Pointer(&buf[0])))
	wp, ap := bptr(w), bptr(act)
	w0, w1, w2, w3 := wp, unsafe.Add(wp, min(1, nr-1)*rb), unsafe.Add(wp, min(2, nr-1)*rb), unsafe.Add(wp, min(3, nr-1)*rb)
	var x [4]unsafe.Pointer
	for j := range x {
		x[j] = unsafe.Add(ap, min(j, nt-1)*actStride)
	}
	for b := 0; b < nb; b += fChunk {
		n := min(fChunk, nb-b)
		wo := b * bb
		k.unpackF(s, unsafe.Add(w0, wo), unsafe.Add(w1, wo), unsafe.Add(w2, wo), unsafe.Add(w3, wo), n)
		ao := b * ActQ8x32Bytes
		if pairs := n / 2; pairs > 0 {
			k.dotF(&acc, s, unsafe.Add(x[0], ao), unsafe.Add(x[1], ao), unsafe.Add(x[2], ao), unsafe.Add(x[3], ao), pairs, nt)
		}
		if n%2 == 1 {
			last := ao + (n-1)*ActQ8x32Bytes
			for j := range min(nt, 4) {
				copy(tail[j][:ActQ8x32Bytes], unsafe.Slice((*byte)(unsafe.Add(x[j], last)), ActQ8x32Bytes))
			}
			t0 := unsafe.Pointer(&tail[0])
			t1, t2, t3 := unsafe.Pointer(&tail[min(1, nt-1)]), unsafe.Pointer(&tail[min(2, nt-1)]), unsafe.Pointer(&tail[min(3, nt-1)])
			k.dotF(&acc, (*byte)(unsafe.Add(unsafe.Pointer(s), n/2*4*fRow)), t0, t1, t2, t3, 1, nt)
		}
	}
	qHsum16(res, &acc)
}

func (k *tiler512) unpackF(s *byte, w0, w1, w2, w3 unsafe.Pointer, n int) {
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

// xsTile is IQ4_XS's qTileFn (VNNI only).
func (k *tiler512) xsTile(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	_ = w[(nr-1)*rb+nb*iq4XSBytes-1]
	_ = act[(nt-1)*actStride+nb*ActQ8KBytes-1]
	const chunk = 2 // super-blocks per unpack: 6 KiB
	var buf [chunk*4*4*fRow + 64]byte
	var acc [256]float32
	s := (*byte)(alignUp64(unsafe.Pointer(&buf[0])))
	wp, ap := bptr(w), bptr(act)
	w0, w1, w2, w3 := wp, unsafe.Add(wp, min(1, nr-1)*rb), unsafe.Add(wp, min(2, nr-1)*rb), unsafe.Add(wp, min(3, nr-1)*rb)
	x0, x1, x2, x3 := ap, unsafe.Add(ap, min(1, nt-1)*actStride), unsafe.Add(ap, min(2, nt-1)*actStride), unsafe.Add(ap, min(3, nt-1)*actStride)
	for b := 0; b < nb; b += chunk {
		n := min(chunk, nb-b)
		wo, ao := b*iq4XSBytes, b*ActQ8KBytes
		unpackIQ4XS(s, unsafe.Add(w0, wo), unsafe.Add(w1, wo), unsafe.Add(w2, wo), unsafe.Add(w3, wo), n)
		if nt == 1 {
			xsDot1V(&acc, s, unsafe.Add(x0, ao), nil, nil, nil, n, k.o)
		} else {
			xsDot4V(&acc, s, unsafe.Add(x0, ao), unsafe.Add(x1, ao), unsafe.Add(x2, ao), unsafe.Add(x3, ao), n, k.o)
		}
	}
	qHsum16(res, &acc)
}

// alignUp64 rounds p up to a multiple of 64 bytes (a cache line).
func alignUp64(p unsafe.Pointer) unsafe.Pointer {
	return unsafe.Add(p, (64-uintptr(p)&63)&63)
}
