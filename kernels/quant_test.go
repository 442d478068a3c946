package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// The block quantizations the engine must read (issue: every GGUF
// quantization people download), besides Q8_0.
var quantTypesWanted = []DType{Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4}

// quantRoundTripMax is each type's bound on the RMS error of
// quantize→dequantize relative to the RMS of normally distributed values.
//
// For the 32-value types the one block holding TestQuantRoundTrip's outlier
// (25 among values of σ 0.7) dominates: measured, total / without that
// block, Q4_0 0.115/0.067, Q4_1 0.098/0.060, Q5_0 0.075/0.032, Q5_1
// 0.044/0.028, IQ4_NL 0.097/0.055, MXFP4 0.113/0.080. Q5_0's bound was
// 0.06, under what Q5_0 can reach: scanning every scale (steps of 0.0005,
// both signs, each value rounded optimally) the best encoding of the
// outlier block still leaves 0.0747 in all.
var quantRoundTripMax = map[DType]float64{
	Q4_0: 0.12, Q4_1: 0.10, Q5_0: 0.08, Q5_1: 0.05,
	// Q6_K measures 0.0262: the 16-value sub-block holding the test's
	// outlier (25 among values of RMS 0.7) must step by about 25/32, so
	// its other 15 values alone cost 0.023 of relative error, and the
	// normal super-blocks (0.0156 each) bring the total over 0.025.
	Q2_K: 0.40, Q3_K: 0.20, Q4_K: 0.10, Q5_K: 0.05, Q6_K: 0.03,
	// IQ4_NL 0.103 and IQ4_XS 0.105 here, most of it the outlier's block.
	IQ4_NL: 0.11, IQ4_XS: 0.11, MXFP4: 0.20,
}

func TestQuantFormatsRegistered(t *testing.T) {
	for _, dt := range quantTypesWanted {
		f := quantFormatOf(dt)
		if f == nil {
			t.Errorf("%v: no format registered", dt)
			continue
		}
		if f.dequant == nil || f.quantize == nil || f.blockDot == nil || f.act == 0 {
			t.Errorf("%v: incomplete format %+v", dt, f)
		}
		if got, err := ParseDType(dt.String()); err != nil || got != dt {
			t.Errorf("ParseDType(%q) = %v, %v", dt.String(), got, err)
		}
		if (f.act == actQ8K) != (f.block == 256) {
			t.Errorf("%v: %d-value blocks with activation kind %d", dt, f.block, f.act)
		}
	}
}

func TestQuantRoundTrip(t *testing.T) {
	for _, dt := range quantTypesWanted {
		f := quantFormatOf(dt)
		if f == nil {
			continue
		}
		// The same values for every type, whichever types are registered.
		n := 8 * 256
		x := randF32(rand.New(rand.NewPCG(1, 2)), n, 0.7)
		// A block of zeros and one with an outlier: both must survive.
		clear(x[256:512])
		x[700] = 25
		rb, _ := dt.RowBytes(n)
		data := make([]byte, rb)
		if err := Quantize(dt, data, x); err != nil {
			t.Fatal(err)
		}
		y := make([]float32, n)
		if err := Dequantize(dt, y, data); err != nil {
			t.Fatal(err)
		}
		var se, sx float64
		for i := range x {
			if math.IsNaN(float64(y[i])) || math.IsInf(float64(y[i]), 0) {
				t.Fatalf("%v: value %d decodes to %v", dt, i, y[i])
			}
			d := float64(y[i] - x[i])
			se += d * d
			sx += float64(x[i]) * float64(x[i])
		}
		for i := 256; i < 512; i++ {
			if y[i] != 0 {
				t.Errorf("%v: zero block decodes value %d to %v", dt, i, y[i])
				break
			}
		}
		rel := math.Sqrt(se / sx)
		t.Logf("%v: relative RMS error %.4f (%d bytes for %d values, %.3f bits each)", dt, rel, rb, n, float64(8*rb)/float64(n))
		if rel > quantRoundTripMax[dt] {
			t.Errorf("%v: relative RMS error %.4f over %.4f", dt, rel, quantRoundTripMax[dt])
		}
	}
}

// dequantAct decodes one activation row of kind k.
func dequantAct(k actKind, a []byte, cols int) []float32 {
	out := make([]float32, cols)
	if k == actQ8K {
		for b := range cols / ActQ8KBlock {
			blk := a[b*ActQ8KBytes:]
			d := math.Float32frombits(binary.LittleEndian.Uint32(blk))
			for i := range ActQ8KBlock {
				out[b*ActQ8KBlock+i] = d * float32(int8(blk[4+i]))
			}
		}
		return out
	}
	for b := range cols / ActQ8x32Block {
		blk := a[b*ActQ8x32Bytes:]
		d := math.Float32frombits(binary.LittleEndian.Uint32(blk))
		for i := range ActQ8x32Block {
			out[b*ActQ8x32Block+i] = d * float32(int8(blk[8+i]))
		}
	}
	return out
}

func TestQuantActBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := randF32(r, 512, 2)
	a := make([]byte, actRowBytes(actQ8K, 512))
	quantizeActQ8K(a, x)
	for b := range 2 {
		blk := a[b*ActQ8KBytes:]
		for g := range 16 {
			var s int
			for i := range 16 {
				s += int(int8(blk[4+g*16+i]))
			}
			if got := int16(binary.LittleEndian.Uint16(blk[260+2*g:])); int(got) != s {
				t.Fatalf("Q8_K block %d sum %d = %d, want %d", b, g, got, s)
			}
		}
	}
	a = make([]byte, actRowBytes(actQ8x32, 512))
	quantizeActQ8x32(a, x)
	for b := range 16 {
		blk := a[b*ActQ8x32Bytes:]
		d := math.Float32frombits(binary.LittleEndian.Uint32(blk))
		var s int32
		for i := range 32 {
			s += int32(int8(blk[8+i]))
		}
		if got := math.Float32frombits(binary.LittleEndian.Uint32(blk[4:])); got != d*float32(s) {
			t.Fatalf("Q8x32 block %d s = %v, want %v", b, got, d*float32(s))
		}
	}
	for _, k := range []actKind{actQ8x32, actQ8K} {
		y := dequantAct(k, func() []byte { b := make([]byte, actRowBytes(k, 512)); quantizeActRow(k, b, x); return b }(), 512)
		for i := range x {
			if d := math.Abs(float64(y[i] - x[i])); d > 8.0/127*0.51+1e-6 { // |x| < 8 here: half a step
				t.Fatalf("kind %d: value %d: %v decodes to %v", k, i, x[i], y[i])
			}
		}
	}
}

// TestQuantDot checks each format's portable integer dot product against
// the float64 product of the dequantized weights and activations: the
// integer sums are exact, so only float32 scaling error remains.
func TestQuantDot(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, dt := range quantTypesWanted {
		f := quantFormatOf(dt)
		if f == nil {
			continue
		}
		for _, cols := range []int{256, 768, 2816} {
			w := randF32(r, cols, 0.5)
			x := randF32(r, cols, 1.5)
			rb, _ := dt.RowBytes(cols)
			wq := make([]byte, rb)
			if err := Quantize(dt, wq, w); err != nil {
				t.Fatal(err)
			}
			wd := make([]float32, cols)
			Dequantize(dt, wd, wq)
			a := make([]byte, actRowBytes(f.act, cols))
			quantizeActRow(f.act, a, x)
			xd := dequantAct(f.act, a, cols)
			var want, mag float64
			for i := range cols {
				want += float64(wd[i]) * float64(xd[i])
				mag += math.Abs(float64(wd[i]) * float64(xd[i]))
			}
			got := f.blockDot(wq, a, cols/f.block)
			if d := math.Abs(float64(got) - want); d > 2e-6*mag+1e-6 {
				t.Errorf("%v cols %d: dot %v, want %v (Σ|w·x| %v)", dt, cols, got, want, mag)
			}
		}
	}
}

// TestQuantMatMul runs every format on every backend this CPU has: each
// output within float32 rounding of the product of the dequantized
// weights and activations, and bit-identical alone or batched.
func TestQuantMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, dt := range append([]DType{Q8_0}, quantTypesWanted...) {
		f := quantFormatOf(dt)
		if dt == Q8_0 {
			// Only its activation kind is read here; the paths that
			// quantize Q8_0's activations make the same actQ8x32 values.
			f = &q8x32Format
		}
		if f == nil {
			continue
		}
		// 37 rows: two whole 16-row groups and a partial one; 9 K blocks
		// or 72 of 32 values: several unpacked chunks and a partial one.
		rows, cols, T := 37, 2304, 11
		m := encodeMatrix(t, dt, rows, cols, randF32(r, rows*cols, 0.3))
		wd := dequantized(m)
		x := randF32(r, T*cols, 1)
		for _, be := range backendsUnderTest(t) {
			t.Run(fmt.Sprintf("%v/%s", dt, be.name), func(t *testing.T) {
				c := newCPU(2, be)
				defer c.Close()
				out := make([]float32, T*rows)
				c.MatMul(out, x, T, m)
				a := make([]byte, actRowBytes(f.act, cols))
				for tok := range T {
					quantizeActRow(f.act, a, x[tok*cols:(tok+1)*cols])
					xd := dequantAct(f.act, a, cols)
					for row := range rows {
						var want, mag float64
						for i := range cols {
							p := float64(wd[row*cols+i]) * float64(xd[i])
							want += p
							mag += math.Abs(p)
						}
						if d := math.Abs(float64(out[tok*rows+row]) - want); d > 2e-6*mag+1e-6 {
							t.Fatalf("token %d row %d: %v, want %v", tok, row, out[tok*rows+row], want)
						}
					}
				}
				// Batch invariance: each token alone, and tokens 2..8 as a batch.
				one := make([]float32, rows)
				for tok := range T {
					c.MatMul(one, x[tok*cols:(tok+1)*cols], 1, m)
					if i := bitsEqual(one, out[tok*rows:(tok+1)*rows]); i >= 0 {
						t.Fatalf("token %d row %d: %v alone, %v batched", tok, i, one[i], out[tok*rows+i])
					}
				}
				part := make([]float32, 7*rows)
				c.MatMul(part, x[2*cols:9*cols], 7, m)
				if i := bitsEqual(part, out[2*rows:9*rows]); i >= 0 {
					t.Fatalf("tokens 2..8, element %d: %v, want %v", i, part[i], out[2*rows+i])
				}
				// A backend's whole-item path (qrows) and its tiles agree
				// bit for bit. (Not Q8_0: without qitems it leaves the quant
				// format route for the backend's own Q8_0 kernels.)
				if (be.qrows[dt] != nil || be.qitems[dt] != nil) && be.qtiles[dt] != nil && dt != Q8_0 {
					tilesOnly := *be
					tilesOnly.qrows = [numDTypes]qRowsFn{}
					tilesOnly.qitems = [numDTypes]qItemsFn{}
					ct := newCPU(2, &tilesOnly)
					defer ct.Close()
					tiled := make([]float32, T*rows)
					ct.MatMul(tiled, x, T, m)
					if i := bitsEqual(tiled, out); i >= 0 {
						t.Fatalf("element %d: %v by qrows, %v by qtiles", i, out[i], tiled[i])
					}
				}
			})
		}
	}
}

func BenchmarkQuantMatMul(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, dt := range append([]DType{Q8_0}, quantTypesWanted...) {
		if dt != Q8_0 && quantFormatOf(dt) == nil {
			continue
		}
		rows, cols := 896, 4864
		m := encodeMatrix(b, dt, rows, cols, randF32(r, rows*cols, 0.3))
		data := m.Data
		for _, be := range backendsUnderTest(b) {
			for _, T := range []int{1, 8, 32} {
				b.Run(fmt.Sprintf("%v/%s/T%d", dt, be.name, T), func(b *testing.B) {
					c := newCPU(1, be)
					defer c.Close()
					x := randF32(r, T*cols, 1)
					out := make([]float32, T*rows)
					b.SetBytes(int64(len(data)))
					for b.Loop() {
						c.MatMul(out, x, T, m)
					}
				})
			}
		}
	}
}

// TestQuantActBackends: a backend's own activation quantizer (quantAct)
// writes the portable one's bytes.
func TestQuantActBackends(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	x := randF32(r, 1024, 3)
	clear(x[256:288]) // an all-zero block of both kinds' 32-value groups
	clear(x[512:768]) // and a whole Q8_K block
	x[5], x[300] = 1e-30, -7e4
	for _, be := range backendsUnderTest(t) {
		if be.quantAct == nil {
			continue
		}
		for _, k := range []actKind{actQ8x32, actQ8K} {
			want := make([]byte, actRowBytes(k, len(x)))
			quantizeActRow(k, want, x)
			got := make([]byte, len(want))
			be.quantAct(k, got, x)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%s, kind %d: byte %d is %#x, want %#x", be.name, k, i, got[i], want[i])
				}
			}
		}
	}
}

// TestQuantQ8_0Exact holds every backend's Q8_0 MatMul to exact integer
// block sums, extremes included: weights of scale 1 with quants over the
// whole int8 range (-128, which the quantizers never write but a file may
// hold, and 127 in every position) times integer activations that quantize
// to themselves (each block reaches ±127, so d = 1), every prefix sum below
// 2^24 so that float32 holds it exactly: each output must be the integer
// Σ w·y, the same on every path. 37 rows (a partial row group), 11 tokens
// (four-token groups and a tail), 37 blocks (several unpacked chunks and a
// partial one).
func TestQuantQ8_0Exact(t *testing.T) {
	const rows, T, nb = 37, 11, 37
	const cols = nb * Q8BlockSize
	r := rand.New(rand.NewPCG(17, 18))
	// Per block, a weight pattern and an activation pattern.
	wPat := []func(i int) int8{
		func(int) int8 { return -128 },
		func(int) int8 { return 127 },
		func(i int) int8 { return [2]int8{-128, 127}[i%2] },
		func(i int) int8 { return [2]int8{127, -128}[i%2] },
		func(int) int8 { return 0 },
		func(int) int8 { return int8(r.Uint32()) },
		func(int) int8 { return int8(r.Uint32()) },
	}
	xPat := []func(i int) int8{
		func(int) int8 { return 127 },
		func(int) int8 { return -127 },
		func(i int) int8 { return [2]int8{-127, 127}[i%2] },
		func(i int) int8 { return [2]int8{127, -127}[i%2] },
		func(i int) int8 {
			if i == 0 {
				return -127
			}
			return int8(r.IntN(255) - 127)
		},
	}
	rb := nb * Q8BlockBytes
	data := make([]byte, rows*rb)
	wq := make([]int8, rows*cols)
	for row := range rows {
		for b := range nb {
			blk := data[row*rb+b*Q8BlockBytes:]
			binary.LittleEndian.PutUint16(blk, 0x3c00) // float16 1
			p := wPat[r.IntN(len(wPat))]
			for i := range Q8BlockSize {
				v := p(i)
				blk[2+i] = byte(v)
				wq[row*cols+b*Q8BlockSize+i] = v
			}
		}
	}
	m, err := NewMatrix(Q8_0, rows, cols, data)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, T*cols)
	for tok := range T {
		for b := range nb {
			p := xPat[r.IntN(len(xPat))]
			for i := range Q8BlockSize {
				x[tok*cols+b*Q8BlockSize+i] = float32(p(i))
			}
		}
	}
	want := make([]float32, T*rows)
	for tok := range T {
		for row := range rows {
			var sum int64
			for c := range cols {
				sum += int64(wq[row*cols+c]) * int64(x[tok*cols+c])
				if c%Q8BlockSize == Q8BlockSize-1 && (sum >= 1<<24 || sum <= -1<<24) {
					t.Fatalf("token %d row %d: prefix sum %d is not exact in float32", tok, row, sum)
				}
			}
			want[tok*rows+row] = float32(sum)
		}
	}
	for _, be := range backendsUnderTest(t) {
		c := newCPU(2, be)
		out := make([]float32, T*rows)
		c.MatMul(out, x, T, m)
		one := make([]float32, rows)
		for tok := range T {
			for row := range rows {
				if got := out[tok*rows+row]; got != want[tok*rows+row] {
					t.Errorf("%s token %d row %d: %v, want %v", be.name, tok, row, got, want[tok*rows+row])
				}
			}
			c.MatMul(one, x[tok*cols:(tok+1)*cols], 1, m)
			if i := bitsEqual(one, out[tok*rows:(tok+1)*rows]); i >= 0 {
				t.Errorf("%s token %d row %d: %v alone, %v batched", be.name, tok, i, one[i], out[tok*rows+i])
			}
		}
		c.Close()
	}
}
