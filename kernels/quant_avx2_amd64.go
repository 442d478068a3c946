//go:build goexperiment.simd && amd64

package kernels

import (
	"math"
	"simd/archsimd"
	"unsafe"
)

// The avx2 backend's tiles for the block quantizations (quant.go), in
// archsimd: integer products of the weights unpacked to bytes with the
// int8 activations, each weight block unpacked once per tile for all its
// tokens. The 32-value formats are further down; the 256-value ones here.
//
// Each 256-value tile runs in two phases over a chunk of blocks. The vector phase
// (the *Ints functions) computes every block's integer sums for the tile's
// rows and tokens: a weight block is unpacked to bytes once per row and
// then multiplied with each token's int8 activations (VPMADDUBSW, weights
// unsigned, then VPMADDWD with the sub-block scales), so a 4-token tile
// pays the unpacking once where a per-token vec_dot pays it four times. The
// sums are exact integers, so how they are reduced (per token or four
// tokens at once) cannot change them. The scalar phase, after VZEROUPPER,
// scales each (block, row, token) sum into its output in float32, in block
// order: the same operations for every output whatever the tile's shape,
// which is what makes the tiles batch-invariant.
//
// Tokens: a tile of one token runs the one-token path (decode); two to four
// tokens run the four-token path, missing tokens reading token 0's
// activations again (their sums are dropped).

// qaChunkK is how many 256-value blocks one vector phase covers: the sums of
// a chunk stay in a 1 KiB stack array.
const qaChunkK = 8

// qaSums holds a chunk's integer sums: per block and row, 8 int32 (the
// format says which: for Q4_K the 4 tokens' scaled sums, then their min
// sums).
type qaSums [qaChunkK][4][8]int32

func init() {
	avx2.qtiles[Q4_K] = qaTileK(q4KBytes, 0, true, qaQ4KInts)
	avx2.qtiles[Q5_K] = qaTileK(q5KBytes, 0, true, qaQ5KInts)
	avx2.qtiles[Q6_K] = qaTileK(q6KBytes, 208, false, qaQ6KInts)
	avx2.qtiles[Q3_K] = qaTileK(q3KBytes, 108, false, qaQ3KInts)
	avx2.qtiles[Q2_K] = qaTileK(q2KBytes, 80, true, qaQ2KInts)
	avx2.qtiles[IQ4_XS] = qaTileK(iq4XSBytes, 0, false, qaIQ4XSInts)
}

// qaIntsFn is a format's vector phase: the integer sums of n blocks of
// rows w, w+rb, … (nr) against tokens act, act+stride, … (nt).
type qaIntsFn func(sums *qaSums, w unsafe.Pointer, rb, nr int, act unsafe.Pointer, stride, nt, n int)

// qaTileK is the tile of a 256-value format of blockBytes-byte blocks with
// its float16 scale d at dOff, whose vector phase is ints. With mins, the
// block also has a float16 dmin at dOff+2 and ints gives per row the 4
// tokens' scaled sums then their min sums: the block adds
// d8·(d·sum − dmin·minsum). Without, ints gives the 4 tokens' sums and the
// block adds d8·d·sum.
func qaTileK(blockBytes, dOff int, mins bool, ints qaIntsFn) qTileFn {
	return func(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
		var sums qaSums
		var acc [16]float32
		wp, ap := bptr(w), bptr(act)
		for b0 := 0; b0 < nb; b0 += qaChunkK {
			n := min(qaChunkK, nb-b0)
			ints(&sums, unsafe.Add(wp, b0*blockBytes), rb, nr, unsafe.Add(ap, b0*ActQ8KBytes), actStride, nt, n)
			for b := range n {
				for i := range nr {
					blk := unsafe.Add(wp, i*rb+(b0+b)*blockBytes+dOff)
					d := f16Table[qaU16(blk, 0)]
					s := &sums[b][i]
					if mins {
						dmin := f16Table[qaU16(blk, 2)]
						for j := range nt {
							d8 := qaF32(ap, j*actStride+(b0+b)*ActQ8KBytes)
							acc[j*4+i] += d8 * (d*float32(s[j]) - dmin*float32(s[4+j]))
						}
						continue
					}
					for j := range nt {
						d8 := qaF32(ap, j*actStride+(b0+b)*ActQ8KBytes)
						acc[j*4+i] += d8 * d * float32(s[j])
					}
				}
			}
		}
		*res = acc
	}
}

func qaU8x32(p unsafe.Pointer, off int) *[32]uint8 { return (*[32]uint8)(unsafe.Add(p, off)) }
func qaS8x32(p unsafe.Pointer, off int) *[32]int8  { return (*[32]int8)(unsafe.Add(p, off)) }
func qaS16x16(p unsafe.Pointer, off int) *[16]int16 {
	return (*[16]int16)(unsafe.Add(p, off))
}
func qaU16(p unsafe.Pointer, off int) uint16 { return *(*uint16)(unsafe.Add(p, off)) }
func qaU32(p unsafe.Pointer, off int) uint32 { return *(*uint32)(unsafe.Add(p, off)) }
func qaF32(p unsafe.Pointer, off int) float32 {
	return math.Float32frombits(*(*uint32)(unsafe.Add(p, off)))
}

// qaTokPtrs are the activation rows of tokens 0..3 at byte offset off; past
// nt, token 0's again.
func qaTokPtrs(act unsafe.Pointer, stride, nt, off int) (a0, a1, a2, a3 unsafe.Pointer) {
	a0 = unsafe.Add(act, off)
	a1, a2, a3 = a0, a0, a0
	if nt > 1 {
		a1 = unsafe.Add(a0, stride)
	}
	if nt > 2 {
		a2 = unsafe.Add(a0, 2*stride)
	}
	if nt > 3 {
		a3 = unsafe.Add(a0, 3*stride)
	}
	return
}

// qaSum4x8 reduces four tokens' 8-lane sums x0..x3 and y0..y3 to
// [Σx0, Σx1, Σx2, Σx3, Σy0, Σy1, Σy2, Σy3].
func qaSum4x8(x0, x1, x2, x3, y0, y1, y2, y3 archsimd.Int32x8) archsimd.Int32x8 {
	x := x0.AddPairsGrouped(x1).AddPairsGrouped(x2.AddPairsGrouped(x3))
	y := y0.AddPairsGrouped(y1).AddPairsGrouped(y2.AddPairsGrouped(y3))
	return x.Select128FromPair(0, 2, y).Add(x.Select128FromPair(1, 3, y))
}

// qaSum1x8 reduces one token's sums x and y to [Σx, Σy, Σx, Σy] (low half).
func qaSum1x8(x, y archsimd.Int32x8) archsimd.Int32x4 {
	h := x.AddPairsGrouped(y)
	h = h.AddPairsGrouped(h)
	return h.GetLo().Add(h.GetHi())
}

// qaSums4 is [Σs0, Σs1, Σs2, Σs3], or Σs0 in every lane for one token.
func qaSums4(nt int, s0, s1, s2, s3 archsimd.Int32x8) archsimd.Int32x4 {
	if nt == 1 {
		return qaSum1x8(s0, s0)
	}
	return qaSum4x8(s0, s1, s2, s3, s0, s1, s2, s3).GetLo()
}

// qaShr and qaShl shift 32-bit lanes, for byte fields the caller masks:
// bits crossing into a byte from its neighbour are masked off, so the
// arithmetic shift serves (the compiler has an immediate form for it, not
// for the logical one, whose count it moves through a legacy-SSE MOVQ).
func qaShr(x archsimd.Uint8x32, n uint64) archsimd.Uint8x32 {
	return x.AsInt32x8().ShiftAllRight(n).AsUint8x32()
}

func qaShl(x archsimd.Uint8x32, n uint64) archsimd.Uint8x32 {
	return x.AsInt32x8().ShiftAllLeft(n).AsUint8x32()
}

// qaWordPats[k] makes VPSHUFB copy int16 word k of each 128-bit lane to
// all 8 words of that lane.
var qaWordPats = func() (p [8][32]int8) {
	for k := range 8 {
		for b := range 32 {
			p[k][b] = int8(2*k + b%2)
		}
	}
	return
}()

// qaPairPats[g] copies word 2g of each lane to the low lane's 8 words and
// word 2g+1 to the high lane's: the two 16-value scales of 32 values.
var qaPairPats = func() (p [4][32]int8) {
	for g := range 4 {
		for b := range 32 {
			w := 2 * g
			if b >= 16 {
				w++
			}
			p[g][b] = int8(2*w + b%2)
		}
	}
	return
}()

// qaMinPat spreads 8 words m0..m7 (both lanes) to m0,m0,m1,m1,…,m3,m3 in
// the low lane and m4,m4,…,m7,m7 in the high lane: each min against the
// pair of 16-value activation sums of its 32 values.
var qaMinPat = func() (p [32]int8) {
	for b := range 32 {
		w := (b % 16) / 4
		if b >= 16 {
			w += 4
		}
		p[b] = int8(2*w + b%2)
	}
	return
}()

// ---- Q4_K: 144-byte blocks: f16 d, f16 dmin, 12 bytes of 6-bit scales
// and mins for 8 sub-blocks of 32, 128 bytes of nibbles (per 64 values, 32
// bytes: low nibbles the first 32, high nibbles the next). The sums per
// token are Σ_j sc_j·Σ q·q8 and Σ_j m_j·Σ q8.

// qaQ4KScales unpacks a Q4_K block's 6-bit scales and mins to bytes
// sc0..sc7, m0..m7 in out (see qaIQ4XSScales for why not a result).
func qaQ4KScales(out *[4]uint32, blk unsafe.Pointer) {
	u0, u1, u2 := qaU32(blk, 4), qaU32(blk, 8), qaU32(blk, 12)
	out[0] = u0 & 0x3f3f3f3f
	out[1] = u2&0x0f0f0f0f | (u0>>6&0x03030303)<<4
	out[2] = u1 & 0x3f3f3f3f
	out[3] = u2>>4&0x0f0f0f0f | (u1>>6&0x03030303)<<4
}

func qaQ4KInts(sums *qaSums, w unsafe.Pointer, rb, nr int, act unsafe.Pointer, stride, nt, n int) {
	qaKMinInts(sums, w, rb, nr, act, stride, nt, n, q4KBytes, false)
}

// ---- Q5_K: 176-byte blocks: as Q4_K, with 32 bytes of fifth bits (qh[l]
// bit j for value l of sub-block j) before the nibbles.

func qaQ5KInts(sums *qaSums, w unsafe.Pointer, rb, nr int, act unsafe.Pointer, stride, nt, n int) {
	qaKMinInts(sums, w, rb, nr, act, stride, nt, n, q5KBytes, true)
}

// qaKMinInts is the vector phase of Q4_K and (five) Q5_K.
func qaKMinInts(sums *qaSums, w unsafe.Pointer, rb, nr int, act unsafe.Pointer, stride, nt, n, blockBytes int, five bool) {
	var scm [4]uint32 // zeroed here, before the vector code (MOVUPS)
	qsOff := 16
	if five {
		qsOff = 48
	}
	for b := range n {
		a0, a1, a2, a3 := qaTokPtrs(act, stride, nt, b*ActQ8KBytes)
		for i := range nr {
			blk := unsafe.Add(w, i*rb+b*blockBytes)
			qaQ4KScales(&scm, blk)
			m4 := archsimd.BroadcastUint8x32(0x0f)
			b4 := archsimd.BroadcastUint8x32(0x10)
			sm := archsimd.LoadUint32x4(&scm).AsUint8x16().ExtendToUint16().AsInt16x16()
			scs := sm.Select128FromPair(0, 0, sm).AsInt8x32()
			mins := sm.Select128FromPair(1, 1, sm).AsInt8x32().PermuteOrZeroGrouped(archsimd.LoadInt8x32(&qaMinPat)).AsInt16x16()
			qh := archsimd.LoadUint8x32(qaU8x32(blk, 16)) // Q5_K: bits 2c, 2c+1 at chunk c
			var s0, s1, s2, s3 archsimd.Int32x8
			for c := range 4 {
				qs := archsimd.LoadUint8x32(qaU8x32(blk, qsOff+32*c))
				lo := qs.And(m4)
				hi := qaShr(qs, 4).And(m4)
				if five {
					lo = lo.Or(qaShl(qh, 4).And(b4))
					hi = hi.Or(qaShl(qh, 3).And(b4))
					qh = qaShr(qh, 2)
				}
				sl := scs.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&qaWordPats[2*c])).AsInt16x16()
				sh := scs.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&qaWordPats[2*c+1])).AsInt16x16()
				off := 4 + 64*c
				s0 = s0.Add(lo.DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a0, off))).DotProductPairs(sl))
				s0 = s0.Add(hi.DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a0, off+32))).DotProductPairs(sh))
				if nt > 1 {
					s1 = s1.Add(lo.DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a1, off))).DotProductPairs(sl))
					s1 = s1.Add(hi.DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a1, off+32))).DotProductPairs(sh))
					s2 = s2.Add(lo.DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a2, off))).DotProductPairs(sl))
					s2 = s2.Add(hi.DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a2, off+32))).DotProductPairs(sh))
					s3 = s3.Add(lo.DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a3, off))).DotProductPairs(sl))
					s3 = s3.Add(hi.DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a3, off+32))).DotProductPairs(sh))
				}
			}
			m0 := archsimd.LoadInt16x16(qaS16x16(a0, 260)).DotProductPairs(mins)
			if nt == 1 {
				var r [4]int32
				qaSum1x8(s0, m0).Store(&r)
				sums[b][i][0], sums[b][i][4] = r[0], r[1]
				continue
			}
			m1 := archsimd.LoadInt16x16(qaS16x16(a1, 260)).DotProductPairs(mins)
			m2 := archsimd.LoadInt16x16(qaS16x16(a2, 260)).DotProductPairs(mins)
			m3 := archsimd.LoadInt16x16(qaS16x16(a3, 260)).DotProductPairs(mins)
			qaSum4x8(s0, s1, s2, s3, m0, m1, m2, m3).Store(&sums[b][i])
		}
	}
	archsimd.ClearAVXUpperBits()
}

// ---- The formats with a scale per 16 values: in each half h of 128
// values, value 32g+l is field g of byte l of the half's packed bits, and
// the scales of sub-blocks 8h+2g and 8h+2g+1 serve its 32 values.
//
// Q6_K, 210-byte blocks: 128 bytes of low nibbles, 64 bytes of high 2-bit
// pairs, 16 int8 scales, f16 d; q = 6 bits − 32. Q3_K, 110 bytes: 32 bytes
// of high bits (value 32k+l: bit k of byte l), 64 of 2-bit fields, 12 of
// 6-bit scales (stored +32), f16 d; q = 3 bits − 4. The sum per token is
// Σ_s sc_s·Σ u·q8 − offset·Σ_s sc_s·Σ q8, u the unsigned bits. Q2_K, 84
// bytes: 16 bytes of 4-bit scale and min, 64 of 2-bit fields, f16 d and
// dmin: the sums per token are Σ_s sc_s·Σ q·q8 and Σ_s m_s·Σ q8, as Q4_K's.

const (
	qaQ6K = iota
	qaQ3K
	qaQ2K
)

func qaQ6KInts(sums *qaSums, w unsafe.Pointer, rb, nr int, act unsafe.Pointer, stride, nt, n int) {
	qa16Ints(sums, w, rb, nr, act, stride, nt, n, q6KBytes, qaQ6K)
}

func qaQ3KInts(sums *qaSums, w unsafe.Pointer, rb, nr int, act unsafe.Pointer, stride, nt, n int) {
	qa16Ints(sums, w, rb, nr, act, stride, nt, n, q3KBytes, qaQ3K)
}

func qaQ2KInts(sums *qaSums, w unsafe.Pointer, rb, nr int, act unsafe.Pointer, stride, nt, n int) {
	qa16Ints(sums, w, rb, nr, act, stride, nt, n, q2KBytes, qaQ2K)
}

// qaQ3KScales unpacks a Q3_K block's 16 6-bit scales (still +32) to bytes
// in out (see qaIQ4XSScales for why not a result).
func qaQ3KScales(out *[4]uint32, s unsafe.Pointer) {
	a0, a1, hi := qaU32(s, 0), qaU32(s, 4), qaU32(s, 8)
	out[0] = a0&0x0f0f0f0f | (hi&0x03030303)<<4
	out[1] = a1&0x0f0f0f0f | (hi>>2&0x03030303)<<4
	out[2] = a0>>4&0x0f0f0f0f | (hi>>4&0x03030303)<<4
	out[3] = a1>>4&0x0f0f0f0f | (hi>>6&0x03030303)<<4
}

// qa32s is 16 bytes of 32: Q3_K's scale offset.
var qa32s = [16]int8{32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32}

func qa16Ints(sums *qaSums, w unsafe.Pointer, rb, nr int, act unsafe.Pointer, stride, nt, n, blockBytes, kind int) {
	// Zeroed here, before the vector code (MOVUPS).
	var scw [4]uint32
	var q [4]archsimd.Uint8x32 // a half's 4 fields, each 32 unsigned values
	for b := range n {
		a0, a1, a2, a3 := qaTokPtrs(act, stride, nt, b*ActQ8KBytes)
		for i := range nr {
			blk := unsafe.Add(w, i*rb+b*blockBytes)
			m4 := archsimd.BroadcastUint8x32(0x0f)
			k3 := archsimd.BroadcastUint8x32(0x03)
			m30 := archsimd.BroadcastUint8x32(0x30)
			b2 := archsimd.BroadcastUint8x32(0x04)
			// sc: the 16 scales; off: what multiplies the 16 activation
			// sums (the scales times the offset, or Q2_K's mins).
			var sc, off archsimd.Int16x16
			switch kind {
			case qaQ6K:
				sc = archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(blk, 192))).ExtendToInt16()
				off = sc.ShiftAllLeft(5)
			case qaQ3K:
				qaQ3KScales(&scw, unsafe.Add(blk, 96))
				sc = archsimd.LoadUint32x4(&scw).AsInt8x16().Sub(archsimd.LoadInt8x16(&qa32s)).ExtendToInt16()
				off = sc.ShiftAllLeft(2)
			default:
				raw := archsimd.LoadUint8x16((*[16]uint8)(blk))
				sc = raw.And(m4.GetLo()).ExtendToUint16().AsInt16x16()
				off = raw.AsInt32x4().ShiftAllRight(4).AsUint8x16().And(m4.GetLo()).ExtendToUint16().AsInt16x16()
			}
			scA := sc.Select128FromPair(0, 0, sc).AsInt8x32()
			scB := sc.Select128FromPair(1, 1, sc).AsInt8x32()
			var hm archsimd.Uint8x32
			if kind == qaQ3K {
				hm = archsimd.LoadUint8x32(qaU8x32(blk, 0))
			}
			var s0, s1, s2, s3 archsimd.Int32x8
			for h := range 2 {
				half := scA
				if h == 1 {
					half = scB
				}
				switch kind {
				case qaQ6K:
					ql0 := archsimd.LoadUint8x32(qaU8x32(blk, 64*h))
					ql1 := archsimd.LoadUint8x32(qaU8x32(blk, 64*h+32))
					qh := archsimd.LoadUint8x32(qaU8x32(blk, 128+32*h))
					q[0] = ql0.And(m4).Or(qaShl(qh, 4).And(m30))
					q[1] = ql1.And(m4).Or(qaShl(qh, 2).And(m30))
					q[2] = qaShr(ql0, 4).And(m4).Or(qh.And(m30))
					q[3] = qaShr(ql1, 4).And(m4).Or(qaShr(qh, 2).And(m30))
				case qaQ3K:
					qs := archsimd.LoadUint8x32(qaU8x32(blk, 32+32*h))
					hb := hm
					if h == 1 {
						hb = qaShr(hm, 4)
					}
					q[0] = qs.And(k3).Or(qaShl(hb, 2).And(b2))
					q[1] = qaShr(qs, 2).And(k3).Or(qaShl(hb, 1).And(b2))
					q[2] = qaShr(qs, 4).And(k3).Or(hb.And(b2))
					q[3] = qaShr(qs, 6).And(k3).Or(qaShr(hb, 1).And(b2))
				default:
					qs := archsimd.LoadUint8x32(qaU8x32(blk, 16+32*h))
					q[0] = qs.And(k3)
					q[1] = qaShr(qs, 2).And(k3)
					q[2] = qaShr(qs, 4).And(k3)
					q[3] = qaShr(qs, 6).And(k3)
				}
				for g := range 4 {
					sv := half.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&qaPairPats[g])).AsInt16x16()
					o := 4 + 128*h + 32*g
					s0 = s0.Add(q[g].DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a0, o))).DotProductPairs(sv))
					if nt > 1 {
						s1 = s1.Add(q[g].DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a1, o))).DotProductPairs(sv))
						s2 = s2.Add(q[g].DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a2, o))).DotProductPairs(sv))
						s3 = s3.Add(q[g].DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a3, o))).DotProductPairs(sv))
					}
				}
			}
			m0 := archsimd.LoadInt16x16(qaS16x16(a0, 260)).DotProductPairs(off)
			var m1, m2, m3 archsimd.Int32x8
			if nt > 1 {
				m1 = archsimd.LoadInt16x16(qaS16x16(a1, 260)).DotProductPairs(off)
				m2 = archsimd.LoadInt16x16(qaS16x16(a2, 260)).DotProductPairs(off)
				m3 = archsimd.LoadInt16x16(qaS16x16(a3, 260)).DotProductPairs(off)
			}
			if kind == qaQ2K {
				if nt == 1 {
					var r [4]int32
					qaSum1x8(s0, m0).Store(&r)
					sums[b][i][0], sums[b][i][4] = r[0], r[1]
					continue
				}
				qaSum4x8(s0, s1, s2, s3, m0, m1, m2, m3).Store(&sums[b][i])
				continue
			}
			qaSums4(nt, s0.Sub(m0), s1.Sub(m1), s2.Sub(m2), s3.Sub(m3)).Store((*[4]int32)(sums[b][i][:4]))
		}
	}
	archsimd.ClearAVXUpperBits()
}

// ---- IQ4_XS: 136-byte blocks: f16 d, 16 bits of scale tops, 4 bytes of
// scale nibbles (8 sub-blocks of 32, scale 6 bits − 32), then per sub-block
// 16 bytes of indices into the non-linear grid kvaluesIQ4NL (low nibbles the
// first 16 values). The grid values are signed: VPMADDUBSW gets their
// magnitudes and the activations with their signs (|q8| ≤ 127, so the sign
// flip cannot overflow).

// qaIQ4Grid is kvaluesIQ4NL in both lanes, for VPSHUFB.
var qaIQ4Grid = func() (g [32]int8) {
	for i := range g {
		g[i] = kvaluesIQ4NL[i%16]
	}
	return
}()

// qaIQ4XSScales writes a block's 8 sub-block scales as int16 to out, one
// 32-bit store at a time: returning the array would copy it with a legacy-SSE
// MOVUPS while the caller's vector state is dirty (a call the layout walk
// of TestNoLegacySSEWhileVectorStateDirty takes as clean).
func qaIQ4XSScales(out *[4]uint32, blk unsafe.Pointer) {
	sh, sl := uint32(qaU16(blk, 2)), qaU32(blk, 4)
	for k := range 4 {
		lo := int32(sl>>(8*k)&0xf|sh>>(4*k)&3<<4) - 32
		hi := int32(sl>>(8*k+4)&0xf|sh>>(4*k+2)&3<<4) - 32
		out[k] = uint32(uint16(lo)) | uint32(uint16(hi))<<16
	}
}

func qaIQ4XSInts(sums *qaSums, w unsafe.Pointer, rb, nr int, act unsafe.Pointer, stride, nt, n int) {
	var scv [4]uint32 // zeroed here, before the vector code (MOVUPS)
	for b := range n {
		a0, a1, a2, a3 := qaTokPtrs(act, stride, nt, b*ActQ8KBytes)
		for i := range nr {
			blk := unsafe.Add(w, i*rb+b*iq4XSBytes)
			qaIQ4XSScales(&scv, blk)
			m4 := archsimd.BroadcastUint8x32(0x0f)
			grid := archsimd.LoadInt8x32(&qaIQ4Grid)
			sc := archsimd.LoadUint32x4(&scv).AsInt8x16()
			var scs archsimd.Int8x32
			scs = scs.SetLo(sc).SetHi(sc)
			var s0, s1, s2, s3 archsimd.Int32x8
			for c := range 4 {
				qs := archsimd.LoadUint8x32(qaU8x32(blk, 8+32*c))
				lo := qs.And(m4)
				hi := qaShr(qs, 4).And(m4)
				// Sub-block 2c is the low lanes of lo then hi, 2c+1 the high ones.
				ia := lo.Select128FromPair(0, 2, hi).AsInt8x32()
				ib := lo.Select128FromPair(1, 3, hi).AsInt8x32()
				va, vb := grid.PermuteOrZeroGrouped(ia), grid.PermuteOrZeroGrouped(ib)
				ua, ub := va.Abs().AsUint8x32(), vb.Abs().AsUint8x32()
				sa := scs.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&qaWordPats[2*c])).AsInt16x16()
				sb := scs.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&qaWordPats[2*c+1])).AsInt16x16()
				off := 4 + 64*c
				s0 = s0.Add(ua.DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a0, off)).CopySign(va)).DotProductPairs(sa))
				s0 = s0.Add(ub.DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a0, off+32)).CopySign(vb)).DotProductPairs(sb))
				if nt > 1 {
					s1 = s1.Add(ua.DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a1, off)).CopySign(va)).DotProductPairs(sa))
					s1 = s1.Add(ub.DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a1, off+32)).CopySign(vb)).DotProductPairs(sb))
					s2 = s2.Add(ua.DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a2, off)).CopySign(va)).DotProductPairs(sa))
					s2 = s2.Add(ub.DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a2, off+32)).CopySign(vb)).DotProductPairs(sb))
					s3 = s3.Add(ua.DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a3, off)).CopySign(va)).DotProductPairs(sa))
					s3 = s3.Add(ub.DotProductPairsSaturated(archsimd.LoadInt8x32(qaS8x32(a3, off+32)).CopySign(vb)).DotProductPairs(sb))
				}
			}
			qaSums4(nt, s0, s1, s2, s3).Store((*[4]int32)(sums[b][i][:4]))
		}
	}
	archsimd.ClearAVXUpperBits()
}

// ---- The 32-value formats (quant_legacy.go) against actQ8x32 blocks: the
// assembly in quant_avx2_amd64.s, four rows against one token, each block
// unpacked in registers (nothing is written but the four results): the
// decode path. With several tokens, qrows unpacks the four rows once into
// the worker's qbuf and runs each token over that (qa2Buf*), with the same
// integer sums and float steps per output; the tiles (no worker, so no
// buffer) run the single-token kernel per token. So each output's steps do
// not depend on nt: qrows and the tiles agree bit for bit.

// qaMXFP4Grid is kvaluesMXFP4 in both lanes, for VPSHUFB.
var qaMXFP4Grid = func() (g [32]int8) {
	for i := range g {
		g[i] = kvaluesMXFP4[i%16]
	}
	return
}()

// qaE8M0Tab is the float32 bits of e8m0Half(e), by e: MXFP4's block scale
// for the assembly.
var qaE8M0Tab = func() (t [256]uint32) {
	for e := range t {
		t[e] = qaE8M0HalfBits(byte(e))
	}
	return
}()

// qaE8M0HalfBits is the float32 bits of e8m0Half(e).
func qaE8M0HalfBits(e byte) uint32 {
	if e < 2 {
		return 0x00200000 << e
	}
	return uint32(e-1) << 23
}

// Assembly kernels (quant_avx2_amd64.s): res[i] = row wi · token x over n
// blocks; pf is the prefetch distance in bytes.

//go:noescape
func qa2Q4_0Rows4(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)

//go:noescape
func qa2Q4_1Rows4(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)

//go:noescape
func qa2Q5_0Rows4(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)

//go:noescape
func qa2Q5_1Rows4(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)

//go:noescape
func qa2IQ4NLRows4(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)

//go:noescape
func qa2MXFP4Rows4(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)

// Unpacking and per-token kernels for several tokens: n ≥ 1 blocks; a
// record per block and row of qaRecBytes[kind] bytes.

//go:noescape
func qa2UnpQ4_0(dst, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func qa2UnpQ4_1(dst, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func qa2UnpQ5_0(dst, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func qa2UnpQ5_1(dst, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func qa2UnpIQ4NL(dst, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func qa2UnpMXFP4(dst, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func qa2BufOff(res *[4]float32, buf, x, off unsafe.Pointer, n int)

//go:noescape
func qa2BufMin(res *[4]float32, buf, x, off unsafe.Pointer, n int)

//go:noescape
func qa2BufGrid(res *[4]float32, buf, x, off unsafe.Pointer, n int)

// qaOff8 and qaOff16 are Q4_0's and Q5_0's offsets for qa2BufOff.
var qaOff8, qaOff16 = qaBytes32(8), qaBytes32(16)

func qaBytes32(v byte) (b [32]byte) {
	for i := range b {
		b[i] = v
	}
	return
}

// Kinds of 32-value format.
const (
	qaQ4_0 = iota
	qaQ4_1
	qaQ5_0
	qaQ5_1
	qaIQ4NL
	qaMXFP4
)

// qaRecBytes is each kind's record size: 32 weight bytes, the scale in 8
// lanes, and for Q4_1 and Q5_1 the min in 4.
var qaRecBytes = [...]int{qaQ4_0: 64, qaQ4_1: 80, qaQ5_0: 64, qaQ5_1: 80, qaIQ4NL: 64, qaMXFP4: 64}

// qaPrefetchRows: each row prefetches the same columns this many rows
// ahead, the rows a later call takes (as avx2PrefetchRows for Q8_0).
const qaPrefetchRows = 8

func init() {
	avx2.qtiles[Q4_0], avx2.qrows[Q4_0] = avx2Q4_0Tile, avx2Q4_0Rows
	avx2.qtiles[Q4_1], avx2.qrows[Q4_1] = avx2Q4_1Tile, avx2Q4_1Rows
	avx2.qtiles[Q5_0], avx2.qrows[Q5_0] = avx2Q5_0Tile, avx2Q5_0Rows
	avx2.qtiles[Q5_1], avx2.qrows[Q5_1] = avx2Q5_1Tile, avx2Q5_1Rows
	avx2.qtiles[IQ4_NL], avx2.qrows[IQ4_NL] = avx2IQ4NLTile, avx2IQ4NLRows
	avx2.qtiles[MXFP4], avx2.qrows[MXFP4] = avx2MXFP4Tile, avx2MXFP4Rows
	// The 8-row kernels take over all but IQ4_NL (quant_r8_avx2_amd64.go).
	installR8(avx2)
}

func avx2Q4_0Tile(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	qaLegacyRows(qaQ4_0, res[:], 4, w, rb, nr, act, actStride, nt, nb)
}

func avx2Q4_0Rows(wk *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	if nt > 1 {
		qaLegacyBuffered(qaQ4_0, wk, out, outStride, w, rb, nr, act, actStride, nt, nb)
		return
	}
	qaLegacyRows(qaQ4_0, out, outStride, w, rb, nr, act, actStride, nt, nb)
}

func avx2Q4_1Tile(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	qaLegacyRows(qaQ4_1, res[:], 4, w, rb, nr, act, actStride, nt, nb)
}

func avx2Q4_1Rows(wk *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	if nt > 1 {
		qaLegacyBuffered(qaQ4_1, wk, out, outStride, w, rb, nr, act, actStride, nt, nb)
		return
	}
	qaLegacyRows(qaQ4_1, out, outStride, w, rb, nr, act, actStride, nt, nb)
}

func avx2Q5_0Tile(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	qaLegacyRows(qaQ5_0, res[:], 4, w, rb, nr, act, actStride, nt, nb)
}

func avx2Q5_0Rows(wk *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	if nt > 1 {
		qaLegacyBuffered(qaQ5_0, wk, out, outStride, w, rb, nr, act, actStride, nt, nb)
		return
	}
	qaLegacyRows(qaQ5_0, out, outStride, w, rb, nr, act, actStride, nt, nb)
}

func avx2Q5_1Tile(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	qaLegacyRows(qaQ5_1, res[:], 4, w, rb, nr, act, actStride, nt, nb)
}

func avx2Q5_1Rows(wk *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	if nt > 1 {
		qaLegacyBuffered(qaQ5_1, wk, out, outStride, w, rb, nr, act, actStride, nt, nb)
		return
	}
	qaLegacyRows(qaQ5_1, out, outStride, w, rb, nr, act, actStride, nt, nb)
}

func avx2IQ4NLTile(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	qaLegacyRows(qaIQ4NL, res[:], 4, w, rb, nr, act, actStride, nt, nb)
}

func avx2IQ4NLRows(wk *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	if nt > 1 {
		qaLegacyBuffered(qaIQ4NL, wk, out, outStride, w, rb, nr, act, actStride, nt, nb)
		return
	}
	qaLegacyRows(qaIQ4NL, out, outStride, w, rb, nr, act, actStride, nt, nb)
}

func avx2MXFP4Tile(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	qaLegacyRows(qaMXFP4, res[:], 4, w, rb, nr, act, actStride, nt, nb)
}

func avx2MXFP4Rows(wk *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	if nt > 1 {
		qaLegacyBuffered(qaMXFP4, wk, out, outStride, w, rb, nr, act, actStride, nt, nb)
		return
	}
	qaLegacyRows(qaMXFP4, out, outStride, w, rb, nr, act, actStride, nt, nb)
}

// qaLegacyRows is qRowsFn for the 32-value format kind (rows past nr
// repeat the last; their results are dropped).
func qaLegacyRows(kind int, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	var res [4]float32
	p0, p1, p2, p3 := rowPtrs(bptr(w), rb, 0, nr)
	ap, pf := bptr(act), qaPrefetchRows*rb
	for j := range nt {
		x := unsafe.Add(ap, j*actStride)
		switch kind {
		case qaQ4_0:
			qa2Q4_0Rows4(&res, p0, p1, p2, p3, x, nb, pf)
		case qaQ4_1:
			qa2Q4_1Rows4(&res, p0, p1, p2, p3, x, nb, pf)
		case qaQ5_0:
			qa2Q5_0Rows4(&res, p0, p1, p2, p3, x, nb, pf)
		case qaQ5_1:
			qa2Q5_1Rows4(&res, p0, p1, p2, p3, x, nb, pf)
		case qaIQ4NL:
			qa2IQ4NLRows4(&res, p0, p1, p2, p3, x, nb, pf)
		case qaMXFP4:
			qa2MXFP4Rows4(&res, p0, p1, p2, p3, x, nb, pf)
		}
		copy(out[j*outStride:j*outStride+nr], res[:nr])
	}
}

// qaLegacyBuffered is qRowsFn for several tokens of the 32-value format
// kind: the rows unpacked once into wk.qbuf, then each token over them.
func qaLegacyBuffered(kind int, wk *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	wk.qbuf = growBytes(wk.qbuf, 4*nb*qaRecBytes[kind])
	buf := bptr(wk.qbuf)
	p0, p1, p2, p3 := rowPtrs(bptr(w), rb, 0, nr)
	switch kind {
	case qaQ4_0:
		qa2UnpQ4_0(buf, p0, p1, p2, p3, nb)
	case qaQ4_1:
		qa2UnpQ4_1(buf, p0, p1, p2, p3, nb)
	case qaQ5_0:
		qa2UnpQ5_0(buf, p0, p1, p2, p3, nb)
	case qaQ5_1:
		qa2UnpQ5_1(buf, p0, p1, p2, p3, nb)
	case qaIQ4NL:
		qa2UnpIQ4NL(buf, p0, p1, p2, p3, nb)
	case qaMXFP4:
		qa2UnpMXFP4(buf, p0, p1, p2, p3, nb)
	}
	var res [4]float32
	ap := bptr(act)
	for j := range nt {
		x := unsafe.Add(ap, j*actStride)
		switch kind {
		case qaQ4_0:
			qa2BufOff(&res, buf, x, unsafe.Pointer(&qaOff8), nb)
		case qaQ5_0:
			qa2BufOff(&res, buf, x, unsafe.Pointer(&qaOff16), nb)
		case qaQ4_1, qaQ5_1:
			qa2BufMin(&res, buf, x, nil, nb)
		default:
			qa2BufGrid(&res, buf, x, nil, nb)
		}
		copy(out[j*outStride:j*outStride+nr], res[:nr])
	}
}
