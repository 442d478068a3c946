//go:build goexperiment.simd && amd64

package kernels

import "unsafe"

// The avx2 path of the block formats Q4_0, Q4_1, Q5_0, Q5_1, MXFP4, Q8_0
// and the K-quants Q2_K to Q6_K: eight weight rows at a time, transposed so
// that a 32-bit lane of a 256-bit register holds one row
// (quant_r8_avx2_amd64.s), the avx512 16-row scheme
// (quant_r16_avx512_amd64.go) in AVX2: a token's activation dword is
// broadcast to all 8 rows, VPMADDUBSW+VPMADDWD sum a block for all of them
// exactly (for the K-quants, VPMADDWD with the sub-block scale pairs), and
// one conversion and two multiplies per 8 rows scale it. Q8_0's quants as
// unsigned bytes (w+128) would saturate VPMADDUBSW's pair sums: it
// multiplies |w| by the activations with w's signs instead (VPSIGNB, the
// sign trick) and widens each group's pair sums before adding them
// (r8DotS), still exact, so Q8_0 quantizes its activations on avx2 as on the
// other paths. IQ4_NL and IQ4_XS (u up to 241) would saturate VPMADDUBSW's
// pair sums and keep their 4-row paths.

//go:noescape
func r8UnpQ4_0(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r8UnpQ4_1(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r8UnpQ5_0(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r8UnpQ5_1(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r8UnpMXFP4(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r8UnpQ8_0(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr8UnpQ4K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr8UnpQ5K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr8UnpQ6K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr8UnpQ2K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr8UnpQ3K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr8Dot32(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

//go:noescape
func kr8Dot16(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

//go:noescape
func r8DotB(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

//go:noescape
func r8DotS(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

//go:noescape
func r8DotMB(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

// r8Store writes nt tokens' 8 accumulators (lane order) to out in row
// order, token j's at out[j*outStride:][:8].
//
//go:noescape
func r8Store(out *float32, outStride int, acc *float32, nt int)

const (
	r8Rows   = 8
	r8Block  = 320  // scratch bytes per unpacked 32-value block of 8 rows
	r8Chunk  = 32   // 32-value blocks unpacked per call: 12 KiB, in L1
	r8QBlock = 544  // the same for Q8_0: |w| and w, two byte planes
	r8QChunk = 16   // Q8_0 blocks unpacked per call: 9.5 KiB
	r8KBlock = 2880 // the same per super-block of the K formats
	r8KStage = 160  // their staging: float16 scales and transposed qh
	r8KChunk = 4    // super-blocks unpacked per call: 12 KiB
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
		// Signed quants: no offset, no -o·Σy to compute.
		{t: Q8_0, bb: Q8BlockBytes, q8: true, unpack: r8UnpQ8_0, dot: r8DotS},
	} {
		k.r8 = true
		k.setPacked(b)
		b.qitems[k.t], b.qoff[k.t] = k.items, k.o
		b.qtiles[k.t], b.qrows[k.t] = k.tile, nil
	}
	// The K formats but IQ4_XS (its grid values, u up to 241, would
	// saturate VPMADDUBSW's pair sums).
	for _, k := range []*groupFmt{
		{t: Q4_K, bb: q4KBytes, k: true, unpack: kr8UnpQ4K, dot: kr8Dot32},
		{t: Q5_K, bb: q5KBytes, k: true, unpack: kr8UnpQ5K, dot: kr8Dot32},
		{t: Q6_K, bb: q6KBytes, k: true, unpack: kr8UnpQ6K, dot: kr8Dot16},
		{t: Q2_K, bb: q2KBytes, k: true, unpack: kr8UnpQ2K, dot: kr8Dot16},
		{t: Q3_K, bb: q3KBytes, k: true, unpack: kr8UnpQ3K, dot: kr8Dot16},
	} {
		k.r8 = true
		k.setPacked(b)
		b.qitems[k.t], b.qoff[k.t] = k.items, 0
		b.qtiles[k.t], b.qrows[k.t] = k.tile, nil
	}
}
