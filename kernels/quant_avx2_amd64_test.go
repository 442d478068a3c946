//go:build goexperiment.simd && amd64

package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// avx2QF16At is, per format with an avx2 tile, where its float16 scales
// are in a block: TestAVX2QuantTiles sets them to sane values in otherwise
// random blocks.
var avx2QF16At = map[DType][]int{
	Q4_K:   {0, 2},
	Q5_K:   {0, 2},
	Q6_K:   {208},
	Q3_K:   {108},
	Q2_K:   {80, 82},
	IQ4_XS: {0},
	Q4_0:   {0},
	Q4_1:   {0, 2},
	Q5_0:   {0},
	Q5_1:   {0, 2},
	IQ4_NL: {0},
	MXFP4:  {},
	Q8_0:   {0},
}

// q8TileFormat is Q8_0 as TestAVX2QuantTiles reads a format: its blocks,
// activation kind and exact dequantization.
var q8TileFormat = quantFormat{
	block: Q8BlockSize, blockBytes: Q8BlockBytes, act: actQ8x32,
	dequant: func(dst []float32, src []byte) {
		if err := DequantizeQ8_0(dst, src); err != nil {
			panic(err)
		}
	},
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
		q := quantFormatOf(DType(dt))
		if DType(dt) == Q8_0 {
			q = &q8TileFormat // random bytes: every int8 quant, -128 included
		}
		f16At, ok := avx2QF16At[DType(dt)]
		if q == nil || !ok {
			t.Errorf("%v: avx2 tile without a format or a test", DType(dt))
			continue
		}
		// Enough blocks to cross a chunk boundary of the vector phase.
		nb := 11
		if q.block == 32 {
			nb = 75
		}
		cols := nb * q.block
		rb := nb * q.blockBytes
		w := make([]byte, 4*rb)
		for i := range w {
			w[i] = byte(r.Uint32())
		}
		wd := make([]float32, 4*cols)
		for blk := range 4 * nb {
			b := w[blk*q.blockBytes : (blk+1)*q.blockBytes]
			for _, o := range f16At {
				binary.LittleEndian.PutUint16(b[o:], F32ToF16(float32(r.Float64()*0.02-0.005)))
			}
			if DType(dt) == MXFP4 {
				b[0] = byte(116 + r.IntN(8)) // E8M0 scale 2^-12 … 2^-5
			}
			q.dequant(wd[blk*q.block:(blk+1)*q.block], b)
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
