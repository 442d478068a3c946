package kernels

import (
	"encoding/binary"
	"math"
)

// The 32-value block formats: ggml's legacy Q4_0, Q4_1, Q5_0, Q5_1, the
// non-linear IQ4_NL and gpt-oss's MXFP4. All pair with actQ8x32
// activations. Byte layouts, per block of 32 values x[0..31]:
//
//	Q4_0   f16 d, 16 qs                    x = d·(q-8)
//	Q4_1   f16 d, f16 m, 16 qs             x = d·q + m
//	Q5_0   f16 d, u32 qh, 16 qs            x = d·(q-16)
//	Q5_1   f16 d, f16 m, u32 qh, 16 qs     x = d·q + m
//	IQ4_NL f16 d, 16 qs                    x = d·kvaluesIQ4NL[q]
//	MXFP4  u8 e, 16 qs                     x = e8m0Half(e)·kvaluesMXFP4[q]
//
// Byte qs[j] holds value j in its low nibble and value j+16 in its high
// nibble; for the 5-bit types bit j of the little-endian qh is the fifth
// (0x10) bit of value j.

// Bytes per block.
const (
	q4_0Bytes   = 18
	q4_1Bytes   = 20
	q5_0Bytes   = 22
	q5_1Bytes   = 24
	iq4nlBytes  = 18
	mxfp4Bytes  = 17
	legacyBlock = 32
)

// kvaluesIQ4NL is ggml's non-linear 4-bit grid (kvalues_iq4nl), shared
// with IQ4_XS.
var kvaluesIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// kvaluesMXFP4 are the FP4 E2M1 values doubled, so that they are integers
// (ggml's kvalues_mxfp4): code 0b0111 is 6.0, stored as 12. e8m0Half
// halves the block scale to compensate.
var kvaluesMXFP4 = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// Nibble-to-value tables of the linear 4-bit types, for the shared dot.
var (
	q4_0Vals = [16]int8{-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7}
	q4_1Vals = [16]int8{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
)

func init() {
	reg := func(t DType, bytes int, dq func([]float32, []byte), q func([]byte, []float32), dot func([]byte, []byte, int) float32) {
		registerQuant(t, &quantFormat{block: legacyBlock, blockBytes: bytes, act: actQ8x32, dequant: dq, quantize: q, dot: dot})
	}
	reg(Q4_0, q4_0Bytes, dequantQ4_0, quantizeQ4_0, dotQ4_0)
	reg(Q4_1, q4_1Bytes, dequantQ4_1, quantizeQ4_1, dotQ4_1)
	reg(Q5_0, q5_0Bytes, dequantQ5_0, quantizeQ5_0, dotQ5_0)
	reg(Q5_1, q5_1Bytes, dequantQ5_1, quantizeQ5_1, dotQ5_1)
	reg(IQ4_NL, iq4nlBytes, dequantIQ4NL, quantizeIQ4NL, dotIQ4NL)
	reg(MXFP4, mxfp4Bytes, dequantMXFP4, quantizeMXFP4, dotMXFP4)
}

// e8m0Half is the E8M0 scale byte e as the float 2^(e-128): half the MX
// scale 2^(e-127), because kvaluesMXFP4 are doubled. e = 0 and 1 give the
// subnormals 2^-128 and 2^-127; e = 255 (NaN in the OCP spec) is 2^127,
// as in ggml.
func e8m0Half(e byte) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

// halfAt reads the float16 at b[0:2].
func halfAt(b []byte) float32 { return f16Table[binary.LittleEndian.Uint16(b)] }

// ---- dequantization ----

// dequantNibbles decodes one block of 16 packed nibbles through tab, times d.
func dequantNibbles(out *[32]float32, qs *[16]byte, tab *[16]int8, d float32) {
	for j, b := range qs {
		out[j] = float32(tab[b&15]) * d
		out[j+16] = float32(tab[b>>4]) * d
	}
}

func dequantQ4_0(dst []float32, src []byte) {
	for b := range len(dst) / legacyBlock {
		x := (*[q4_0Bytes]byte)(src[b*q4_0Bytes:])
		dequantNibbles((*[32]float32)(dst[b*legacyBlock:]), (*[16]byte)(x[2:]), &q4_0Vals, halfAt(x[:]))
	}
}

func dequantQ4_1(dst []float32, src []byte) {
	for b := range len(dst) / legacyBlock {
		x := (*[q4_1Bytes]byte)(src[b*q4_1Bytes:])
		d, m := halfAt(x[0:]), halfAt(x[2:])
		out := (*[32]float32)(dst[b*legacyBlock:])
		for j, q := range (*[16]byte)(x[4:]) {
			// The conversion rounds d·q before m is added, so no platform
			// fuses the two into an FMA: the C source's x0*d + m read
			// without contraction (a build of llama.cpp that contracts it
			// can differ in the last bit).
			out[j] = float32(float32(q&15)*d) + m
			out[j+16] = float32(float32(q>>4)*d) + m
		}
	}
}

// q5Vals unpacks one 5-bit block's values as unsigned 0..31 into out.
func q5Vals(out *[32]int32, qh uint32, qs *[16]byte) {
	for j, q := range qs {
		out[j] = int32(q&15) | int32(qh>>j&1)<<4
		out[j+16] = int32(q>>4) | int32(qh>>(j+16)&1)<<4
	}
}

func dequantQ5_0(dst []float32, src []byte) {
	var q [32]int32
	for b := range len(dst) / legacyBlock {
		x := (*[q5_0Bytes]byte)(src[b*q5_0Bytes:])
		d := halfAt(x[0:])
		q5Vals(&q, binary.LittleEndian.Uint32(x[2:]), (*[16]byte)(x[6:]))
		out := (*[32]float32)(dst[b*legacyBlock:])
		for i, v := range q {
			out[i] = float32(v-16) * d
		}
	}
}

func dequantQ5_1(dst []float32, src []byte) {
	var q [32]int32
	for b := range len(dst) / legacyBlock {
		x := (*[q5_1Bytes]byte)(src[b*q5_1Bytes:])
		d, m := halfAt(x[0:]), halfAt(x[2:])
		q5Vals(&q, binary.LittleEndian.Uint32(x[4:]), (*[16]byte)(x[8:]))
		out := (*[32]float32)(dst[b*legacyBlock:])
		for i, v := range q {
			out[i] = float32(float32(v)*d) + m
		}
	}
}

func dequantIQ4NL(dst []float32, src []byte) {
	for b := range len(dst) / legacyBlock {
		x := (*[iq4nlBytes]byte)(src[b*iq4nlBytes:])
		dequantNibbles((*[32]float32)(dst[b*legacyBlock:]), (*[16]byte)(x[2:]), &kvaluesIQ4NL, halfAt(x[:]))
	}
}

func dequantMXFP4(dst []float32, src []byte) {
	for b := range len(dst) / legacyBlock {
		x := (*[mxfp4Bytes]byte)(src[b*mxfp4Bytes:])
		dequantNibbles((*[32]float32)(dst[b*legacyBlock:]), (*[16]byte)(x[1:]), &kvaluesMXFP4, e8m0Half(x[0]))
	}
}

// ---- dot products against actQ8x32 ----
//
// Per block the weight integers times the activation int8s sum exactly in
// int32; the block then adds float32(dw·da·Σ) (and dm·s for the types with
// a minimum) to a float32 total, in block order. The explicit conversions
// stop the compiler fusing the multiply into the add on FMA architectures,
// so every platform computes the same bits.

// actAt is activation block b: its scale d, its s = d·Σq and the block
// bytes (quants at [8:40]).
func actAt(act []byte, b int) (d, s float32, a *[ActQ8x32Bytes]byte) {
	a = (*[ActQ8x32Bytes]byte)(act[b*ActQ8x32Bytes:])
	return math.Float32frombits(binary.LittleEndian.Uint32(a[0:])), math.Float32frombits(binary.LittleEndian.Uint32(a[4:])), a
}

// nibbleDot is Σ tab[nibble]·q over one block: the low nibbles against
// activation values 0..15, the high ones against 16..31. Four independent
// sums let the adds overlap (measured about 25% faster than one); none can
// overflow (32·127·128 < 2^31).
func nibbleDot(tab *[16]int8, qs *[16]byte, a *[ActQ8x32Bytes]byte) int32 {
	lo, hi := (*[16]byte)(a[8:]), (*[16]byte)(a[24:])
	var s0, s1, s2, s3 int32
	for j := 0; j < 16; j += 2 {
		b0, b1 := qs[j], qs[j+1]
		s0 += int32(tab[b0&15]) * int32(int8(lo[j]))
		s1 += int32(tab[b0>>4]) * int32(int8(hi[j]))
		s2 += int32(tab[b1&15]) * int32(int8(lo[j+1]))
		s3 += int32(tab[b1>>4]) * int32(int8(hi[j+1]))
	}
	return (s0 + s1) + (s2 + s3)
}

// q5Dot is Σ (v-off)·q over one 5-bit block, v the unsigned 5-bit value:
// qh is shifted along, two fifth bits per step for each half, rather than
// indexed by j.
func q5Dot(qh uint32, qs *[16]byte, a *[ActQ8x32Bytes]byte, off int32) int32 {
	lo, hi := (*[16]byte)(a[8:]), (*[16]byte)(a[24:])
	hh := qh >> 16
	var s0, s1, s2, s3 int32
	for j := 0; j < 16; j += 2 {
		b0, b1 := qs[j], qs[j+1]
		s0 += ((int32(b0&15) | int32(qh&1)<<4) - off) * int32(int8(lo[j]))
		s1 += ((int32(b0>>4) | int32(hh&1)<<4) - off) * int32(int8(hi[j]))
		s2 += ((int32(b1&15) | int32(qh&2)<<3) - off) * int32(int8(lo[j+1]))
		s3 += ((int32(b1>>4) | int32(hh&2)<<3) - off) * int32(int8(hi[j+1]))
		qh >>= 2
		hh >>= 2
	}
	return (s0 + s1) + (s2 + s3)
}

func dotQ4_0(w, act []byte, nb int) float32 {
	var sum float32
	for b := range nb {
		x := (*[q4_0Bytes]byte)(w[b*q4_0Bytes:])
		da, _, a := actAt(act, b)
		sum += float32(halfAt(x[:]) * da * float32(nibbleDot(&q4_0Vals, (*[16]byte)(x[2:]), a)))
	}
	return sum
}

func dotQ4_1(w, act []byte, nb int) float32 {
	var sum float32
	for b := range nb {
		x := (*[q4_1Bytes]byte)(w[b*q4_1Bytes:])
		da, sa, a := actAt(act, b)
		i := nibbleDot(&q4_1Vals, (*[16]byte)(x[4:]), a)
		sum += float32(halfAt(x[0:])*da*float32(i)) + float32(halfAt(x[2:])*sa)
	}
	return sum
}

func dotQ5_0(w, act []byte, nb int) float32 {
	var sum float32
	for b := range nb {
		x := (*[q5_0Bytes]byte)(w[b*q5_0Bytes:])
		da, _, a := actAt(act, b)
		i := q5Dot(binary.LittleEndian.Uint32(x[2:]), (*[16]byte)(x[6:]), a, 16)
		sum += float32(halfAt(x[0:]) * da * float32(i))
	}
	return sum
}

func dotQ5_1(w, act []byte, nb int) float32 {
	var sum float32
	for b := range nb {
		x := (*[q5_1Bytes]byte)(w[b*q5_1Bytes:])
		da, sa, a := actAt(act, b)
		i := q5Dot(binary.LittleEndian.Uint32(x[4:]), (*[16]byte)(x[8:]), a, 0)
		sum += float32(halfAt(x[0:])*da*float32(i)) + float32(halfAt(x[2:])*sa)
	}
	return sum
}

func dotIQ4NL(w, act []byte, nb int) float32 {
	var sum float32
	for b := range nb {
		x := (*[iq4nlBytes]byte)(w[b*iq4nlBytes:])
		da, _, a := actAt(act, b)
		sum += float32(halfAt(x[:]) * da * float32(nibbleDot(&kvaluesIQ4NL, (*[16]byte)(x[2:]), a)))
	}
	return sum
}

func dotMXFP4(w, act []byte, nb int) float32 {
	var sum float32
	for b := range nb {
		x := (*[mxfp4Bytes]byte)(w[b*mxfp4Bytes:])
		da, _, a := actAt(act, b)
		sum += float32(e8m0Half(x[0]) * da * float32(nibbleDot(&kvaluesMXFP4, (*[16]byte)(x[1:]), a)))
	}
	return sum
}

// ---- reference quantizers ----
//
// The linear types take llama.cpp's reference scales (Q4_0: d = -max/8 of
// the value largest in magnitude; Q4_1: d = (max-min)/15, m = min; the
// 5-bit ones alike with 16 and 31), but round each value against the scale
// as stored in float16, not the float32 one, so that the stored scale and
// the integers agree.

// f16Scale stores a block scale as float16, saturating at ±65504 so that a
// block beyond the half range decodes to large finite values, not ±Inf,
// and storing a zero scale as +0 so that a zero block (0/-8 is -0) decodes
// to +0, not -0.
func f16Scale(d float32) uint16 {
	h := F32ToF16(d)
	switch h & 0x7fff {
	case 0x7c00:
		return h&0x8000 | 0x7bff
	case 0:
		return 0
	}
	return h
}

// inv is 1/d, or 0 for a zero scale (an all-zero block).
func inv(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

// level rounds v to the nearest integer (halves away from zero) clamped to
// [lo, hi].
func level(v float32, lo, hi int) int {
	r := math.Round(float64(v))
	if !(r >= float64(lo)) { // also NaN
		return lo
	}
	if r > float64(hi) {
		return hi
	}
	return int(r)
}

// signedAbsMax is the first value of x with the largest magnitude.
func signedAbsMax(x *[32]float32) float32 {
	var amax, m float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, m = a, v
		}
	}
	return m
}

// minMax is x's least and greatest value.
func minMax(x *[32]float32) (lo, hi float32) {
	lo, hi = x[0], x[0]
	for _, v := range x[1:] {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

// packNibbles stores 32 4-bit codes as qs: value j low, value j+16 high.
func packNibbles(qs *[16]byte, l *[32]uint8) {
	for j := range qs {
		qs[j] = l[j]&15 | l[j+16]<<4
	}
}

// packQ5 stores 32 5-bit codes as qh (fifth bits) and qs (low nibbles).
func packQ5(qh *[4]byte, qs *[16]byte, l *[32]uint8) {
	var h uint32
	for i, v := range l {
		h |= uint32(v>>4&1) << i
	}
	binary.LittleEndian.PutUint32(qh[:], h)
	packNibbles(qs, l)
}

// symLevels quantizes x as codes c = round(x/d)+off in [0, 2·off) for the
// symmetric types, d their stored scale, and returns the half's bits.
func symLevels(l *[32]uint8, x *[32]float32, off int) uint16 {
	h := f16Scale(signedAbsMax(x) / float32(-off))
	id := inv(f16Table[h])
	for i, v := range x {
		l[i] = uint8(level(v*id, -off, off-1) + off)
	}
	return h
}

// affineLevels quantizes x as codes c = round((x-m)/d) in [0, n] for the
// types with a minimum, and returns the halves of d and m.
func affineLevels(l *[32]uint8, x *[32]float32, n int) (hd, hm uint16) {
	lo, hi := minMax(x)
	hd, hm = f16Scale((hi-lo)/float32(n)), f16Scale(lo)
	id, m := inv(f16Table[hd]), f16Table[hm]
	for i, v := range x {
		l[i] = uint8(level((v-m)*id, 0, n))
	}
	return hd, hm
}

func quantizeQ4_0(dst []byte, src []float32) {
	var l [32]uint8
	for b := range len(src) / legacyBlock {
		out := (*[q4_0Bytes]byte)(dst[b*q4_0Bytes:])
		h := symLevels(&l, (*[32]float32)(src[b*legacyBlock:]), 8)
		binary.LittleEndian.PutUint16(out[0:], h)
		packNibbles((*[16]byte)(out[2:]), &l)
	}
}

func quantizeQ4_1(dst []byte, src []float32) {
	var l [32]uint8
	for b := range len(src) / legacyBlock {
		out := (*[q4_1Bytes]byte)(dst[b*q4_1Bytes:])
		hd, hm := affineLevels(&l, (*[32]float32)(src[b*legacyBlock:]), 15)
		binary.LittleEndian.PutUint16(out[0:], hd)
		binary.LittleEndian.PutUint16(out[2:], hm)
		packNibbles((*[16]byte)(out[4:]), &l)
	}
}

func quantizeQ5_0(dst []byte, src []float32) {
	var l [32]uint8
	for b := range len(src) / legacyBlock {
		out := (*[q5_0Bytes]byte)(dst[b*q5_0Bytes:])
		h := symLevels(&l, (*[32]float32)(src[b*legacyBlock:]), 16)
		binary.LittleEndian.PutUint16(out[0:], h)
		packQ5((*[4]byte)(out[2:]), (*[16]byte)(out[6:]), &l)
	}
}

func quantizeQ5_1(dst []byte, src []float32) {
	var l [32]uint8
	for b := range len(src) / legacyBlock {
		out := (*[q5_1Bytes]byte)(dst[b*q5_1Bytes:])
		hd, hm := affineLevels(&l, (*[32]float32)(src[b*legacyBlock:]), 31)
		binary.LittleEndian.PutUint16(out[0:], hd)
		binary.LittleEndian.PutUint16(out[2:], hm)
		packQ5((*[4]byte)(out[4:]), (*[16]byte)(out[8:]), &l)
	}
}

// nearestIQ4NL is the index of the grid value nearest v (ties to the
// lower one); the grid is sorted.
func nearestIQ4NL(v float32) uint8 {
	var i uint8
	for i < 15 && 2*v > float32(kvaluesIQ4NL[i])+float32(kvaluesIQ4NL[i+1]) {
		i++
	}
	return i
}

// iq4nlTries is how many grid-unit steps either side of each anchor the
// IQ4_NL quantizer tries when it searches for the block scale.
const iq4nlTries = 8

// quantizeIQ4NL picks per block the scale minimising the squared error over
// the non-linear grid. The grid is lopsided (-127 … 113), so the value
// largest in magnitude is tried both at the negative end (d = -max/127) and
// at the positive end (d = max/113), each with inverse scales a few grid
// units to either side; for each candidate's codes the least-squares scale
// Σx·v/Σv² is the best one, with error Σx² - (Σx·v)²/Σv². The winner is
// stored as float16 and the codes chosen again against that stored scale.
func quantizeIQ4NL(dst []byte, src []float32) {
	var l [32]uint8
	for b := range len(src) / legacyBlock {
		x := (*[32]float32)(src[b*legacyBlock:])
		out := (*[iq4nlBytes]byte)(dst[b*iq4nlBytes:])
		h := f16Scale(iq4nlScale(x))
		id := inv(f16Table[h])
		for i, v := range x {
			l[i] = nearestIQ4NL(v * id)
		}
		binary.LittleEndian.PutUint16(out[0:], h)
		packNibbles((*[16]byte)(out[2:]), &l)
	}
}

// iq4nlScale is the float32 block scale quantizeIQ4NL stores (0 for an
// all-zero block).
func iq4nlScale(x *[32]float32) float32 {
	m := signedAbsMax(x)
	if m == 0 {
		return 0
	}
	var best, bestD float64
	for _, anchor := range []int{int(kvaluesIQ4NL[0]), int(kvaluesIQ4NL[15])} {
		for k := -iq4nlTries; k <= iq4nlTries; k++ {
			id := float32(anchor+k) / m
			var sxv, svv float64
			for _, v := range x {
				g := float64(kvaluesIQ4NL[nearestIQ4NL(v*id)])
				sxv += float64(v) * g
				svv += g * g
			}
			if svv > 0 && sxv*sxv > best*svv {
				best, bestD = sxv*sxv/svv, sxv/svv
			}
		}
	}
	return float32(bestD)
}

// mxfp4Mag are the doubled E2M1 magnitudes, codes 0..7.
var mxfp4Mag = [8]float32{0, 1, 2, 3, 4, 6, 8, 12}

// nearestMXFP4 is the code of the doubled FP4 value nearest v (ties to the
// smaller magnitude; zero always code 0, never the negative zero 8).
func nearestMXFP4(v float32) uint8 {
	a := abs32(v)
	var i uint8
	for i < 7 && 2*a > mxfp4Mag[i]+mxfp4Mag[i+1] {
		i++
	}
	if v < 0 && i != 0 {
		i |= 8
	}
	return i
}

// quantizeMXFP4 picks per block the shared exponent. llama.cpp's reference
// takes e = floor(log2 max|x|) - 2 + 127, whose largest value, 1.5·2^k for
// max|x| in [2^k, 2^(k+1)), clips the top quarter of that range; the
// exponent one higher never clips but is coarser. Both are tried and the
// one with the smaller squared error kept.
func quantizeMXFP4(dst []byte, src []float32) {
	var l [32]uint8
	for b := range len(src) / legacyBlock {
		x := (*[32]float32)(src[b*legacyBlock:])
		out := (*[mxfp4Bytes]byte)(dst[b*mxfp4Bytes:])
		e := mxfp4Exponent(x)
		d := e8m0Half(e)
		for i, v := range x {
			l[i] = nearestMXFP4(v / d) // not v·(1/d): 1/d overflows for e < 2
		}
		out[0] = e
		packNibbles((*[16]byte)(out[1:]), &l)
	}
}

// mxfp4Exponent is the E8M0 byte quantizeMXFP4 stores for x, in [0, 254].
func mxfp4Exponent(x *[32]float32) byte {
	amax := abs32(signedAbsMax(x))
	if amax == 0 || amax != amax {
		return 0
	}
	_, exp := math.Frexp(float64(amax)) // amax = f·2^exp, f in [0.5, 1)
	e0 := exp - 1 - 2 + 127
	best, bestErr := byte(min(max(e0, 0), 254)), math.Inf(1)
	for e := e0; e <= e0+1; e++ {
		c := byte(min(max(e, 0), 254))
		if err := mxfp4Err(x, c); err < bestErr {
			best, bestErr = c, err
		}
	}
	return best
}

// mxfp4Err is the squared error of x quantized with exponent e, decoded in
// float32 as the kernels do (a value overflowing to Inf makes it +Inf).
func mxfp4Err(x *[32]float32, e byte) float64 {
	d := e8m0Half(e)
	var se float64
	for _, v := range x {
		diff := float64(float32(kvaluesMXFP4[nearestMXFP4(v/d)])*d) - float64(v)
		se += diff * diff
	}
	return se
}
