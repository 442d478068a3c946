//go:build goexperiment.simd && amd64

package kernels

import "unsafe"

// The avx2 path of the 32-value block formats Q4_0, Q4_1, Q5_0, Q5_1 and
// MXFP4: eight weight rows at a time, transposed so that a 32-bit lane of
// a 256-bit register holds one row (quant_r8_avx2_amd64.s), the avx512
// 16-row scheme (quant_r16_avx512_amd64.go) in AVX2: a token's activation
// dword is broadcast to all 8 rows, VPMADDUBSW+VPMADDWD sum a block for
// all of them exactly, and one conversion and two multiplies per 8 rows
// scale it. IQ4_NL (u up to 241) would saturate VPMADDUBSW's pair sums
// and keeps its 4-row path; Q8_0 keeps avx2's float path (floatQ8).

//go:noescape
func r8UnpQ4_0(dst *byte, w unsafe.Pointer, rb, n int, pf unsafe.Pointer)

//go:noescape
func r8UnpQ4_1(dst *byte, w unsafe.Pointer, rb, n int, pf unsafe.Pointer)

//go:noescape
func r8UnpQ5_0(dst *byte, w unsafe.Pointer, rb, n int, pf unsafe.Pointer)

//go:noescape
func r8UnpQ5_1(dst *byte, w unsafe.Pointer, rb, n int, pf unsafe.Pointer)

//go:noescape
func r8UnpMXFP4(dst *byte, w unsafe.Pointer, rb, n int, pf unsafe.Pointer)

//go:noescape
func r8DotB(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

//go:noescape
func r8DotMB(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

// r8Store writes nt tokens' 8 accumulators (lane order) to out in row
// order, token j's at out[j*outStride:][:8].
//
//go:noescape
func r8Store(out *float32, outStride int, acc *float32, nt int)

const (
	r8Rows  = 8
	r8Block = 320 // scratch bytes per unpacked block of 8 rows
	r8Chunk = 32  // blocks unpacked per call: 11 KiB, in L1
)

// r8Row is the weight row of each lane: P(p) = 2·(p mod 4) + p/4.
var r8Row = [r8Rows]int{0, 2, 4, 6, 1, 3, 5, 7}

// installR8 sets b's 8-row paths (b is avx2, or a test's copy of it).
func installR8(b *backend) {
	for _, k := range []*groupFmt{
		{t: Q4_0, bb: q4_0Bytes, o: 8, unpack: r8UnpQ4_0, dot: r8DotB},
		{t: Q5_0, bb: q5_0Bytes, o: 16, unpack: r8UnpQ5_0, dot: r8DotB},
		{t: Q4_1, bb: q4_1Bytes, min: true, unpack: r8UnpQ4_1, dot: r8DotMB},
		{t: Q5_1, bb: q5_1Bytes, min: true, unpack: r8UnpQ5_1, dot: r8DotMB},
		{t: MXFP4, bb: mxfp4Bytes, o: 12, unpack: r8UnpMXFP4, dot: r8DotB},
	} {
		k.r8 = true
		b.qitems[k.t], b.qoff[k.t] = k.items, k.o
		b.qtiles[k.t], b.qrows[k.t] = k.tile, nil
	}
}
