package devicetest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/batchd/batchd/kernels"
)

// testBuffers: Alloc zeroes, Upload and Download copy exactly, a view is a
// window that an operation does not reach past, a bad size is an error.
func testBuffers(t *testing.T, d *dev) {
	r := rand.New(rand.NewPCG(1, 1))
	b := d.zeros(37)
	exact(t, "Alloc", d.get(b), make([]float32, 37))
	x := randVec(r, 37, 1)
	x[3], x[4], x[5] = float32(math.Inf(1)), float32(math.Copysign(0, -1)), 1e-40 // subnormal
	d.d.Upload(b, x)
	exact(t, "Upload then Download", d.get(b), x)
	part := make([]float32, 5)
	d.d.Download(part, b)
	exact(t, "Download of a prefix", part, x[:5])

	v := b.Slice(10, 4)
	if v.Len() != 4 {
		t.Fatalf("Slice(10, 4).Len() = %d", v.Len())
	}
	d.d.Upload(v, []float32{1, 2, 3, 4})
	want := append([]float32(nil), x...)
	copy(want[10:], []float32{1, 2, 3, 4})
	exact(t, "Upload into a view", d.get(b), want)
	exact(t, "Download of a view", d.get(v), []float32{1, 2, 3, 4})
	d.d.Add(b.Slice(20, 2), d.buf([]float32{10, 20}))
	want[20], want[21] = want[20]+10, want[21]+20
	exact(t, "Add on a view", d.get(b), want)
	d.d.Free(b)

	if _, err := d.d.Alloc(-1); err == nil {
		t.Fatal("Alloc(-1) did not fail")
	}
	if e := d.zeros(0); e.Len() != 0 {
		t.Fatalf("Alloc(0).Len() = %d", e.Len())
	}
}

// matrix returns a rows×cols matrix of type dt from normal values and its
// exact dequantization.
func matrix(t *testing.T, r *rand.Rand, dt kernels.DType, rows, cols int) (*kernels.Matrix, []float32) {
	t.Helper()
	rb, err := dt.RowBytes(cols)
	if err != nil {
		t.Fatal(err)
	}
	vals := randVec(r, rows*cols, 1)
	data := make([]byte, rows*rb)
	for i := range rows {
		if err := kernels.Quantize(dt, data[i*rb:(i+1)*rb], vals[i*cols:(i+1)*cols]); err != nil {
			t.Fatal(err)
		}
	}
	m, err := kernels.NewMatrix(dt, rows, cols, data)
	if err != nil {
		t.Fatal(err)
	}
	deq := make([]float32, rows*cols)
	for i := range rows {
		m.Row(i, deq[i*cols:(i+1)*cols])
	}
	return m, deq
}

// refMatMul is out[t][r] = Σ_c x[t][c]·w[r][c] in float64, with each
// output's tolerance under the package doc's policy.
func refMatMul(dt kernels.DType, x, w []float32, T, rows, cols int) (want, tol []float64) {
	want, tol = make([]float64, T*rows), make([]float64, T*rows)
	bs := dt.BlockSize()
	rel := MatMulRel(dt)
	for tk := range T {
		xr := x[tk*cols : (tk+1)*cols]
		for r := range rows {
			wr := w[r*cols : (r+1)*cols]
			var s, abs, act float64
			for c := range cols {
				p := float64(xr[c]) * float64(wr[c])
				s += p
				abs += math.Abs(p)
			}
			if bs > 1 {
				for b := 0; b < cols; b += bs {
					var amax, wsum float64
					for c := b; c < b+bs; c++ {
						amax = max(amax, math.Abs(float64(xr[c])))
						wsum += math.Abs(float64(wr[c]))
					}
					act += amax / 254 * wsum
				}
			}
			want[tk*rows+r], tol[tk*rows+r] = s, rel*abs+act
		}
	}
	return want, tol
}

// testMatMul: MatMul of every shape below against the float64 product,
// each token bit-identical alone and batched, on the weight as uploaded and
// (on a WeightPacker) packed; Embed returns the stored rows; Shape is the
// matrix's.
func testMatMul(t *testing.T, d *dev, dt kernels.DType) {
	r := rand.New(rand.NewPCG(2, uint64(dt)))
	for _, sh := range []struct{ T, rows, cols int }{{1, 37, 256}, {17, 48, 512}, {5, 3, 256}} {
		m, deq := matrix(t, r, dt, sh.rows, sh.cols)
		w := d.weight(m)
		if gt, gr, gc := w.Shape(); gt != dt || gr != sh.rows || gc != sh.cols {
			t.Fatalf("Shape() = %v %d×%d, want %v %d×%d", gt, gr, gc, dt, sh.rows, sh.cols)
		}
		weights := []kernels.Weight{w}
		if p, ok := d.d.(kernels.WeightPacker); ok {
			pw := d.weight(m)
			p.PackWeight(pw)
			weights = append(weights, pw)
		}
		x := randVec(r, sh.T*sh.cols, 1)
		want, tol := refMatMul(dt, x, deq, sh.T, sh.rows, sh.cols)
		xb := d.buf(x)
		for i, w := range weights {
			what := name("%v %d×%d×%d", dt, sh.T, sh.rows, sh.cols)
			if i == 1 {
				what += " packed"
			}
			out := d.zeros(sh.T * sh.rows)
			d.d.MatMul(out, xb, sh.T, w)
			batched := d.get(out)
			within(t, "MatMul "+what, batched, want, tol)
			// Batch invariance: each token alone, into a view.
			if sh.T > 1 {
				one := d.zeros(sh.T * sh.rows)
				for tk := range sh.T {
					d.d.MatMul(one.Slice(tk*sh.rows, sh.rows), xb.Slice(tk*sh.cols, sh.cols), 1, w)
				}
				exact(t, "MatMul token by token vs batched "+what, d.get(one), batched)
			}
		}

		ids := []int32{int32(sh.rows - 1), 0, int32(sh.rows / 2), 0}
		emb := d.zeros(len(ids) * sh.cols)
		d.d.Embed(emb, w, ids)
		got := d.get(emb)
		wantE := make([]float32, 0, len(got))
		for _, id := range ids {
			wantE = append(wantE, deq[int(id)*sh.cols:(int(id)+1)*sh.cols]...)
		}
		if dt.BlockSize() <= 1 {
			exact(t, "Embed "+dt.String(), got, wantE)
			continue
		}
		tolE := make([]float64, len(wantE))
		for i, v := range wantE {
			tolE[i] = 0x1p-8 * math.Abs(float64(v))
		}
		within(t, "Embed "+dt.String(), got, f64(wantE), tolE)
	}
}
