//go:build goexperiment.simd && amd64

package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"simd/archsimd"
	"slices"
	"testing"
	"unsafe"
)

// avx512BW is the avx512 backend with the AVX-512BW quant tiles, as on a
// CPU without AVX512-VNNI.
var avx512BW = func() *backend {
	b := newAVX512("avx512-bw", true, false)
	installQuant512(b, false)
	return b
}()

// TestQuantTiles512 runs every AVX-512 quant tile, with and without VNNI,
// over each tile shape (rows × tokens up to 4 × 4) and more blocks than one
// unpacked chunk: each product within float32 rounding of the portable
// dot, bit-identical whatever the shape on each path.
func TestQuantTiles512(t *testing.T) {
	if !slices.Contains(simdBackends, avx512) {
		t.Skip("the CPU lacks AVX-512")
	}
	vnni := archsimd.X86.AVX512VNNI()
	r := rand.New(rand.NewPCG(11, 12))
	for _, dt := range quantTypesWanted {
		f := quantFormatOf(dt)
		if f == nil || avx512BW.qtiles[dt] == nil && avx512.qtiles[dt] == nil {
			continue
		}
		t.Run(dt.String(), func(t *testing.T) {
			cols := 9 * 256
			if f.block == 32 {
				cols = 37 * 32 // an odd block count
			}
			nb := cols / f.block
			m := encodeMatrix(t, dt, 4, cols, randF32(r, 4*cols, 0.3))
			rbytes, _ := dt.RowBytes(cols)
			if dt == MXFP4 {
				// The subnormal and smallest normal scales (E8M0 0, 1, 2).
				for i, e := range []byte{0, 1, 2} {
					m.Data[i*rbytes+(5*i+1)*mxfp4Bytes] = e
				}
			}
			stride := actRowBytes(f.act, cols)
			act := make([]byte, 4*stride)
			for j := range 4 {
				quantizeActRow(f.act, act[j*stride:(j+1)*stride], randF32(r, cols, 1))
			}
			var want [16]float32
			for j := range 4 {
				for i := range 4 {
					want[j*4+i] = f.blockDot(m.Data[i*rbytes:], act[j*stride:], nb)
				}
			}
			var full [16]float32
			tiles := map[string]qTileFn{"bw": avx512BW.qtiles[dt]}
			if vnni {
				tiles["vnni"] = avx512.qtiles[dt]
			}
			for name, tile := range tiles {
				if tile == nil {
					t.Logf("%s: no %s tile", dt, name)
					continue
				}
				// Bit-identical across shapes within one path (the VNNI and
				// BW paths of a K format reduce in different orders).
				var seen [16]bool
				for nr := 1; nr <= 4; nr++ {
					for nt := 1; nt <= 4; nt++ {
						var res [16]float32
						// Tile rows 4-nr.. and tokens 4-nt..: the last rows of the data.
						w := m.Data[(4-nr)*rbytes:]
						tile(&res, w, rbytes, nr, act[(4-nt)*stride:], stride, nt, nb)
						for j := range nt {
							for i := range nr {
								got := res[j*4+i]
								k := (4-nt+j)*4 + 4 - nr + i
								if !seen[k] {
									full[k], seen[k] = got, true
								} else if math.Float32bits(got) != math.Float32bits(full[k]) {
									t.Fatalf("%s %dx%d: row %d token %d = %v, %v in another shape", name, nr, nt, 4-nr+i, 4-nt+j, got, full[k])
								}
								if d := math.Abs(float64(got - want[k])); d > 1e-5*math.Abs(float64(want[k]))+1e-4 {
									t.Errorf("%s %dx%d: row %d token %d = %v, portable dot %v", name, nr, nt, 4-nr+i, 4-nt+j, got, want[k])
								}
							}
						}
					}
				}
			}
		})
	}
}

// TestQuantMatMulBW is TestQuantMatMul's check on the AVX-512BW tiles:
// bit-identical to the avx512 backend's (VNNI or not, the integer sums are
// exact and the float steps the same).
func TestQuantMatMulBW(t *testing.T) {
	if !slices.Contains(simdBackends, avx512) {
		t.Skip("the CPU lacks AVX-512")
	}
	r := rand.New(rand.NewPCG(13, 14))
	for _, dt := range quantTypesWanted {
		if quantFormatOf(dt) == nil || avx512BW.qtiles[dt] == nil || avx512.qtiles[dt] == nil {
			continue
		}
		if (avx512BW.qitems[dt] == nil) != (avx512.qitems[dt] == nil) {
			// VNNI runs the 16-row kernels, AVX-512BW the 4-row tiles:
			// two reduction orders (each checked by TestQuantMatMul).
			continue
		}
		t.Run(fmt.Sprint(dt), func(t *testing.T) {
			rows, cols, T := 37, 2304, 11
			m := encodeMatrix(t, dt, rows, cols, randF32(r, rows*cols, 0.3))
			x := randF32(r, T*cols, 1)
			want := make([]float32, T*rows)
			got := make([]float32, T*rows)
			c := newCPU(2, avx512)
			c.MatMul(want, x, T, m)
			c.Close()
			c = newCPU(2, avx512BW)
			c.MatMul(got, x, T, m)
			c.Close()
			if i := bitsEqual(got, want); i >= 0 {
				t.Fatalf("element %d: %v with AVX-512BW, %v with avx512", i, got[i], want[i])
			}
		})
	}
}

// TestUnpackMXFP4Scales checks the E8M0 decoding of every exponent byte,
// subnormals included, in the 16-row kernels' unpacked scratch.
func TestUnpackMXFP4Scales(t *testing.T) {
	if !slices.Contains(simdBackends, avx512) {
		t.Skip("the CPU lacks AVX-512")
	}
	rb := 256 * mxfp4Bytes
	w := make([]byte, r16Rows*rb)
	for r := range r16Rows {
		for e := range 256 {
			w[r*rb+e*mxfp4Bytes] = byte(e)
		}
	}
	s := make([]byte, r16Chunk*(r16Block+r16Stage))
	for b0 := 0; b0 < 256; b0 += r16Chunk {
		r16UnpMXFP4(&s[0], unsafe.Pointer(&w[b0*mxfp4Bytes]), rb, r16Chunk, uintptr(unsafe.Pointer(&w[0])))
		for b := range r16Chunk {
			e := b0 + b
			for p := range r16Rows {
				off := b*r16Block + 512 + 4*p
				got := math.Float32frombits(binary.LittleEndian.Uint32(s[off:]))
				if got != e8m0Half(byte(e)) {
					t.Fatalf("e=%d lane %d: %v, want %v", e, p, got, e8m0Half(byte(e)))
				}
			}
		}
	}
}

// TestQuantRows512 checks every AVX-512 qrows path against its tiles bit
// for bit, with and without VNNI: row blocks of 1 to 4 rows, token counts
// with every 4-token tail, and more blocks than one qrows chunk (an odd
// count for the 32-value formats), so that chunking, the one-token path
// and the tails are all covered.
func TestQuantRows512(t *testing.T) {
	if !slices.Contains(simdBackends, avx512) {
		t.Skip("the CPU lacks AVX-512")
	}
	r := rand.New(rand.NewPCG(15, 16))
	bes := []*backend{avx512BW}
	if archsimd.X86.AVX512VNNI() {
		bes = append(bes, avx512)
	}
	for _, dt := range quantTypesWanted {
		f := quantFormatOf(dt)
		if f == nil {
			continue
		}
		t.Run(dt.String(), func(t *testing.T) {
			cols := 19 * 256
			if f.block == 32 {
				cols = 71 * 32
			}
			nb := cols / f.block
			const rows, T = 7, 13
			m := encodeMatrix(t, dt, rows, cols, randF32(r, rows*cols, 0.3))
			rb, _ := dt.RowBytes(cols)
			stride := actRowBytes(f.act, cols)
			act := make([]byte, T*stride)
			for j := range T {
				quantizeActRow(f.act, act[j*stride:(j+1)*stride], randF32(r, cols, 1))
			}
			for _, be := range bes {
				rowsFn, tile := be.qrows[dt], be.qtiles[dt]
				if rowsFn == nil || tile == nil {
					continue
				}
				var wk worker
				for _, r0 := range []int{0, 3, 4} {
					nr := min(4, rows-r0)
					w := m.Data[r0*rb:]
					for _, nt := range []int{1, 2, 3, 4, 5, 8, 13} {
						out := make([]float32, nt*rows)
						rowsFn(&wk, out, rows, w, rb, nr, act, stride, nt, nb)
						for t0 := 0; t0 < nt; t0 += 4 {
							var res [16]float32
							tile(&res, w, rb, nr, act[t0*stride:], stride, min(4, nt-t0), nb)
							for j := range min(4, nt-t0) {
								for i := range nr {
									got, want := out[(t0+j)*rows+i], res[j*4+i]
									if math.Float32bits(got) != math.Float32bits(want) {
										t.Fatalf("%s rows %d+%d, %d tokens: token %d row %d = %v by qrows, %v by the tile", be.name, r0, nr, nt, t0+j, i, got, want)
									}
								}
							}
						}
					}
				}
			}
		})
	}
}
