package kernels

import (
	"encoding/binary"
	"math"
)

// The K-quants and IQ4_XS: 256-value super-blocks whose sub-blocks of 16 or
// 32 values carry small integer scales (and, for Q2_K, Q4_K and Q5_K,
// integer mins) under one or two float16 super-block scales. Layouts are
// llama.cpp's block_q2_K … block_iq4_xs byte for byte; dequantization
// rounds in the order ggml's dequantize_row_* does (sub-block scale first,
// then times the quant, then minus the min), each step in float32.
//
// The dot products work as ggml's portable vec_dot_*_q8_K: exact int32 sums
// of quant × activation per sub-block, times the integer sub-block scale,
// mins through the activation block's 16-value sums, then one float32
// scaling per super-block, accumulated in block order.

// Super-block sizes in bytes.
const (
	q2KBytes   = 84  // scales[16], qs[64], d, dmin
	q3KBytes   = 110 // hmask[32], qs[64], scales[12], d
	q4KBytes   = 144 // d, dmin, scales[12], qs[128]
	q5KBytes   = 176 // d, dmin, scales[12], qh[32], qs[128]
	q6KBytes   = 210 // ql[128], qh[64], scales[16] int8, d
	iq4XSBytes = 136 // d, scales_h u16, scales_l[4], qs[128]
)

func init() {
	for _, r := range []struct {
		t DType
		f quantFormat
	}{
		{Q2_K, quantFormat{dequant: dequantQ2K, quantize: quantizeQ2K, dot: dotQ2K, blockBytes: q2KBytes}},
		{Q3_K, quantFormat{dequant: dequantQ3K, quantize: quantizeQ3K, dot: dotQ3K, blockBytes: q3KBytes}},
		{Q4_K, quantFormat{dequant: dequantQ4K, quantize: quantizeQ4K, dot: dotQ4K, blockBytes: q4KBytes}},
		{Q5_K, quantFormat{dequant: dequantQ5K, quantize: quantizeQ5K, dot: dotQ5K, blockBytes: q5KBytes}},
		{Q6_K, quantFormat{dequant: dequantQ6K, quantize: quantizeQ6K, dot: dotQ6K, blockBytes: q6KBytes}},
		{IQ4_XS, quantFormat{dequant: dequantIQ4XS, quantize: quantizeIQ4XS, dot: dotIQ4XS, blockBytes: iq4XSBytes}},
	} {
		f := r.f
		f.block, f.act = 256, actQ8K
		registerQuant(r.t, &f)
	}
}

func f16At(b []byte, off int) float32 { return f16Table[binary.LittleEndian.Uint16(b[off:])] }

// scaleMinK4 unpacks sub-block j's 6-bit scale and min from the 12 bytes
// Q4_K and Q5_K share: sub-blocks 0-3 keep theirs in the low 6 bits of
// bytes j and j+4; 4-7 keep the low 4 bits in byte j+4's nibbles and the
// top 2 in the spare top bits of bytes j-4 and j.
func scaleMinK4(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0xF | s[j-4]>>6<<4, s[j+4]>>4 | s[j]>>6<<4
}

// putScaleMinK4 is scaleMinK4's inverse, for s zeroed and then filled in
// sub-block order (4-7 OR their top bits into bytes 0-7 written by 0-3).
func putScaleMinK4(j int, s []byte, sc, m uint8) {
	if j < 4 {
		s[j], s[j+4] = sc, m
		return
	}
	s[j+4] = sc&0xF | m<<4
	s[j-4] |= sc >> 4 << 6
	s[j] |= m >> 4 << 6
}

// scalesQ3K unpacks Q3_K's sixteen 6-bit scales (stored +32): the low
// nibbles of bytes 0-7 hold scales 0-7, their high nibbles scales 8-15, and
// bytes 8-11 the top two bits, scale j at byte 8+j%4, bits 2·(j/4).
func scalesQ3K(s []byte) (out [16]int32) {
	for j := range 16 {
		lo := s[j%8] >> (4 * (j / 8)) & 0xF
		hi := s[8+j%4] >> (2 * (j / 4)) & 3
		out[j] = int32(lo|hi<<4) - 32
	}
	return out
}

// --- dequantization ---

func dequantQ2K(dst []float32, src []byte) {
	for b := range len(dst) / 256 {
		blk := src[b*q2KBytes : (b+1)*q2KBytes]
		y := dst[b*256 : (b+1)*256]
		d, dmin := f16At(blk, 80), f16At(blk, 82)
		// Value 128h+32k+l is 2-bit field k of qs[32h+l]; sub-block (value/16).
		for i := range 256 {
			h, k, l := i/128, i/32%4, i%32
			sc := blk[i/16]
			dl := d * float32(sc&0xF)
			ml := dmin * float32(sc>>4)
			q := blk[16+32*h+l] >> (2 * k) & 3
			y[i] = float32(dl*float32(q)) - ml
		}
	}
}

func dequantQ3K(dst []float32, src []byte) {
	for b := range len(dst) / 256 {
		blk := src[b*q3KBytes : (b+1)*q3KBytes]
		y := dst[b*256 : (b+1)*256]
		d := f16At(blk, 108)
		sc := scalesQ3K(blk[96:108])
		for i := range 256 {
			y[i] = d * float32(sc[i/16]) * float32(q3KValue(blk, i))
		}
	}
}

// q3KValue is value i of a Q3_K block as a signed quant in -4..3: the low
// two bits sit like Q2_K's, and a clear hmask bit (byte i%32, bit i/32)
// subtracts 4.
func q3KValue(blk []byte, i int) int32 {
	h, k, l := i/128, i/32%4, i%32
	q := int32(blk[32+32*h+l] >> (2 * k) & 3)
	if blk[l]>>(i/32)&1 == 0 {
		q -= 4
	}
	return q
}

func dequantQ4K(dst []float32, src []byte) {
	for b := range len(dst) / 256 {
		blk := src[b*q4KBytes : (b+1)*q4KBytes]
		y := dst[b*256 : (b+1)*256]
		d, dmin := f16At(blk, 0), f16At(blk, 2)
		// Chunk c of 64 values: the low nibbles of qs[32c:32c+32] then the high.
		for j := range 8 {
			sc, m := scaleMinK4(j, blk[4:16])
			dl, ml := d*float32(sc), dmin*float32(m)
			qs := blk[16+32*(j/2):][:32]
			shift := 4 * (j % 2)
			out := y[32*j : 32*j+32]
			for l := range out {
				out[l] = float32(dl*float32(qs[l]>>shift&0xF)) - ml
			}
		}
	}
}

func dequantQ5K(dst []float32, src []byte) {
	for b := range len(dst) / 256 {
		blk := src[b*q5KBytes : (b+1)*q5KBytes]
		y := dst[b*256 : (b+1)*256]
		d, dmin := f16At(blk, 0), f16At(blk, 2)
		qh := blk[16:48]
		// As Q4_K, plus a fifth bit: qh[l] bit j for sub-block j.
		for j := range 8 {
			sc, m := scaleMinK4(j, blk[4:16])
			dl, ml := d*float32(sc), dmin*float32(m)
			qs := blk[48+32*(j/2):][:32]
			shift := 4 * (j % 2)
			out := y[32*j : 32*j+32]
			for l := range out {
				q := qs[l]>>shift&0xF | qh[l]>>j&1<<4
				out[l] = float32(dl*float32(q)) - ml
			}
		}
	}
}

func dequantQ6K(dst []float32, src []byte) {
	for b := range len(dst) / 256 {
		blk := src[b*q6KBytes : (b+1)*q6KBytes]
		y := dst[b*256 : (b+1)*256]
		d := f16At(blk, 208)
		for i := range 256 {
			y[i] = d * float32(int8(blk[192+i/16])) * float32(q6KValue(blk, i))
		}
	}
}

// q6KValue is value i of a Q6_K block as a signed quant in -32..31. In each
// half h of 128 values, value 32k+l takes its low nibble from ql[64h+l]
// (k=0,2) or ql[64h+32+l] (k=1,3), low nibble for k<2, high for k≥2, and
// its top two bits from qh[32h+l] bits 2k.
func q6KValue(blk []byte, i int) int32 {
	h, k, l := i/128, i/32%4, i%32
	lo := blk[64*h+32*(k%2)+l] >> (4 * (k / 2)) & 0xF
	hi := blk[128+32*h+l] >> (2 * k) & 3
	return int32(lo|hi<<4) - 32
}

func dequantIQ4XS(dst []float32, src []byte) {
	for b := range len(dst) / 256 {
		blk := src[b*iq4XSBytes : (b+1)*iq4XSBytes]
		y := dst[b*256 : (b+1)*256]
		d := f16At(blk, 0)
		sh := binary.LittleEndian.Uint16(blk[2:])
		for j := range 8 {
			dl := d * float32(iq4XSScale(blk[4:8], sh, j))
			qs := blk[8+16*j:][:16]
			out := y[32*j : 32*j+32]
			for l, q := range qs {
				out[l] = dl * float32(kvaluesIQ4NL[q&0xF])
				out[l+16] = dl * float32(kvaluesIQ4NL[q>>4])
			}
		}
	}
}

// iq4XSScale is sub-block j's scale in -32..31: low nibble j%2 of
// scales_l[j/2], top bits 2j of scales_h, stored +32.
func iq4XSScale(sl []byte, sh uint16, j int) int32 {
	lo := int32(sl[j/2]>>(4*(j%2))) & 0xF
	hi := int32(sh>>(2*j)) & 3
	return lo | hi<<4 - 32
}

// --- dot products against actQ8K ---

// q8K splits an activation block into its scale, quants and 16-value sums.
func q8K(a []byte) (d float32, q []byte, bsums []byte) {
	a = a[:ActQ8KBytes]
	return math.Float32frombits(binary.LittleEndian.Uint32(a)), a[4:260], a[260:292]
}

func bsum(bs []byte, g int) int32 { return int32(int16(binary.LittleEndian.Uint16(bs[2*g:]))) }

// The 2-bit formats unpack their quants into a 256-entry buffer first,
// each qs byte read once with constant shifts, so that the sums per
// 16-value sub-block run over plain int8 pairs (dot16).

func dotQ2K(w, act []byte, nb int) float32 {
	var sum float32
	var q [256]int8
	for b := range nb {
		blk := w[b*q2KBytes : (b+1)*q2KBytes]
		ad, q8, bs := q8K(act[b*ActQ8KBytes:])
		for h := range 2 {
			qs := (*[32]byte)(blk[16+32*h:])
			o := (*[128]int8)(q[128*h:])
			for l, v := range qs {
				o[l], o[32+l], o[64+l], o[96+l] = int8(v&3), int8(v>>2&3), int8(v>>4&3), int8(v>>6)
			}
		}
		var isum, msum int32
		for g := range 16 {
			sc := blk[g]
			msum += bsum(bs, g) * int32(sc>>4)
			isum += int32(sc&0xF) * dot16(&q, q8, g)
		}
		dall := ad * f16At(blk, 80)
		dmin := ad * f16At(blk, 82)
		sum += float32(dall*float32(isum)) - float32(dmin*float32(msum))
	}
	return sum
}

// dot16 is the int32 sum of q·a over sub-block g's 16 values.
func dot16(q *[256]int8, a []byte, g int) int32 {
	x := (*[16]int8)(q[16*g:])
	y := (*[16]byte)(a[16*g:])
	var s int32
	for l := range 16 {
		s += int32(x[l]) * int32(int8(y[l]))
	}
	return s
}

func dotQ3K(w, act []byte, nb int) float32 {
	var sum float32
	var q [256]int8
	for b := range nb {
		blk := w[b*q3KBytes : (b+1)*q3KBytes]
		ad, q8, _ := q8K(act[b*ActQ8KBytes:])
		sc := scalesQ3K(blk[96:108])
		hm := (*[32]byte)(blk)
		for h := range 2 {
			qs := (*[32]byte)(blk[32+32*h:])
			o := (*[128]int8)(q[128*h:])
			sh := uint(4 * h)
			for l, v := range qs {
				// A clear hmask bit means 4 less.
				m := ^hm[l] >> sh
				o[l] = int8(v&3) - int8(m&1<<2)
				o[32+l] = int8(v>>2&3) - int8(m>>1&1<<2)
				o[64+l] = int8(v>>4&3) - int8(m>>2&1<<2)
				o[96+l] = int8(v>>6) - int8(m>>3&1<<2)
			}
		}
		var isum int32
		for g := range 16 {
			isum += sc[g] * dot16(&q, q8, g)
		}
		sum += ad * f16At(blk, 108) * float32(isum)
	}
	return sum
}

// kScaleMins unpacks the eight 6-bit scales and mins of a Q4_K or Q5_K
// block, as ggml's vec_dot does with its utmp shuffle.
func kScaleMins(s []byte) (sc, m [8]int32) {
	for j := range 8 {
		a, b := scaleMinK4(j, s)
		sc[j], m[j] = int32(a), int32(b)
	}
	return sc, m
}

func dotQ4K(w, act []byte, nb int) float32 {
	var sum float32
	for b := range nb {
		blk := w[b*q4KBytes : (b+1)*q4KBytes]
		ad, q8, bs := q8K(act[b*ActQ8KBytes:])
		sc, mn := kScaleMins(blk[4:16])
		var isum, msum int32
		for c := range 4 {
			qs := (*[32]byte)(blk[16+32*c:])
			a0 := (*[32]byte)(q8[64*c:])
			a1 := (*[32]byte)(q8[64*c+32:])
			var s0, s1 int32
			for l, q := range qs {
				s0 += int32(q&0xF) * int32(int8(a0[l]))
				s1 += int32(q>>4) * int32(int8(a1[l]))
			}
			isum += sc[2*c]*s0 + sc[2*c+1]*s1
		}
		for j := range 8 {
			msum += (bsum(bs, 2*j) + bsum(bs, 2*j+1)) * mn[j]
		}
		d := ad * f16At(blk, 0)
		dmin := ad * f16At(blk, 2)
		sum += float32(d*float32(isum)) - float32(dmin*float32(msum))
	}
	return sum
}

func dotQ5K(w, act []byte, nb int) float32 {
	var sum float32
	for b := range nb {
		blk := w[b*q5KBytes : (b+1)*q5KBytes]
		ad, q8, bs := q8K(act[b*ActQ8KBytes:])
		sc, mn := kScaleMins(blk[4:16])
		qh := (*[32]byte)(blk[16:])
		var isum, msum int32
		for c := range 4 {
			qs := (*[32]byte)(blk[48+32*c:])
			a0 := (*[32]byte)(q8[64*c:])
			a1 := (*[32]byte)(q8[64*c+32:])
			b0, b1 := uint(2*c), uint(2*c+1)
			var s0, s1 int32
			for l, q := range qs {
				h := qh[l]
				s0 += int32(q&0xF|h>>b0&1<<4) * int32(int8(a0[l]))
				s1 += int32(q>>4|h>>b1&1<<4) * int32(int8(a1[l]))
			}
			isum += sc[2*c]*s0 + sc[2*c+1]*s1
		}
		for j := range 8 {
			msum += (bsum(bs, 2*j) + bsum(bs, 2*j+1)) * mn[j]
		}
		d := ad * f16At(blk, 0)
		dmin := ad * f16At(blk, 2)
		sum += float32(d*float32(isum)) - float32(dmin*float32(msum))
	}
	return sum
}

func dotQ6K(w, act []byte, nb int) float32 {
	var sum float32
	for b := range nb {
		blk := w[b*q6KBytes : (b+1)*q6KBytes]
		ad, q8, _ := q8K(act[b*ActQ8KBytes:])
		var isum int32
		for h := range 2 {
			ql0 := (*[32]byte)(blk[64*h:])
			ql1 := (*[32]byte)(blk[64*h+32:])
			qh := (*[32]byte)(blk[128+32*h:])
			a := (*[128]byte)(q8[128*h:])
			// Four 32-value runs; their two 16-value halves have their own scales.
			var s [8]int32
			for l := range 32 {
				hi := qh[l]
				half := l / 16
				s[0+half] += (int32(ql0[l]&0xF|hi&3<<4) - 32) * int32(int8(a[l]))
				s[2+half] += (int32(ql1[l]&0xF|hi>>2&3<<4) - 32) * int32(int8(a[32+l]))
				s[4+half] += (int32(ql0[l]>>4|hi>>4&3<<4) - 32) * int32(int8(a[64+l]))
				s[6+half] += (int32(ql1[l]>>4|hi>>6<<4) - 32) * int32(int8(a[96+l]))
			}
			for g, v := range s {
				isum += int32(int8(blk[192+8*h+g])) * v
			}
		}
		sum += ad * f16At(blk, 208) * float32(isum)
	}
	return sum
}

func dotIQ4XS(w, act []byte, nb int) float32 {
	var sum float32
	for b := range nb {
		blk := w[b*iq4XSBytes : (b+1)*iq4XSBytes]
		ad, q8, _ := q8K(act[b*ActQ8KBytes:])
		sh := binary.LittleEndian.Uint16(blk[2:])
		var isum int32
		for j := range 8 {
			qs := (*[16]byte)(blk[8+16*j:])
			a0 := (*[16]byte)(q8[32*j:])
			a1 := (*[16]byte)(q8[32*j+16:])
			var s int32
			for l := range 16 {
				q := qs[l]
				s += int32(kvaluesIQ4NL[q&0xF])*int32(int8(a0[l])) + int32(kvaluesIQ4NL[q>>4])*int32(int8(a1[l]))
			}
			isum += iq4XSScale(blk[4:8], sh, j) * s
		}
		sum += ad * f16At(blk, 0) * float32(isum)
	}
	return sum
}

// --- reference quantizers ---
//
// Each picks per-sub-block scales (and mins) in float32 by a small search
// that refits by weighted least squares, quantizes those to the format's
// few-bit integers under a float16 super-block scale, then rounds every
// value again against the scales as stored, so the quants fit what the
// decoder will actually multiply them by.

// nearest rounds to the nearest integer, ties to even.
func nearest(x float32) int32 { return int32(math.RoundToEven(float64(x))) }

func clampI32(v, lo, hi int32) int32 { return max(lo, min(hi, v)) }

// storeF16 writes v as float16 at b[off:] and returns the value stored.
func storeF16(b []byte, off int, v float32) float32 {
	h := F32ToF16(v)
	binary.LittleEndian.PutUint16(b[off:], h)
	return F16ToF32(h)
}

// fitScaleMin chooses x ≈ s·q − m with q in 0..nmax and s, m ≥ 0 for one
// sub-block, minimizing Σ w·|err|² (or Σ w·|err| when mad). Starting from
// the grid that spans [min(x,0), max(x)], it tries nstep+1 slightly finer
// or coarser spacings (rmin + rdelta·k extra levels over the span), and for
// each rounding refits s and m by weighted least squares; a positive fitted
// offset is refused (m ≥ 0 is all the format stores), refitting s alone.
// q receives the chosen quants.
func fitScaleMin(x, w []float32, q []uint8, nmax int, rmin, rdelta float32, nstep int, mad bool) (s, m float32) {
	lo, hi := x[0], x[0]
	var sw, swx float32
	for i, v := range x {
		lo, hi = min(lo, v), max(hi, v)
		sw += w[i]
		swx += w[i] * v
	}
	lo = min(lo, 0)
	if hi == lo {
		clear(q)
		return 0, -lo
	}
	var aux [32]uint8
	qa := aux[:len(x)]
	s = float32(nmax) / (hi - lo)
	roundAsym(q, x, s, lo, nmax)
	s = 1 / s
	best := asymErr(x, w, q, s, lo, mad)
	for k := range nstep + 1 {
		is := (rmin + rdelta*float32(k) + float32(nmax)) / (hi - lo)
		roundAsym(qa, x, is, lo, nmax)
		var sl, sl2, slx float32
		for i, v := range x {
			l := float32(qa[i])
			sl += w[i] * l
			sl2 += w[i] * l * l
			slx += w[i] * l * v
		}
		det := sw*sl2 - sl*sl
		if det <= 0 {
			continue
		}
		ts := (sw*slx - swx*sl) / det
		tm := (sl2*swx - sl*slx) / det
		if tm > 0 {
			tm, ts = 0, slx/sl2
		}
		if ts <= 0 {
			continue
		}
		if e := asymErr(x, w, qa, ts, tm, mad); e < best {
			best, s, lo = e, ts, tm
			copy(q, qa)
		}
	}
	return s, -lo
}

// roundAsym sets q[i] = round(is·(x[i]−lo)) clamped to 0..nmax.
func roundAsym(q []uint8, x []float32, is, lo float32, nmax int) {
	for i, v := range x {
		q[i] = uint8(clampI32(nearest(is*(v-lo)), 0, int32(nmax)))
	}
}

func asymErr(x, w []float32, q []uint8, s, lo float32, mad bool) float32 {
	var e float32
	for i, v := range x {
		d := s*float32(q[i]) + lo - v
		if mad {
			e += w[i] * abs32(d)
		} else {
			e += w[i] * d * d
		}
	}
	return e
}

// fitSym chooses x ≈ s·q with q in −nmax..nmax−1 for one sub-block,
// weighting each value by x² so the large ones, which matter most, land
// close. The grid's extra negative level goes to the value of largest
// magnitude (hence s takes that value's opposite sign); spacings within
// ±0.9 of a level of that are tried, each refit by least squares, keeping
// the best. Returns s (0 for an all-zero sub-block).
func fitSym(x []float32, nmax int) float32 {
	var amax, mx float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	if amax == 0 {
		return 0
	}
	var s, bestNum, bestDen float32
	for k := -9; k <= 9; k++ {
		is := -(float32(nmax) + 0.1*float32(k)) / mx
		var slx, sl2 float32
		for _, v := range x {
			l := float32(clampI32(nearest(is*v), -int32(nmax), int32(nmax)-1))
			w := v * v
			slx += w * l * v
			sl2 += w * l * l
		}
		// slx²/sl2 is what the least-squares fit removes from the error.
		if sl2 > 0 && (bestDen == 0 || slx*slx*bestDen > bestNum*sl2) {
			s, bestNum, bestDen = slx/sl2, slx*slx, sl2
		}
	}
	return s
}

// maxAbs returns the value of largest magnitude in v, sign kept.
func maxAbs(v []float32) float32 {
	var m float32
	for _, x := range v {
		if abs32(x) > abs32(m) {
			m = x
		}
	}
	return m
}

// requantAsym rounds x to q = round((x+m)/s) in 0..nmax (0 where s is 0).
func requantAsym(q []uint8, x []float32, s, m float32, nmax int32) {
	if s == 0 {
		clear(q)
		return
	}
	is := 1 / s
	for i, v := range x {
		q[i] = uint8(clampI32(nearest((v+m)*is), 0, nmax))
	}
}

// requantSym rounds x to q = round(x/s) in −nmax..nmax−1, stored +nmax.
func requantSym(q []uint8, x []float32, s float32, nmax int32) {
	if s == 0 {
		for i := range q {
			q[i] = uint8(nmax)
		}
		return
	}
	is := 1 / s
	for i, v := range x {
		q[i] = uint8(clampI32(nearest(v*is), -nmax, nmax-1) + nmax)
	}
}

// quantizeScales maps non-negative sub-block values to integers 0..top
// under one float16 step written at blk[off:], the largest value landing on
// top. Returns the integers and the step as stored.
func quantizeScales(v []float32, top float32, blk []byte, off int) (ls []uint8, d float32) {
	var mx float32
	for _, x := range v {
		mx = max(mx, x)
	}
	ls = make([]uint8, len(v))
	d = storeF16(blk, off, mx/top)
	if mx == 0 {
		return ls, d
	}
	is := top / mx
	for i, x := range v {
		ls[i] = uint8(clampI32(nearest(is*x), 0, int32(top)))
	}
	return ls, d
}

func quantizeQ2K(dst []byte, src []float32) {
	for b := range len(src) / 256 {
		x := src[b*256 : (b+1)*256]
		blk := dst[b*q2KBytes : (b+1)*q2KBytes]
		clear(blk)
		var sc, mn [16]float32
		var q [256]uint8
		var w [16]float32
		for g := range 16 {
			xs := x[16*g : 16*g+16]
			for i, v := range xs {
				w[i] = abs32(v)
			}
			// Two bits leave little room: the absolute error criterion
			// keeps one large value from pulling the whole grid.
			sc[g], mn[g] = fitScaleMin(xs, w[:], q[16*g:16*g+16], 3, -0.5, 0.1, 15, true)
		}
		ls, d := quantizeScales(sc[:], 15, blk, 80)
		lm, dm := quantizeScales(mn[:], 15, blk, 82)
		for g := range 16 {
			ls[g], lm[g] = refineAsym(x[16*g:16*g+16], d, dm, ls[g], lm[g], 15, 3)
			blk[g] = ls[g] | lm[g]<<4
			requantAsym(q[16*g:16*g+16], x[16*g:16*g+16], d*float32(ls[g]), dm*float32(lm[g]), 3)
		}
		for i, v := range q {
			blk[16+32*(i/128)+i%32] |= v << (2 * (i / 32 % 4))
		}
	}
}

func quantizeQ3K(dst []byte, src []float32) {
	for b := range len(src) / 256 {
		x := src[b*256 : (b+1)*256]
		blk := dst[b*q3KBytes : (b+1)*q3KBytes]
		clear(blk)
		var sc [16]float32
		for g := range 16 {
			sc[g] = fitSym(x[16*g:16*g+16], 4)
		}
		ls, d := symScales(sc[:], 32, blk, 108)
		var q [256]uint8
		for g := range 16 {
			ls[g] = refineSym(x[16*g:16*g+16], d, ls[g], 32, 4)
			s := (ls[g] + 32) & 63
			blk[96+g%8] |= uint8(s&0xF) << (4 * (g / 8))
			blk[104+g%4] |= uint8(s>>4) << (2 * (g / 4))
			requantSym(q[16*g:16*g+16], x[16*g:16*g+16], d*float32(ls[g]), 4)
		}
		for i, v := range q {
			blk[32+32*(i/128)+i%32] |= (v & 3) << (2 * (i / 32 % 4))
			blk[i%32] |= (v >> 2) << (i / 32)
		}
	}
}

// symScales maps signed sub-block scales to integers in −top..top−1 under
// one float16 step written at blk[off:]; the scale of largest magnitude
// lands on −top, using the grid's extra negative level. Returns the
// integers and the step as stored.
func symScales(v []float32, top int32, blk []byte, off int) (ls []int32, d float32) {
	ls = make([]int32, len(v))
	mx := maxAbs(v)
	if mx == 0 {
		return ls, storeF16(blk, off, 0)
	}
	is := -float32(top) / mx
	d = storeF16(blk, off, 1/is)
	for i, s := range v {
		ls[i] = clampI32(nearest(is*s), -top, top-1)
	}
	return ls, d
}

// fitKSub fits the eight 32-value sub-blocks of a Q4_K or Q5_K super-block,
// weighting each value by the sub-block's RMS plus its magnitude: every
// value counts, the large ones more.
func fitKSub(x []float32, q []uint8, nmax int, rmin float32, nstep int) (sc, mn [8]float32) {
	var w [32]float32
	for j := range 8 {
		xs := x[32*j : 32*j+32]
		var s2 float32
		for _, v := range xs {
			s2 += v * v
		}
		av := float32(math.Sqrt(float64(s2 / 32)))
		for i, v := range xs {
			w[i] = av + abs32(v)
		}
		sc[j], mn[j] = fitScaleMin(xs, w[:], q[32*j:32*j+32], nmax, rmin, 0.1, nstep, false)
	}
	return sc, mn
}

// kScalesStore quantizes a Q4_K/Q5_K super-block's scales and mins to 6
// bits (d, dmin at blk[0:4], packed into blk[4:16]) and re-rounds the
// values to them.
func kScalesStore(blk []byte, x []float32, q []uint8, sc, mn [8]float32, nmax int32) {
	ls, d := quantizeScales(sc[:], 63, blk, 0)
	lm, dm := quantizeScales(mn[:], 63, blk, 2)
	for j := range 8 {
		ls[j], lm[j] = refineAsym(x[32*j:32*j+32], d, dm, ls[j], lm[j], 63, nmax)
		putScaleMinK4(j, blk[4:16], ls[j], lm[j])
		requantAsym(q[32*j:32*j+32], x[32*j:32*j+32], d*float32(ls[j]), dm*float32(lm[j]), nmax)
	}
}

func quantizeQ4K(dst []byte, src []float32) {
	for b := range len(src) / 256 {
		x := src[b*256 : (b+1)*256]
		blk := dst[b*q4KBytes : (b+1)*q4KBytes]
		clear(blk)
		var q [256]uint8
		sc, mn := fitKSub(x, q[:], 15, -1, 20)
		kScalesStore(blk, x, q[:], sc, mn, 15)
		for i, v := range q {
			blk[16+32*(i/64)+i%32] |= v << (4 * (i / 32 % 2))
		}
	}
}

func quantizeQ5K(dst []byte, src []float32) {
	for b := range len(src) / 256 {
		x := src[b*256 : (b+1)*256]
		blk := dst[b*q5KBytes : (b+1)*q5KBytes]
		clear(blk)
		var q [256]uint8
		sc, mn := fitKSub(x, q[:], 31, -0.5, 15)
		kScalesStore(blk, x, q[:], sc, mn, 31)
		for i, v := range q {
			blk[48+32*(i/64)+i%32] |= (v & 0xF) << (4 * (i / 32 % 2))
			blk[16+i%32] |= (v >> 4) << (i / 32)
		}
	}
}

func quantizeQ6K(dst []byte, src []float32) {
	for b := range len(src) / 256 {
		x := src[b*256 : (b+1)*256]
		blk := dst[b*q6KBytes : (b+1)*q6KBytes]
		clear(blk)
		var sc [16]float32
		for g := range 16 {
			sc[g] = fitSym(x[16*g:16*g+16], 32)
		}
		ls, d := symScales(sc[:], 128, blk, 208)
		var q [256]uint8
		for g := range 16 {
			ls[g] = refineSym(x[16*g:16*g+16], d, ls[g], 128, 32)
			blk[192+g] = byte(int8(ls[g]))
			requantSym(q[16*g:16*g+16], x[16*g:16*g+16], d*float32(ls[g]), 32)
		}
		for i, v := range q {
			h, k, l := i/128, i/32%4, i%32
			blk[64*h+32*(k%2)+l] |= (v & 0xF) << (4 * (k / 2))
			blk[128+32*h+l] |= (v >> 4) << (2 * k)
		}
	}
}

// nearestIQ4 is the index of the grid value nearest to v.
func nearestIQ4(v float32) uint8 {
	best, bd := uint8(0), float32(math.Inf(1))
	for i, g := range kvaluesIQ4NL {
		if d := abs32(v - float32(g)); d < bd {
			best, bd = uint8(i), d
		}
	}
	return best
}

// fitIQ4 chooses x ≈ s·grid[q] for one 32-value sub-block, weighting each
// value by x². The grid is not symmetric, so both ways round are tried:
// the value of largest magnitude mapped to −127 and to 113, each end moved
// by up to 7 grid units either way, each rounding refit by least squares.
func fitIQ4(x []float32) float32 {
	mx := maxAbs(x)
	if mx == 0 {
		return 0
	}
	var s, bestNum, bestDen float32
	for _, end := range [2]float32{float32(kvaluesIQ4NL[0]), float32(kvaluesIQ4NL[15])} {
		for k := -7; k <= 7; k++ {
			is := (end + float32(k)) / mx
			var sqx, sq2 float32
			for _, v := range x {
				g := float32(kvaluesIQ4NL[nearestIQ4(is*v)])
				w := v * v
				sqx += w * g * v
				sq2 += w * g * g
			}
			if sq2 > 0 && (bestDen == 0 || sqx*sqx*bestDen > bestNum*sq2) {
				s, bestNum, bestDen = sqx/sq2, sqx*sqx, sq2
			}
		}
	}
	return s
}

func quantizeIQ4XS(dst []byte, src []float32) {
	for b := range len(src) / 256 {
		x := src[b*256 : (b+1)*256]
		blk := dst[b*iq4XSBytes : (b+1)*iq4XSBytes]
		clear(blk)
		var sc [8]float32
		for j := range 8 {
			sc[j] = fitIQ4(x[32*j : 32*j+32])
		}
		ls, d := symScales(sc[:], 32, blk, 0)
		var sh uint16
		for j := range 8 {
			ls[j] = refineScale(ls[j], -32, 31, func(l int32) float32 { return errIQ4(x[32*j:32*j+32], d*float32(l)) })
			s := uint8(ls[j] + 32)
			blk[4+j/2] |= (s & 0xF) << (4 * (j % 2))
			sh |= uint16(s>>4) << (2 * j)
			dl := d * float32(ls[j])
			var idl float32
			if dl != 0 {
				idl = 1 / dl
			}
			xs := x[32*j : 32*j+32]
			for l := range 16 {
				blk[8+16*j+l] = nearestIQ4(idl*xs[l]) | nearestIQ4(idl*xs[l+16])<<4
			}
		}
		binary.LittleEndian.PutUint16(blk[2:], sh)
	}
}

// The super-block step is shared, so a sub-block's scale is rounded to an
// integer multiple of it; where that integer is small (a super-block with
// an outlier) plain rounding can clip the sub-block's extremes or waste
// levels. The refine helpers try the neighbouring integers too and keep
// the one whose re-rounded values have the least squared error.

// refineScale returns whichever of l−1, l, l+1 within lo..hi minimizes err.
func refineScale(l, lo, hi int32, err func(l int32) float32) int32 {
	best, be := l, err(l)
	for _, c := range [2]int32{l - 1, l + 1} {
		if c < lo || c > hi {
			continue
		}
		if e := err(c); e < be {
			best, be = c, e
		}
	}
	return best
}

// refineSym refines a symmetric format's sub-block scale l (in −top..top−1,
// step d) for values in −nmax..nmax−1.
func refineSym(x []float32, d float32, l, top, nmax int32) int32 {
	return refineScale(l, -top, top-1, func(l int32) float32 {
		s := d * float32(l)
		var q [32]uint8
		requantSym(q[:len(x)], x, s, nmax)
		var e float32
		for i, v := range x {
			r := s*float32(int32(q[i])-nmax) - v
			e += r * r
		}
		return e
	})
}

// refineAsym refines a scale-and-min format's sub-block integers ls, lm
// (0..top, steps d and dm) for values in 0..nmax.
func refineAsym(x []float32, d, dm float32, ls, lm uint8, top, nmax int32) (uint8, uint8) {
	bs, bm, be := ls, lm, float32(math.Inf(1))
	for cs := int32(ls) - 1; cs <= int32(ls)+1; cs++ {
		for cm := int32(lm) - 1; cm <= int32(lm)+1; cm++ {
			if cs < 0 || cm < 0 || cs > top || cm > top {
				continue
			}
			s, m := d*float32(cs), dm*float32(cm)
			var q [32]uint8
			requantAsym(q[:len(x)], x, s, m, nmax)
			var e float32
			for i, v := range x {
				r := s*float32(q[i]) - m - v
				e += r * r
			}
			if e < be {
				bs, bm, be = uint8(cs), uint8(cm), e
			}
		}
	}
	return bs, bm
}

// errIQ4 is the squared error of x rounded to the IQ4 grid under scale s.
func errIQ4(x []float32, s float32) float32 {
	var is float32
	if s != 0 {
		is = 1 / s
	}
	var e float32
	for _, v := range x {
		r := s*float32(kvaluesIQ4NL[nearestIQ4(is*v)]) - v
		e += r * r
	}
	return e
}
