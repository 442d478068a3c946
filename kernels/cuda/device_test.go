package cuda_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/kernels/cuda"
	"github.com/batchd/batchd/kernels/refdev"
)

// testDevice is a cuda.Device on ktOpen's driver, with or without graphs.
func testDevice(t *testing.T, graphs bool) *cuda.Device {
	t.Helper()
	return cuda.NewDevice(nonClosing{ktOpen(t)}, graphs)
}

// nonClosing leaves closing the driver to ktOpen's cleanup.
type nonClosing struct{ cuda.Driver }

func (nonClosing) Close() {}

func randVec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func up(t *testing.T, d kernels.Device, x []float32) kernels.Buf {
	t.Helper()
	b, err := d.Alloc(len(x))
	if err != nil {
		t.Fatal(err)
	}
	d.Upload(b, x)
	return b
}

func down(d kernels.Device, b kernels.Buf) []float32 {
	out := make([]float32, b.Len())
	d.Download(out, b)
	return out
}

// near fails when got and want differ by more than tol relative to
// scale (or to |want| when scale is nil), naming the first such index.
func near(t *testing.T, what string, got, want []float32, tol float64, scale []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst := 0.0
	for i := range want {
		s := math.Abs(float64(want[i]))
		if scale != nil {
			s = scale[i]
		}
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if d > tol*max(s, 1e-6) || math.IsNaN(float64(got[i])) != math.IsNaN(float64(want[i])) {
			t.Fatalf("%s: [%d] = %v, want %v (tolerance %g of %g)", what, i, got[i], want[i], tol, s)
		}
		worst = max(worst, d/max(s, 1e-6))
	}
	t.Logf("%s: worst relative difference %.2e", what, worst)
}

// The CUDA device computes what the reference device computes, op by op.
func TestDeviceMatchesReference(t *testing.T) {
	d := testDevice(t, false)
	ref := refdev.New()
	r := rand.New(rand.NewPCG(1, 2))
	both := func(x []float32) (kernels.Buf, kernels.Buf) { return up(t, d, x), up(t, ref, x) }

	// Elementwise ops on odd sizes.
	const rows, dim = 5, 77
	x := randVec(r, rows*dim)
	w := randVec(r, dim)
	xd, xr := both(x)
	wd, wr := both(w)
	od, _ := d.Alloc(rows * dim)
	or, _ := ref.Alloc(rows * dim)
	d.RMSNorm(od, xd, wd, rows, dim, 1e-5)
	ref.RMSNorm(or, xr, wr, rows, dim, 1e-5)
	near(t, "RMSNorm", down(d, od), down(ref, or), 1e-5, nil)
	d.RMSNorm(xd, xd, wd, rows, dim, 1e-5) // aliased
	near(t, "RMSNorm in place", down(d, xd), down(ref, or), 1e-5, nil)

	g, u := randVec(r, 1001), randVec(r, 1001)
	gd, gr := both(g)
	ud, ur := both(u)
	d.SiLUMul(gd, ud)
	ref.SiLUMul(gr, ur)
	near(t, "SiLUMul", down(d, gd), down(ref, gr), 1e-5, nil)
	d.Add(gd, ud)
	ref.Add(gr, ur)
	near(t, "Add", down(d, gd), down(ref, gr), 1e-6, nil)
	bias := randVec(r, dim)
	bd, br := both(bias)
	yd, yr := both(randVec(r, rows*dim))
	d.AddBias(yd, bd, rows, dim)
	ref.AddBias(yr, br, rows, dim)
	near(t, "AddBias", down(d, yd), down(ref, yr), 0, nil)

	// RoPE, both pair layouts, positions far from zero.
	const T, heads, hd = 3, 4, 16
	inv := make([]float32, hd/2)
	for i := range inv {
		inv[i] = float32(math.Pow(10000, -2*float64(i)/hd))
	}
	pos := []int32{0, 17, 4097}
	for _, neox := range []bool{false, true} {
		q := randVec(r, T*heads*hd)
		qd, qr := both(q)
		d.RoPE(qd, T, heads, hd, pos, inv, neox)
		ref.RoPE(qr, T, heads, hd, pos, inv, neox)
		near(t, "RoPE", down(d, qd), down(ref, qr), 1e-5, nil)
	}

	// MatMul in every weight type, against the reference's own numerics:
	// 16-bit activations (and Q8_0's bf16 dequantization) allow bf16's
	// rounding of each product, relative to Σ|x·w|.
	for _, typ := range append([]kernels.DType{kernels.F32, kernels.F16, kernels.BF16}, kernels.QuantTypes()...) {
		const R, C, M = 33, 256, 3
		wv := randVec(r, R*C)
		var data []byte
		switch typ {
		case kernels.F32:
			data = make([]byte, 4*len(wv))
			for i, v := range wv {
				putU32(data[4*i:], math.Float32bits(v))
			}
		case kernels.F16, kernels.BF16:
			data = make([]byte, 2*len(wv))
			for i, v := range wv {
				h := kernels.F32ToF16(v)
				if typ == kernels.BF16 {
					h = kernels.F32ToBF16(v)
				}
				data[2*i], data[2*i+1] = byte(h), byte(h>>8)
			}
		default:
			rb, err := typ.RowBytes(C)
			if err != nil {
				t.Fatal(err)
			}
			data = make([]byte, R*rb)
			if err := kernels.Quantize(typ, data, wv); err != nil {
				t.Fatal(err)
			}
		}
		m, err := kernels.NewMatrix(typ, R, C, data)
		if err != nil {
			t.Fatal(err)
		}
		Wd, err := d.UploadMatrix(m)
		if err != nil {
			t.Fatal(err)
		}
		Wr, _ := ref.UploadMatrix(m)
		if tt, rr, cc := Wd.Shape(); tt != typ || rr != R || cc != C {
			t.Errorf("%v weight: shape %v %dx%d", typ, tt, rr, cc)
		}
		xs := randVec(r, M*C)
		xd, xr := both(xs)
		od, _ := d.Alloc(M * R)
		or, _ := ref.Alloc(M * R)
		d.MatMul(od, xd, M, Wd)
		ref.MatMul(or, xr, M, Wr)
		tol := 1e-5
		if typ != kernels.F32 {
			tol = 1.0 / 128
		}
		scale := make([]float64, M*R)
		wq := make([]float32, C) // the weights as stored
		for j := range R {
			m.Row(j, wq)
			for t := range M {
				for c := range C {
					scale[t*R+j] += math.Abs(float64(xs[t*C+c] * wq[c]))
				}
			}
		}
		near(t, "MatMul "+typ.String(), down(d, od), down(ref, or), tol, scale)

		// Embedding rows of the same matrix: exact for 16- and 32-bit types.
		ids := []int32{3, 0, 32, 3}
		ed, _ := d.Alloc(len(ids) * C)
		er, _ := ref.Alloc(len(ids) * C)
		d.Embed(ed, Wd, ids)
		ref.Embed(er, Wr, ids)
		etol := 0.0
		if typ.BlockSize() > 1 {
			etol = 1.0 / 256 // bf16 of the dequantized value
		}
		near(t, "Embed "+typ.String(), down(d, ed), down(ref, er), etol, nil)
	}
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// pass is one decoder-layer-like pass over segments: what the native
// engine's forward does with a FusedDevice, small enough to check.
type passInputs struct {
	segs    []kernels.Segment
	pos     []int32
	ids     []int32
	heads   int
	kvHeads int
	hd      int
}

// passBufs are a pass's activations, kept from pass to pass (as the
// engine keeps its scratch) so that repeated passes launch the same calls.
type passBufs struct {
	T                  int
	xq, xk, xv, att, h kernels.Buf
}

// runPass embeds ids, runs QKVPost (bias, qk-norm, RoPE, KV append) and
// the segments' attention, then AddRMSNorm, and downloads the result.
func runPass(t *testing.T, d kernels.FusedDevice, in passInputs, w *passWeights, pool kernels.KVPool, b *passBufs) []float32 {
	t.Helper()
	T := len(in.ids)
	qDim, kvDim := in.heads*in.hd, in.kvHeads*in.hd
	if b.T != T {
		buf := func(n int) kernels.Buf {
			x, err := d.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			return x
		}
		*b = passBufs{T: T, xq: buf(T * qDim), xk: buf(T * kvDim), xv: buf(T * kvDim), att: buf(T * qDim), h: buf(T * qDim)}
	}
	if pd, ok := d.(kernels.PassDevice); ok {
		pd.BeginPass()
	}
	d.SetSegments(in.segs, pool.BlockSize)
	d.Embed(b.xq, w.embQ, in.ids)
	d.Embed(b.xk, w.embK, in.ids)
	d.Embed(b.xv, w.embK, in.ids)
	inv := make([]float32, in.hd/2)
	for i := range inv {
		inv[i] = float32(math.Pow(10000, -2*float64(i)/float64(in.hd)))
	}
	d.QKVPost(b.xq, b.xk, b.xv, T, w.bq, w.bk, w.bv, w.qn, w.kn, 1e-6, in.pos, inv, true, in.heads, in.kvHeads, in.hd, pool)
	d.PagedAttentionSegments(b.att, b.xq, pool, in.heads, in.kvHeads, in.hd, float32(1/math.Sqrt(float64(in.hd))))
	d.AddRMSNorm(b.h, b.att, b.xq, w.norm, T, qDim, 1e-6)
	return down(d, b.h)
}

type passWeights struct {
	embQ, embK               kernels.Weight
	bq, bk, bv, qn, kn, norm kernels.Buf
}

func newPassWeights(t *testing.T, d kernels.Device, r *rand.Rand, vocab, heads, kvHeads, hd int) *passWeights {
	t.Helper()
	mat := func(rows, cols int) kernels.Weight {
		v := randVec(r, rows*cols)
		data := make([]byte, 4*len(v))
		for i, x := range v {
			putU32(data[4*i:], math.Float32bits(x))
		}
		m, _ := kernels.NewMatrix(kernels.F32, rows, cols, data)
		w, err := d.UploadMatrix(m)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	return &passWeights{
		embQ: mat(vocab, heads*hd), embK: mat(vocab, kvHeads*hd),
		bq: up(t, d, randVec(r, heads*hd)), bk: up(t, d, randVec(r, kvHeads*hd)), bv: up(t, d, randVec(r, kvHeads*hd)),
		qn: up(t, d, randVec(r, hd)), kn: up(t, d, randVec(r, hd)), norm: up(t, d, randVec(r, heads*hd)),
	}
}

// The fused and per-pass methods compute what the reference's op-by-op
// chains compute, over scattered block tables, a prefill chunk and decode
// tokens in one pass, GQA; and a pass that repeats replays as a graph with
// the new inputs, not the captured ones.
func TestDevicePassesAndGraphs(t *testing.T) {
	const vocab, heads, kvHeads, hd, bs = 50, 6, 2, 16, 4
	for _, graphs := range []bool{false, true} {
		d := testDevice(t, graphs)
		ref := refdev.New()
		r1, r2 := rand.New(rand.NewPCG(5, 6)), rand.New(rand.NewPCG(5, 6))
		wd := newPassWeights(t, d, r1, vocab, heads, kvHeads, hd)
		wr := newPassWeights(t, ref, r2, vocab, heads, kvHeads, hd)
		pd, err := d.AllocKV(16, bs, kvHeads*hd)
		if err != nil {
			t.Fatal(err)
		}
		pr, _ := ref.AllocKV(16, bs, kvHeads*hd)
		// Sequence A starts with a 6-token prompt chunk, B with a 2-token
		// one, in one pass; then both decode a token a pass, four passes of
		// the same shape.
		tabA, tabB := []int32{7, 2, 11}, []int32{5, 14, 0}
		passes := []passInputs{{
			segs: []kernels.Segment{{First: 0, N: 6, Start: 0, Blocks: tabA}, {First: 6, N: 2, Start: 0, Blocks: tabB}},
			pos:  []int32{0, 1, 2, 3, 4, 5, 0, 1}, ids: []int32{1, 2, 3, 4, 5, 6, 7, 8},
		}}
		for i := range 4 {
			passes = append(passes, passInputs{
				segs: []kernels.Segment{{First: 0, N: 1, Start: 6 + i, Blocks: tabA}, {First: 1, N: 1, Start: 2 + i, Blocks: tabB}},
				pos:  []int32{int32(6 + i), int32(2 + i)}, ids: []int32{int32(10 + i), int32(30 + 2*i)},
			})
		}
		var bd, br passBufs
		for _, p := range passes {
			p.heads, p.kvHeads, p.hd = heads, kvHeads, hd
			got := runPass(t, d, p, wd, pd, &bd)
			want := runPass(t, ref, p, wr, pr, &br)
			near(t, "pass", got, want, 1e-4, nil)
		}
		st := d.GraphStats()
		if graphs {
			// Decode passes 1..4 repeat: seen at 1, captured at 2, replayed
			// at 3 and 4 (with their own ids and positions: checked above).
			if st.Captured != 1 || st.Replayed != 2 {
				t.Errorf("graphs: %+v, want 1 capture and 2 replays", st)
			}
		} else if st.Captured != 0 || st.Replayed != 0 {
			t.Errorf("without graphs: %+v", st)
		}
		d.Close()
	}
}
