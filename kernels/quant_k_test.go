package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// Float16 bit patterns of the super-block scales the hand-built blocks use.
const (
	h025 = 0x3400 // 0.25
	h05  = 0x3800 // 0.5
	h1   = 0x3C00 // 1
)

// kBlockCase is one hand-built super-block: its bytes, written from the
// format's definition, and every value it decodes to.
type kBlockCase struct {
	t    DType
	blk  []byte
	want [256]float32
}

// fillSub sets the 16 or 32 values of sub-block g to v.
func fillSub(w *[256]float32, size, g int, v float32) {
	for i := g * size; i < (g+1)*size; i++ {
		w[i] = v
	}
}

func q2KCase() kBlockCase {
	c := kBlockCase{t: Q2_K, blk: make([]byte, q2KBytes)}
	b := c.blk
	binary.LittleEndian.PutUint16(b[80:], h1)  // d
	binary.LittleEndian.PutUint16(b[82:], h05) // dmin
	b[0] = 0x21                                // sub-block 0: scale 1, min 2
	b[1] = 0x3F                                // sub-block 1: scale 15, min 3
	b[2] = 0x12                                // sub-block 2: scale 2, min 1
	b[9] = 0x07                                // sub-block 9: scale 7, min 0
	// qs[0] holds values 0, 32, 64, 96 in its bit pairs 0, 2, 4, 6.
	b[16] = 0xE4                  // 0, 1, 2, 3
	b[16+16] = 0x03               // value 16 (sub-block 1): 3
	b[16+32+16] = 2               // value 128+16 (sub-block 9): 2
	fillSub(&c.want, 16, 0, -1)   // 1·0 − 0.5·2
	fillSub(&c.want, 16, 1, -1.5) // 15·0 − 0.5·3
	fillSub(&c.want, 16, 2, -0.5) // 2·0 − 0.5·1
	c.want[0] = -1                // q 0
	c.want[32] = 1.5              // sub-block 2: 2·1 − 0.5
	c.want[64] = 0                // sub-block 4 (scale 0, min 0), q 2
	c.want[16] = 43.5             // 15·3 − 0.5·3
	c.want[144] = 14              // 7·2
	return c
}

func q3KCase() kBlockCase {
	c := kBlockCase{t: Q3_K, blk: make([]byte, q3KBytes)}
	b := c.blk
	binary.LittleEndian.PutUint16(b[108:], h05)
	for i := range 32 {
		b[i] = 0xFF // hmask set: no 4 subtracted
	}
	// Scales are stored +32 in 6 bits: 32 is low nibble 0, top bits 2.
	s := b[96:108]
	for i := 8; i < 12; i++ {
		s[i] = 0xAA
	}
	s[0] = 0x01     // sub-block 0 low nibble 1 (33 → scale 1)
	s[9] = 0x8A     // sub-block 9 top bits 0 (stored 0 → scale −32)
	s[7] = 0xF0     // sub-block 15 low nibble 15 …
	s[11] = 0xEA    // … top bits 3 (63 → scale 31)
	b[32] = 3       // value 0: low bits 3
	b[1] = 0xFE     // value 1: hmask bit 0 clear → −4
	b[32+32+16] = 1 // value 144 (sub-block 9): low bits 1 …
	b[16] = 0xEF    // … hmask bit 4 clear → 1 − 4
	b[32+32+31] = 0x80
	b[30] = 0x7F // value 254 (sub-block 15): −4
	c.want[0] = 0.5 * 1 * 3
	c.want[1] = 0.5 * 1 * -4
	c.want[144] = 0.5 * -32 * -3
	c.want[255] = 0.5 * 31 * 2
	c.want[254] = 0.5 * 31 * -4
	return c
}

// kScaleBytes are a Q4_K/Q5_K scale field: sub-block 0 scale 1 min 2,
// sub-block 1 scale 63 min 0, sub-block 5 scale 37 min 50 (whose top bits
// share bytes 1 and 5 with sub-blocks 1 and 5's low ones); the rest 0.
func kScaleBytes(s []byte) {
	s[0], s[4] = 1, 2
	s[1], s[5] = 63|2<<6, 0|3<<6
	s[9] = 5 | 2<<4
}

func q4KCase() kBlockCase {
	c := kBlockCase{t: Q4_K, blk: make([]byte, q4KBytes)}
	b := c.blk
	binary.LittleEndian.PutUint16(b[0:], h1)
	binary.LittleEndian.PutUint16(b[2:], h05)
	kScaleBytes(b[4:16])
	b[16] = 0x27    // value 0: 7, value 32: 2
	b[16+64] = 0xF0 // value 160 (sub-block 5): 15, value 128: 0
	fillSub(&c.want, 32, 0, -1)
	fillSub(&c.want, 32, 5, -25)
	c.want[0] = 1*7 - 0.5*2
	c.want[32] = 63 * 2
	c.want[160] = 37*15 - 0.5*50
	return c
}

func q5KCase() kBlockCase {
	c := kBlockCase{t: Q5_K, blk: make([]byte, q5KBytes)}
	b := c.blk
	binary.LittleEndian.PutUint16(b[0:], h1)
	binary.LittleEndian.PutUint16(b[2:], h05)
	kScaleBytes(b[4:16])
	qh, qs := b[16:48], b[48:176]
	qs[0] = 0x27    // value 0: 7, value 32: 2
	qh[0] = 0x01    // value 0: +16; value 32 not
	qh[1] = 0x22    // value 33 (sub-block 1) and 161 (sub-block 5): +16
	qs[64+1] = 0xF0 // value 161: 15
	fillSub(&c.want, 32, 0, -1)
	fillSub(&c.want, 32, 5, -25)
	c.want[0] = 1*23 - 0.5*2
	c.want[32] = 63 * 2
	c.want[33] = 63 * 16
	c.want[161] = 37*31 - 0.5*50
	return c
}

func q6KCase() kBlockCase {
	c := kBlockCase{t: Q6_K, blk: make([]byte, q6KBytes)}
	b := c.blk
	binary.LittleEndian.PutUint16(b[208:], h025)
	sc := b[192:208]
	sc[0], sc[2], sc[7], sc[15] = 1, 0x80, 127, 0xFD // 1, −128, 127, −3
	// Quants are stored +32; all-zero bytes are −32.
	fillSub(&c.want, 16, 0, 0.25*1*-32)
	fillSub(&c.want, 16, 2, 0.25*-128*-32)
	fillSub(&c.want, 16, 7, 0.25*127*-32)
	fillSub(&c.want, 16, 15, 0.25*-3*-32)
	b[0] = 0x0F   // value 0 low nibble 15 …
	b[128] = 0x03 // … top bits 3: 63 → 31
	b[48] = 0x50  // value 112 (k=3, l=16): high nibble of ql[32+16] …
	b[144] = 0x80 // … top bits from qh[16] bits 6-7: 37 → 5
	b[127] = 0x10 // value 255 (half 1, k=3, l=31): 1 → −31
	c.want[0] = 0.25 * 1 * 31
	c.want[112] = 0.25 * 127 * 5
	c.want[255] = 0.25 * -3 * -31
	return c
}

func iq4XSCase() kBlockCase {
	c := kBlockCase{t: IQ4_XS, blk: make([]byte, iq4XSBytes)}
	b := c.blk
	binary.LittleEndian.PutUint16(b[0:], h05)
	// Scales stored +32: sub-block 0 → 1, 3 → −32, 7 → 31, the rest 0.
	binary.LittleEndian.PutUint16(b[2:], 0xEA2A)
	b[4], b[5], b[7] = 0x01, 0x00, 0xF0
	qs := b[8:]
	// Quant 0 is the grid's −127.
	fillSub(&c.want, 32, 0, 0.5*1*-127)
	fillSub(&c.want, 32, 3, 0.5*-32*-127)
	fillSub(&c.want, 32, 7, 0.5*31*-127)
	qs[0] = 0xF0      // value 0: grid[0] = −127, value 16: grid[15] = 113
	qs[48] = 0x08     // value 96 (sub-block 3): grid[8] = 1
	qs[112+15] = 0x70 // value 255: grid[7] = −10
	c.want[16] = 0.5 * 1 * 113
	c.want[96] = 0.5 * -32 * 1
	c.want[255] = 0.5 * 31 * -10
	return c
}

func kBlockCases() []kBlockCase {
	return []kBlockCase{q2KCase(), q3KCase(), q4KCase(), q5KCase(), q6KCase(), iq4XSCase()}
}

func TestQuantKHandBuilt(t *testing.T) {
	for _, c := range kBlockCases() {
		if n := quantFormatOf(c.t).blockBytes; n != len(c.blk) {
			t.Fatalf("%v: %d-byte blocks, want %d", c.t, n, len(c.blk))
		}
		got := make([]float32, 256)
		if err := Dequantize(c.t, got, c.blk); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%v: value %d = %v, want %v", c.t, i, got[i], c.want[i])
			}
		}
	}
}

// TestQuantKHandBuiltDot checks the integer dot on the hand-built blocks
// against the known values, with an activation whose quants are ±1 … ±127.
func TestQuantKHandBuiltDot(t *testing.T) {
	act := make([]byte, ActQ8KBytes)
	x := make([]float32, 256)
	for i := range x {
		x[i] = float32((i*37)%255 - 127)
	}
	quantizeActQ8K(act, x)
	if d := math.Float32frombits(binary.LittleEndian.Uint32(act)); d != 1 {
		t.Fatalf("activation scale %v, want 1", d)
	}
	for _, c := range kBlockCases() {
		var want float64
		for i, v := range c.want {
			want += float64(v) * float64(x[i])
		}
		var mag float64
		for i, v := range c.want {
			mag += math.Abs(float64(v) * float64(x[i]))
		}
		if got := quantFormatOf(c.t).dot(c.blk, act, 1); math.Abs(float64(got)-want) > 1e-6*mag {
			t.Errorf("%v: dot %v, want %v", c.t, got, want)
		}
	}
}

var kTypes = []DType{Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS}

// kScaleOffsets are the float16 super-block scales' byte offsets per type.
var kScaleOffsets = map[DType][]int{
	Q2_K: {80, 82}, Q3_K: {108}, Q4_K: {0, 2}, Q5_K: {0, 2}, Q6_K: {208}, IQ4_XS: {0},
}

// TestQuantKRandomBytes decodes and dots blocks of random bytes (every
// scale, min and high-bit pattern, float16 scales made finite): the dot
// must match the float64 product of the decoded values.
func TestQuantKRandomBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	const nb = 6
	x := randF32(r, nb*256, 1)
	act := make([]byte, actRowBytes(actQ8K, len(x)))
	quantizeActQ8K(act, x)
	xd := dequantAct(actQ8K, act, len(x))
	for _, dt := range kTypes {
		f := quantFormatOf(dt)
		for range 20 {
			w := make([]byte, nb*f.blockBytes)
			for i := range w {
				w[i] = byte(r.Uint32())
			}
			for b := range nb {
				for _, off := range kScaleOffsets[dt] {
					binary.LittleEndian.PutUint16(w[b*f.blockBytes+off:], F32ToF16(float32(r.NormFloat64())*0.01))
				}
			}
			wd := make([]float32, nb*256)
			f.dequant(wd, w)
			var want, mag float64
			for i := range wd {
				want += float64(wd[i]) * float64(xd[i])
				mag += math.Abs(float64(wd[i]) * float64(xd[i]))
			}
			if got := f.dot(w, act, nb); math.Abs(float64(got)-want) > 2e-6*mag+1e-6 {
				t.Fatalf("%v: dot %v, want %v (Σ|w·x| %v)", dt, got, want, mag)
			}
		}
	}
}

func TestQuantKZeros(t *testing.T) {
	for _, dt := range kTypes {
		f := quantFormatOf(dt)
		// All-zero bytes decode to zeros.
		y := make([]float32, 256)
		f.dequant(y, make([]byte, f.blockBytes))
		for i, v := range y {
			if v != 0 {
				t.Fatalf("%v: zero bytes decode value %d to %v", dt, i, v)
			}
		}
		// Zeros quantize to a block that decodes to zeros and dots to 0.
		blk := make([]byte, f.blockBytes)
		for i := range blk {
			blk[i] = 0xA5 // the quantizer must overwrite every byte that matters
		}
		f.quantize(blk, make([]float32, 256))
		f.dequant(y, blk)
		for i, v := range y {
			if v != 0 {
				t.Fatalf("%v: quantized zeros decode value %d to %v", dt, i, v)
			}
		}
		act := make([]byte, ActQ8KBytes)
		quantizeActQ8K(act, randF32(rand.New(rand.NewPCG(1, 1)), 256, 1))
		if got := f.dot(blk, act, 1); got != 0 {
			t.Fatalf("%v: zero weights dot to %v", dt, got)
		}
	}
}

// TestQuantKOutlier quantizes super-blocks with one large value among
// small ones, at every sub-block position parity: the outlier survives
// within a few percent and the rest stays finite and bounded.
func TestQuantKOutlier(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, dt := range kTypes {
		f := quantFormatOf(dt)
		for _, pos := range []int{0, 17, 100, 255} {
			for _, big := range []float32{40, -40, 3e4} {
				x := randF32(r, 256, 0.1)
				x[pos] = big
				blk := make([]byte, f.blockBytes)
				f.quantize(blk, x)
				y := make([]float32, 256)
				f.dequant(y, blk)
				if d := abs32(y[pos] - big); d > 0.05*abs32(big) {
					t.Errorf("%v: outlier %v at %d decodes to %v", dt, big, pos, y[pos])
				}
				for i, v := range y {
					if i != pos && !(abs32(v) < abs32(big)*0.1+1) {
						t.Fatalf("%v: outlier %v at %d: value %d (%v) decodes to %v", dt, big, pos, i, x[i], v)
					}
				}
			}
		}
	}
}

func TestScaleMinK4Packing(t *testing.T) {
	for sc := range uint8(64) {
		for m := range uint8(64) {
			for j := range 8 {
				s := make([]byte, 12)
				// The other sub-blocks' fields at their maximum must not leak.
				for k := range 8 {
					if k == j {
						putScaleMinK4(k, s, sc, m)
					} else {
						putScaleMinK4(k, s, 63, 63)
					}
				}
				for k := range 8 {
					gs, gm := scaleMinK4(k, s)
					ws, wm := uint8(63), uint8(63)
					if k == j {
						ws, wm = sc, m
					}
					if gs != ws || gm != wm {
						t.Fatalf("sub-block %d of (%d: %d, %d): %d, %d, want %d, %d", k, j, sc, m, gs, gm, ws, wm)
					}
				}
			}
		}
	}
}
