//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// AVX-512 integer tiles for the K quantizations on CPUs without
// AVX512-VNNI (quant_avx512_amd64.s): VPMADDUBSW and VPMADDWD (AVX-512BW).
// With VNNI every block format, and without it the 32-value ones, run the
// 16-row kernels instead (quant_r16_avx512_amd64.go).
//
// A tile decodes each weight block of its rows once, into a small scratch
// buffer in a layout the format family shares, and multiplies that with
// every token of the tile (llama.cpp's vec_dot decodes per token). Sums are
// exact int32 per block, as in the portable dot products.

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

// K-family dot kernels: n unpacked blocks against 4 tokens (or 1), adding
// to the 16-lane accumulators acc[16·(4j+i):] of token j, row i.
//
//go:noescape
func kDot4BW(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n int)

//go:noescape
func kDot1BW(acc *[256]float32, s *byte, x0 unsafe.Pointer, n int)

// qHsum16 sets res[k] to the sum of acc[16k:16k+16], in a fixed order.
//
//go:noescape
func qHsum16(res *[16]float32, acc *[256]float32)

const (
	kRow   = 512 // scratch bytes per row and block (see the .s file)
	kChunk = 4   // blocks unpacked per call: 8 KiB of scratch, in L1
)

func init() {
	installQuant512(avx512, archsimd.X86.AVX512VNNI())
	installAMX()
}

// installQuant512 sets b's quant tiles; vnni says the CPU has AVX512-VNNI.
// (A test installs the AVX-512BW ones on a second backend.) Only method
// values are stored here: nothing runs at init.
func installQuant512(b *backend, vnni bool) {
	if !vnni {
		for _, k := range []tiler512{{t: Q2_K, bb: q2KBytes}, {t: Q3_K, bb: q3KBytes}, {t: Q4_K, bb: q4KBytes}, {t: Q5_K, bb: q5KBytes}, {t: Q6_K, bb: q6KBytes}} {
			b.qtiles[k.t], b.qrows[k.t] = (&k).kTile, (&k).kRows
		}
	}
	installR16(b, vnni, false)
}

// tiler512 holds what a format's tile needs to know: its type and block
// bytes (not read from quantFormats: the formats register from their own
// inits, which may run after this one).
type tiler512 struct {
	t  DType
	bb int
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
	if nt == 1 {
		kDot1BW(acc, s, x0, n)
		return
	}
	kDot4BW(acc, s, x0, unsafe.Add(x[1], off), unsafe.Add(x[2], off), unsafe.Add(x[3], off), n)
}

// The qrows paths unpack a larger chunk of each 4-row block than a tile
// (per-worker scratch, not zeroed per call) and run every 4-token group of
// the item over it before moving on: the unpacked chunk stays in L1 while
// the groups' accumulators (1 KiB each) and activations stream. Each
// product's instruction sequence is the tile's, so its results are too.
const kRowsChunk = 8 // K blocks: 16 KiB

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

// alignUp64 rounds p up to a multiple of 64 bytes (a cache line).
func alignUp64(p unsafe.Pointer) unsafe.Pointer {
	return unsafe.Add(p, (64-uintptr(p)&63)&63)
}
