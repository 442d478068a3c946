package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// withBackends runs f once per backend with a 2-thread CPU on it.
func withBackends(t *testing.T, f func(t *testing.T, be *backend, cpu *CPU)) {
	for _, be := range backendsUnderTest(t) {
		t.Run(be.name, func(t *testing.T) {
			cpu := newCPU(2, be)
			defer cpu.Close()
			f(t, be, cpu)
		})
	}
}

// TestRMSNorm: tolerance 1e-5 relative per element (float32 sum of squares
// over ≤ 1000 values, one rsqrt, two products).
func TestRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 21))
	withBackends(t, func(t *testing.T, _ *backend, cpu *CPU) {
		for _, dim := range []int{1, 7, 16, 64, 100, 896} {
			rows := 5
			x, w := randF32(r, rows*dim, 2), randF32(r, dim, 1)
			out := make([]float32, len(x))
			cpu.RMSNorm(out, x, w, dim, 1e-6)
			inPlace := append([]float32(nil), x...)
			cpu.RMSNorm(inPlace, inPlace, w, dim, 1e-6)
			if i := bitsEqual(inPlace, out); i >= 0 {
				t.Fatalf("dim %d: in-place result differs at %d", dim, i)
			}
			for row := range rows {
				xr := x[row*dim : (row+1)*dim]
				var ss float64
				for _, v := range xr {
					ss += float64(v) * float64(v)
				}
				scale := 1 / math.Sqrt(ss/float64(dim)+1e-6)
				for i, v := range xr {
					ref := float64(v) * scale * float64(w[i])
					if got := out[row*dim+i]; math.Abs(float64(got)-ref) > 1e-5*math.Abs(ref)+1e-30 {
						t.Fatalf("dim %d row %d [%d]: %g, want %g", dim, row, i, got, ref)
					}
				}
			}
		}
	})
}

// TestRMSNormLarge checks the parallel split (rows spread over threads).
func TestRMSNormLarge(t *testing.T) {
	r := rand.New(rand.NewPCG(22, 23))
	x, w := randF32(r, 300*128, 1), randF32(r, 128, 1)
	one, two := NewCPU(1), NewCPU(2)
	defer one.Close()
	defer two.Close()
	a, b := make([]float32, len(x)), make([]float32, len(x))
	one.RMSNorm(a, x, w, 128, 1e-5)
	two.RMSNorm(b, x, w, 128, 1e-5)
	if i := bitsEqual(a, b); i >= 0 {
		t.Fatalf("1 vs 2 threads differ at %d", i)
	}
}

// ropeRef rotates in float64 from the float32 angle.
func ropeRef(x []float32, T, heads, hd int, pos []int32, invFreq []float32, neox bool) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	n := len(invFreq)
	for t := range T {
		for h := range heads {
			v := out[(t*heads+h)*hd:][:hd]
			for i, f := range invFreq {
				s, c := math.Sincos(float64(float32(pos[t]) * f))
				a, b := i*2, i*2+1
				if neox {
					a, b = i, i+n
				}
				x0, x1 := v[a], v[b]
				v[a], v[b] = x0*c-x1*s, x0*s+x1*c
			}
		}
	}
	return out
}

// TestRoPE: tolerance 1e-6·(|x0|+|x1|) per rotated value (cos/sin rounded to
// float32, two products and a sum); dimensions past 2·len(invFreq) untouched.
func TestRoPE(t *testing.T) {
	r := rand.New(rand.NewPCG(24, 25))
	withBackends(t, func(t *testing.T, _ *backend, cpu *CPU) {
		for _, tc := range []struct{ T, heads, hd, pairs int }{
			{1, 2, 64, 32}, {3, 4, 128, 64}, {5, 3, 64, 16}, {2, 2, 96, 48}, {4, 1, 10, 3}, {300, 2, 64, 32},
		} {
			for _, neox := range []bool{false, true} {
				invFreq := make([]float32, tc.pairs)
				for i := range invFreq {
					invFreq[i] = float32(math.Pow(10000, -float64(2*i)/float64(2*tc.pairs)))
				}
				pos := make([]int32, tc.T)
				for i := range pos {
					pos[i] = int32(r.IntN(40000))
				}
				x := randF32(r, tc.T*tc.heads*tc.hd, 1)
				ref := ropeRef(x, tc.T, tc.heads, tc.hd, pos, invFreq, neox)
				got := append([]float32(nil), x...)
				cpu.RoPE(got, tc.T, tc.heads, tc.hd, pos, invFreq, neox)
				for i := range got {
					d := i % tc.hd
					if d >= 2*tc.pairs {
						if got[i] != x[i] {
							t.Fatalf("%+v neox=%v: unrotated dim %d changed", tc, neox, d)
						}
						continue
					}
					mate := i - d + (d+tc.pairs)%(2*tc.pairs)
					if !neox {
						mate = i ^ 1
					}
					tol := 1e-6 * (math.Abs(float64(x[i])) + math.Abs(float64(x[mate])))
					if math.Abs(float64(got[i])-ref[i]) > tol {
						t.Fatalf("%+v neox=%v: x[%d] = %g, want %g", tc, neox, i, got[i], ref[i])
					}
				}
			}
		}
	})
}

// TestRoPERowsReused: a CPU reuses the cos/sin rows of its last RoPE call
// when positions, frequencies and layout repeat (q and k of every layer),
// and only then: each call equals a fresh CPU's bit for bit, whatever came
// before, including frequencies changed in place and a different layout.
func TestRoPERowsReused(t *testing.T) {
	r := rand.New(rand.NewPCG(26, 27))
	const heads, hd, pairs = 2, 16, 8
	invFreq := make([]float32, pairs)
	for i := range invFreq {
		invFreq[i] = float32(math.Pow(10000, -float64(2*i)/float64(2*pairs)))
	}
	posA, posB := []int32{3, 9, 40}, []int32{3, 9, 41}
	cpu := NewCPU(2)
	defer cpu.Close()
	check := func(what string, pos []int32, neox bool) {
		t.Helper()
		x := randF32(r, len(pos)*heads*hd, 1)
		want := append([]float32(nil), x...)
		fresh := NewCPU(1)
		fresh.RoPE(want, len(pos), heads, hd, pos, invFreq, neox)
		fresh.Close()
		cpu.RoPE(x, len(pos), heads, hd, pos, invFreq, neox)
		if i := bitsEqual(x, want); i >= 0 {
			t.Fatalf("%s: differs from a fresh CPU at %d: %g vs %g", what, i, x[i], want[i])
		}
	}
	check("first call", posA, false)
	check("same positions again (reused rows)", posA, false)
	check("one position changed", posB, false)
	check("neox layout", posB, true)
	invFreq[3] *= 1.5 // changed in place, same slice
	check("frequencies changed in place", posB, true)
	check("fewer tokens", posB[:2], true)
}

// TestSiLUMul: tolerance 4e-7 relative (float32 exp within ~2 ulp, a
// division and a product).
func TestSiLUMul(t *testing.T) {
	r := rand.New(rand.NewPCG(26, 27))
	withBackends(t, func(t *testing.T, _ *backend, cpu *CPU) {
		for _, n := range []int{1, 15, 16, 100, 70000} {
			g, u := randF32(r, n, 4), randF32(r, n, 1)
			if n > 8 {
				g[0], g[1], g[2], g[3], g[4] = 0, -100, 100, -87.5, 88.5
			}
			got := append([]float32(nil), g...)
			cpu.SiLUMul(got, u)
			for i := range g {
				ref := float64(g[i]) / (1 + math.Exp(-float64(g[i]))) * float64(u[i])
				if math.Abs(float64(got[i])-ref) > 4e-7*math.Abs(ref)+1e-35 {
					t.Fatalf("n=%d: silu(%g)·%g = %g, want %g", n, g[i], u[i], got[i], ref)
				}
			}
		}
	})
}

// TestSoftmax: tolerance (1e-6 + 1.5e-7·|x-max| + n·2^-24) relative per
// probability: x-max is rounded to float32 before the exponential, and the
// float32 sum of n terms carries up to n·2^-24 relative error.
func TestSoftmax(t *testing.T) {
	r := rand.New(rand.NewPCG(28, 29))
	for _, be := range backendsUnderTest(t) {
		for _, n := range []int{1, 5, 16, 33, 1000} {
			for _, shift := range []float32{0, 1000, -1000} {
				x := randF32(r, n, 5)
				for i := range x {
					x[i] += shift
				}
				got := append([]float32(nil), x...)
				be.softmax(got)
				m := math.Inf(-1)
				for _, v := range x {
					m = max(m, float64(v))
				}
				var sum float64
				for _, v := range x {
					sum += math.Exp(float64(v) - m)
				}
				for i, v := range x {
					ref := math.Exp(float64(v)-m) / sum
					if math.Abs(float64(got[i])-ref) > (1e-6+1.5e-7*math.Abs(float64(v)-m)+float64(n)*0x1p-24)*ref+1e-38 {
						t.Fatalf("%s n=%d shift=%g: p[%d] = %g, want %g", be.name, n, shift, i, got[i], ref)
					}
				}
			}
		}
		be.softmax(nil)
	}
	x := []float32{3, 3, 3}
	Softmax(x)
	if x[0] != x[1] || math.Abs(float64(x[0])-1.0/3) > 1e-7 {
		t.Errorf("Softmax(3,3,3) = %v", x)
	}
}

func TestArgmax(t *testing.T) {
	r := rand.New(rand.NewPCG(30, 31))
	for _, be := range backendsUnderTest(t) {
		for _, n := range []int{1, 2, 15, 16, 17, 100, 151936} {
			x := randF32(r, n, 1)
			for i := range x {
				x[i] -= 10 // all negative
			}
			want := r.IntN(n)
			x[want] = 5
			if n > want+3 {
				x[want+3] = 5 // a later duplicate: the first wins
			}
			if got := be.argmax(x); got != want {
				t.Fatalf("%s n=%d: argmax = %d, want %d", be.name, n, got, want)
			}
		}
	}
	if Argmax(nil) != -1 {
		t.Errorf("Argmax(nil) = %d", Argmax(nil))
	}
}

func TestDotAndAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(32, 33))
	for _, be := range backendsUnderTest(t) {
		for _, n := range []int{0, 1, 15, 16, 17, 64, 1000} {
			a, b := randF32(r, n, 1), randF32(r, n, 1)
			var ref float64
			for i := range a {
				ref += float64(a[i]) * float64(b[i])
			}
			got := be.dot(a, b)
			if tol := float64(n+32) * 0x1p-24 * sumAbsProd(a, b); math.Abs(float64(got)-ref) > tol {
				t.Fatalf("%s n=%d: dot = %g, want %g", be.name, n, got, ref)
			}
			sum := append([]float32(nil), a...)
			be.add(sum, b)
			for i := range sum {
				if sum[i] != a[i]+b[i] {
					t.Fatalf("%s n=%d: add[%d] = %g, want %g", be.name, n, i, sum[i], a[i]+b[i])
				}
			}
		}
	}
}

type attnCase struct{ heads, kv, hd int }

var attnCases = []attnCase{{4, 2, 64}, {14, 2, 64}, {2, 1, 24}, {3, 3, 40}, {8, 8, 128}, {6, 2, 136},
	// Heads narrower than a vector: stories260K's shape (8 wide), and 12, 20.
	{8, 4, 8}, {3, 1, 12}, {4, 2, 20}}

// attnRef is the float64 reference: softmax(scale·q·k) over positions 0..start+i.
func attnRef(q, k, v []float32, nTok, start int, c attnCase, scale float64) []float64 {
	out := make([]float64, nTok*c.heads*c.hd)
	for i := range nTok {
		n := start + i + 1
		for h := range c.heads {
			g := h / (c.heads / c.kv)
			qv := q[(i*c.heads+h)*c.hd:][:c.hd]
			s := make([]float64, n)
			m := math.Inf(-1)
			for p := range n {
				kv := k[(p*c.kv+g)*c.hd:][:c.hd]
				for d := range qv {
					s[p] += float64(qv[d]) * float64(kv[d])
				}
				s[p] *= scale
				m = max(m, s[p])
			}
			var sum float64
			for p := range s {
				s[p] = math.Exp(s[p] - m)
				sum += s[p]
			}
			o := out[(i*c.heads+h)*c.hd:][:c.hd]
			for p := range n {
				vv := v[(p*c.kv+g)*c.hd:][:c.hd]
				for d := range o {
					o[d] += s[p] / sum * float64(vv[d])
				}
			}
		}
	}
	return out
}

// TestAttention: against float64; tolerance 2e-5·max|v| per output (a convex
// combination of v rows with float32 weights).
func TestAttention(t *testing.T) {
	r := rand.New(rand.NewPCG(34, 35))
	withBackends(t, func(t *testing.T, _ *backend, cpu *CPU) {
		for _, c := range attnCases {
			for _, tc := range []struct{ nTok, start int }{{1, 0}, {5, 0}, {1, 37}, {9, 20}} {
				n := tc.start + tc.nTok
				q := randF32(r, tc.nTok*c.heads*c.hd, 1)
				k, v := randF32(r, n*c.kv*c.hd, 1), randF32(r, n*c.kv*c.hd, 1)
				scale := float32(1 / math.Sqrt(float64(c.hd)))
				out := make([]float32, len(q))
				cpu.Attention(out, q, k, v, tc.nTok, tc.start, c.heads, c.kv, c.hd, scale)
				ref := attnRef(q, k, v, tc.nTok, tc.start, c, float64(scale))
				var vmax float64
				for _, x := range v {
					vmax = max(vmax, math.Abs(float64(x)))
				}
				for i := range out {
					if math.Abs(float64(out[i])-ref[i]) > 2e-5*vmax {
						t.Fatalf("%+v nTok=%d start=%d: out[%d] = %g, want %g", c, tc.nTok, tc.start, i, out[i], ref[i])
					}
				}
			}
		}
	})
}

// TestAttentionBatchInvariance: a sequence prefilled in one call, in chunks,
// or token by token gives bit-identical outputs, on 1 or 2 threads.
func TestAttentionBatchInvariance(t *testing.T) {
	r := rand.New(rand.NewPCG(36, 37))
	for _, be := range backendsUnderTest(t) {
		for _, c := range attnCases {
			const N = 45
			q := randF32(r, N*c.heads*c.hd, 2)
			k, v := randF32(r, N*c.kv*c.hd, 2), randF32(r, N*c.kv*c.hd, 1)
			qn := c.heads * c.hd
			whole := make([]float32, len(q))
			two := newCPU(2, be)
			two.Attention(whole, q, k, v, N, 0, c.heads, c.kv, c.hd, 0.2)
			two.Close()
			for _, threads := range []int{1, 2} {
				cpu := newCPU(threads, be)
				for _, chunk := range []int{1, 4, 13, N} {
					got := make([]float32, len(q))
					for s := 0; s < N; s += chunk {
						m := min(chunk, N-s)
						// Only the rows the call may read: positions 0..s+m-1.
						cpu.Attention(got[s*qn:(s+m)*qn], q[s*qn:(s+m)*qn], k[:(s+m)*c.kv*c.hd], v[:(s+m)*c.kv*c.hd], m, s, c.heads, c.kv, c.hd, 0.2)
					}
					if i := bitsEqual(got, whole); i >= 0 {
						t.Fatalf("%s %+v threads=%d chunk=%d: differs from one call at token %d", be.name, c, threads, chunk, i/qn)
					}
				}
				cpu.Close()
			}
		}
	}
}

// TestSIMDMatchesPortableOps compares the SIMD backends with the portable
// one: RoPE and Add are bit-identical (same float32 operations); the
// reductions agree within tolerance; all SIMD backends agree bit for bit.
func TestSIMDMatchesPortableOps(t *testing.T) {
	skipWithoutSIMD(t)
	r := rand.New(rand.NewPCG(38, 39))
	type result struct {
		name string
		out  []float32
	}
	run := func(f func(be *backend, cpu *CPU) []float32) []result {
		var res []result
		for _, be := range backendsUnderTest(t) {
			cpu := newCPU(2, be)
			res = append(res, result{be.name, f(be, cpu)})
			cpu.Close()
		}
		return res
	}
	check := func(what string, res []result, bitExactWithPortable bool, tol func(i int) float64) {
		t.Helper()
		for _, x := range res[1:] {
			if i := bitsEqual(x.out, res[1].out); i >= 0 {
				t.Errorf("%s: %s and %s differ at %d: %g vs %g", what, x.name, res[1].name, i, x.out[i], res[1].out[i])
			}
			for i := range x.out {
				d := math.Abs(float64(x.out[i] - res[0].out[i]))
				if bitExactWithPortable && math.Float32bits(x.out[i]) != math.Float32bits(res[0].out[i]) || d > tol(i) {
					t.Errorf("%s: %s differs from portable at %d: %g vs %g", what, x.name, i, x.out[i], res[0].out[i])
					break
				}
			}
		}
	}
	x, w := randF32(r, 3*200, 2), randF32(r, 200, 1)
	check("RMSNorm", run(func(_ *backend, cpu *CPU) []float32 {
		out := make([]float32, len(x))
		cpu.RMSNorm(out, x, w, 200, 1e-6)
		return out
	}), false, func(i int) float64 { return 2e-6 * math.Abs(float64(x[i]*w[i%200])) })

	invFreq := []float32{1, 0.5, 0.1, 0.01, 0.001, 1e-4, 1e-5, 1e-6, 2e-6, 3e-6, 4e-6, 5e-6, 6e-6, 7e-6, 8e-6, 9e-6, 1e-7, 2e-7}
	pos := []int32{0, 7, 1234, 99999}
	for _, neox := range []bool{false, true} {
		xr := randF32(r, 4*3*40, 1)
		check(fmt.Sprintf("RoPE neox=%v", neox), run(func(_ *backend, cpu *CPU) []float32 {
			y := append([]float32(nil), xr...)
			cpu.RoPE(y, 4, 3, 40, pos, invFreq, neox)
			return y
		}), true, func(int) float64 { return 0 })
	}

	g, u := randF32(r, 1001, 3), randF32(r, 1001, 1)
	check("SiLUMul", run(func(_ *backend, cpu *CPU) []float32 {
		y := append([]float32(nil), g...)
		cpu.SiLUMul(y, u)
		return y
	}), false, func(i int) float64 { return 4e-7 * math.Abs(float64(g[i]*u[i])) })

	sm := randF32(r, 777, 4)
	check("Softmax", run(func(be *backend, _ *CPU) []float32 {
		y := append([]float32(nil), sm...)
		be.softmax(y)
		return y
	}), false, func(int) float64 { return 1e-6 })

	a, b := randF32(r, 333, 1), randF32(r, 333, 1)
	check("Add", run(func(be *backend, _ *CPU) []float32 {
		y := append([]float32(nil), a...)
		be.add(y, b)
		return y
	}), true, func(int) float64 { return 0 })
	check("Dot", run(func(be *backend, _ *CPU) []float32 { return []float32{be.dot(a, b)} }),
		false, func(int) float64 { return 400 * 0x1p-24 * sumAbsProd(a, b) })

	for _, c := range attnCases {
		q := randF32(r, 6*c.heads*c.hd, 1)
		k, v := randF32(r, 30*c.kv*c.hd, 1), randF32(r, 30*c.kv*c.hd, 1)
		check(fmt.Sprintf("Attention %+v", c), run(func(_ *backend, cpu *CPU) []float32 {
			out := make([]float32, len(q))
			cpu.Attention(out, q, k, v, 6, 24, c.heads, c.kv, c.hd, 0.1)
			return out
		}), false, func(int) float64 { return 1e-5 })
	}
}
