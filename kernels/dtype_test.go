package kernels

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func TestRowBytes(t *testing.T) {
	tests := []struct {
		dt   DType
		cols int
		want int
		err  error
	}{
		{F32, 10, 40, nil},
		{F16, 10, 20, nil},
		{BF16, 7, 14, nil},
		{Q8_0, 64, 68, nil},
		{Q8_0, 0, 0, nil},
		{Q8_0, 33, 0, ErrShape},
		{F32, -1, 0, ErrShape},
		{F32, math.MaxInt/4 + 1, 0, ErrShape},
		{DType(0), 4, 0, ErrDType},
		{DType(99), 4, 0, ErrDType},
	}
	for _, tc := range tests {
		got, err := tc.dt.RowBytes(tc.cols)
		if !errors.Is(err, tc.err) || got != tc.want {
			t.Errorf("%v.RowBytes(%d) = %d, %v; want %d, %v", tc.dt, tc.cols, got, err, tc.want, tc.err)
		}
	}
	if s := Q8_0.String(); s != "Q8_0" {
		t.Errorf("Q8_0.String() = %q", s)
	}
	if s := DType(99).String(); s != "DType(99)" {
		t.Errorf("DType(99).String() = %q", s)
	}
}

func TestNewMatrix(t *testing.T) {
	if _, err := NewMatrix(F16, 3, 4, make([]byte, 24)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dt         DType
		rows, cols int
		n          int
	}{
		{F16, 3, 4, 23},
		{F16, 3, 4, 25},
		{F32, -1, 4, 0},
		{Q8_0, 2, 31, 68},
		{F32, math.MaxInt / 8, 16, 64}, // rows·rowBytes overflows
		{DType(99), 1, 1, 4},
	} {
		if _, err := NewMatrix(tc.dt, tc.rows, tc.cols, make([]byte, tc.n)); err == nil {
			t.Errorf("NewMatrix(%v, %d, %d, %d bytes) succeeded", tc.dt, tc.rows, tc.cols, tc.n)
		}
	}
}

func TestF16Conversion(t *testing.T) {
	tests := []struct {
		f float32
		h uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},                           // largest finite
		{65519.99, 0x7bff},                        // rounds down
		{65520, 0x7c00},                           // ties to even → overflows to Inf
		{float32(math.Inf(1)), 0x7c00},            //
		{float32(math.Inf(-1)), 0xfc00},           //
		{0x1p-14, 0x0400},                         // smallest normal
		{0x1p-24, 0x0001},                         // smallest subnormal
		{0x1p-25, 0x0000},                         // tie between 0 and 2^-24 → even (0)
		{0x1.8p-25, 0x0001},                       // above the tie
		{0x3p-25, 0x0002},                         // 1.5·2^-24: tie → even (2)
		{0x1.ffcp-15, 0x0400},                     // largest subnormal + half ulp: tie → even, into the normals
		{0x3ffp-24, 0x03ff},                       // largest subnormal
		{1 + 0x1p-11, 0x3c00},                     // tie → even
		{1 + 0x3p-11, 0x3c02},                     // tie → even (up)
		{1 + 0x1p-11 + 0x1p-20, 0x3c01},           // above the tie
		{0.1, 0x2e66},                             //
		{-0.333333333, 0xb555},                    //
		{1e-10, 0x0000},                           // underflow
		{-1e-10, 0x8000},                          //
		{1e10, 0x7c00},                            // overflow
		{float32(math.SmallestNonzeroFloat32), 0}, //
	}
	for _, tc := range tests {
		if got := F32ToF16(tc.f); got != tc.h {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", tc.f, got, tc.h)
		}
	}
	if h := F32ToF16(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("F32ToF16(NaN) = %#04x, not a NaN", h)
	}
	if f := F16ToF32(0x7e01); !math.IsNaN(float64(f)) {
		t.Errorf("F16ToF32(0x7e01) = %g, want NaN", f)
	}
	if f := F16ToF32(0x0001); f != 0x1p-24 {
		t.Errorf("F16ToF32(1) = %g", f)
	}
	if f := F16ToF32(0x8001); f != -0x1p-24 {
		t.Errorf("F16ToF32(0x8001) = %g", f)
	}
	// Every non-NaN half round-trips, and its float32 value is exactly what
	// float64 arithmetic gives.
	for i := range 1 << 16 {
		h := uint16(i)
		f := F16ToF32(h)
		exp, mant := int(h>>10)&31, float64(h&0x3ff)
		var want float64
		switch exp {
		case 0:
			want = mant * 0x1p-24
		case 31:
			want = math.Inf(1)
			if mant != 0 {
				continue
			}
		default:
			want = (1 + mant/1024) * math.Ldexp(1, exp-15)
		}
		if h&0x8000 != 0 {
			want = -want
		}
		if float64(f) != want || (want == 0 && math.Signbit(float64(f)) != (h&0x8000 != 0)) {
			t.Fatalf("F16ToF32(%#04x) = %g, want %g", h, f, want)
		}
		if back := F32ToF16(f); back != h {
			t.Fatalf("F32ToF16(F16ToF32(%#04x)) = %#04x", h, back)
		}
	}
	// Random floats round to the nearest half, ties to even.
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		f := math.Float32frombits(r.Uint32())
		if math.IsNaN(float64(f)) || math.Abs(float64(f)) >= 65520 {
			continue
		}
		h := F32ToF16(f)
		got := float64(F16ToF32(h))
		// Check against both neighbours.
		for _, n := range []uint16{h - 1, h + 1} {
			if n&0x7fff > 0x7bff || (h&0x7fff == 0 && n == h-1) {
				continue
			}
			nv := float64(F16ToF32(n))
			dg, dn := math.Abs(got-float64(f)), math.Abs(nv-float64(f))
			if dn < dg || (dn == dg && h&1 == 1) {
				t.Fatalf("F32ToF16(%g) = %#04x (%g); neighbour %#04x (%g) is nearer or even", f, h, got, n, nv)
			}
		}
	}
}

func TestBF16Conversion(t *testing.T) {
	tests := []struct {
		f float32
		h uint16
	}{
		{0, 0},
		{1, 0x3f80},
		{-1, 0xbf80},
		{1 + 0x1p-8, 0x3f80},            // tie → even
		{1 + 0x3p-8, 0x3f82},            // tie → even (up)
		{1 + 0x1p-8 + 0x1p-20, 0x3f81},  // above the tie
		{math.MaxFloat32, 0x7f80},       // rounds up to Inf
		{float32(math.Inf(-1)), 0xff80}, //
		{0x1p-133, 0x0001},              // subnormal, exact
		{0x1p-149, 0x0000},              // smallest float32 subnormal rounds to 0
	}
	for _, tc := range tests {
		if got := F32ToBF16(tc.f); got != tc.h {
			t.Errorf("F32ToBF16(%g) = %#04x, want %#04x", tc.f, got, tc.h)
		}
	}
	for _, nan := range []uint32{0x7fc00000, 0x7f800001, 0xff800001, 0x7fffffff} {
		h := F32ToBF16(math.Float32frombits(nan))
		if !math.IsNaN(float64(BF16ToF32(h))) {
			t.Errorf("F32ToBF16(NaN %#08x) = %#04x, not a NaN", nan, h)
		}
	}
	for i := range 1 << 16 {
		h := uint16(i)
		f := BF16ToF32(h)
		if math.Float32bits(f) != uint32(h)<<16 {
			t.Fatalf("BF16ToF32(%#04x) = %#08x", h, math.Float32bits(f))
		}
		if !math.IsNaN(float64(f)) && F32ToBF16(f) != h {
			t.Fatalf("round trip of %#04x gives %#04x", h, F32ToBF16(f))
		}
	}
}

// TestQuantizeQ8_0Blocks checks the encoding byte for byte against blocks
// computed by hand: fp16 scale first, then 32 int8, q = round(x/d) half away
// from zero as ggml's reference quantizer does.
func TestQuantizeQ8_0Blocks(t *testing.T) {
	src := make([]float32, 96)
	// Block 0: amax 127 → d = 1 (0x3c00); halves round away from zero.
	copy(src, []float32{127, -127, 2.5, -2.5, 0.5, -0.5, 1.49, -1.51, 0.49})
	// Block 1: all zero → d = 0, q = 0.
	// Block 2: amax 254 → d = 2 (0x4000), 1/d = 0.5.
	copy(src[64:], []float32{3, -254, 5, 1, -1, 253})
	want := make([]byte, 3*34)
	copy(want, []byte{0x00, 0x3c, 127, 0x81, 3, 0xfd, 1, 0xff, 1, 0xfe, 0})
	copy(want[68:], []byte{0x00, 0x40, 2, 0x81, 3, 1, 0xff, 127})
	got := make([]byte, len(want))
	if err := QuantizeQ8_0(got, src); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("QuantizeQ8_0:\n got % x\nwant % x", got, want)
	}
	deq := make([]float32, 96)
	if err := DequantizeQ8_0(deq, got); err != nil {
		t.Fatal(err)
	}
	for i, w := range map[int]float32{0: 127, 1: -127, 2: 3, 3: -3, 4: 1, 6: 1, 7: -2, 64: 4, 65: -254, 66: 6, 69: 254} {
		if deq[i] != w {
			t.Errorf("dequantized[%d] = %g, want %g", i, deq[i], w)
		}
	}
	if err := QuantizeQ8_0(got, src[:33]); !errors.Is(err, ErrShape) {
		t.Errorf("33 values: %v", err)
	}
	if err := QuantizeQ8_0(got[:100], src); !errors.Is(err, ErrShape) {
		t.Errorf("short dst: %v", err)
	}
}

// TestQ8_0RoundTrip: dequantize(quantize(x)) is within half a step of x,
// with the step fp16(max|x|/127).
func TestQ8_0RoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	src := randF32(r, 32*64, 1)
	for i := range src {
		src[i] *= float32(math.Exp(float64(i/32%13 - 6))) // a range of block scales
	}
	q := make([]byte, 64*34)
	if err := QuantizeQ8_0(q, src); err != nil {
		t.Fatal(err)
	}
	back := make([]float32, len(src))
	if err := DequantizeQ8_0(back, q); err != nil {
		t.Fatal(err)
	}
	for b := range 64 {
		d := float64(F16ToF32(uint16(q[b*34]) | uint16(q[b*34+1])<<8))
		for i := b * 32; i < (b+1)*32; i++ {
			// |x - q·d16| <= |x - q·d| + |q|·|d - d16| <= d/2 + 127·d·2^-11.
			if diff := math.Abs(float64(src[i] - back[i])); diff > d*(0.5+127.0/2048)+1e-30 {
				t.Fatalf("value %d: %g → %g (d=%g)", i, src[i], back[i], d)
			}
		}
	}
}

func TestMatrixRow(t *testing.T) {
	vals := []float32{1, -2, 0.5, 3.25, 0, -0.125, 7, 8}
	for _, dt := range []DType{F32, F16, BF16} {
		m := encodeMatrix(t, dt, 2, 4, vals)
		got := make([]float32, 4)
		m.Row(1, got)
		for i, v := range got {
			if v != vals[4+i] {
				t.Errorf("%v row 1 = %v, want %v", dt, got, vals[4:])
				break
			}
		}
	}
	q := encodeMatrix(t, Q8_0, 1, 32, append([]float32{127}, make([]float32, 31)...))
	got := make([]float32, 32)
	q.Row(0, got)
	if got[0] != 127 || got[1] != 0 {
		t.Errorf("Q8_0 row = %v", got[:2])
	}
}
