//go:build goexperiment.simd && amd64

package kernels

import (
	"math"
	"simd/archsimd"
	"unsafe"
)

// The avx2 backend's tiles for IQ4_XS and IQ4_NL (quant.go; the other block
// formats run the 8-row kernels of quant_r8_avx2_amd64.go), in archsimd:
// integer products of the weights unpacked to bytes with the int8
// activations, each weight block unpacked once per tile for all its tokens.
// IQ4_NL is further down; IQ4_XS here.
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
func qaU16(p unsafe.Pointer, off int) uint16       { return *(*uint16)(unsafe.Add(p, off)) }
func qaU32(p unsafe.Pointer, off int) uint32       { return *(*uint32)(unsafe.Add(p, off)) }
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

// qaShr shifts 32-bit lanes right, for byte fields the caller masks:
// bits crossing into a byte from its neighbour are masked off, so the
// arithmetic shift serves (the compiler has an immediate form for it, not
// for the logical one, whose count it moves through a legacy-SSE MOVQ).
func qaShr(x archsimd.Uint8x32, n uint64) archsimd.Uint8x32 {
	return x.AsInt32x8().ShiftAllRight(n).AsUint8x32()
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

// ---- IQ4_NL against actQ8x32 blocks (the other 32-value formats run the
// 8-row kernels, quant_r8_avx2_amd64.go): the assembly in
// quant_avx2_amd64.s, four rows against one token, each block unpacked in
// registers (nothing is written but the four results): the decode path.
// With several tokens, qrows unpacks the four rows once into the worker's
// qbuf and runs each token over that (qa2BufGrid), with the same integer
// sums and float steps per output; the tiles (no worker, so no buffer) run
// the single-token kernel per token. So each output's steps do not depend
// on nt: qrows and the tiles agree bit for bit.

// qa2IQ4NLRows4 sets res[i] = row wi · token x over n blocks; pf is the
// prefetch distance in bytes.
//
//go:noescape
func qa2IQ4NLRows4(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)

// qa2UnpIQ4NL unpacks n ≥ 1 blocks of the four rows into records of
// qaRecBytes per block and row; qa2BufGrid runs one token over them.
//
//go:noescape
func qa2UnpIQ4NL(dst, w0, w1, w2, w3 unsafe.Pointer, n int)

//go:noescape
func qa2BufGrid(res *[4]float32, buf, x, off unsafe.Pointer, n int)

// qaRecBytes is a record's size: 32 weight bytes and the scale in 8 lanes.
const qaRecBytes = 64

// qaPrefetchRows: each row prefetches the same columns this many rows
// ahead, the rows a later call takes (as avx2PrefetchRows for Q8_0).
const qaPrefetchRows = 8

func init() {
	avx2.qtiles[IQ4_NL], avx2.qrows[IQ4_NL] = avx2IQ4NLTile, avx2IQ4NLRows
	// The 8-row kernels take the other block formats but IQ4_XS, and Q8_0
	// (quant_r8_avx2_amd64.go).
	installR8(avx2)
}

func avx2IQ4NLTile(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	qaIQ4NLRows(res[:], 4, w, rb, nr, act, actStride, nt, nb)
}

func avx2IQ4NLRows(wk *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	if nt > 1 {
		qaIQ4NLBuffered(wk, out, outStride, w, rb, nr, act, actStride, nt, nb)
		return
	}
	qaIQ4NLRows(out, outStride, w, rb, nr, act, actStride, nt, nb)
}

// qaIQ4NLRows runs each token over the four rows in registers (rows past
// nr repeat the last; their results are dropped).
func qaIQ4NLRows(out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	var res [4]float32
	p0, p1, p2, p3 := rowPtrs(bptr(w), rb, 0, nr)
	ap, pf := bptr(act), qaPrefetchRows*rb
	for j := range nt {
		qa2IQ4NLRows4(&res, p0, p1, p2, p3, unsafe.Add(ap, j*actStride), nb, pf)
		copy(out[j*outStride:j*outStride+nr], res[:nr])
	}
}

// qaIQ4NLBuffered unpacks the rows once into wk.qbuf, then runs each token
// over them.
func qaIQ4NLBuffered(wk *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	wk.qbuf = growBytes(wk.qbuf, 4*nb*qaRecBytes)
	buf := bptr(wk.qbuf)
	p0, p1, p2, p3 := rowPtrs(bptr(w), rb, 0, nr)
	qa2UnpIQ4NL(buf, p0, p1, p2, p3, nb)
	var res [4]float32
	ap := bptr(act)
	for j := range nt {
		qa2BufGrid(&res, buf, unsafe.Add(ap, j*actStride), nil, nb)
		copy(out[j*outStride:j*outStride+nr], res[:nr])
	}
}
