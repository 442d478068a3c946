package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// scatter stores contiguous rows [n][nKV][hd] into a pool of nBlocks
// blocks [bs][nKV][hd] through a shuffled block table, returning the pool
// and table.
func scatter(r *rand.Rand, k, v []float32, n, nKV, hd, bs, nBlocks int) (kp, vp []float32, table []int32) {
	stride := nKV * hd
	perm := r.Perm(nBlocks)
	need := (n + bs - 1) / bs
	for i := range need {
		table = append(table, int32(perm[i]))
	}
	kp, vp = randF32(r, nBlocks*bs*stride, 9), randF32(r, nBlocks*bs*stride, 9) // garbage elsewhere
	for p := range n {
		for g := range nKV {
			dst := ((int(table[p/bs])*bs+p%bs)*nKV + g) * hd
			src := (p*nKV + g) * hd
			copy(kp[dst:dst+hd], k[src:src+hd])
			copy(vp[dst:dst+hd], v[src:src+hd])
		}
	}
	return kp, vp, table
}

// TestPagedAttentionEqualsContiguous: paged attention over a shuffled block
// table is bit-identical to Attention over the same rows stored
// contiguously, on every backend, for block sizes that do and do not divide
// the kernel's position blocking, and prefilled in one call, in chunks or
// token by token. -short (CI's emulated runs) keeps one block size below
// the blocking and one above, in one call and token by token.
func TestPagedAttentionEqualsContiguous(t *testing.T) {
	const N = 150
	r := rand.New(rand.NewPCG(50, 51))
	blockSizes, chunks := []int{16, 32, 128, 4, 64}, []int{N, 17, 1}
	if testing.Short() {
		blockSizes, chunks = []int{128, 4}, []int{N, 1}
	}
	for _, be := range backendsUnderTest(t) {
		for _, c := range attnCases {
			stride := c.kv * c.hd
			q := randF32(r, N*c.heads*c.hd, 2)
			k, v := randF32(r, N*stride, 2), randF32(r, N*stride, 1)
			qn := c.heads * c.hd
			want := make([]float32, len(q))
			cpu := newCPU(2, be)
			cpu.Attention(want, q, k, v, N, 0, c.heads, c.kv, c.hd, 0.2)
			for _, bs := range blockSizes {
				kp, vp, table := scatter(r, k, v, N, c.kv, c.hd, bs, (N+bs-1)/bs+3)
				for _, chunk := range chunks {
					got := make([]float32, len(q))
					for s := 0; s < N; s += chunk {
						m := min(chunk, N-s)
						cpu.PagedAttention(got[s*qn:(s+m)*qn], q[s*qn:(s+m)*qn], kp, vp, table, bs, m, s, c.heads, c.kv, c.hd, 0.2)
					}
					if i := bitsEqual(got, want); i >= 0 {
						t.Fatalf("%s %+v bs=%d chunk=%d: differs from contiguous Attention at token %d", be.name, c, bs, chunk, i/qn)
					}
				}
			}
			cpu.Close()
		}
	}
}

// BenchmarkPagedAttention is BenchmarkAttention's shapes over a paged cache
// of 16-position blocks in shuffled order.
func BenchmarkPagedAttention(b *testing.B) {
	const heads, kv, hd, bs = 14, 2, 64, 16
	cpu := NewCPU(0)
	defer cpu.Close()
	for _, tc := range []struct{ nTok, start int }{{1, 511}, {1, 4095}, {128, 384}} {
		for _, order := range []string{"shuffled", "inorder"} {
			b.Run(fmt.Sprintf("nTok=%d/start=%d/%s", tc.nTok, tc.start, order), func(b *testing.B) {
				r := rand.New(rand.NewPCG(4, 5))
				n := tc.start + tc.nTok
				q := randF32(r, tc.nTok*heads*hd, 1)
				k, v := randF32(r, n*kv*hd, 1), randF32(r, n*kv*hd, 1)
				kp, vp, table := scatter(r, k, v, n, kv, hd, bs, (n+bs-1)/bs+8)
				if order == "inorder" {
					kp, vp = append([]float32(nil), k...), append([]float32(nil), v...)
					kp = append(kp, make([]float32, ((n+bs-1)/bs*bs-n)*kv*hd)...)
					vp = append(vp, make([]float32, ((n+bs-1)/bs*bs-n)*kv*hd)...)
					for i := range table {
						table[i] = int32(i)
					}
				}
				out := make([]float32, len(q))
				cpu.PagedAttention(out, q, kp, vp, table, bs, tc.nTok, tc.start, heads, kv, hd, 0.125)
				b.ResetTimer()
				for range b.N {
					cpu.PagedAttention(out, q, kp, vp, table, bs, tc.nTok, tc.start, heads, kv, hd, 0.125)
				}
			})
		}
	}
}

// BenchmarkPagedVsContiguous runs Attention and PagedAttention (shuffled
// 16-position blocks) on the same rows, alternating in short rounds, and
// reports each one's best round in µs per call: on a noisy machine the
// paired minimum is what compares the kernels.
func BenchmarkPagedVsContiguous(b *testing.B) {
	const heads, kv, hd = 14, 2, 64
	bs := 16
	if x, err := strconv.Atoi(os.Getenv("PAGED_BS")); err == nil {
		bs = x
	}
	cpu := NewCPU(0)
	defer cpu.Close()
	for _, tc := range []struct{ nTok, start int }{{1, 511}, {1, 4095}, {128, 384}} {
		b.Run(fmt.Sprintf("nTok=%d/start=%d", tc.nTok, tc.start), func(b *testing.B) {
			r := rand.New(rand.NewPCG(4, 5))
			n := tc.start + tc.nTok
			q := randF32(r, tc.nTok*heads*hd, 1)
			k, v := randF32(r, n*kv*hd, 1), randF32(r, n*kv*hd, 1)
			kp, vp, table := scatter(r, k, v, n, kv, hd, bs, (n+bs-1)/bs+8)
			if os.Getenv("PAGED_INORDER") != "" {
				kp, vp, table = scatterInOrder(k, v, n, kv, hd, bs)
			}
			out := make([]float32, len(q))
			round := max(1, 20_000_000/(n*tc.nTok*heads*hd))
			best := [2]float64{1e18, 1e18}
			for range b.N {
				for which := range 2 {
					start := time.Now()
					for range round {
						if which == 0 {
							cpu.Attention(out, q, k, v, tc.nTok, tc.start, heads, kv, hd, 0.125)
						} else {
							cpu.PagedAttention(out, q, kp, vp, table, bs, tc.nTok, tc.start, heads, kv, hd, 0.125)
						}
					}
					best[which] = min(best[which], float64(time.Since(start).Microseconds())/float64(round))
				}
			}
			b.ReportMetric(best[0], "contig-µs")
			b.ReportMetric(best[1], "paged-µs")
			b.ReportMetric(best[1]/best[0], "paged/contig")
		})
	}
}

// scatterInOrder is scatter with blocks in order: 0, 1, 2, ...
func scatterInOrder(k, v []float32, n, nKV, hd, bs int) (kp, vp []float32, table []int32) {
	nb := (n + bs - 1) / bs
	kp, vp = make([]float32, nb*bs*nKV*hd), make([]float32, nb*bs*nKV*hd)
	for b := range nb {
		table = append(table, int32(b))
	}
	for p := range n {
		for g := range nKV {
			dst, src := (p*nKV+g)*hd, (p*nKV+g)*hd
			copy(kp[dst:dst+hd], k[src:src+hd])
			copy(vp[dst:dst+hd], v[src:src+hd])
		}
	}
	return kp, vp, table
}

// BenchmarkPagedAttentionNarrow is stories260K's attention (8 heads of 8
// over 4 kv heads) on one thread: a decode token and a 5-token verify
// chunk after 170 positions, in 16-position blocks.
func BenchmarkPagedAttentionNarrow(b *testing.B) {
	const heads, kv, hd, bs = 8, 4, 8, 16
	cpu := NewCPU(1)
	defer cpu.Close()
	for _, nTok := range []int{1, 5} {
		b.Run(fmt.Sprintf("nTok=%d/start=170", nTok), func(b *testing.B) {
			r := rand.New(rand.NewPCG(4, 5))
			n := 170 + nTok
			q := randF32(r, nTok*heads*hd, 1)
			k, v := randF32(r, n*kv*hd, 1), randF32(r, n*kv*hd, 1)
			kp, vp, table := scatter(r, k, v, n, kv, hd, bs, (n+bs-1)/bs+8)
			out := make([]float32, len(q))
			b.ResetTimer()
			for range b.N {
				cpu.PagedAttention(out, q, kp, vp, table, bs, nTok, 170, heads, kv, hd, 0.125)
			}
		})
	}
}

// TestPagedAttentionWindow: sliding-window attention gives each query
// exactly (bit for bit) what PagedAttention gives it over only its window's
// rows, stored from position 0, on every backend, for windows shorter and
// longer than a block and windows that do and do not start on a group of
// four; prefilled in one call or token by token. With a soft cap or sinks
// each result is the float64 reference's (scores capped by c·tanh(s/c);
// each head's sink one more term of its softmax's sum) within float32
// rounding, and differs from the plain one.
func TestPagedAttentionWindow(t *testing.T) {
	const N, bs = 70, 16
	r := rand.New(rand.NewPCG(52, 53))
	for _, be := range backendsUnderTest(t) {
		cpu := newCPU(2, be)
		for _, c := range attnCases {
			stride, qn := c.kv*c.hd, c.heads*c.hd
			q := randF32(r, N*qn, 2)
			k, v := randF32(r, N*stride, 2), randF32(r, N*stride, 1)
			kp, vp, table := scatter(r, k, v, N, c.kv, c.hd, bs, (N+bs-1)/bs+2)
			for _, win := range []int{1, 5, 8, 23, 64, N + 5} {
				for _, chunk := range []int{N, 1} {
					got := make([]float32, len(q))
					for s := 0; s < N; s += chunk {
						m := min(chunk, N-s)
						cpu.PagedAttentionOpts(got[s*qn:(s+m)*qn], q[s*qn:(s+m)*qn], kp, vp, table, bs, m, s, c.heads, c.kv, c.hd, 0.2, AttnOpts{Window: win})
					}
					for p := range N {
						lo := max(0, p+1-win)
						wk, wv, wt := scatter(r, k[lo*stride:(p+1)*stride], v[lo*stride:(p+1)*stride], p+1-lo, c.kv, c.hd, bs, (p+1-lo+bs-1)/bs)
						want := make([]float32, qn)
						cpu.PagedAttention(want, q[p*qn:(p+1)*qn], wk, wv, wt, bs, 1, p-lo, c.heads, c.kv, c.hd, 0.2)
						if i := bitsEqual(got[p*qn:(p+1)*qn], want); i >= 0 {
							t.Fatalf("%s %+v window %d chunk %d: position %d differs from attention over its window at %d", be.name, c, win, chunk, p, i)
						}
					}
				}
			}
			// Soft caps and sinks: against the obvious computation in float64.
			sinks := randF32(r, c.heads, 3)
			for _, o := range []AttnOpts{{SoftCap: 0.3, Window: 40}, {Sinks: sinks}, {Sinks: sinks, Window: 5, SoftCap: 0.3}} {
				got, plain := make([]float32, len(q)), make([]float32, len(q))
				cpu.PagedAttentionOpts(got, q, kp, vp, table, bs, N, 0, c.heads, c.kv, c.hd, 0.2, o)
				cpu.PagedAttentionOpts(plain, q, kp, vp, table, bs, N, 0, c.heads, c.kv, c.hd, 0.2, AttnOpts{Window: o.Window})
				if bitsEqual(got, plain) < 0 {
					t.Fatalf("%s %+v: %+v changed nothing", be.name, c, o)
				}
				checkAttnRef(t, be.name, c, got, q, k, v, N, 0.2, o)
			}
		}
		cpu.Close()
	}
}

// checkAttnRef checks out, the attention of n tokens from position 0,
// against the obvious computation in float64 with o's window, soft cap
// and sinks, within 1e-5.
func checkAttnRef(t *testing.T, name string, c attnCase, out, q, k, v []float32, n int, scale float64, o AttnOpts) {
	t.Helper()
	group := c.heads / c.kv
	for p := range n {
		lo := 0
		if o.Window > 0 {
			lo = max(0, p+1-o.Window)
		}
		for h := range c.heads {
			g := h / group
			qh := q[(p*c.heads+h)*c.hd:][:c.hd]
			w := make([]float64, p+1-lo)
			var sum float64
			for j := range w {
				var d float64
				for x := range c.hd {
					d += float64(qh[x]) * float64(k[((lo+j)*c.kv+g)*c.hd+x])
				}
				d *= scale
				if cp := float64(o.SoftCap); cp > 0 {
					d = cp * math.Tanh(d/cp)
				}
				w[j] = math.Exp(d)
				sum += w[j]
			}
			if o.Sinks != nil {
				sum += math.Exp(float64(o.Sinks[h]))
			}
			for x := range c.hd {
				var r float64
				for j := range w {
					r += w[j] * float64(v[((lo+j)*c.kv+g)*c.hd+x])
				}
				if r /= sum; math.Abs(float64(out[(p*c.heads+h)*c.hd+x])-r) > 1e-5 {
					t.Fatalf("%s %+v %+v: position %d head %d dim %d = %g, want %g", name, c, o, p, h, x, out[(p*c.heads+h)*c.hd+x], r)
				}
			}
		}
	}
}
