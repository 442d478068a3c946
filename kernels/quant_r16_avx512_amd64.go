//go:build goexperiment.simd && amd64

package kernels

import "unsafe"

// The AVX-512 path of the block formats: sixteen weight rows at a time,
// each block's quants transposed so that one 32-bit lane of a 512-bit
// register holds one row (layout in quant_r16_avx512_amd64.s; the driver,
// shared with avx2's 8-row path, in quant_group_amd64.go). A token's
// activation dword is broadcast to all 16 rows and VPDPBUSD (or
// VPMADDUBSW+VPMADDWD without VNNI) sums the block for all of them at once,
// so the float work per block is one conversion and two multiplies for 16
// rows, not per row; the unpacking is paid once per item for all its
// tokens.
//
// Every (row, token) product of a 32-value format is, in block order,
// acc += float(Σ)·(d·dx) (then + m·s for the types with a minimum), Σ the
// block's exact integer sum Σ(u-o)·y; of a K format, per super-block, acc
// += float(isum)·(d·dx), acc -= float(msum)·(dmin·dx) with isum and msum
// exact. The same operations whether the token runs alone or among 64, and
// whichever rows share the call: one token (decode) takes the same kernels
// as many, with no separate one-token path to keep in step.

//go:noescape
func r16UnpQ4_0(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r16UnpQ4_1(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r16UnpQ5_0(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r16UnpQ5_1(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r16UnpIQ4NL(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r16UnpQ8_0(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r16UnpMXFP4(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

// r16Store writes nt tokens' 16 accumulators (lane order) to out in row
// order, token j's at out[j*outStride:][:16].
//
//go:noescape
func r16Store(out *float32, outStride int, acc *float32, nt int)

//go:noescape
func kr16UnpQ4K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr16UnpQ5K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr16UnpQ6K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr16UnpIQ4XS(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr16UnpQ2K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr16UnpQ3K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr16Dot32(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

//go:noescape
func kr16Dot16(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

//go:noescape
func r16DotV(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

//go:noescape
func r16DotMV(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

//go:noescape
func r16DotB(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

//go:noescape
func r16DotMB(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

const (
	r16Rows   = 16
	r16Block  = 640  // scratch bytes per unpacked 32-value block of 16 rows
	r16KBlock = 5760 // the same per 256-value super-block (the K formats)
	r16Stage  = 64   // float16 staging bytes per block
	r16Chunk  = 16   // 32-value blocks unpacked per call: 11 KiB, in L1
	r16KChunk = 2    // super-blocks unpacked per call: 11.4 KiB
)

// r16Row is the weight row of each lane: P(p) = 4·(p mod 4) + p/4.
var r16Row = [r16Rows]int{0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15}

// installR16 sets b's 16-row paths; vnni says the CPU has AVX512-VNNI.
// Without it VPMADDUBSW's pair sums could saturate for IQ4_NL (u up to
// 241) and Q8_0 (255): those keep their other paths. amx (with vnni) adds
// the AMX dot kernels of the 32-value formats (quant_amx_amd64.go).
func installR16(b *backend, vnni, amx bool) {
	for _, k := range []*groupFmt{
		{t: Q4_0, bb: q4_0Bytes, o: 8, unpack: r16UnpQ4_0},
		{t: Q5_0, bb: q5_0Bytes, o: 16, unpack: r16UnpQ5_0},
		{t: Q4_1, bb: q4_1Bytes, min: true, unpack: r16UnpQ4_1},
		{t: Q5_1, bb: q5_1Bytes, min: true, unpack: r16UnpQ5_1},
		{t: MXFP4, bb: mxfp4Bytes, o: 12, unpack: r16UnpMXFP4},
		{t: IQ4_NL, bb: iq4nlBytes, o: 128, unpack: r16UnpIQ4NL},
		{t: Q8_0, bb: Q8BlockBytes, o: 128, unpack: r16UnpQ8_0},
	} {
		if k.o == 128 && !vnni {
			continue
		}
		switch {
		case k.min && vnni:
			k.dot = r16DotMV
		case k.min:
			k.dot = r16DotMB
		case vnni:
			k.dot = r16DotV
		default:
			k.dot = r16DotB
		}
		if amx && vnni {
			k.amx = amxDotS
			if k.min {
				k.amx = amxDotM
			}
		}
		k.setPacked(b)
		b.qitems[k.t], b.qoff[k.t] = k.items, k.o
		b.qtiles[k.t], b.qrows[k.t] = k.tile, nil
	}
	if !vnni {
		// The K formats keep their AVX-512BW tiles (quant_avx512_amd64.go).
		return
	}
	for _, k := range []*groupFmt{
		{t: Q4_K, bb: q4KBytes, k: true, unpack: kr16UnpQ4K, dot: kr16Dot32},
		{t: Q5_K, bb: q5KBytes, k: true, unpack: kr16UnpQ5K, dot: kr16Dot32},
		{t: Q6_K, bb: q6KBytes, k: true, unpack: kr16UnpQ6K, dot: kr16Dot16},
		{t: IQ4_XS, bb: iq4XSBytes, k: true, unpack: kr16UnpIQ4XS, dot: kr16Dot32},
		{t: Q2_K, bb: q2KBytes, k: true, unpack: kr16UnpQ2K, dot: kr16Dot16},
		{t: Q3_K, bb: q3KBytes, k: true, unpack: kr16UnpQ3K, dot: kr16Dot16},
	} {
		if amx {
			k.amx = kamxDot32
			if r16KSub16[k.t] {
				k.amx = kamxDot16
			}
		}
		b.qitems[k.t], b.qoff[k.t] = k.items, 0
		b.qtiles[k.t], b.qrows[k.t] = k.tile, nil
	}
}

// r16KSub16 are the K formats whose scales cover 16 values, not 32.
var r16KSub16 = map[DType]bool{Q6_K: true, Q2_K: true, Q3_K: true}
