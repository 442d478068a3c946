//go:build arm64

package kernels

import (
	"encoding/binary"
	"unsafe"
)

// neon is the arm64 backend: the portable kernels, except that the quant
// formats' paths (qrows and tiles, neon_quant_arm64.go) and the Q8_0
// MatMul run their int8·int8 sums in assembly
// (neon_arm64.s): SDOT where the CPU has the dot-product extension
// (asimddp), plain NEON widening multiplies otherwise. Everything else is
// the portable code, so it agrees with generic bit for bit there.
//
// Its products are exact int32 sums per group of 16 or 32 values, scaled in
// float32 in block order: each result depends on nb alone (batch
// invariance), and its Q8_0 MatMul computes exactly genericDotQ8's floats.
var neon = &backend{
	name:        BackendNEON,
	matmul:      neonMatMul,
	quantizeAct: genericQuantizeAct,
	qtiles:      neonQTiles(neonQRows()),
	qrows:       neonQRows(),
	dot:         genericDot,
	rmsnorm:     genericRMSNorm,
	rope:        genericRoPE,
	siluMul:     genericSiLUMul,
	attention:   genericAttention,
	softmax:     genericSoftmax,
	add:         genericAdd,
	argmax:      genericArgmax,
}

// neonDots is the group dot product this CPU runs: SDOT needs asimddp.
// Chosen by flag, at package initialisation, without executing either.
var neonDots = pickNEONDots(HasFeature("asimddp"))

func pickNEONDots(sdot bool) func(w *byte, wstride int, a *byte, astride int, nblocks, ngb, nv int, out *int32) {
	if sdot {
		return neonDotsSDOT
	}
	return neonDotsNEON
}

// neonDotsSDOT and neonDotsNEON: for nblocks blocks (weights wstride bytes
// apart from w, activations astride bytes apart from a), each of ngb groups
// of nv·16 int8 values, out gets the exact int32 Σ w·a of the group.
//
//go:noescape
func neonDotsSDOT(w *byte, wstride int, a *byte, astride int, nblocks, ngb, nv int, out *int32)

//go:noescape
func neonDotsNEON(w *byte, wstride int, a *byte, astride int, nblocks, ngb, nv int, out *int32)

func i8ptr(q []int8) *byte { return (*byte)(unsafe.Pointer(&q[0])) }

// neonMatMul is genericMatMul with the Q8_0 block sums in assembly.
func neonMatMul(a *mmArgs, w *worker, r0, r1, t0, t1 int) {
	m := a.w
	if m.Type != Q8_0 {
		genericMatMul(a, w, r0, r1, t0, t1)
		return
	}
	for r := r0; r < r1; r++ {
		wrow := m.Data[r*a.rb : (r+1)*a.rb]
		for t := t0; t < t1; t++ {
			qs, xs := a.act.row(t)
			a.out[t*m.Rows+r] = neonDotQ8(wrow, qs, xs, a.act.nb)
		}
	}
}

// neonDotQ8 is genericDotQ8 with the int32 block sums from neonDots, up to
// 64 blocks per call: the same floats, in the same order.
func neonDotQ8(wrow, qs []byte, xs []float32, nb int) float32 {
	var acc float32
	var sums [64]int32
	for b0 := 0; b0 < nb; b0 += len(sums) {
		n := min(len(sums), nb-b0)
		neonDots(&wrow[b0*Q8BlockBytes+2], Q8BlockBytes, &qs[b0*Q8BlockSize], Q8BlockSize, n, 1, 2, &sums[0])
		for i, s := range sums[:n] {
			b := b0 + i
			dw := f16Table[binary.LittleEndian.Uint16(wrow[b*Q8BlockBytes:])]
			dx := xs[(b>>1)*16+(b&1)*8]
			acc += float32(s) * (dw * dx)
		}
	}
	return acc
}

// neonDots4 is the four-row kernel this CPU runs (neon_arm64.s): SDOT
// where it has asimddp.
var neonDots4 = pickNEONDots4(HasFeature("asimddp"))

func pickNEONDots4(sdot bool) func(w, a *byte, astride, tstride, nblocks, ngb, nv, ntok int, out *int32) {
	if sdot {
		return neonDots4SDOT
	}
	return neonDots4NEON
}

// neonDots4SDOT and neonDots4NEON: four rows of decoded int8 weights,
// neonChunk bytes apart from w, against ntok (1 or 2) tokens' activations
// (block b of token j at a + b·astride + j·tstride); per block and group of
// nv·16 values, out gets eight exact int32 sums: token 0's rows 0-3, then
// token 1's (untouched when ntok is 1).
//
//go:noescape
func neonDots4SDOT(w, a *byte, astride, tstride, nblocks, ngb, nv, ntok int, out *int32)

//go:noescape
func neonDots4NEON(w, a *byte, astride, tstride, nblocks, ngb, nv, ntok int, out *int32)

// neonNib16 decodes n 16-byte pieces of 4-bit codes (sstride bytes apart
// from src) to 32 int8 each at dst, low nibbles first, each looked up in kv.
//
//go:noescape
func neonNib16(dst, src *byte, sstride, n int, kv *[16]int8)

// neonNib32 decodes n 32-byte pieces of 4-bit codes, back to back at src,
// to 64 int8 each at dst: the 32 low nibbles, then the 32 high ones.
//
//go:noescape
func neonNib32(dst, src *byte, n int)
