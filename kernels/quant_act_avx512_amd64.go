//go:build goexperiment.simd && amd64

package kernels

import (
	"encoding/binary"
	"math"
	"simd/archsimd"
	"unsafe"
)

// avx512QuantAct is quantizeActRow on AVX-512, byte for byte: per block d =
// max|x|/127 and id = 1/d in float32 lanes, q = x·id rounded to nearest
// even (VRNDSCALEPS, then an exact conversion), as the portable code
// computes them. The vector pass writes d and the int8 values; the sums
// (actQ8x32's s = d·Σq, actQ8K's int16 sums per 16) are integer work done
// after VZEROUPPER from the bytes written.
func avx512QuantAct(k actKind, dst []byte, x []float32) {
	quantActBlocks(k, dst, x, quantActVec512)
}

// quantActBlocks quantizes x into dst in kind k with the vector pass vec
// (over nb blocks of block values, bytes apart in dst, the int8 values at
// qoff: it writes d and the values), then quantActSums.
func quantActBlocks(k actKind, dst []byte, x []float32, vec func(dst, x unsafe.Pointer, nb, block, bytes, qoff int)) {
	block, bytes, qoff := ActQ8x32Block, ActQ8x32Bytes, 8
	if k == actQ8K {
		block, bytes, qoff = ActQ8KBlock, ActQ8KBytes, 4
	}
	nb := len(x) / block
	_ = dst[nb*bytes-1]
	vec(bptr(dst), f32ptr(x), nb, block, bytes, qoff)
	quantActSums(k, dst, nb)
}

// quantActSums completes nb activation blocks of kind k whose d and int8
// values a vector pass wrote: actQ8x32's s = d·Σq, actQ8K's int16 sums per
// 16 values, as the portable quantizers compute them.
func quantActSums(k actKind, dst []byte, nb int) {
	if k == actQ8K {
		for b := range nb {
			out := dst[b*ActQ8KBytes : (b+1)*ActQ8KBytes]
			for g := range 16 {
				binary.LittleEndian.PutUint16(out[260+2*g:], uint16(int16(int8Sum(out[4+16*g:][:16]))))
			}
		}
		return
	}
	for b := range nb {
		out := dst[b*ActQ8x32Bytes : (b+1)*ActQ8x32Bytes]
		d := math.Float32frombits(binary.LittleEndian.Uint32(out))
		binary.LittleEndian.PutUint32(out[4:], math.Float32bits(d*float32(int8Sum(out[8:40]))))
	}
}

// quantActVec512 is avx512QuantAct's vector pass (see quantActBlocks), 16
// floats a vector.
func quantActVec512(dst, x unsafe.Pointer, nb, block, bytes, qoff int) {
	vecs := block / 16
	absMask := archsimd.BroadcastUint32x16(0x7fffffff)
	var zero archsimd.Float32x16
	one, c127 := archsimd.BroadcastFloat32x16(1), archsimd.BroadcastFloat32x16(127)
	for b := range nb {
		xb := unsafe.Add(x, 4*16*vecs*b)
		ob := unsafe.Add(dst, bytes*b)
		var m archsimd.Float32x16
		for v := range vecs {
			m = m.Max(archsimd.LoadFloat32x16(f32At(xb, 16*v)).AsUint32x16().And(absMask).AsFloat32x16())
		}
		dv := bcastMax16(m).Div(c127)
		idv := zero.Merge(one.Div(dv), dv.Equal(zero))
		// d first: the 16-byte store's tail is overwritten by the values.
		dv.GetLo().GetLo().Store((*[4]float32)(ob))
		for v := range vecs {
			q := archsimd.LoadFloat32x16(f32At(xb, 16*v)).Mul(idv).RoundToEvenScaled(0).ConvertToInt32().SaturateToInt8()
			q.AsUint8x16().Store((*[16]uint8)(unsafe.Add(ob, qoff+16*v)))
		}
	}
	archsimd.ClearAVXUpperBits()
}

func init() { avx512.quantAct = avx512QuantAct }
