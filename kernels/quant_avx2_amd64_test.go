//go:build goexperiment.simd && amd64

package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// avx2QTest is what TestAVX2QuantTiles needs of a format: its geometry,
// where its float16 scales are (set to sane values in otherwise random
// blocks) and an exact dequantization.
type avx2QTest struct {
	block, bytes int
	act          actKind
	f16At        []int
	dequant      func(dst []float32, blk []byte) // one block
}

var avx2QTests = map[DType]avx2QTest{
	Q4_K: {256, 144, actQ8K, []int{0, 2}, refDequantQ4K},
	Q6_K: {256, 210, actQ8K, []int{208}, refDequantQ6K},
}

func refDequantQ4K(y []float32, b []byte) {
	d, dmin := F16ToF32(binary.LittleEndian.Uint16(b)), F16ToF32(binary.LittleEndian.Uint16(b[2:]))
	sc := b[4:16]
	scaleMin := func(j int) (float32, float32) {
		if j < 4 {
			return float32(sc[j] & 63), float32(sc[j+4] & 63)
		}
		return float32(sc[j+4]&0xf | sc[j-4]>>6<<4), float32(sc[j+4]>>4 | sc[j]>>6<<4)
	}
	for c := range 4 {
		s1, m1 := scaleMin(2 * c)
		s2, m2 := scaleMin(2*c + 1)
		for l := range 32 {
			q := b[16+32*c+l]
			y[64*c+l] = d*s1*float32(q&0xf) - dmin*m1
			y[64*c+32+l] = d*s2*float32(q>>4) - dmin*m2
		}
	}
}

func refDequantQ6K(y []float32, b []byte) {
	d := F16ToF32(binary.LittleEndian.Uint16(b[208:]))
	for h := range 2 {
		ql, qh, sc := b[64*h:], b[128+32*h:], b[192+8*h:]
		for l := range 32 {
			is := l / 16
			q1 := int(ql[l]&0xf|(qh[l]&3)<<4) - 32
			q2 := int(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
			q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
			q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
			o := y[128*h:]
			o[l] = d * float32(int8(sc[is])) * float32(q1)
			o[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
			o[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
			o[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
		}
	}
}

// TestAVX2QuantTiles runs each avx2 quant tile on random blocks (every bit
// pattern of the packed values and scales) for every tile shape: each
// output within float32 rounding of the float64 product of the dequantized
// weights and activations, and bit-identical to the same output of the
// full 4×4 tile.
func TestAVX2QuantTiles(t *testing.T) {
	if !slices.Contains(simdBackends, avx2) {
		t.Skip("the CPU lacks AVX2")
	}
	r := rand.New(rand.NewPCG(11, 12))
	for dt, tile := range avx2.qtiles {
		if tile == nil {
			continue
		}
		q, ok := avx2QTests[DType(dt)]
		if !ok {
			t.Errorf("%v: avx2 tile without a test", DType(dt))
			continue
		}
		// Enough blocks to cross a chunk boundary of the vector phase.
		nb := 11
		if q.block == 32 {
			nb = 75
		}
		cols := nb * q.block
		rb := nb * q.bytes
		w := make([]byte, 4*rb)
		for i := range w {
			w[i] = byte(r.Uint32())
		}
		wd := make([]float32, 4*cols)
		for blk := range 4 * nb {
			b := w[blk*q.bytes : (blk+1)*q.bytes]
			for _, o := range q.f16At {
				binary.LittleEndian.PutUint16(b[o:], F32ToF16(float32(r.Float64()*0.02-0.005)))
			}
			q.dequant(wd[blk*q.block:], b)
		}
		stride := actRowBytes(q.act, cols)
		act := make([]byte, 4*stride)
		xd := make([][]float32, 4)
		for j := range 4 {
			quantizeActRow(q.act, act[j*stride:(j+1)*stride], randF32(r, cols, 1))
			xd[j] = dequantAct(q.act, act[j*stride:], cols)
		}
		var full [16]float32
		tile(&full, w, rb, 4, act, stride, 4, nb)
		for j := range 4 {
			for i := range 4 {
				var want, mag float64
				for c := range cols {
					p := float64(wd[i*cols+c]) * float64(xd[j][c])
					want += p
					mag += math.Abs(p)
				}
				if d := math.Abs(float64(full[j*4+i]) - want); d > 2e-6*mag+1e-6 {
					t.Errorf("%v row %d token %d: %v, want %v", DType(dt), i, j, full[j*4+i], want)
				}
			}
		}
		for nr := 1; nr <= 4; nr++ {
			for nt := 1; nt <= 4; nt++ {
				for _, r0 := range []int{0, 4 - nr} { // first and last rows
					for _, t0 := range []int{0, 4 - nt} {
						var res [16]float32
						tile(&res, w[r0*rb:], rb, nr, act[t0*stride:], stride, nt, nb)
						for j := range nt {
							for i := range nr {
								got, want := res[j*4+i], full[(t0+j)*4+r0+i]
								if math.Float32bits(got) != math.Float32bits(want) {
									t.Fatalf("%v %d×%d tile at row %d token %d: (%d,%d) = %v, %v in the 4×4 tile", DType(dt), nr, nt, r0, t0, i, j, got, want)
								}
							}
						}
					}
				}
			}
		}
	}
}
