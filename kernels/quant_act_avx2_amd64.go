//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// avx2QuantAct is quantizeActRow in AVX2, byte for byte, as
// avx512QuantAct: per block d = max|x|/127 and id = 1/d in float32 lanes,
// q = x·id rounded to nearest even (VROUNDPS, then an exact conversion),
// the sums after VZEROUPPER (quantActSums).
func avx2QuantAct(k actKind, dst []byte, x []float32) {
	quantActBlocks(k, dst, x, quantActVec256)
}

// Constants of quantActVec256, loaded rather than broadcast: a broadcast
// goes through a 128-bit register the compiler may spill with a
// legacy-SSE MOVUPS.
var (
	qaAbs32   = [8]uint32{0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff}
	qaOnes32  = [8]float32{1, 1, 1, 1, 1, 1, 1, 1}
	qa127s32  = [8]float32{127, 127, 127, 127, 127, 127, 127, 127}
	qaPackLo  = qaPackPat(0) // int16 words 0-7 of a lane to its bytes 0-7
	qaPackHi  = qaPackPat(8) // … to its bytes 8-15
	qaPackOrd = [8]uint32{0, 4, 1, 5, 2, 6, 3, 7}
)

// qaPackPat makes VPSHUFB take the low byte of each int16 word of a lane to
// bytes at..at+7 of that lane, zeroing the others.
func qaPackPat(at int) (p [32]int8) {
	for b := range 32 {
		p[b] = -1
		if l := b % 16; l >= at && l < at+8 {
			p[b] = int8(2 * (l - at))
		}
	}
	return p
}

// quantActVec256 is avx2QuantAct's vector pass (see quantActBlocks), 32
// floats a group; their int32 values (|q| ≤ 127) go to bytes through
// VPACKSSDW, VPSHUFB and VPERMD.
func quantActVec256(dst, x unsafe.Pointer, nb, block, bytes, qoff int) {
	groups := block / 32
	var zero archsimd.Float32x8
	absMask := archsimd.LoadUint32x8(&qaAbs32)
	one, c127 := archsimd.LoadFloat32x8(&qaOnes32), archsimd.LoadFloat32x8(&qa127s32)
	lo, hi := archsimd.LoadInt8x32(&qaPackLo), archsimd.LoadInt8x32(&qaPackHi)
	ord := archsimd.LoadUint32x8(&qaPackOrd)
	for b := range nb {
		xb := unsafe.Add(x, 4*32*groups*b)
		ob := unsafe.Add(dst, bytes*b)
		var m archsimd.Float32x8
		for v := range 4 * groups {
			m = m.Max(archsimd.LoadFloat32x8(f32x8At(xb, 8*v)).AsUint32x8().And(absMask).AsFloat32x8())
		}
		h := m.GetLo().Max(m.GetHi())
		h = h.Max(h.SelectFromPair(2, 3, 0, 1, h))
		h = h.Max(h.SelectFromPair(1, 0, 3, 2, h))
		dv := h.Broadcast1To8().Div(c127)
		idv := zero.Merge(one.Div(dv), dv.Equal(zero))
		// d first: the 16-byte store's tail is overwritten by the values.
		dv.GetLo().Store((*[4]float32)(ob))
		for g := range groups {
			q := func(v int) archsimd.Int32x8 {
				return archsimd.LoadFloat32x8(f32x8At(xb, 32*g+8*v)).Mul(idv).RoundToEven().ConvertToInt32()
			}
			w01 := q(0).SaturateToInt16ConcatGrouped(q(1)).AsInt8x32()
			w23 := q(2).SaturateToInt16ConcatGrouped(q(3)).AsInt8x32()
			out := w01.PermuteOrZeroGrouped(lo).Or(w23.PermuteOrZeroGrouped(hi)).AsInt32x8().Permute(ord)
			out.AsInt8x32().Store(qaS8x32(ob, qoff+32*g))
		}
	}
	archsimd.ClearAVXUpperBits()
}
