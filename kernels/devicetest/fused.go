package devicetest

import (
	"math/rand/v2"
	"testing"

	"github.com/batchd/batchd/kernels"
)

// fusedShape is the layer the fused checks run: GQA, pools of 4-position
// blocks.
const (
	fHeads, fKV, fHD, fBS, fBlocks = 6, 2, 16, 4, 16
	fQDim, fKVDim                  = fHeads * fHD, fKV * fHD
	fEps                           = 1e-6
	fScale                         = 0.25
)

// fusedPass is one forward pass's segments.
type fusedPass struct {
	segs []kernels.Segment
	seq  []int // the sequence of each segment
}

// fusedPasses: sequence 1's 2-token prompt chunk before sequence 0's
// 6-token one in the first pass, then four passes that decode a token of
// each (the same shape each time: a PassDevice may replay them).
func fusedPasses(tables [][]int32) []fusedPass {
	ps := []fusedPass{{
		segs: []kernels.Segment{{First: 0, N: 2, Start: 0, Blocks: tables[1]}, {First: 2, N: 6, Start: 0, Blocks: tables[0]}},
		seq:  []int{1, 0},
	}}
	for i := range 4 {
		ps = append(ps, fusedPass{
			segs: []kernels.Segment{{First: 0, N: 1, Start: 6 + i, Blocks: tables[0]}, {First: 1, N: 1, Start: 2 + i, Blocks: tables[1]}},
			seq:  []int{0, 1},
		})
	}
	return ps
}

// fusedBufs are a pass's device buffers, reused by passes of as many
// tokens (as an engine reuses its scratch).
type fusedBufs struct {
	T                                  int
	q, k, v, rawK, rawV, att, res, out kernels.Buf
}

// testFused runs fusedPasses through SetSegments, WriteKVSegments, QKVPost
// (with biases and qk-norm, and without), PagedAttentionSegments and
// AddRMSNorm, each pass inside BeginPass … Download on a PassDevice, and
// checks every step against the reference on the device's own inputs to
// it: the pool's rows exactly.
func testFused(t *testing.T, d *dev) {
	fd := d.d.(kernels.FusedDevice)
	for _, variant := range []struct {
		name         string
		biased, neox bool
	}{{"bias, qk-norm, neox", true, true}, {"plain", false, false}} {
		t.Run(variant.name, func(t *testing.T) {
			d := &dev{t: t, d: d.d}
			r := rand.New(rand.NewPCG(9, 9))
			perm := shuffledTable(r, 6, fBlocks)
			tables := [][]int32{perm[:3], perm[3:]}
			pool, raw := d.allocKV(fBlocks, fBS, fKVDim), d.allocKV(fBlocks, fBS, fKVDim)
			var bq, bk, bv, qn, kn []float32
			var bqB, bkB, bvB, qnB, knB kernels.Buf // empty: absent
			if variant.biased {
				bq, bk, bv = randVec(r, fQDim, 1), randVec(r, fKVDim, 1), randVec(r, fKVDim, 1)
				qn, kn = randVec(r, fHD, 1), randVec(r, fHD, 1)
				bqB, bkB, bvB, qnB, knB = d.buf(bq), d.buf(bk), d.buf(bv), d.buf(qn), d.buf(kn)
			}
			normW := randVec(r, fQDim, 1)
			normB := d.buf(normW)
			inv := invFreqs(fHD/2, fHD)
			seqK, seqV := make([][]float32, 2), make([][]float32, 2)       // the pool's rows, as the device wrote them
			rawSeqK, rawSeqV := make([][]float32, 2), make([][]float32, 2) // WriteKVSegments's
			var b fusedBufs
			for pi, p := range fusedPasses(tables) {
				T := 0
				for _, sg := range p.segs {
					T = max(T, sg.First+sg.N)
				}
				pos := make([]int32, T)
				for _, sg := range p.segs {
					for i := range sg.N {
						pos[sg.First+i] = int32(sg.Start + i)
					}
				}
				if b.T != T {
					b = fusedBufs{T: T, q: d.zeros(T * fQDim), k: d.zeros(T * fKVDim), v: d.zeros(T * fKVDim),
						rawK: d.zeros(T * fKVDim), rawV: d.zeros(T * fKVDim), att: d.zeros(T * fQDim),
						res: d.zeros(T * fQDim), out: d.zeros(T * fQDim)}
				}
				q, k, v := randVec(r, T*fQDim, 1), randVec(r, T*fKVDim, 1), randVec(r, T*fKVDim, 1)
				rk, rv, res := randVec(r, T*fKVDim, 1), randVec(r, T*fKVDim, 1), randVec(r, T*fQDim, 1)
				for _, x := range []struct {
					b kernels.Buf
					v []float32
				}{{b.q, q}, {b.k, k}, {b.v, v}, {b.rawK, rk}, {b.rawV, rv}, {b.res, res}} {
					d.d.Upload(x.b, x.v)
				}

				pd, isPass := d.d.(kernels.PassDevice)
				if isPass {
					pd.BeginPass()
				}
				fd.SetSegments(p.segs, fBS)
				fd.WriteKVSegments(raw, b.rawK, b.rawV)
				fd.QKVPost(b.q, b.k, b.v, T, bqB, bkB, bvB, qnB, knB, fEps, pos, inv, variant.neox, fHeads, fKV, fHD, pool)
				fd.PagedAttentionSegments(b.att, b.q, pool, fHeads, fKV, fHD, fScale)
				fd.AddRMSNorm(b.out, b.res, b.att, normB, T, fQDim, fEps)
				out := d.get(b.out) // ends a pass
				gq, gk, att, gres := d.get(b.q), d.get(b.k), d.get(b.att), d.get(b.res)
				wv := addRows(v, bv, T) // the pool's V rows (v itself may keep its value)
				what := name("pass %d", pi)

				// QKVPost: biases (exact), per-head norms, RoPE; v+bv is
				// checked in the pool.
				wq, wk := postRef(q, bq, qn, T, fHeads), postRef(k, bk, kn, T, fKV)
				refRoPE(wq, T, fHeads, fHD, pos, inv, variant.neox)
				refRoPE(wk, T, fKV, fHD, pos, inv, variant.neox)
				near(t, what+": QKVPost's q", gq, wq)
				near(t, what+": QKVPost's k", gk, wk)

				// The pools: every row so far where the segments put it.
				for si, sg := range p.segs {
					s := p.seq[si]
					seqK[s] = append(seqK[s], gk[sg.First*fKVDim:(sg.First+sg.N)*fKVDim]...)
					seqV[s] = append(seqV[s], wv[sg.First*fKVDim:(sg.First+sg.N)*fKVDim]...)
					rawSeqK[s] = append(rawSeqK[s], rk[sg.First*fKVDim:(sg.First+sg.N)*fKVDim]...)
					rawSeqV[s] = append(rawSeqV[s], rv[sg.First*fKVDim:(sg.First+sg.N)*fKVDim]...)
				}
				checkPool(t, d.pool(raw), tables, rawSeqK, rawSeqV)
				checkPool(t, d.pool(pool), tables, seqK, seqV)

				// Attention of each segment over its sequence, from the
				// device's q and pool rows.
				s := attnShape{nHeads: fHeads, nKV: fKV, headDim: fHD, scale: fScale}
				for si, sg := range p.segs {
					sq := gq[sg.First*fQDim : (sg.First+sg.N)*fQDim]
					want, tol := refAttention(s, sq, seqK[p.seq[si]], seqV[p.seq[si]], sg.N, sg.Start, kernels.AttnOpts{})
					within(t, name("%s: PagedAttentionSegments of segment %d", what, si),
						att[sg.First*fQDim:(sg.First+sg.N)*fQDim], want, tol)
				}

				// AddRMSNorm: the residual exactly, then its norm.
				sum := make([]float32, len(res))
				for i := range res {
					sum[i] = res[i] + att[i]
				}
				exact(t, what+": AddRMSNorm's residual", gres, sum)
				near(t, what+": AddRMSNorm", out, refRMSNorm(sum, normW, T, fQDim, fEps))
			}
		})
	}
}

// postRef is x ([T][heads][fHD]) plus bias (exact float32; none when nil)
// and, when norm is not nil, normalized per head.
func postRef(x, bias, norm []float32, T, heads int) []float64 {
	xb := addRows(x, bias, T)
	if norm == nil {
		return f64(xb)
	}
	return refRMSNorm(xb, norm, T*heads, fHD, fEps)
}

// addRows is x ([T][len(bias)]) plus bias in each row, in float32; x when
// bias is nil.
func addRows(x, bias []float32, T int) []float32 {
	if bias == nil {
		return x
	}
	out := make([]float32, len(x))
	n := len(x) / T
	for i := range x {
		out[i] = x[i] + bias[i%n]
	}
	return out
}
