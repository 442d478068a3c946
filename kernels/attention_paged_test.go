package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// scatter stores contiguous rows [n][stride] into a pool of nBlocks blocks
// of bs rows through a shuffled block table, returning the pool and table.
func scatter(r *rand.Rand, k, v []float32, n, stride, bs, nBlocks int) (kp, vp []float32, table []int32) {
	perm := r.Perm(nBlocks)
	need := (n + bs - 1) / bs
	for i := range need {
		table = append(table, int32(perm[i]))
	}
	kp, vp = randF32(r, nBlocks*bs*stride, 9), randF32(r, nBlocks*bs*stride, 9) // garbage elsewhere
	for p := range n {
		dst := (int(table[p/bs])*bs + p%bs) * stride
		copy(kp[dst:dst+stride], k[p*stride:(p+1)*stride])
		copy(vp[dst:dst+stride], v[p*stride:(p+1)*stride])
	}
	return kp, vp, table
}

// TestPagedAttentionEqualsContiguous: paged attention over a shuffled block
// table is bit-identical to Attention over the same rows stored
// contiguously, on every backend, for block sizes that do and do not divide
// the kernel's position blocking, and prefilled in one call, in chunks or
// token by token.
func TestPagedAttentionEqualsContiguous(t *testing.T) {
	r := rand.New(rand.NewPCG(50, 51))
	for _, be := range backendsUnderTest() {
		for _, c := range attnCases {
			const N = 150
			stride := c.kv * c.hd
			q := randF32(r, N*c.heads*c.hd, 2)
			k, v := randF32(r, N*stride, 2), randF32(r, N*stride, 1)
			qn := c.heads * c.hd
			want := make([]float32, len(q))
			cpu := newCPU(2, be)
			cpu.Attention(want, q, k, v, N, 0, c.heads, c.kv, c.hd, 0.2)
			for _, bs := range []int{16, 32, 128, 4} {
				kp, vp, table := scatter(r, k, v, N, stride, bs, (N+bs-1)/bs+3)
				for _, chunk := range []int{N, 17, 1} {
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
		b.Run(fmt.Sprintf("nTok=%d/start=%d", tc.nTok, tc.start), func(b *testing.B) {
			r := rand.New(rand.NewPCG(4, 5))
			n := tc.start + tc.nTok
			q := randF32(r, tc.nTok*heads*hd, 1)
			k, v := randF32(r, n*kv*hd, 1), randF32(r, n*kv*hd, 1)
			kp, vp, table := scatter(r, k, v, n, kv*hd, bs, (n+bs-1)/bs+8)
			out := make([]float32, len(q))
			cpu.PagedAttention(out, q, kp, vp, table, bs, tc.nTok, tc.start, heads, kv, hd, 0.125)
			b.ResetTimer()
			for range b.N {
				cpu.PagedAttention(out, q, kp, vp, table, bs, tc.nTok, tc.start, heads, kv, hd, 0.125)
			}
		})
	}
}
