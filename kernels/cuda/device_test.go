package cuda_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/kernels/cuda"
	"github.com/batchd/batchd/kernels/devicetest"
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

// near fails when got and want differ by more than tol relative to |want|,
// naming the first such index.
func near(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		s := math.Abs(float64(want[i]))
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if d > tol*max(s, 1e-6) || math.IsNaN(float64(got[i])) != math.IsNaN(float64(want[i])) {
			t.Fatalf("%s: [%d] = %v, want %v (tolerance %g of %g)", what, i, got[i], want[i], tol, s)
		}
	}
}

// TestDeviceContract runs the Device contract suite on the CUDA device,
// with and without graphs: the suite's fused passes repeat, so that with
// graphs some of them replay, and are checked as they do.
func TestDeviceContract(t *testing.T) {
	for _, graphs := range []bool{false, true} {
		t.Run(fmt.Sprint("graphs=", graphs), func(t *testing.T) {
			var devs []*cuda.Device
			devicetest.Run(t, devicetest.Harness{New: func(t *testing.T) kernels.Device {
				d := testDevice(t, graphs)
				devs = append(devs, d)
				return d
			}})
			var replayed int64
			for _, d := range devs {
				replayed += d.GraphStats().Replayed
			}
			if graphs != (replayed > 0) {
				t.Errorf("graphs %v: %d passes replayed", graphs, replayed)
			}
		})
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
			near(t, "pass", got, want, 1e-4)
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
