//go:build goexperiment.simd && amd64

package kernels

import (
	"math"
	"simd/archsimd"
	"unsafe"
)

// This file holds what the AVX-512 and AVX2 backends share: the choice
// between them, pointer helpers and the reduction order both implement.
//
// The reduction order, which makes the two backends agree bit for bit and
// every MatMul element independent of its tile:
//   - A float dot product accumulates 16 lanes: lane l sums, by fused
//     multiply-add in column order, the products of columns c ≡ l (mod 16);
//     a tail shorter than 16 is zero-padded.
//   - A Q8_0 dot product processes blocks in pairs (2p, 2p+1); lanes 0-7 take
//     block 2p, lanes 8-15 block 2p+1, lane 8h+j holding the exact int32 sum
//     of bytes 4j..4j+3 of its block; lane += float32(sum)·(dw·dx) by fused
//     multiply-add. A missing odd last block contributes zeros.
//   - The 16 lanes are then summed as ((l+h8) pairwise to 8, to 4, then
//     (a0+a1)+(a2+a3)), see hsum16.
// AVX2 keeps each 16-lane accumulator as two 8-lane halves. (Where the CPU
// has AVX512-VNNI, avx512 runs Q8_0 as a block quantization instead, in
// its own order: quant_r16_avx512_amd64.go.)

// detectSIMD fills simdBackends from CPUID and makes the fastest of them
// best (select.go's init calls it, before any test override).
func detectSIMD() {
	for _, b := range simdBuilt {
		if canRun(b) {
			simdBackends = append(simdBackends, b)
		}
	}
	if len(simdBackends) > 0 {
		best = simdBackends[0]
	}
}

// canRun says whether the CPU has every feature b's family needs
// (avx512-go is the avx512 family).
func canRun(b *backend) bool { return len(missingFeatures(b)) == 0 }

// hsum16 sums a 16-lane accumulator in the fixed order described above,
// and clears the upper vector state before the result reaches a float
// register: the caller's scalar code is legacy SSE, which costs a state
// transition of hundreds of cycles on many x86 CPUs while the upper halves
// are dirty. (The sum leaves through an integer register: a Float32x4 kept
// across VZEROUPPER would be spilled with legacy MOVUPS.)
func hsum16(v archsimd.Float32x16) float32 {
	return cleanFloat(hsumLanes(v).AsUint32x4().GetElem(0))
}

// hsumLanes is hsum16's additions kept in a vector: every lane holds the
// sum.
func hsumLanes(v archsimd.Float32x16) archsimd.Float32x4 {
	q := quarter(v)
	q = q.AddPairs(q)
	return q.AddPairs(q)
}

// cleanFloat runs VZEROUPPER, then returns the float32 with bits u. It is
// not inlined so that the compiler cannot move the integer-to-float move
// (legacy MOVD) above the VZEROUPPER.
//
//go:noinline
func cleanFloat(u uint32) float32 {
	archsimd.ClearAVXUpperBits()
	return math.Float32frombits(u)
}

// hsum4x16 is [hsum16(a), hsum16(b), hsum16(c), hsum16(d)], the same
// additions with the horizontal adds shared.
func hsum4x16(a, b, c, d archsimd.Float32x16) archsimd.Float32x4 {
	qa, qb := quarter(a), quarter(b)
	qc, qd := quarter(c), quarter(d)
	return qa.AddPairs(qb).AddPairs(qc.AddPairs(qd))
}

// quarter is the first two steps of hsum16: lo8+hi8, then lo4+hi4.
func quarter(v archsimd.Float32x16) archsimd.Float32x4 {
	h := v.GetLo().Add(v.GetHi())
	return h.GetLo().Add(h.GetHi())
}

// Pointer helpers. Callers guarantee the ranges are in bounds; weight bytes
// are always loaded as bytes so that no alignment is assumed.

func bytesAt(p unsafe.Pointer, off int) *[64]uint8 { return (*[64]uint8)(unsafe.Add(p, off)) }
func bytes32At(p unsafe.Pointer, off int) *[32]uint8 {
	return (*[32]uint8)(unsafe.Add(p, off))
}
func f32At(p unsafe.Pointer, i int) *[16]float32 { return (*[16]float32)(unsafe.Add(p, 4*i)) }
func f32x8At(p unsafe.Pointer, i int) *[8]float32 {
	return (*[8]float32)(unsafe.Add(p, 4*i))
}
func i8At(p unsafe.Pointer, off int) *[64]int8 { return (*[64]int8)(unsafe.Add(p, off)) }
func i8x32At(p unsafe.Pointer, off int) *[32]int8 {
	return (*[32]int8)(unsafe.Add(p, off))
}
func u16At(p unsafe.Pointer, off int) uint16 {
	b := (*[2]byte)(unsafe.Add(p, off))
	return uint16(b[0]) | uint16(b[1])<<8
}

func f32ptr(s []float32) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(s)) }
func bptr(s []byte) unsafe.Pointer      { return unsafe.Pointer(unsafe.SliceData(s)) }

// rowPtrs returns the addresses of rows r..r+3, repeating the last row below
// r1 for the missing ones (their results are computed and dropped).
func rowPtrs(base unsafe.Pointer, rb, r, r1 int) (p0, p1, p2, p3 unsafe.Pointer) {
	last := r1 - 1
	return unsafe.Add(base, r*rb), unsafe.Add(base, min(r+1, last)*rb),
		unsafe.Add(base, min(r+2, last)*rb), unsafe.Add(base, min(r+3, last)*rb)
}

// packRows converts rows [r0,r1) of an F16 or BF16 matrix to float32 in dst,
// cols values per row, so the float32 tiles can reuse them across tokens.
func packRows(dst []float32, m *Matrix, rb, r0, r1 int, conv func(dst []float32, src unsafe.Pointer, n int)) {
	base := bptr(m.Data)
	for r := r0; r < r1; r++ {
		conv(dst[(r-r0)*m.Cols:(r-r0+1)*m.Cols], unsafe.Add(base, r*rb), m.Cols)
	}
}

// Partial vectors are masked loads and stores: the masked-off lanes read
// as zero and are neither read nor written in memory (AVX-512 and AVX2's
// VPMASKMOVD suppress faults there), so a tail at the end of an
// allocation is safe. The full-array pointer they take may reach past
// that end, which checkptr (on under -race) would reject at the
// conversion: hence go:nocheckptr on these helpers, which do nothing else.
// len(s) must be 1..16 (1..8 for the 8-lane ones).

func loadF32x16Tail(s []float32) archsimd.Float32x16 {
	return loadMasked16(f32ptr(s), 0, tailMask16(len(s)))
}

// loadMasked16 loads the lanes of m from the 16 floats at p+4i.
//
//go:nocheckptr
func loadMasked16(p unsafe.Pointer, i int, m archsimd.Mask32x16) archsimd.Float32x16 {
	return archsimd.LoadMaskedFloat32x16((*[16]float32)(unsafe.Add(p, 4*i)), m)
}

//go:nocheckptr
func storeF32x16Tail(v archsimd.Float32x16, s []float32) {
	v.StoreMasked((*[16]float32)(unsafe.Pointer(unsafe.SliceData(s))), tailMask16(len(s)))
}

// tailMask16 enables lanes 0..n-1 (AVX-512: a mask register).
func tailMask16(n int) archsimd.Mask32x16 { return archsimd.Mask32x16FromBits(uint16(1)<<n - 1) }

func loadF32x8Tail(s []float32) archsimd.Float32x8 {
	return loadMasked8(f32ptr(s), 0, tailMask8(len(s)))
}

// loadMasked8 loads the lanes of m from the 8 floats at p+4i.
//
//go:nocheckptr
func loadMasked8(p unsafe.Pointer, i int, m archsimd.Mask32x8) archsimd.Float32x8 {
	return archsimd.LoadMaskedFloat32x8((*[8]float32)(unsafe.Add(p, 4*i)), m)
}

//go:nocheckptr
func storeF32x8Tail(v archsimd.Float32x8, s []float32) {
	v.StoreMasked((*[8]float32)(unsafe.Pointer(unsafe.SliceData(s))), tailMask8(len(s)))
}

var iota8 = [8]int32{0, 1, 2, 3, 4, 5, 6, 7}

// tailMask8 enables lanes 0..n-1 by a vector compare, so that it needs
// only AVX2 (Mask32x8FromBits is an AVX-512 instruction).
func tailMask8(n int) archsimd.Mask32x8 {
	return archsimd.LoadInt32x8(&iota8).Less(archsimd.BroadcastInt32x8(int32(n)))
}
