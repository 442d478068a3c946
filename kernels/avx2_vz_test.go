//go:build goexperiment.simd && amd64

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestAVX2TailsMatchAVX512 runs the avx2 kernels on every tail length up
// to two 16-lane chunks (their masked tails and the VZEROUPPER boundaries
// in between), on head-dim-8 attention at every context length mod 4, and
// on matmul rows that are not whole 8-column groups, and wants the
// AVX-512 backends' results bit for bit (skipped where the CPU lacks
// AVX-512).
func TestAVX2TailsMatchAVX512(t *testing.T) {
	if !slices.Contains(simdBackends, avx2) {
		t.Skipf("this CPU lacks %v", missingFeatures(avx2))
	}
	var others []*backend
	for _, b := range simdBackends {
		if b != avx2 {
			others = append(others, b)
		}
	}
	if len(others) == 0 {
		t.Skip("no other SIMD backend runs here to compare with")
	}
	r := rand.New(rand.NewPCG(40, 41))
	same := func(what string, be *backend, got, want []float32) {
		t.Helper()
		if i := bitsEqual(got, want); i >= 0 {
			t.Errorf("%s: avx2 and %s differ at %d: %g vs %g", what, be.name, i, got[i], want[i])
		}
	}
	for n := 1; n <= 40; n++ {
		x, y, w := randF32(r, n, 3), randF32(r, n, 1), randF32(r, n, 1)
		x[r.IntN(n)] = 0 // a zero among the values: max and exp see ±0
		pos := []int32{3, 1000}
		inv := []float32{1, 0.3, 0.01, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 2e-7, 3e-7, 4e-7, 5e-7, 6e-7, 7e-7, 8e-7, 9e-7, 1e-8, 2e-8, 3e-8, 4e-8}
		for _, be := range others {
			run := func(be *backend, f func(be *backend, cpu *CPU) []float32) []float32 {
				cpu := newCPU(1, be)
				defer cpu.Close()
				return f(be, cpu)
			}
			both := func(what string, f func(be *backend, cpu *CPU) []float32) {
				t.Helper()
				same(fmt.Sprintf("%s n=%d", what, n), be, run(avx2, f), run(be, f))
			}
			both("RMSNorm", func(_ *backend, cpu *CPU) []float32 {
				out := make([]float32, n)
				cpu.RMSNorm(out, x, w, n, 1e-5)
				return out
			})
			both("Dot", func(be *backend, _ *CPU) []float32 { return []float32{be.dot(x, y)} })
			both("Add", func(be *backend, _ *CPU) []float32 {
				d := slices.Clone(x)
				be.add(d, y)
				return d
			})
			both("SiLUMul", func(be *backend, _ *CPU) []float32 {
				d := slices.Clone(x)
				be.siluMul(d, y)
				return d
			})
			both("Softmax", func(be *backend, _ *CPU) []float32 {
				d := slices.Clone(x)
				be.softmax(d)
				return d
			})
			both("Argmax", func(be *backend, _ *CPU) []float32 { return []float32{float32(be.argmax(x))} })
			if n%2 == 0 && n/2 <= len(inv) {
				for _, neox := range []bool{false, true} {
					both(fmt.Sprintf("RoPE neox=%v", neox), func(_ *backend, cpu *CPU) []float32 {
						d := randF32(rand.New(rand.NewPCG(1, uint64(n))), 2*3*n, 1)
						cpu.RoPE(d, 2, 3, n, pos, inv[:n/2], neox)
						return d
					})
				}
			}
			if n <= 13 {
				// stories260K's heads, context n.
				const heads, kv, hd = 8, 4, 8
				q, k, v := randF32(r, 2*heads*hd, 1), randF32(r, (n+1)*kv*hd, 1), randF32(r, (n+1)*kv*hd, 1)
				both("Attention hd=8", func(_ *backend, cpu *CPU) []float32 {
					out := make([]float32, len(q))
					cpu.Attention(out, q, k, v, 2, n-1, heads, kv, hd, 0.35)
					return out
				})
			}
		}
	}
	// Argmax with a NaN: avx2 keeps its scalar fallback's answer.
	nan := randF32(r, 37, 1)
	nan[20] = float32(math.NaN())
	for _, be := range append(others, portable) {
		if got, want := avx2.argmax(nan), be.argmax(nan); got != want {
			t.Errorf("Argmax with a NaN: avx2 %d, %s %d", got, be.name, want)
		}
	}
	// Matmul rows that are not whole 8-column groups take avx2MatMulGo
	// (its tiles' tails); T=1 and T=5 (widened F16/BF16 rows).
	for _, dt := range []DType{F32, F16, BF16} {
		for _, cols := range []int{3, 12, 17, 29, 172} {
			m := benchMatrix(dt, 9, cols)
			for _, T := range []int{1, 5} {
				x := randF32(r, T*cols, 1)
				for _, be := range others {
					f := func(_ *backend, cpu *CPU) []float32 {
						out := make([]float32, T*9)
						cpu.MatMul(out, x, T, m)
						return out
					}
					// The assembly matmul sums in 8 lanes; avx2MatMulGo
					// (cols%8 != 0) follows the 16-lane order.
					if cols%8 != 0 {
						a, b := newCPU(1, avx2), newCPU(1, be)
						ga, gb := f(avx2, a), f(be, b)
						a.Close()
						b.Close()
						same(fmt.Sprintf("MatMul %v cols=%d T=%d", dt, cols, T), be, ga, gb)
					}
				}
			}
		}
	}
}

// BenchmarkAVX2Kernels runs the avx2 backend's archsimd kernels on the
// shapes the native engine gives them (stories260K: 8 heads, 4 kv heads,
// head dim 8; Qwen2.5-0.5B: 14, 2, 64), whatever backend this CPU would
// pick: with AVX-512 present the package-level benchmarks measure avx512.
//
//	GOEXPERIMENT=simd go test -run '^$' -bench AVX2Kernels ./kernels/
func BenchmarkAVX2Kernels(b *testing.B) {
	if !slices.Contains(simdBackends, avx2) {
		b.Skipf("this CPU lacks %v", missingFeatures(avx2))
	}
	cpu := newCPU(1, avx2)
	defer cpu.Close()
	r := rand.New(rand.NewPCG(20, 21))
	for _, tc := range []struct{ heads, kv, hd, nTok, start int }{{8, 4, 8, 1, 169}, {8, 4, 8, 16, 140}, {14, 2, 64, 1, 511}} {
		b.Run(fmt.Sprintf("Attention/hd=%d/nTok=%d/start=%d", tc.hd, tc.nTok, tc.start), func(b *testing.B) {
			n := tc.start + tc.nTok
			q := randF32(r, tc.nTok*tc.heads*tc.hd, 1)
			k, v := randF32(r, n*tc.kv*tc.hd, 1), randF32(r, n*tc.kv*tc.hd, 1)
			out := make([]float32, len(q))
			for range b.N {
				cpu.Attention(out, q, k, v, tc.nTok, tc.start, tc.heads, tc.kv, tc.hd, 0.35)
			}
		})
	}
	for _, n := range []int{64, 172, 896} {
		x, y := randF32(r, n, 1), randF32(r, n, 1)
		out := make([]float32, n)
		b.Run(fmt.Sprintf("RMSNorm/n=%d", n), func(b *testing.B) {
			for range b.N {
				cpu.RMSNorm(out, x, y, n, 1e-5)
			}
		})
		b.Run(fmt.Sprintf("Dot/n=%d", n), func(b *testing.B) {
			for range b.N {
				avx2.dot(x, y)
			}
		})
		b.Run(fmt.Sprintf("Add/n=%d", n), func(b *testing.B) {
			for range b.N {
				avx2.add(out, y)
			}
		})
		b.Run(fmt.Sprintf("SiLUMul/n=%d", n), func(b *testing.B) {
			for range b.N {
				copy(out, x)
				avx2.siluMul(out, y)
			}
		})
	}
	for _, n := range []int{171, 512, 32000} {
		x := randF32(r, n, 3)
		out := make([]float32, n)
		b.Run(fmt.Sprintf("Softmax/n=%d", n), func(b *testing.B) {
			for range b.N {
				copy(out, x)
				avx2.softmax(out)
			}
		})
		b.Run(fmt.Sprintf("Argmax/n=%d", n), func(b *testing.B) {
			for range b.N {
				avx2.argmax(x)
			}
		})
	}
	for _, sh := range [][3]int{{64, 64, 1}, {172, 64, 1}, {64, 172, 1}, {100, 250, 8}} {
		rows, cols, T := sh[0], sh[1], sh[2]
		m := benchMatrix(F32, rows, cols)
		x := randF32(r, T*cols, 1)
		out := make([]float32, T*rows)
		b.Run(fmt.Sprintf("MatMul/F32/%dx%d/T=%d", rows, cols, T), func(b *testing.B) {
			for range b.N {
				cpu.MatMul(out, x, T, m)
			}
		})
	}
}
