package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

type mmCase struct {
	dt         DType
	rows, cols int
}

func mmCases() []mmCase {
	var cs []mmCase
	for _, dt := range allTypes {
		// Q8_0 needs cols%32 == 0; 96 and 160 have an odd number of blocks.
		for _, sh := range [][2]int{{1, 32}, {7, 96}, {13, 160}, {37, 320}, {64, 896}} {
			cs = append(cs, mmCase{dt, sh[0], sh[1]})
		}
		if dt != Q8_0 {
			for _, sh := range [][2]int{{5, 17}, {9, 50}, {6, 3}} {
				cs = append(cs, mmCase{dt, sh[0], sh[1]})
			}
		}
	}
	return cs
}

// mmTolerance bounds |MatMul - exact| for one output element: float32
// accumulation error (any order, fused or not) and, for Q8_0, the rounding
// of the activations to their per-block grid (at most half a step each).
func mmTolerance(dt DType, w []float32, x []float32) float64 {
	n := len(x)
	var sumAbs float64
	for i := range x {
		sumAbs += math.Abs(float64(w[i]) * float64(x[i]))
	}
	tol := float64(n+32) * 0x1p-24 * sumAbs
	if dt == Q8_0 {
		for b := 0; b < n; b += 32 {
			var amax, wabs float64
			for i := b; i < b+32; i++ {
				amax = max(amax, math.Abs(float64(x[i])))
				wabs += math.Abs(float64(w[i]))
			}
			// Half a step, plus the float32 error of x·(1/d) before rounding.
			tol += amax / 127 * (0.5 + 1e-5) * wabs
		}
		tol *= 1 + 1e-5
	}
	return tol + 1e-30
}

// TestMatMulAccuracy compares every backend and type with a float64 product
// of the dequantized weights and the (unquantized) activations.
func TestMatMulAccuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, be := range backendsUnderTest(t) {
		cpu := newCPU(2, be)
		defer cpu.Close()
		for _, tc := range mmCases() {
			m := encodeMatrix(t, tc.dt, tc.rows, tc.cols, randF32(r, tc.rows*tc.cols, 0.5))
			w := dequantized(m)
			for _, T := range []int{1, 3, 5, 9} {
				x := randF32(r, T*tc.cols, 1)
				out := make([]float32, T*tc.rows)
				cpu.MatMul(out, x, T, m)
				for tt := range T {
					xt := x[tt*tc.cols : (tt+1)*tc.cols]
					for row := range tc.rows {
						wr := w[row*tc.cols : (row+1)*tc.cols]
						var ref float64
						for i := range xt {
							ref += float64(wr[i]) * float64(xt[i])
						}
						got := out[tt*tc.rows+row]
						if d := math.Abs(float64(got) - ref); !(d <= mmTolerance(tc.dt, wr, xt)) {
							t.Fatalf("%s %v %dx%d T=%d: out[%d][%d] = %g, want %g (diff %g > tol %g)",
								be.name, tc.dt, tc.rows, tc.cols, T, tt, row, got, ref, d, mmTolerance(tc.dt, wr, xt))
						}
					}
				}
			}
		}
	}
}

// TestMatMulBatchInvariance: every output row is bit-identical whether its
// token runs alone (T=1), in a batch of 7 or of 64, on 1 or 2 threads.
func TestMatMulBatchInvariance(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	cpus := map[int]map[string]*CPU{1: {}, 2: {}}
	for threads := range cpus {
		for _, be := range backendsUnderTest(t) {
			cpus[threads][be.name] = newCPU(threads, be)
			defer cpus[threads][be.name].Close()
		}
	}
	const T = 64
	for _, dt := range allTypes {
		for _, sh := range [][2]int{{70, 256}, {45, 96}, {16, 50}, {9, 112}, {21, 800}} {
			rows, cols := sh[0], sh[1]
			if dt == Q8_0 && cols%32 != 0 {
				continue
			}
			m := encodeMatrix(t, dt, rows, cols, randF32(r, rows*cols, 0.5))
			x := randF32(r, T*cols, 1)
			for _, be := range backendsUnderTest(t) {
				name := fmt.Sprintf("%s/%v/%dx%d", be.name, dt, rows, cols)
				ref := make([]float32, T*rows)
				cpus[2][be.name].MatMul(ref, x, T, m)
				for threads, byName := range cpus {
					cpu := byName[be.name]
					got := make([]float32, T*rows)
					cpu.MatMul(got, x, T, m)
					if i := bitsEqual(got, ref); i >= 0 {
						t.Fatalf("%s: T=64 on %d threads differs at %d", name, threads, i)
					}
					for t0 := 0; t0 < T; t0 += 7 {
						n := min(7, T-t0)
						cpu.MatMul(got[:n*rows], x[t0*cols:(t0+n)*cols], n, m)
						if i := bitsEqual(got[:n*rows], ref[t0*rows:(t0+n)*rows]); i >= 0 {
							t.Fatalf("%s: T=%d at token %d on %d threads differs at token %d row %d", name, n, t0, threads, t0+i/rows, i%rows)
						}
					}
					for tok := range T {
						cpu.MatMul(got[:rows], x[tok*cols:(tok+1)*cols], 1, m)
						if i := bitsEqual(got[:rows], ref[tok*rows:(tok+1)*rows]); i >= 0 {
							t.Fatalf("%s: T=1 token %d on %d threads differs at row %d: %g vs %g", name, tok, threads, i, got[i], ref[tok*rows+i])
						}
					}
				}
			}
		}
	}
}

// TestMatMulSIMDMatchesPortable: the SIMD backends agree with the portable
// one within float32 accumulation error (they sum in a different order and
// with fused multiply-adds, so not bit for bit; the Q8_0 activations are
// quantized identically), and bit for bit with the backends of the same
// reduction order (avx512 and its archsimd twin). Q8_0 on a backend that
// multiplies float activations (floatQ8 without a qitems path for Q8_0) is
// checked against the exact product.
func TestMatMulSIMDMatchesPortable(t *testing.T) {
	skipWithoutSIMD(t)
	r := rand.New(rand.NewPCG(9, 10))
	ref := newCPU(1, portable)
	defer ref.Close()
	for _, tc := range mmCases() {
		m := encodeMatrix(t, tc.dt, tc.rows, tc.cols, randF32(r, tc.rows*tc.cols, 0.5))
		w := dequantized(m)
		T := 6
		x := randF32(r, T*tc.cols, 1)
		want := make([]float32, T*tc.rows)
		ref.MatMul(want, x, T, m)
		first, firstName := map[string][]float32{}, map[string]string{}
		for _, be := range simdBackends {
			cpu := newCPU(2, be)
			got := make([]float32, T*tc.rows)
			cpu.MatMul(got, x, T, m)
			cpu.Close()
			for i := range got {
				row, tt := i%tc.rows, i/tc.rows
				wr, xt := w[row*tc.cols:(row+1)*tc.cols], x[tt*tc.cols:(tt+1)*tc.cols]
				tol := 2 * float64(tc.cols+32) * 0x1p-24 * sumAbsProd(wr, xt)
				ref := float64(want[i])
				switch {
				case tc.dt == Q8_0 && be.floatQ8 && be.qitems[Q8_0] == nil:
					// Unquantized activations: compare with the exact
					// product of the dequantized weights.
					ref = 0
					for c := range xt {
						ref += float64(wr[c]) * float64(xt[c])
					}
					tol /= 2
				case tc.dt == Q8_0:
					tol = mmTolerance(Q8_0, wr, xt) // loose: the x rounding is shared
				}
				if d := math.Abs(float64(got[i]) - ref); !(d <= tol+1e-30) {
					t.Fatalf("%s %v %dx%d: out[%d] = %g, want %g (diff %g > %g)", be.name, tc.dt, tc.rows, tc.cols, i, got[i], ref, d, tol)
				}
			}
			// Backends of one reduction order agree bit for bit (a
			// qitems path has its own: quant_r16_avx512_amd64.go).
			key := fmt.Sprint(be.mmLanes, be.floatQ8, be.qitems[tc.dt] != nil)
			if first[key] == nil {
				first[key], firstName[key] = got, be.name
			} else if i := bitsEqual(got, first[key]); i >= 0 {
				t.Fatalf("%s and %s differ for %v %dx%d at %d: %g vs %g", be.name, firstName[key], tc.dt, tc.rows, tc.cols, i, got[i], first[key][i])
			}
		}
	}
}

func sumAbsProd(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += math.Abs(float64(a[i]) * float64(b[i]))
	}
	return s
}

// TestQuantizeActIdentical: every backend quantizes activations to the same
// bytes and scales.
func TestQuantizeActIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{32, 96, 896} {
		x := randF32(r, n, 3)
		x[5] = 0
		if n >= 64 {
			clear(x[32:64]) // an all-zero block
		}
		nb := n / 32
		pairs := (nb + 1) / 2
		var wantQ []byte
		var wantS []float32
		for _, be := range backendsUnderTest(t) {
			qs, xs := make([]byte, pairs*64), make([]float32, pairs*16)
			for i := range qs {
				qs[i] = 0xaa // the padding must be overwritten
			}
			be.quantizeAct(qs, xs, x)
			if wantQ == nil {
				wantQ, wantS = qs, xs
				continue
			}
			if string(qs) != string(wantQ) || bitsEqual(xs, wantS) >= 0 {
				t.Fatalf("%s quantizes %d values differently", be.name, n)
			}
		}
		for b := range nb {
			d := wantS[(b>>1)*16+(b&1)*8]
			for i := b * 32; i < (b+1)*32; i++ {
				q := float64(int8(wantQ[i]))
				if math.Abs(q*float64(d)-float64(x[i])) > float64(d)*(0.5+1e-5) {
					t.Fatalf("x[%d] = %g quantized to %g·%g", i, x[i], q, d)
				}
			}
		}
		if nb%2 == 1 {
			for _, v := range wantQ[nb*32:] {
				if v != 0 {
					t.Fatalf("padding not zeroed")
				}
			}
		}
	}
}

func TestMatMulPanicsOnShortBuffers(t *testing.T) {
	cpu := NewCPU(1)
	defer cpu.Close()
	m := encodeMatrix(t, F32, 4, 8, make([]float32, 32))
	for _, f := range []func(){
		func() { cpu.MatMul(make([]float32, 7), make([]float32, 16), 2, m) },
		func() { cpu.MatMul(make([]float32, 8), make([]float32, 15), 2, m) },
		func() {
			cpu.MatMul(make([]float32, 8), make([]float32, 16), 2, &Matrix{Type: F32, Rows: 4, Cols: 8, Data: make([]byte, 100)})
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		}()
	}
}
