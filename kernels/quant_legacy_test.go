package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

var legacyTypes = []DType{Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4}

// legacyCase is one block written byte by byte from the format definition,
// with the 32 values it must decode to.
type legacyCase struct {
	name string
	t    DType
	blk  []byte
	want [32]float32
}

// fill is a [32]float32 of v with the given index → value overrides.
func fill(v float32, at map[int]float32) (out [32]float32) {
	for i := range out {
		out[i] = v
	}
	for i, x := range at {
		out[i] = x
	}
	return out
}

// qsOf is 16 bytes of def with the given index → byte overrides.
func qsOf(def byte, at map[int]byte) []byte {
	qs := slices.Repeat([]byte{def}, 16)
	for i, b := range at {
		qs[i] = b
	}
	return qs
}

func legacyCases() []legacyCase {
	cat := func(parts ...[]byte) []byte { return slices.Concat(parts...) }
	return []legacyCase{{
		// d = 0.5 (half 0x3800); x = d·(nibble-8); 0x88 decodes to 0, 0.
		name: "Q4_0", t: Q4_0,
		blk: cat([]byte{0x00, 0x38}, qsOf(0x88, map[int]byte{0: 0x1f, 5: 0x80, 15: 0x09})),
		want: fill(0, map[int]float32{
			0: 3.5, 16: -3.5, // 0x1f: low 15 → value 0, high 1 → value 16
			5: -4, 21: 0, // 0x80: low 0, high 8
			15: 0.5, 31: -4, // 0x09: low 9, high 0
		}),
	}, {
		// d = 0.25 (0x3400), m = -1 (0xbc00); x = d·nibble + m; 0x44 → 0.
		name: "Q4_1", t: Q4_1,
		blk:  cat([]byte{0x00, 0x34, 0x00, 0xbc}, qsOf(0x44, map[int]byte{0: 0xf0, 3: 0x4a})),
		want: fill(0, map[int]float32{0: -1, 16: 2.75, 3: 1.5, 19: 0}),
	}, {
		// d = 1 (0x3c00); x = d·((nibble | bit<<4) - 16). Every fifth bit set
		// except bits 1, 15 and 16: qh = 0xfffe7ffd, little-endian. Nibbles
		// 0 with the bit set decode to 0.
		name: "Q5_0", t: Q5_0,
		blk: cat([]byte{0x00, 0x3c}, []byte{0xfd, 0x7f, 0xfe, 0xff}, qsOf(0x00, map[int]byte{0: 0x3a, 1: 0x5f, 15: 0xf0})),
		want: fill(0, map[int]float32{
			0: 10, 16: -13, // 0x3a: 0xa|0x10 = 26; 3 without its bit 16
			1: -1, 17: 5, // 0x5f: 0xf without bit 1; 5|0x10 = 21
			15: -16, 31: 15, // 0xf0: 0 without bit 15; 0xf|0x10 = 31
		}),
	}, {
		// d = 0.5 (0x3800), m = -2 (0xc000); x = d·(nibble | bit<<4) + m.
		// Bits 0 and 16 set: qh = 0x00010001. 0x44 without bits → 0.
		name: "Q5_1", t: Q5_1,
		blk: cat([]byte{0x00, 0x38, 0x00, 0xc0}, []byte{0x01, 0x00, 0x01, 0x00}, qsOf(0x44, map[int]byte{0: 0x4f, 15: 0x04})),
		want: fill(0, map[int]float32{
			0: 13.5, 16: 8, // 0x4f: 0xf|0x10 = 31; 4|0x10 = 20
			15: 0, 31: -2, // 0x04: 4; 0
		}),
	}, {
		// d = 0.5 (0x3800); x = d·kvalues_iq4nl[nibble]; 0x88 → index 8 (1).
		name: "IQ4_NL", t: IQ4_NL,
		blk: cat([]byte{0x00, 0x38}, qsOf(0x88, map[int]byte{0: 0x0f, 7: 0x97})),
		want: fill(0.5, map[int]float32{
			0: 56.5, 16: -63.5, // index 15 (113), index 0 (-127)
			7: -5, 23: 6.5, // index 7 (-10), index 9 (13)
		}),
	}, {
		// e = 127: scale 2^0, so the codes decode to plain E2M1 values (the
		// doubled table times ggml's halved scale 0.5).
		name: "MXFP4", t: MXFP4,
		blk: cat([]byte{127}, qsOf(0x00, map[int]byte{0: 0xf7, 1: 0x91, 2: 0x85, 9: 0x6e})),
		want: fill(0, map[int]float32{
			0: 6, 16: -6, // code 7 (0b0111 = 6.0), code 15 (-6.0)
			1: 0.5, 17: -0.5, // code 1, code 9
			2: 3, 18: 0, // code 5 (3.0), code 8 (negative zero → 0)
			9: -4, 25: 4, // code 14, code 6
		}),
	}, {
		// e = 130: scale 2^3; code 3 is 1.5 → 12, code 12 is -2 → -16.
		name: "MXFP4 e=130", t: MXFP4,
		blk:  cat([]byte{130}, qsOf(0x00, map[int]byte{4: 0xc3})),
		want: fill(0, map[int]float32{4: 12, 20: -16}),
	}, {
		// e = 0: scale 2^-127, the doubled table halves it to the subnormal
		// 2^-128; code 1 (0.5) is 2^-128, code 7 (6.0) is 3·2^-126.
		name: "MXFP4 e=0", t: MXFP4,
		blk:  cat([]byte{0}, qsOf(0x00, map[int]byte{0: 0x71})),
		want: fill(0, map[int]float32{0: 0x1p-128, 16: 0x3p-126}),
	}}
}

func TestLegacyDequantHandBuilt(t *testing.T) {
	for _, c := range legacyCases() {
		f := quantFormatOf(c.t)
		if len(c.blk) != f.blockBytes {
			t.Fatalf("%s: hand-built block of %d bytes, format has %d", c.name, len(c.blk), f.blockBytes)
		}
		var got [32]float32
		if err := Dequantize(c.t, got[:], c.blk); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: value %d = %v, want %v", c.name, i, got[i], c.want[i])
			}
		}
	}
}

// actBlockOf is one actQ8x32 block with scale d and quants q.
func actBlockOf(d float32, q *[32]int8) []byte {
	b := make([]byte, ActQ8x32Bytes)
	var sum int32
	for i, v := range q {
		b[8+i] = byte(v)
		sum += int32(v)
	}
	binary.LittleEndian.PutUint32(b, math.Float32bits(d))
	binary.LittleEndian.PutUint32(b[4:], math.Float32bits(d*float32(sum)))
	return b
}

// TestLegacyDotHandBuilt checks each hand-built block's dot against an
// activation block whose product is exact in float32: it must be exactly
// Σ value·activation, which also pins the Q4_1/Q5_1 minimum term (m·s) and
// the pairing of high nibbles with activations 16..31.
func TestLegacyDotHandBuilt(t *testing.T) {
	var q [32]int8
	for i := range q {
		q[i] = int8(3*i - 50) // distinct, both signs, non-zero sum
	}
	const da = 0.25
	act := actBlockOf(da, &q)
	for _, c := range legacyCases() {
		var want float64
		for i, v := range c.want {
			want += float64(v) * da * float64(q[i])
		}
		if got := quantFormatOf(c.t).dot(c.blk, act, 1); float64(got) != want {
			t.Errorf("%s: dot %v, want %v", c.name, got, want)
		}
	}
}

// TestLegacyRequantizeExact: a block whose values lie on one of the
// format's grids must come back exactly from quantize → dequantize (the
// reference quantizers find that grid).
func TestLegacyRequantizeExact(t *testing.T) {
	for _, c := range legacyCases() {
		if c.name == "MXFP4 e=0" {
			continue // the rounding to e = 0 is covered by TestLegacyQuantEdges
		}
		f := quantFormatOf(c.t)
		blk := make([]byte, f.blockBytes)
		f.quantize(blk, c.want[:])
		var got [32]float32
		f.dequant(got[:], blk)
		if got != c.want {
			t.Errorf("%s: requantized to %v, want %v", c.name, got, c.want)
		}
	}
}

func TestE8M0Half(t *testing.T) {
	for e := range 255 { // 255 is NaN in the OCP spec; ggml reads it as 2^127
		if got, want := e8m0Half(byte(e)), float32(math.Ldexp(1, e-128)); got != want {
			t.Fatalf("e8m0Half(%d) = %v, want 2^%d", e, got, e-128)
		}
	}
}

// roundTrip quantizes one block of x as t and decodes it.
func roundTrip(t DType, x []float32) []float32 {
	f := quantFormatOf(t)
	blk := make([]byte, f.blockBytes)
	f.quantize(blk, x)
	y := make([]float32, len(x))
	f.dequant(y, blk)
	return y
}

func TestLegacyQuantEdges(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	t.Run("zero", func(t *testing.T) {
		for _, dt := range legacyTypes {
			f := quantFormatOf(dt)
			blk := make([]byte, f.blockBytes)
			f.quantize(blk, make([]float32, 32))
			y := make([]float32, 32)
			f.dequant(y, blk)
			for i, v := range y {
				if v != 0 || math.Signbit(float64(v)) {
					t.Errorf("%v: zero block value %d decodes to %v", dt, i, v)
				}
			}
			act := make([]byte, ActQ8x32Bytes)
			quantizeActQ8x32(act, randF32(r, 32, 1))
			if d := f.dot(blk, act, 1); d != 0 {
				t.Errorf("%v: zero block dot %v", dt, d)
			}
		}
	})
	t.Run("plus-minus-max", func(t *testing.T) {
		// ±A alternating: the error bound is what each grid allows. Q4_0
		// and Q5_0 are asymmetric (-8d … 7d), so the value opposite the
		// first maximum loses one step; IQ4_NL's grid ends at -127 and
		// 113; MXFP4 puts 1000 at 1024.
		tol := map[DType]float64{Q4_0: 1.0 / 8, Q5_0: 1.0 / 16, Q4_1: 1e-3, Q5_1: 1e-3, IQ4_NL: 0.07, MXFP4: 0.025}
		for _, dt := range legacyTypes {
			for _, a := range []float32{3, 1000} {
				x := make([]float32, 32)
				for i := range x {
					x[i] = a * float32(1-2*(i&1))
				}
				y := roundTrip(dt, x)
				for i := range x {
					if e := math.Abs(float64(y[i]-x[i])) / float64(a); e > tol[dt] || (y[i] < 0) != (x[i] < 0) {
						t.Errorf("%v ±%v: value %d %v decodes to %v", dt, a, i, x[i], y[i])
					}
				}
			}
		}
	})
	t.Run("beyond-range", func(t *testing.T) {
		// Past float16's range the half scales saturate: finite, with the
		// signs kept. MXFP4's exponent reaches float32's top without Inf.
		for _, dt := range legacyTypes {
			for _, a := range []float32{1e9, 3e38} {
				x := randF32(r, 32, 1)
				x[3], x[20] = a, -a
				y := roundTrip(dt, x)
				for i, v := range y {
					if math.IsInf(float64(v), 0) || math.IsNaN(float64(v)) {
						t.Fatalf("%v, |x| up to %v: value %d decodes to %v", dt, a, i, v)
					}
				}
				if y[3] <= 0 || y[20] >= 0 {
					t.Errorf("%v: ±%v decode to %v, %v", dt, a, y[3], y[20])
				}
				if dt == MXFP4 && math.Abs(float64(y[3]-a))/float64(a) > 0.25 {
					t.Errorf("MXFP4: %v decodes to %v", a, y[3])
				}
			}
		}
	})
	t.Run("outlier", func(t *testing.T) {
		// One value 10⁵ times the others: the outlier keeps its value
		// (within the grid's resolution at the top), the rest stay within
		// 1% of it of their true values: no wild codes, no overflow.
		tol := map[DType]float64{Q4_0: 1e-3, Q4_1: 1e-3, Q5_0: 1e-3, Q5_1: 1e-3, IQ4_NL: 0.02, MXFP4: 0.025}
		for _, dt := range legacyTypes {
			for _, out := range []float32{1000, -1000} {
				x := randF32(r, 32, 0.01)
				x[7] = out
				y := roundTrip(dt, x)
				if e := math.Abs(float64(y[7]-out)) / 1000; e > tol[dt] {
					t.Errorf("%v: outlier %v decodes to %v", dt, out, y[7])
				}
				for i := range x {
					if i != 7 && math.Abs(float64(y[i]-x[i])) > 10 {
						t.Errorf("%v: beside outlier %v, value %d %v decodes to %v", dt, out, i, x[i], y[i])
					}
				}
			}
		}
	})
}
