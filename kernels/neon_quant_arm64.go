//go:build arm64

package kernels

import (
	"encoding/binary"
	"math"
)

// The neon backend's quant paths. Its qrows take four weight rows against
// all of a work item's tokens: each row's blocks are decoded to int8 values
// (in the activations' order) with their block parameters, a chunk of
// neonChunk values at a time, ONCE for every token; neonDots4 then takes
// the exact int32 sums of the four rows against one or two tokens' int8
// activations at a time, per group of 16 or 32 (the groups that share one
// integer scale). The sums are scaled in float32 block by block in column
// order, the same expression for every (row, token): the order depends on
// nb alone. Its qtiles are the same code with at most four tokens, so the
// two agree bit for bit.
//
// Decoding here is separate from the formats' portable code (quant_*.go):
// it emits integers for the sums, not floats; TestQuantMatMul checks both
// against the formats' dequantization.

// neonChunk is how many values of each of the four rows are decoded at a
// time: 4 KiB of int8 on the stack, in L1 while every token streams by.
// neonDots4 takes the rows this far apart.
const neonChunk = 1024

// neonDecode32 decodes n 32-value blocks of one row into q (32 values per
// block) and their parameters dm (w = dm[b][0]·q + dm[b][1]).
type neonDecode32 func(q []int8, dm [][2]float32, row []byte, n int)

// neonKBlock is a 256-value block's parameters: w = d·sc[g]·q − dmin·mn[h]
// for a value in scale group g and 16-value group h.
type neonKBlock struct {
	d, dmin float32
	sc      [16]int32
	mn      [16]int32
}

// neonDecodeK decodes n 256-value blocks of one row into q and p.
type neonDecodeK func(q []int8, p []neonKBlock, row []byte, n int)

// neonQRows is the whole-item path of every format the backend decodes.
func neonQRows() [numDTypes]qRowsFn {
	var t [numDTypes]qRowsFn
	t[Q4_0] = neonRows32(18, false, decodeQ4_0)
	t[Q4_1] = neonRows32(20, true, decodeQ4_1)
	t[Q5_0] = neonRows32(22, false, perBlock32(22, unpackQ5_0))
	t[Q5_1] = neonRows32(24, true, perBlock32(24, unpackQ5_1))
	t[IQ4_NL] = neonRows32(18, false, decodeIQ4_NL)
	t[MXFP4] = neonRows32(17, false, decodeMXFP4)
	t[Q2_K] = neonRowsK(84, 16, true, perBlockK(84, unpackQ2_K))
	t[Q3_K] = neonRowsK(110, 16, false, perBlockK(110, unpackQ3_K))
	t[Q4_K] = neonRowsK(144, 8, true, perBlockK(144, unpackQ4_K))
	t[Q5_K] = neonRowsK(176, 8, true, perBlockK(176, unpackQ5_K))
	t[Q6_K] = neonRowsK(210, 16, false, perBlockK(210, unpackQ6_K))
	t[IQ4_XS] = neonRowsK(136, 8, false, perBlockK(136, unpackIQ4_XS))
	return t
}

// neonQTiles is neonQRows run on one tile (at most four tokens).
func neonQTiles(rows [numDTypes]qRowsFn) [numDTypes]qTileFn {
	var t [numDTypes]qTileFn
	for dt, f := range rows {
		if f != nil {
			t[dt] = func(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
				f(nil, res[:], 4, w, rb, nr, act, actStride, nt, nb)
			}
		}
	}
	return t
}

// neonRows32 is the qrows of a 32-value format of bytes-byte blocks against
// actQ8x32 activations; mins says w has an offset term m.
func neonRows32(bytes int, mins bool, decode neonDecode32) qRowsFn {
	const per = neonChunk / 32
	return func(_ *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
		var q [4][neonChunk]int8
		var dm [4][per][2]float32
		var sums [per][8]int32
		for j := range nt {
			clear(out[j*outStride:][:nr])
		}
		for b0 := 0; b0 < nb; b0 += per {
			n := min(per, nb-b0)
			for i := range nr {
				decode(q[i][:], dm[i][:n], w[i*rb+b0*bytes:], n)
			}
			for j := 0; j < nt; j += 2 {
				ntok := min(2, nt-j)
				a := act[j*actStride+b0*ActQ8x32Bytes:]
				neonDots4(i8ptr(q[0][:]), &a[8], ActQ8x32Bytes, actStride, n, 1, 2, ntok, &sums[0][0])
				for k := range ntok {
					// The token's block scales, read once for the four rows.
					var dx, sx [per]float32
					ak := act[(j+k)*actStride+b0*ActQ8x32Bytes:][:n*ActQ8x32Bytes]
					for b := range n {
						dx[b], sx[b] = f32at(ak, b*ActQ8x32Bytes), f32at(ak, b*ActQ8x32Bytes+4)
					}
					o := out[(j+k)*outStride:][:nr]
					for i := range o {
						acc := o[i]
						for b := range n {
							v := float32(sums[b][4*k+i]) * (dm[i][b][0] * dx[b])
							if mins {
								v += dm[i][b][1] * sx[b]
							}
							acc += v
						}
						o[i] = acc
					}
				}
			}
		}
	}
}

// neonRowsK is the qrows of a 256-value format of bytes-byte blocks against
// actQ8K activations, with ngb scale groups per block; mins says w has the
// dmin term.
func neonRowsK(bytes, ngb int, mins bool, decode neonDecodeK) qRowsFn {
	const per = neonChunk / 256
	nv := 16 / ngb
	return func(_ *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
		var q [4][neonChunk]int8
		var p [4][per]neonKBlock
		var sums [per * 16][8]int32
		for j := range nt {
			clear(out[j*outStride:][:nr])
		}
		for b0 := 0; b0 < nb; b0 += per {
			n := min(per, nb-b0)
			for i := range nr {
				decode(q[i][:], p[i][:n], w[i*rb+b0*bytes:], n)
			}
			for j := 0; j < nt; j += 2 {
				ntok := min(2, nt-j)
				a := act[j*actStride+b0*ActQ8KBytes:]
				neonDots4(i8ptr(q[0][:]), &a[4], ActQ8KBytes, actStride, n, ngb, nv, ntok, &sums[0][0])
				for k := range ntok {
					// The token's block scales and 16-value sums, read once
					// for the four rows.
					var ax [per]neonActK
					ak := act[(j+k)*actStride+b0*ActQ8KBytes:][:n*ActQ8KBytes]
					for b := range n {
						ax[b].read(ak[b*ActQ8KBytes:], mins)
					}
					o := out[(j+k)*outStride:][:nr]
					for i := range o {
						acc := o[i]
						for b := range n {
							acc += neonKBlockDot(&p[i][b], sums[b*ngb:(b+1)*ngb], 4*k+i, &ax[b], mins)
						}
						o[i] = acc
					}
				}
			}
		}
	}
}

// perBlock32 is a neonDecode32 from a per-block decoder (formats with no
// vector decoder).
func perBlock32(bytes int, unpack func(q []int8, blk []byte) (d, m float32)) neonDecode32 {
	return func(q []int8, dm [][2]float32, row []byte, n int) {
		for b := range n {
			dm[b][0], dm[b][1] = unpack(q[b*32:(b+1)*32], row[b*bytes:])
		}
	}
}

// perBlockK is a neonDecodeK from a per-block decoder.
func perBlockK(bytes int, unpack func(q []int8, p *neonKBlock, blk []byte)) neonDecodeK {
	return func(q []int8, p []neonKBlock, row []byte, n int) {
		for b := range n {
			unpack(q[b*256:(b+1)*256], &p[b], row[b*bytes:])
		}
	}
}

// neonActK is one actQ8K block's scale and, for the formats with mins,
// its 16-value sums.
type neonActK struct {
	dx    float32
	bsums [16]int32
}

func (x *neonActK) read(ab []byte, mins bool) {
	x.dx = f32at(ab, 0)
	if mins {
		for h := range 16 {
			x.bsums[h] = int32(int16(binary.LittleEndian.Uint16(ab[260+2*h:])))
		}
	}
}

// neonKBlockDot scales one block's group sums (column k of sums):
// d·dx·Σ sc·sum, less dmin·dx·Σ mn·bsum where the format has mins.
func neonKBlockDot(p *neonKBlock, sums [][8]int32, k int, x *neonActK, mins bool) float32 {
	var is int32
	for g := range sums {
		is += p.sc[g] * sums[g][k]
	}
	v := p.d * x.dx * float32(is)
	if mins {
		var ms int32
		for h := range 16 {
			ms += p.mn[h] * x.bsums[h]
		}
		v -= p.dmin * x.dx * float32(ms)
	}
	return v
}

func f32at(b []byte, off int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(b[off:]))
}

func f16at(b []byte, off int) float32 { return f16Table[binary.LittleEndian.Uint16(b[off:])] }

// The 4-bit codebooks of IQ4_NL/IQ4_XS and of MXFP4 (E2M1 values doubled;
// the block scale is halved to match).
var (
	neonKvIQ4   = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
	neonKvMXFP4 = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}
)

var (
	neonKvQ4_0 = [16]int8{-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7}
	neonKvQ4_1 = [16]int8{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
)

// nibbleBlocks decodes the 16 bytes of 4-bit codes at offset off of each of
// n bytes-byte blocks in NEON (neonNib16): per block 32 values, the low
// nibbles' first, each looked up in kv.
func nibbleBlocks(q []int8, row []byte, bytes, off, n int, kv *[16]int8) {
	_, _ = q[32*n-1], row[(n-1)*bytes+off+15]
	neonNib16(i8ptr(q), &row[off], bytes, n, kv)
}

// Q4_0: f16 d, 16 bytes of nibbles; w = d·(q−8).
func decodeQ4_0(q []int8, dm [][2]float32, row []byte, n int) {
	nibbleBlocks(q, row, 18, 2, n, &neonKvQ4_0)
	for b := range n {
		dm[b] = [2]float32{f16at(row, 18*b), 0}
	}
}

// Q4_1: f16 d, f16 m, 16 bytes of nibbles; w = d·q + m.
func decodeQ4_1(q []int8, dm [][2]float32, row []byte, n int) {
	nibbleBlocks(q, row, 20, 4, n, &neonKvQ4_1)
	for b := range n {
		dm[b] = [2]float32{f16at(row, 20*b), f16at(row, 20*b+2)}
	}
}

// IQ4_NL: f16 d, 16 bytes of codebook indices.
func decodeIQ4_NL(q []int8, dm [][2]float32, row []byte, n int) {
	nibbleBlocks(q, row, 18, 2, n, &neonKvIQ4)
	for b := range n {
		dm[b] = [2]float32{f16at(row, 18*b), 0}
	}
}

// MXFP4: an E8M0 exponent e, 16 bytes of E2M1 indices; the scale is
// 2^(e−128) (halved for the doubled codebook), subnormal for e < 2.
func decodeMXFP4(q []int8, dm [][2]float32, row []byte, n int) {
	nibbleBlocks(q, row, 17, 1, n, &neonKvMXFP4)
	for b := range n {
		e := uint32(row[17*b])
		bits := uint32(0x00200000) << e
		if e >= 2 {
			bits = (e - 1) << 23
		}
		dm[b] = [2]float32{math.Float32frombits(bits), 0}
	}
}

// fifthBits writes 32 5-bit values: nibbles as nibbles does, value j's fifth
// bit from bit j of qh, less off.
func fifthBits(q []int8, qh uint32, qs []byte, off int8) {
	q, qs = q[:32], qs[:16]
	for j, v := range qs {
		q[j] = int8(v&15|byte(qh>>j&1)<<4) - off
		q[j+16] = int8(v>>4|byte(qh>>(j+16)&1)<<4) - off
	}
}

// Q5_0: f16 d, 32 high bits, 16 bytes of nibbles; w = d·(q−16).
func unpackQ5_0(q []int8, blk []byte) (d, m float32) {
	fifthBits(q, binary.LittleEndian.Uint32(blk[2:]), blk[6:], 16)
	return f16at(blk, 0), 0
}

// Q5_1: f16 d, f16 m, 32 high bits, 16 bytes of nibbles; w = d·q + m.
func unpackQ5_1(q []int8, blk []byte) (d, m float32) {
	fifthBits(q, binary.LittleEndian.Uint32(blk[4:]), blk[8:], 0)
	return f16at(blk, 0), f16at(blk, 2)
}

// k4ScaleMin is Q4_K/Q5_K's 6-bit scale and min of 32-value group j, packed
// in 12 bytes: groups 0-3 in the low 6 bits of bytes j and j+4, groups 4-7
// in the nibbles of bytes j+4 with their top 2 bits in bytes j−4 and j.
func k4ScaleMin(s []byte, j int) (sc, mn int32) {
	if j < 4 {
		return int32(s[j] & 63), int32(s[j+4] & 63)
	}
	return int32(s[j+4]&15 | s[j-4]>>6<<4), int32(s[j+4]>>4 | s[j]>>6<<4)
}

// Q4_K: f16 d, f16 dmin, 12 bytes of scales and mins, 128 bytes of
// nibbles: each 64 values take 32 bytes, low nibbles then high (neonNib32's
// layout).
func unpackQ4_K(q []int8, p *neonKBlock, blk []byte) {
	q = q[:256]
	p.d, p.dmin = f16at(blk, 0), f16at(blk, 2)
	for j := range 8 {
		sc, mn := k4ScaleMin(blk[4:16], j)
		p.sc[j], p.mn[2*j], p.mn[2*j+1] = sc, mn, mn
	}
	_ = blk[143]
	neonNib32(i8ptr(q), &blk[16], 4)
}

// Q5_K: Q4_K's layout plus 32 bytes of fifth bits: bit j of byte l for
// value l of 32-value group j.
func unpackQ5_K(q []int8, p *neonKBlock, blk []byte) {
	q = q[:256]
	p.d, p.dmin = f16at(blk, 0), f16at(blk, 2)
	qh := blk[16:48]
	for j := range 8 {
		sc, mn := k4ScaleMin(blk[4:16], j)
		p.sc[j], p.mn[2*j], p.mn[2*j+1] = sc, mn, mn
		qs, shift := blk[48+32*(j/2):][:32], 4*(j&1)
		for l, v := range qs {
			q[32*j+l] = int8(v>>shift&15 | qh[l]>>j&1<<4)
		}
	}
}

// Q6_K: 128 bytes of low nibbles, 64 of 2-bit high parts, 16 int8 scales
// (one per 16 values), f16 d; w = d·sc·(q−32). Each half of 128 values
// takes 64 low bytes and 32 high bytes.
func unpackQ6_K(q []int8, p *neonKBlock, blk []byte) {
	q = q[:256]
	for n := range 2 {
		ql, qh, y := blk[64*n:][:64], blk[128+32*n:][:32], q[128*n:][:128]
		for l := range 32 {
			h := qh[l]
			y[l] = int8(ql[l]&15|h&3<<4) - 32
			y[l+32] = int8(ql[l+32]&15|h>>2&3<<4) - 32
			y[l+64] = int8(ql[l]>>4|h>>4&3<<4) - 32
			y[l+96] = int8(ql[l+32]>>4|h>>6<<4) - 32
		}
	}
	for g := range 16 {
		p.sc[g] = int32(int8(blk[192+g]))
	}
	p.d = f16at(blk, 208)
}

// twoBits writes Q2_K/Q3_K's 2-bit values: value 32·j+l of each half of
// 128 is bits 2j..2j+1 of byte l of that half's 32 bytes.
func twoBits(q []int8, qs []byte) {
	q, qs = q[:256], qs[:64]
	for n := range 2 {
		for j := range 4 {
			for l, v := range qs[32*n : 32*n+32] {
				q[128*n+32*j+l] = int8(v >> (2 * j) & 3)
			}
		}
	}
}

// Q2_K: 16 bytes of 4-bit scales (low) and mins (high), 64 bytes of 2-bit
// values, f16 d, f16 dmin.
func unpackQ2_K(q []int8, p *neonKBlock, blk []byte) {
	twoBits(q, blk[16:80])
	for g, s := range blk[:16] {
		p.sc[g], p.mn[g] = int32(s&15), int32(s>>4)
	}
	p.d, p.dmin = f16at(blk, 80), f16at(blk, 82)
}

// Q3_K: 32 bytes of high bits (bit 4n+j of byte l for value 128n+32j+l;
// clear means −4), 64 bytes of 2-bit values, 12 bytes of 6-bit scales
// (offset 32), f16 d.
func unpackQ3_K(q []int8, p *neonKBlock, blk []byte) {
	twoBits(q, blk[32:96])
	hm := blk[:32]
	for i := range 256 {
		if hm[i&31]>>(i>>5)&1 == 0 {
			q[i] -= 4
		}
	}
	// Scale g: low 4 bits from nibble g of bytes 96..103 (the low nibbles
	// of all 8 bytes, then the high ones), top 2 bits from bits 2(g/4)..
	// of byte 104+g%4.
	s := blk[96:108]
	for g := range 16 {
		lo := s[g%8] >> (4 * (g / 8)) & 15
		hi := s[8+g%4] >> (2 * (g / 4)) & 3
		p.sc[g] = int32(lo|hi<<4) - 32
	}
	p.d = f16at(blk, 108)
}

// IQ4_XS: f16 d, 16 bits of scale high parts, 4 bytes of scale low
// nibbles, 128 bytes of codebook indices (16 per 32 values); 6-bit scales
// with offset 32.
func unpackIQ4_XS(q []int8, p *neonKBlock, blk []byte) {
	p.d = f16at(blk, 0)
	sh := binary.LittleEndian.Uint16(blk[2:])
	for ib := range 8 {
		ls := blk[4+ib/2]>>(4*(ib%2))&15 | byte(sh>>(2*ib)&3)<<4
		p.sc[ib] = int32(ls) - 32
	}
	_, _ = q[255], blk[135]
	neonNib16(i8ptr(q), &blk[8], 16, 8, &neonKvIQ4)
}
