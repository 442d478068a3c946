package devicetest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/batchd/batchd/kernels"
)

// refRMSNorm is x/sqrt(mean(x²)+eps)·w per row of dim.
func refRMSNorm(x, w []float32, rows, dim int, eps float32) []float64 {
	out := make([]float64, rows*dim)
	for r := range rows {
		v := x[r*dim : (r+1)*dim]
		var ss float64
		for _, e := range v {
			ss += float64(e) * float64(e)
		}
		s := 1 / math.Sqrt(ss/float64(dim)+float64(eps))
		for i, e := range v {
			out[r*dim+i] = float64(e) * s * float64(w[i])
		}
	}
	return out
}

// refRoPE rotates x, [T][heads][headDim], as the contract says: pair i of
// token t by the float32 angle pos[t]·invFreq[i].
func refRoPE(x []float64, T, heads, headDim int, pos []int32, invFreq []float32, neox bool) {
	n := len(invFreq)
	for t := range T {
		for i, f := range invFreq {
			s, c := math.Sincos(float64(float32(pos[t]) * f))
			for h := range heads {
				v := x[(t*heads+h)*headDim:]
				a, b := 2*i, 2*i+1
				if neox {
					a, b = i, i+n
				}
				v[a], v[b] = v[a]*c-v[b]*s, v[a]*s+v[b]*c
			}
		}
	}
}

// invFreqs is RoPE's usual frequencies for pairs pairs of a head of
// headDim.
func invFreqs(pairs, headDim int) []float32 {
	f := make([]float32, pairs)
	for i := range f {
		f[i] = float32(math.Pow(10000, -2*float64(i)/float64(headDim)))
	}
	return f
}

// testRMSNorm: per row and per head (qk-norm), into another buffer and in
// place, at odd widths.
func testRMSNorm(t *testing.T, d *dev) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, c := range []struct {
		rows, dim int
		eps       float32
	}{{5, 77, 1e-5}, {12, 16, 1e-6}, {1, 1024, 1e-6}, {3, 32, 1e-2}} {
		x, w := randVec(r, c.rows*c.dim, 2), randVec(r, c.dim, 1)
		want := refRMSNorm(x, w, c.rows, c.dim, c.eps)
		xb, wb := d.buf(x), d.buf(w)
		out := d.zeros(c.rows * c.dim)
		d.d.RMSNorm(out, xb, wb, c.rows, c.dim, c.eps)
		near(t, name("RMSNorm %d×%d", c.rows, c.dim), d.get(out), want)
		exact(t, "RMSNorm's input", d.get(xb), x)
		d.d.RMSNorm(xb, xb, wb, c.rows, c.dim, c.eps)
		near(t, name("RMSNorm %d×%d in place", c.rows, c.dim), d.get(xb), want)
	}
}

// testRoPE: both pair layouts, positions far from zero, fewer pairs than
// the head has (partial rotary), odd head counts.
func testRoPE(t *testing.T, d *dev) {
	r := rand.New(rand.NewPCG(4, 4))
	pos := []int32{0, 7, 1000, 4097, 32767}
	for _, neox := range []bool{false, true} {
		for _, c := range []struct{ heads, headDim, pairs int }{{3, 16, 8}, {2, 64, 32}, {5, 24, 6}} {
			T := len(pos)
			x := randVec(r, T*c.heads*c.headDim, 1)
			inv := invFreqs(c.pairs, c.headDim)
			want := f64(x)
			refRoPE(want, T, c.heads, c.headDim, pos, inv, neox)
			b := d.buf(x)
			d.d.RoPE(b, T, c.heads, c.headDim, pos, inv, neox)
			near(t, name("RoPE neox=%v heads=%d headDim=%d pairs=%d", neox, c.heads, c.headDim, c.pairs), d.get(b), want)
		}
	}
}

// testElementwise: Add, AddBias and CopyRows exactly, SiLUMul within
// ElemTol, over lengths that are no multiple of a vector.
func testElementwise(t *testing.T, d *dev) {
	r := rand.New(rand.NewPCG(5, 5))
	const rows, n = 7, 45
	x, y := randVec(r, rows*n, 3), randVec(r, rows*n, 3)

	b := d.buf(x)
	d.d.Add(b, d.buf(y))
	want := make([]float32, len(x))
	for i := range x {
		want[i] = x[i] + y[i]
	}
	exact(t, "Add", d.get(b), want)

	bias := randVec(r, n, 1)
	b = d.buf(x)
	d.d.AddBias(b, d.buf(bias), rows, n)
	for i := range x {
		want[i] = x[i] + bias[i%n]
	}
	exact(t, "AddBias", d.get(b), want)

	b = d.buf(x)
	d.d.SiLUMul(b, d.buf(y))
	ref := make([]float64, len(x))
	for i, v := range x {
		g := float64(v)
		ref[i] = g / (1 + math.Exp(-g)) * float64(y[i])
	}
	near(t, "SiLUMul", d.get(b), ref)

	idx := []int32{6, 0, 3, 3}
	out := d.zeros(len(idx) * n)
	d.d.CopyRows(out, d.buf(x), n, idx)
	want = want[:0]
	for _, i := range idx {
		want = append(want, x[int(i)*n:(int(i)+1)*n]...)
	}
	exact(t, "CopyRows", d.get(out), want)
}

// pool is a KV pool's contents on the host.
type pool struct {
	k, v             []float32
	blockSize, width int
}

func (d *dev) pool(p kernels.KVPool) pool {
	return pool{k: d.get(p.K), v: d.get(p.V), blockSize: p.BlockSize, width: p.Width}
}

// allocKV is a pool checked to be zeroed and shaped as asked.
func (d *dev) allocKV(blocks, blockSize, width int) kernels.KVPool {
	d.t.Helper()
	p, err := d.d.AllocKV(blocks, blockSize, width)
	if err != nil {
		d.t.Fatalf("AllocKV: %v", err)
	}
	d.t.Cleanup(func() { d.d.FreeKV(p) })
	n := blocks * blockSize * width
	if p.Blocks != blocks || p.BlockSize != blockSize || p.Width != width || p.K.Len() < n || p.V.Len() < n {
		d.t.Fatalf("AllocKV(%d, %d, %d) = %d blocks of %d×%d, K %d V %d floats", blocks, blockSize, width,
			p.Blocks, p.BlockSize, p.Width, p.K.Len(), p.V.Len())
	}
	exact(d.t, "AllocKV's K", d.get(p.K)[:n], make([]float32, n))
	exact(d.t, "AllocKV's V", d.get(p.V)[:n], make([]float32, n))
	return p
}

// shuffledTable is a block table of n distinct blocks of a pool of blocks.
func shuffledTable(r *rand.Rand, n, blocks int) []int32 {
	p := r.Perm(blocks)[:n]
	out := make([]int32, n)
	for i, b := range p {
		out[i] = int32(b)
	}
	return out
}

// testWriteKV: rows land at [block][BlockSize][Width] through a shuffled
// block table, in chunks that cross blocks; the rest of the pool stays
// zero.
func testWriteKV(t *testing.T, d *dev) {
	r := rand.New(rand.NewPCG(6, 6))
	const bs, width, n = 4, 24, 19
	p := d.allocKV(9, bs, width)
	table := shuffledTable(r, 5, 9)
	k, v := randVec(r, n*width, 1), randVec(r, n*width, 1)
	kb, vb := d.buf(k), d.buf(v)
	for s := 0; s < n; s += 6 {
		c := min(6, n-s)
		d.d.WriteKV(p, kb.Slice(s*width, c*width), vb.Slice(s*width, c*width), table, s, c)
	}
	checkPool(t, d.pool(p), [][]int32{table}, [][]float32{k}, [][]float32{v})
}

// checkPool checks that sequence i's rows k[i], v[i] are in the pool at
// its positions 0.. under tables[i], and that every other row is zero.
func checkPool(t *testing.T, got pool, tables [][]int32, k, v [][]float32) {
	t.Helper()
	wantK := make([]float32, len(got.k))
	wantV := make([]float32, len(got.v))
	w := got.width
	for s, table := range tables {
		for pos := range len(k[s]) / w {
			off := (int(table[pos/got.blockSize])*got.blockSize + pos%got.blockSize) * w
			copy(wantK[off:off+w], k[s][pos*w:(pos+1)*w])
			copy(wantV[off:off+w], v[s][pos*w:(pos+1)*w])
		}
	}
	exact(t, "the pool's K", got.k, wantK)
	exact(t, "the pool's V", got.v, wantV)
}
