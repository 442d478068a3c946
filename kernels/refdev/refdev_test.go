package refdev_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/kernels/refdev"
)

// The same operations on the CPU device (every code path this machine has)
// and on the reference device, from the same inputs, must agree. Tolerances:
//   - exact ops (Embed, CopyRows, WriteKV, Add, AddBias) bit for bit;
//   - elementwise ops (RMSNorm, RoPE, SiLUMul): 2e-6 relative (a few float32
//     roundings; the CPU's vector exp, rsqrt and sincos paths round differently);
//   - sums (MatMul over F32/F16/BF16, PagedAttention): 1e-5 of Σ|terms|, the
//     float32 error of two reduction orders over rows of a few hundred;
//   - Q8_0 MatMul additionally the activation quantization bound of the
//     package doc, Σ_blocks (max|x_block|/254)·Σ_block|w|, since avx2
//     multiplies unquantized activations.

func devices(t *testing.T) map[string]kernels.Device {
	t.Helper()
	devs := map[string]kernels.Device{"reference": refdev.New()}
	for _, b := range kernels.Backends() {
		if !b.Usable() {
			continue
		}
		cpu, err := kernels.NewCPUBackend(2, b.Name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cpu.Close)
		devs["cpu-"+b.Name] = kernels.NewCPUDevice(cpu)
	}
	return devs
}

func randVec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func upload(t *testing.T, d kernels.Device, x []float32) kernels.Buf {
	t.Helper()
	b, err := d.Alloc(len(x))
	if err != nil {
		t.Fatal(err)
	}
	d.Upload(b, x)
	return b
}

func download(d kernels.Device, b kernels.Buf) []float32 {
	out := make([]float32, b.Len())
	d.Download(out, b)
	return out
}

func randMatrix(t *testing.T, r *rand.Rand, dt kernels.DType, rows, cols int) (*kernels.Matrix, []float32) {
	t.Helper()
	f := randVec(r, rows*cols)
	rb, err := dt.RowBytes(cols)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rows*rb)
	for i, v := range f {
		switch dt {
		case kernels.F32:
			u := math.Float32bits(v)
			data[4*i], data[4*i+1], data[4*i+2], data[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		case kernels.F16, kernels.BF16:
			h := kernels.F32ToF16(v)
			if dt == kernels.BF16 {
				h = kernels.F32ToBF16(v)
			}
			data[2*i], data[2*i+1] = byte(h), byte(h>>8)
		}
	}
	if dt == kernels.Q8_0 {
		if err := kernels.QuantizeQ8_0(data, f); err != nil {
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

// agree compares got with want element by element within tol[i].
func agree(t *testing.T, what string, got, want, tol []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > float64(tol[i]) || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s: [%d] = %g, reference %g (|Δ| %.3g > %.3g)", what, i, got[i], want[i], d, tol[i])
		}
	}
}

func relTol(want []float32, rel float32) []float32 {
	tol := make([]float32, len(want))
	for i, w := range want {
		tol[i] = rel * (1 + float32(math.Abs(float64(w))))
	}
	return tol
}

func TestDevicesAgreeOnMatMul(t *testing.T) {
	const T, rows, cols = 5, 37, 160
	for _, dt := range []kernels.DType{kernels.F32, kernels.F16, kernels.BF16, kernels.Q8_0} {
		r := rand.New(rand.NewPCG(1, uint64(dt)))
		m, deq := randMatrix(t, r, dt, rows, cols)
		x := randVec(r, T*cols)
		tol := make([]float32, T*rows)
		for tk := range T {
			for row := range rows {
				var abs, q8 float64
				for c := range cols {
					abs += math.Abs(float64(x[tk*cols+c] * deq[row*cols+c]))
				}
				if dt == kernels.Q8_0 {
					for b := 0; b < cols; b += 32 {
						var amax, wsum float64
						for c := b; c < b+32; c++ {
							amax = math.Max(amax, math.Abs(float64(x[tk*cols+c])))
							wsum += math.Abs(float64(deq[row*cols+c]))
						}
						q8 += amax / 254 * wsum
					}
				}
				tol[tk*rows+row] = float32(1e-5*abs + q8)
			}
		}
		results := map[string][]float32{}
		for name, d := range devices(t) {
			w, err := d.UploadMatrix(m)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := d.Alloc(T * rows)
			d.MatMul(out, upload(t, d, x), T, w)
			results[name] = download(d, out)
			// Embed: the exact rows, in their own type.
			emb, _ := d.Alloc(3 * cols)
			d.Embed(emb, w, []int32{4, 0, int32(rows - 1)})
			e := download(d, emb)
			for i, id := range []int{4, 0, rows - 1} {
				agree(t, dt.String()+" Embed on "+name, e[i*cols:(i+1)*cols], deq[id*cols:(id+1)*cols], make([]float32, cols))
			}
		}
		for name, got := range results {
			agree(t, dt.String()+" MatMul on "+name, got, results["reference"], tol)
		}
	}
}

func TestDevicesAgreeOnElementwise(t *testing.T) {
	const T, heads, headDim = 3, 4, 16
	r := rand.New(rand.NewPCG(2, 2))
	x := randVec(r, T*heads*headDim)
	up := randVec(r, len(x))
	weight := randVec(r, heads*headDim)
	bias := randVec(r, heads*headDim)
	pos := []int32{0, 7, 1000}
	invFreq := make([]float32, headDim/2)
	for i := range invFreq {
		invFreq[i] = float32(math.Pow(10000, -2*float64(i)/headDim))
	}
	type res map[string][]float32
	results := map[string]res{}
	for name, d := range devices(t) {
		out := res{}
		// RMSNorm per row and per head (qk-norm), into itself.
		b := upload(t, d, x)
		d.RMSNorm(b, b, upload(t, d, weight), T, heads*headDim, 1e-5)
		out["RMSNorm"] = download(d, b)
		b = upload(t, d, x)
		d.RMSNorm(b, b, upload(t, d, weight[:headDim]), T*heads, headDim, 1e-6)
		out["RMSNorm per head"] = download(d, b)
		for _, neox := range []bool{false, true} {
			b = upload(t, d, x)
			d.RoPE(b, T, heads, headDim, pos, invFreq[:headDim/2-2], neox)
			out["RoPE neox="+map[bool]string{false: "false", true: "true"}[neox]] = download(d, b)
		}
		b = upload(t, d, x)
		d.SiLUMul(b, upload(t, d, up))
		out["SiLUMul"] = download(d, b)
		b = upload(t, d, x)
		d.Add(b, upload(t, d, up))
		out["Add"] = download(d, b)
		b = upload(t, d, x)
		d.AddBias(b, upload(t, d, bias), T, heads*headDim)
		out["AddBias"] = download(d, b)
		b = upload(t, d, x)
		rows, _ := d.Alloc(2 * headDim)
		d.CopyRows(rows, b, headDim, []int32{5, 2})
		out["CopyRows"] = download(d, rows)
		results[name] = out
	}
	ref := results["reference"]
	for name, out := range results {
		for op, got := range out {
			tol := relTol(ref[op], 2e-6)
			switch op {
			case "Add", "AddBias", "CopyRows":
				tol = make([]float32, len(got))
			}
			agree(t, op+" on "+name, got, ref[op], tol)
		}
	}
	// The exact ops against the obvious host computation.
	for i := range T * heads * headDim {
		if ref["Add"][i] != x[i]+up[i] || ref["AddBias"][i] != x[i]+bias[i%(heads*headDim)] {
			t.Fatalf("Add/AddBias [%d] wrong", i)
		}
	}
	if ref["CopyRows"][0] != x[5*headDim] || ref["CopyRows"][headDim] != x[2*headDim] {
		t.Fatal("CopyRows gathered the wrong rows")
	}
}

// pagedAttention writes a sequence's K/V into a pool through a shuffled
// block table in chunks of chunk tokens and returns the attention outputs.
func pagedAttention(t *testing.T, d kernels.Device, q, k, v []float32, n, chunk, nHeads, nKV, headDim int) []float32 {
	return pagedAttentionOpts(t, d, q, k, v, n, chunk, nHeads, nKV, headDim, kernels.AttnOpts{})
}

// pagedAttentionOpts is pagedAttention with o (d a FamilyDevice when o is
// not the zero value).
func pagedAttentionOpts(t *testing.T, d kernels.Device, q, k, v []float32, n, chunk, nHeads, nKV, headDim int, o kernels.AttnOpts) []float32 {
	const bs = 4
	table := []int32{5, 2, 7, 0, 3}
	pool, err := d.AllocKV(8, bs, nKV*headDim)
	if err != nil {
		t.Fatal(err)
	}
	defer d.FreeKV(pool)
	qd, kd, vd := upload(t, d, q), upload(t, d, k), upload(t, d, v)
	out, _ := d.Alloc(n * nHeads * headDim)
	qs, kvs := nHeads*headDim, nKV*headDim
	for s := 0; s < n; s += chunk {
		c := min(chunk, n-s)
		d.WriteKV(pool, kd.Slice(s*kvs, c*kvs), vd.Slice(s*kvs, c*kvs), table, s, c)
		if o.Plain() {
			d.PagedAttention(out.Slice(s*qs, c*qs), qd.Slice(s*qs, c*qs), pool, table, c, s, nHeads, nKV, headDim, 0.25)
		} else {
			d.(kernels.FamilyDevice).PagedAttentionOpts(out.Slice(s*qs, c*qs), qd.Slice(s*qs, c*qs), pool, table, c, s, nHeads, nKV, headDim, 0.25, o)
		}
	}
	return download(d, out)
}

// TestDevicesAgreeOnFamilyOps: the operations of the families beyond
// Llama's agree with the reference device on every backend (GELUMul, Scale
// and SoftCap within 2e-6 relative, windowed and soft-capped attention as
// PagedAttention), and the reference's own results hold: GELU's known
// values, windowed attention of position 0 is its v row, a soft cap bounds
// the values it returns.
func TestDevicesAgreeOnFamilyOps(t *testing.T) {
	const n, nHeads, nKV, headDim = 17, 6, 2, 16
	r := rand.New(rand.NewPCG(4, 4))
	x, up := randVec(r, 300), randVec(r, 300)
	q, k, v := randVec(r, n*nHeads*headDim), randVec(r, n*nKV*headDim), randVec(r, n*nKV*headDim)
	sinks := randVec(r, nHeads)
	opts := []kernels.AttnOpts{{Window: 1}, {Window: 6}, {SoftCap: 0.5}, {Window: 5, SoftCap: 0.3}, {Sinks: sinks}, {Sinks: sinks, Window: 4}}
	type res map[string][]float32
	results := map[string]res{}
	for name, dev := range devices(t) {
		d, ok := dev.(kernels.FamilyDevice)
		if !ok {
			t.Fatalf("%s is not a FamilyDevice", name)
		}
		out := res{}
		b := upload(t, d, x)
		d.GELUMul(b, upload(t, d, up))
		out["GELUMul"] = download(d, b)
		b = upload(t, d, x)
		scaled := make([]float32, len(up)) // reaching past the clamps
		for i, v := range up {
			scaled[i] = 4 * v
		}
		d.Scale(b, 4)
		d.SwiGLUOAI(b, upload(t, d, scaled), 1.702, 7)
		out["SwiGLUOAI"] = download(d, b)
		b = upload(t, d, x)
		d.Scale(b, 11.3)
		out["Scale"] = download(d, b)
		b = upload(t, d, x)
		d.SoftCap(b, 0.7)
		out["SoftCap"] = download(d, b)
		for _, o := range opts {
			for _, chunk := range []int{n, 4, 1} {
				out[fmt.Sprintf("attention %+v chunk %d", o, chunk)] = pagedAttentionOpts(t, d, q, k, v, n, chunk, nHeads, nKV, headDim, o)
			}
		}
		results[name] = out
	}
	ref := results["reference"]
	for name, out := range results {
		for op, got := range out {
			want := ref[op]
			if strings.HasPrefix(op, "attention") {
				want = ref[op[:strings.LastIndex(op, " chunk")]+fmt.Sprintf(" chunk %d", n)]
			}
			agree(t, op+" on "+name, got, want, relTol(want, 2e-6))
		}
	}
	for i, g := range ref["GELUMul"] {
		xv := float64(x[i])
		want := 0.5 * xv * (1 + math.Tanh(0.7978845608028654*(xv+0.044715*xv*xv*xv))) * float64(up[i])
		if math.Abs(float64(g)-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Fatalf("GELUMul[%d] = %g, want %g", i, g, want)
		}
	}
	clamped := 0
	for i, g := range ref["SwiGLUOAI"] {
		gv, uv := math.Min(4*float64(x[i]), 7), math.Max(math.Min(4*float64(up[i]), 7), -7)
		if gv == 7 || math.Abs(uv) == 7 {
			clamped++
		}
		want := gv / (1 + math.Exp(-1.702*gv)) * (uv + 1)
		if math.Abs(float64(g)-want) > 1e-5*math.Max(1, math.Abs(want)) {
			t.Fatalf("SwiGLUOAI[%d] = %g, want %g", i, g, want)
		}
	}
	if clamped == 0 {
		t.Fatal("no SwiGLUOAI input reached a clamp")
	}
	if g := kernels.GELU(1); math.Abs(float64(g)-0.8411920) > 1e-6 {
		t.Fatalf("GELU(1) = %g, want 0.8411920", g)
	}
	for i, c := range ref["SoftCap"] {
		if math.Abs(float64(c)) >= 0.7 || ref["Scale"][i] != x[i]*11.3 {
			t.Fatalf("SoftCap[%d] = %g (cap 0.7), Scale[%d] = %g (x %g)", i, c, i, ref["Scale"][i], x[i])
		}
	}
	// Sinks change the result.
	if w := ref[fmt.Sprintf("attention %+v chunk %d", kernels.AttnOpts{Sinks: sinks, Window: 4}, n)]; slices.Equal(w, pagedAttentionOpts(t, refdev.New(), q, k, v, n, n, nHeads, nKV, headDim, kernels.AttnOpts{Window: 4})) {
		t.Fatal("sinks changed nothing")
	}
	// A window of one: every query returns its own position's v row.
	w1 := ref[fmt.Sprintf("attention %+v chunk %d", kernels.AttnOpts{Window: 1}, n)]
	for p := range n {
		for h := range nHeads {
			for c := range headDim {
				if got, want := w1[(p*nHeads+h)*headDim+c], v[(p*nKV+h/(nHeads/nKV))*headDim+c]; got != want {
					t.Fatalf("window 1: position %d head %d = %g, want v's %g", p, h, got, want)
				}
			}
		}
	}
	if plain := pagedAttention(t, refdev.New(), q, k, v, n, n, nHeads, nKV, headDim); slices.Equal(plain, ref[fmt.Sprintf("attention %+v chunk %d", kernels.AttnOpts{Window: 6}, n)]) {
		t.Fatal("a window of 6 over 17 positions changed nothing")
	}
}

func TestDevicesAgreeOnPagedAttention(t *testing.T) {
	const n, nHeads, nKV, headDim = 17, 6, 2, 16
	r := rand.New(rand.NewPCG(3, 3))
	q, k, v := randVec(r, n*nHeads*headDim), randVec(r, n*nKV*headDim), randVec(r, n*nKV*headDim)
	ref := pagedAttention(t, refdev.New(), q, k, v, n, n, nHeads, nKV, headDim)
	// Outputs are convex combinations of v rows (|v| < ~5): 1e-5 absolute
	// covers two float32 reduction orders over 17 positions.
	tol := relTol(ref, 1e-5)
	for name, d := range devices(t) {
		for _, chunk := range []int{n, 5, 1} {
			agree(t, name, pagedAttention(t, d, q, k, v, n, chunk, nHeads, nKV, headDim), ref, tol)
		}
	}
}

// On the reference device a token's results do not depend on what shares
// its call: bit-identical alone or batched.
func TestReferenceIsBatchInvariant(t *testing.T) {
	d := refdev.New()
	r := rand.New(rand.NewPCG(4, 4))
	const T, rows, cols = 9, 24, 96
	for _, dt := range []kernels.DType{kernels.F32, kernels.Q8_0} {
		m, _ := randMatrix(t, r, dt, rows, cols)
		w, err := d.UploadMatrix(m)
		if err != nil {
			t.Fatal(err)
		}
		x := upload(t, d, randVec(r, T*cols))
		all, _ := d.Alloc(T * rows)
		d.MatMul(all, x, T, w)
		batched := download(d, all)
		for tk := range T {
			one, _ := d.Alloc(rows)
			d.MatMul(one, x.Slice(tk*cols, cols), 1, w)
			got := download(d, one)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(batched[tk*rows+i]) {
					t.Fatalf("%v token %d row %d: %g alone, %g batched", dt, tk, i, got[i], batched[tk*rows+i])
				}
			}
		}
	}
	const n, nHeads, nKV, headDim = 13, 4, 2, 8
	q, k, v := randVec(r, n*nHeads*headDim), randVec(r, n*nKV*headDim), randVec(r, n*nKV*headDim)
	whole := pagedAttention(t, d, q, k, v, n, n, nHeads, nKV, headDim)
	for _, chunk := range []int{1, 3, 4} {
		got := pagedAttention(t, d, q, k, v, n, chunk, nHeads, nKV, headDim)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(whole[i]) {
				t.Fatalf("attention in chunks of %d: [%d] = %g, %g in one call", chunk, i, got[i], whole[i])
			}
		}
	}
}

// A view is a window: operations on it touch nothing outside it.
func TestViewsStayInside(t *testing.T) {
	for name, d := range devices(t) {
		b := upload(t, d, []float32{1, 2, 3, 4, 5, 6})
		d.Add(b.Slice(2, 2), upload(t, d, []float32{10, 20}))
		got := download(d, b)
		want := []float32{1, 2, 13, 24, 5, 6}
		agree(t, "Add on a view on "+name, got, want, make([]float32, 6))
	}
}

// The reference device keeps its memory to itself: a CPU buffer handed to
// it is refused, not read through.
func TestReferenceRefusesForeignBuffers(t *testing.T) {
	cpu := kernels.NewCPU(1)
	defer cpu.Close()
	host, _ := kernels.NewCPUDevice(cpu).Alloc(4)
	d := refdev.New()
	own, _ := d.Alloc(4)
	defer func() {
		if recover() == nil {
			t.Fatal("Add with a CPU buffer did not panic on the reference device")
		}
	}()
	d.Add(own, host)
}
