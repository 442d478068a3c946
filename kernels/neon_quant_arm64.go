//go:build arm64

package kernels

import (
	"encoding/binary"
	"math"
)

// The neon backend's quant tiles. A tile decodes each weight row's blocks to
// int8 values (in the activations' order) with their block parameters, a
// chunk of blocks at a time, and neonDots takes the exact int32 sums of
// those values against each token's int8 activations, per group of 16 or 32
// (the groups that share one integer scale). The sums are then scaled in
// float32, block by block in column order: the order depends on nb alone.
//
// Decoding here is separate from the formats' portable code (quant_*.go):
// it emits integers for the sums, not floats; TestQuantMatMul checks both
// against the formats' dequantization.

// neonChunk is how many values of each of a tile's rows are decoded at a
// time: 4 rows × 1 KiB stay on the stack and in L1.
const neonChunk = 1024

// neonLegacy decodes one 32-value block into q (w = d·q + m).
type neonLegacy func(q []int8, blk []byte) (d, m float32)

// neonKBlock is a 256-value block's parameters: w = d·sc[g]·q − dmin·mn[h]
// for a value in scale group g and 16-value group h.
type neonKBlock struct {
	d, dmin float32
	sc      [16]int32
	mn      [16]int32
}

// neonKQuant decodes one 256-value block into q and its parameters.
type neonKQuant func(q []int8, p *neonKBlock, blk []byte)

// neonQTiles is the tile of every format the backend decodes itself.
func neonQTiles() [numDTypes]qTileFn {
	var t [numDTypes]qTileFn
	t[Q4_0] = neonTile32(18, false, unpackQ4_0)
	t[Q4_1] = neonTile32(20, true, unpackQ4_1)
	t[Q5_0] = neonTile32(22, false, unpackQ5_0)
	t[Q5_1] = neonTile32(24, true, unpackQ5_1)
	t[IQ4_NL] = neonTile32(18, false, unpackIQ4_NL)
	t[MXFP4] = neonTile32(17, false, unpackMXFP4)
	t[Q2_K] = neonTileK(84, 16, true, unpackQ2_K)
	t[Q3_K] = neonTileK(110, 16, false, unpackQ3_K)
	t[Q4_K] = neonTileK(144, 8, true, unpackQ4_K)
	t[Q5_K] = neonTileK(176, 8, true, unpackQ5_K)
	t[Q6_K] = neonTileK(210, 16, false, unpackQ6_K)
	t[IQ4_XS] = neonTileK(136, 8, false, unpackIQ4_XS)
	return t
}

// neonTile32 is the tile of a 32-value format of bytes-byte blocks against
// actQ8x32 activations; mins says w has an offset term m.
func neonTile32(bytes int, mins bool, unpack neonLegacy) qTileFn {
	const per = neonChunk / 32
	return func(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
		var q [4][neonChunk]int8
		var dm [4][per][2]float32
		var sums [per]int32
		*res = [16]float32{}
		for b0 := 0; b0 < nb; b0 += per {
			n := min(per, nb-b0)
			for i := range nr {
				row := w[i*rb+b0*bytes:]
				for b := range n {
					dm[i][b][0], dm[i][b][1] = unpack(q[i][b*32:(b+1)*32], row[b*bytes:])
				}
			}
			for j := range nt {
				a := act[j*actStride+b0*ActQ8x32Bytes:][:n*ActQ8x32Bytes]
				for i := range nr {
					neonDots(i8ptr(q[i][:]), 32, &a[8], ActQ8x32Bytes, n, 1, 2, &sums[0])
					acc := res[j*4+i]
					for b, s := range sums[:n] {
						ab := a[b*ActQ8x32Bytes:]
						v := float32(s) * (dm[i][b][0] * f32at(ab, 0))
						if mins {
							v += dm[i][b][1] * f32at(ab, 4)
						}
						acc += v
					}
					res[j*4+i] = acc
				}
			}
		}
	}
}

// neonTileK is the tile of a 256-value format of bytes-byte blocks against
// actQ8K activations, with ngb scale groups per block; mins says w has the
// dmin term.
func neonTileK(bytes, ngb int, mins bool, unpack neonKQuant) qTileFn {
	const per = neonChunk / 256
	nv := 16 / ngb
	return func(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
		var q [4][neonChunk]int8
		var p [4][per]neonKBlock
		var sums [per * 16]int32
		*res = [16]float32{}
		for b0 := 0; b0 < nb; b0 += per {
			n := min(per, nb-b0)
			for i := range nr {
				row := w[i*rb+b0*bytes:]
				for b := range n {
					unpack(q[i][b*256:(b+1)*256], &p[i][b], row[b*bytes:])
				}
			}
			for j := range nt {
				a := act[j*actStride+b0*ActQ8KBytes:][:n*ActQ8KBytes]
				for i := range nr {
					neonDots(i8ptr(q[i][:]), 256, &a[4], ActQ8KBytes, n, ngb, nv, &sums[0])
					acc := res[j*4+i]
					for b := range n {
						acc += neonKBlockDot(&p[i][b], sums[b*ngb:(b+1)*ngb], a[b*ActQ8KBytes:], mins)
					}
					res[j*4+i] = acc
				}
			}
		}
	}
}

// neonKBlockDot scales one block's group sums: d·dx·Σ sc·sum, less
// dmin·dx·Σ mn·bsum (the activation block's 16-value sums) where the
// format has mins.
func neonKBlockDot(p *neonKBlock, sums []int32, ab []byte, mins bool) float32 {
	dx := f32at(ab, 0)
	var is int32
	for g, s := range sums {
		is += p.sc[g] * s
	}
	v := p.d * dx * float32(is)
	if mins {
		var ms int32
		for h := range 16 {
			ms += p.mn[h] * int32(int16(binary.LittleEndian.Uint16(ab[260+2*h:])))
		}
		v -= p.dmin * dx * float32(ms)
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

// nibbles writes the 32 values of a 16-byte 4-bit block: low nibbles first,
// then high ones, each looked up in kv.
func nibbles(q []int8, qs []byte, kv *[16]int8) {
	q, qs = q[:32], qs[:16]
	for j, v := range qs {
		q[j], q[j+16] = kv[v&15], kv[v>>4]
	}
}

var (
	neonKvQ4_0 = [16]int8{-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7}
	neonKvQ4_1 = [16]int8{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
)

// Q4_0: f16 d, 16 bytes of nibbles; w = d·(q−8).
func unpackQ4_0(q []int8, blk []byte) (d, m float32) {
	nibbles(q, blk[2:], &neonKvQ4_0)
	return f16at(blk, 0), 0
}

// Q4_1: f16 d, f16 m, 16 bytes of nibbles; w = d·q + m.
func unpackQ4_1(q []int8, blk []byte) (d, m float32) {
	nibbles(q, blk[4:], &neonKvQ4_1)
	return f16at(blk, 0), f16at(blk, 2)
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

// IQ4_NL: f16 d, 16 bytes of codebook indices.
func unpackIQ4_NL(q []int8, blk []byte) (d, m float32) {
	nibbles(q, blk[2:], &neonKvIQ4)
	return f16at(blk, 0), 0
}

// MXFP4: an E8M0 exponent e, 16 bytes of E2M1 indices; the scale is
// 2^(e−128) (halved for the doubled codebook), subnormal for e < 2.
func unpackMXFP4(q []int8, blk []byte) (d, m float32) {
	nibbles(q, blk[1:], &neonKvMXFP4)
	e := uint32(blk[0])
	bits := uint32(0x00200000) << e
	if e >= 2 {
		bits = (e - 1) << 23
	}
	return math.Float32frombits(bits), 0
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
// nibbles: each 64 values take 32 bytes, low nibbles then high.
func unpackQ4_K(q []int8, p *neonKBlock, blk []byte) {
	q = q[:256]
	p.d, p.dmin = f16at(blk, 0), f16at(blk, 2)
	for j := range 8 {
		sc, mn := k4ScaleMin(blk[4:16], j)
		p.sc[j], p.mn[2*j], p.mn[2*j+1] = sc, mn, mn
		qs, shift := blk[16+32*(j/2):][:32], 4*(j&1)
		for l, v := range qs {
			q[32*j+l] = int8(v >> shift & 15)
		}
	}
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
		nibbles(q[32*ib:], blk[8+16*ib:], &neonKvIQ4)
	}
}
