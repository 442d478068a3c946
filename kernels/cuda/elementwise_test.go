package cuda_test

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/kernels/cuda"
	"github.com/batchd/batchd/kernels/cuda/emu"
	"github.com/batchd/batchd/kernels/refdev"
)

// The kernels of csrc/elementwise.cu run on the host emulation of the GPU
// (package emu, a test double for a real device: every CUDA thread a fiber)
// and are checked against package kernels (conversions, bit for bit) and
// kernels/refdev (arithmetic, within elemTol relative).

// elemTol is the relative error allowed against refdev: float32 rounding
// of a differently ordered sum (the issue allows 1e-3).
const elemTol = 1e-5

// gpu is an emulated device for one test.
type gpu struct {
	t *testing.T
	d *emu.Driver
}

func openGPU(t *testing.T) *gpu {
	t.Helper()
	d, err := emu.Open()
	if errors.Is(err, emu.ErrNoCompiler) && os.Getenv("BATCHD_REQUIRE_CLANG") != "1" {
		t.Skipf("skipping the elementwise kernel tests: no C++ compiler for the CUDA emulation: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return &gpu{t: t, d: d}
}

// alloc returns n bytes, freed when the test ends.
func (g *gpu) alloc(n int) cuda.DevPtr {
	g.t.Helper()
	p, err := g.d.Alloc(int64(max(n, 16)))
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { g.d.Free(p) })
	return p
}

func (g *gpu) put(p cuda.DevPtr, b []byte) {
	g.t.Helper()
	if err := g.d.CopyIn(p, b); err != nil {
		g.t.Fatal(err)
	}
}

// upload allocates room for b and copies it in.
func (g *gpu) upload(b []byte) cuda.DevPtr {
	p := g.alloc(len(b))
	g.put(p, b)
	return p
}

func (g *gpu) get(p cuda.DevPtr, n int) []byte {
	g.t.Helper()
	b := make([]byte, n)
	if err := g.d.CopyOut(b, p); err != nil {
		g.t.Fatal(err)
	}
	return b
}

func (g *gpu) getF32(p cuda.DevPtr, n int) []float32 { return fromF32(g.get(p, 4*n)) }
func (g *gpu) getU16(p cuda.DevPtr, n int) []uint16  { return fromU16(g.get(p, 2*n)) }

func (g *gpu) launch(name string, grid, block uint32, args ...cuda.Arg) {
	g.t.Helper()
	if err := g.d.Launch(name, cuda.Dim3{X: grid, Y: 1, Z: 1}, cuda.Dim3{X: block, Y: 1, Z: 1}, 0, args...); err != nil {
		g.t.Fatal(err)
	}
	if err := g.d.Sync(); err != nil {
		g.t.Fatalf("%s grid %d block %d: %v", name, grid, block, err)
	}
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func u16Bytes(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}

func i32Bytes(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

func fromF32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func fromU16(b []byte) []uint16 {
	v := make([]uint16, len(b)/2)
	for i := range v {
		v[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return v
}

func randF32(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (2*r.Float32() - 1) * scale
	}
	return v
}

// sameBits fails unless got and want are equal bit for bit.
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v (%#x), want %v (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// maxRel is the largest relative error seen by a test, logged at its end.
type maxRel struct{ v float64 }

// check fails when an element of got is further than elemTol from want,
// relative to the larger of |want| and the root mean square of want: an
// element that is the small difference of larger ones (a RoPE rotation
// after a norm) carries its operands' absolute rounding error, not one
// relative to itself.
func (m *maxRel) check(t *testing.T, what string, got, want []float32) {
	t.Helper()
	var ss float64
	for _, w := range want {
		ss += float64(w) * float64(w)
	}
	rms := math.Sqrt(ss / float64(max(len(want), 1)))
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if d == 0 {
			continue
		}
		rel := d / max(math.Abs(float64(want[i])), rms)
		m.v = max(m.v, rel)
		if !(rel <= elemTol) {
			t.Fatalf("%s[%d] = %v, want %v (error %.3g relative to max(|want|, rms %.3g) > %g)", what, i, got[i], want[i], rel, rms, elemTol)
		}
	}
}

// ref runs one refdev operation on host slices.
type ref struct{ d *refdev.Device }

func (r ref) buf(v []float32) kernels.Buf {
	b, _ := r.d.Alloc(len(v))
	r.d.Upload(b, v)
	return b
}

func (r ref) down(b kernels.Buf) []float32 {
	v := make([]float32, b.Len())
	r.d.Download(v, b)
	return v
}

// specialF32 are values the conversions must get exactly right: zeros,
// infinities, NaNs, float32 subnormals, f16 overflow and subnormal
// boundaries, and ties.
var specialF32 = []float32{
	0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
	math.Float32frombits(0x7fc00001), math.Float32frombits(0xff812345), math.Float32frombits(0x7f800001),
	math.Float32frombits(1), math.Float32frombits(0x807fffff), 65504, 65519.99, 65520, -65536, 1e10,
	5.9604645e-8, 2.9802322e-8, 2.9802326e-8, 8.940697e-8, 6.1035156e-5, 6.103515e-5, -3.0517578e-5,
	1.0009765625, 1.00048828125, 1.00146484375, 1.00390625, 1.001953125, 3.3895314e38, -3.4028235e38,
}

func convInput(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		switch i % 3 {
		case 0:
			v[i] = math.Float32frombits(r.Uint32()) // any bit pattern
		case 1:
			v[i] = specialF32[r.IntN(len(specialF32))]
		default:
			v[i] = (2*r.Float32() - 1) * float32(math.Ldexp(1, r.IntN(40)-25))
		}
	}
	return v
}

// TestConvertF32 runs convert_f32_bf16 and convert_f32_f16 on odd lengths,
// at an aligned and a misaligned address, with grids that cover n in one
// pass and in many, and compares with kernels.F32ToBF16 and F32ToF16 bit
// for bit.
func TestConvertF32(t *testing.T) {
	g := openGPU(t)
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 3, 4, 5, 1001, 4099} {
		for _, skew := range []int{0, 1} { // elements of misalignment
			in := convInput(r, n)
			pin := g.upload(f32Bytes(append(make([]float32, skew), in...))) + cuda.DevPtr(4*skew)
			pout := g.alloc(2*(n+skew)) + cuda.DevPtr(2*skew)
			for _, shape := range [][2]uint32{{uint32((n + 255) / 256), 256}, {2, 64}} {
				for _, k := range []struct {
					name string
					conv func(float32) uint16
				}{{"convert_f32_bf16", kernels.F32ToBF16}, {"convert_f32_f16", kernels.F32ToF16}} {
					g.put(pout, make([]byte, 2*n))
					g.launch(k.name, shape[0], shape[1], cuda.Ptr(pout), cuda.Ptr(pin), cuda.I64(int64(n)))
					got := g.getU16(pout, n)
					for i, x := range in {
						if want := k.conv(x); got[i] != want {
							t.Fatalf("%s n=%d skew=%d grid %v: [%d] %v (%#x) → %#x, want %#x", k.name, n, skew, shape, i, x, math.Float32bits(x), got[i], want)
						}
					}
				}
			}
		}
	}
}

// TestConvertF16BF16 converts every half (and a misaligned tail) and
// compares with kernels.F32ToBF16(kernels.F16ToF32(h)).
func TestConvertF16BF16(t *testing.T) {
	g := openGPU(t)
	for _, skew := range []int{0, 1} {
		n := 1<<16 - skew
		in := make([]uint16, 1<<16)
		for i := range in {
			in[i] = uint16(i)
		}
		pin := g.upload(u16Bytes(in)) + cuda.DevPtr(2*skew)
		pout := g.alloc(2 << 16)
		g.launch("convert_f16_bf16", 64, 256, cuda.Ptr(pout), cuda.Ptr(pin), cuda.I64(int64(n)))
		got := g.getU16(pout, n)
		for i := range n {
			h := in[i+skew]
			if want := kernels.F32ToBF16(kernels.F16ToF32(h)); got[i] != want {
				t.Fatalf("skew %d: f16 %#x → bf16 %#x, want %#x", skew, h, got[i], want)
			}
		}
	}
}

// TestDequantQ8_0 dequantizes random Q8_0 blocks (random scales, subnormal
// and special ones included) and compares with kernels.DequantizeQ8_0
// rounded by kernels.F32ToBF16, bit for bit, into an aligned and a
// misaligned output.
func TestDequantQ8_0(t *testing.T) {
	g := openGPU(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, nb := range []int{1, 7, 100} {
		q := make([]byte, nb*kernels.Q8BlockBytes)
		for i := range q {
			q[i] = byte(r.Uint32())
		}
		scales := []uint16{0x0001, 0x03ff, 0x3c00, 0xfbff, 0x7c00, 0x8000}
		for b := range min(nb, len(scales)) {
			binary.LittleEndian.PutUint16(q[b*kernels.Q8BlockBytes:], scales[b])
		}
		want := make([]float32, nb*kernels.Q8BlockSize)
		if err := kernels.DequantizeQ8_0(want, q); err != nil {
			t.Fatal(err)
		}
		pq := g.upload(q)
		for _, skew := range []int{0, 1} {
			pout := g.alloc(2*(len(want)+skew)) + cuda.DevPtr(2*skew)
			g.launch("dequant_q8_0_bf16", uint32((nb*32+255)/256), 256, cuda.Ptr(pout), cuda.Ptr(pq), cuda.I64(int64(nb)))
			got := g.getU16(pout, len(want))
			for i, w := range want {
				if got[i] != kernels.F32ToBF16(w) {
					t.Fatalf("nb=%d skew=%d: [%d] = %#x, want %#x (%v)", nb, skew, i, got[i], kernels.F32ToBF16(w), w)
				}
			}
		}
	}
}

// TestEmbedRows gathers rows of f32, f16 and bf16 tables with odd and
// vector-friendly widths and compares with kernels.Matrix.Row bit for bit.
func TestEmbedRows(t *testing.T) {
	g := openGPU(t)
	r := rand.New(rand.NewPCG(5, 6))
	ids := []int32{3, 0, 3, 6, 1}
	const vocab = 7
	for _, cols := range []int{1, 37, 64, 260} {
		for _, typ := range []struct {
			dt    kernels.DType
			wtype int32
		}{{kernels.F32, 1}, {kernels.F16, 2}, {kernels.BF16, 3}} {
			vals := randF32(r, vocab*cols, 4)
			var data []byte
			switch typ.dt {
			case kernels.F32:
				data = f32Bytes(vals)
			default:
				h := make([]uint16, len(vals))
				for i, v := range vals {
					if typ.dt == kernels.F16 {
						h[i] = kernels.F32ToF16(v)
					} else {
						h[i] = kernels.F32ToBF16(v)
					}
				}
				data = u16Bytes(h)
			}
			m, err := kernels.NewMatrix(typ.dt, vocab, cols, data)
			if err != nil {
				t.Fatal(err)
			}
			pw, pids, pout := g.upload(data), g.upload(i32Bytes(ids)), g.alloc(4*len(ids)*cols)
			for _, block := range []uint32{32, 256} {
				g.launch("embed_rows", uint32(len(ids)), block, cuda.Ptr(pout), cuda.Ptr(pw), cuda.I32(typ.wtype), cuda.Ptr(pids), cuda.I32(int32(cols)))
				got := g.getF32(pout, len(ids)*cols)
				for ti, id := range ids {
					want := make([]float32, cols)
					m.Row(int(id), want)
					sameBits(t, "embed "+typ.dt.String(), got[ti*cols:(ti+1)*cols], want)
				}
			}
		}
	}
}

// TestEmbedEveryHalf widens every f16 and bf16 value (NaNs, infinities,
// subnormals) through embed_rows and compares with kernels.F16ToF32 and
// BF16ToF32 bit for bit.
func TestEmbedEveryHalf(t *testing.T) {
	g := openGPU(t)
	all := make([]uint16, 1<<16)
	for i := range all {
		all[i] = uint16(i)
	}
	pw, pid, pout := g.upload(u16Bytes(all)), g.upload(i32Bytes([]int32{0})), g.alloc(4<<16)
	for _, typ := range []struct {
		wtype int32
		conv  func(uint16) float32
	}{{2, kernels.F16ToF32}, {3, kernels.BF16ToF32}} {
		g.launch("embed_rows", 1, 1024, cuda.Ptr(pout), cuda.Ptr(pw), cuda.I32(typ.wtype), cuda.Ptr(pid), cuda.I32(1<<16))
		got := g.getF32(pout, 1<<16)
		for i, h := range all {
			if want := typ.conv(h); math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("wtype %d: %#x → %#x, want %#x", typ.wtype, h, math.Float32bits(got[i]), math.Float32bits(want))
			}
		}
	}
}

// TestCopyRowsWriteKV: copy_rows and write_kv against refdev's CopyRows and
// WriteKV (a shuffled block table), bit for bit, with odd and
// vector-friendly widths.
func TestCopyRowsWriteKV(t *testing.T) {
	g := openGPU(t)
	rd := ref{refdev.New()}
	r := rand.New(rand.NewPCG(7, 8))
	for _, width := range []int{3, 40, 129} {
		x := randF32(r, 9*width, 2)
		rows := []int32{8, 0, 4, 4}
		px, prow, pout := g.upload(f32Bytes(x)), g.upload(i32Bytes(rows)), g.alloc(4*len(rows)*width)
		want := rd.buf(make([]float32, len(rows)*width))
		rd.d.CopyRows(want, rd.buf(x), width, rows)
		for _, block := range []uint32{32, 128} {
			g.launch("copy_rows", uint32(len(rows)), block, cuda.Ptr(pout), cuda.Ptr(px), cuda.Ptr(prow), cuda.I32(int32(width)))
			sameBits(t, "copy_rows", g.getF32(pout, len(rows)*width), rd.down(want))
		}

		const blocks, bs, start, n = 5, 4, 2, 9
		table := []int32{3, 0, 4}
		k, v := randF32(r, n*width, 2), randF32(r, n*width, 2)
		pool, err := rd.d.AllocKV(blocks, bs, width)
		if err != nil {
			t.Fatal(err)
		}
		rd.d.WriteKV(pool, rd.buf(k), rd.buf(v), table, start, n)
		slots := make([]int32, n)
		for i := range slots {
			p := start + i
			slots[i] = table[p/bs]*bs + int32(p%bs)
		}
		pK, pV := g.alloc(4*blocks*bs*width), g.alloc(4*blocks*bs*width)
		g.put(pK, make([]byte, 4*blocks*bs*width))
		g.put(pV, make([]byte, 4*blocks*bs*width))
		g.launch("write_kv", n, 64, cuda.Ptr(pK), cuda.Ptr(pV), cuda.Ptr(g.upload(f32Bytes(k))), cuda.Ptr(g.upload(f32Bytes(v))),
			cuda.Ptr(g.upload(i32Bytes(slots))), cuda.I32(n), cuda.I32(int32(width)))
		sameBits(t, "write_kv K", g.getF32(pK, blocks*bs*width), rd.down(pool.K))
		sameBits(t, "write_kv V", g.getF32(pV, blocks*bs*width), rd.down(pool.V))
	}
}

// TestRMSNorm runs rmsnorm (into another buffer and in place) and
// add_rmsnorm over odd and large dims, one and several rows, and block
// sizes from one warp to 1024 threads, against refdev's RMSNorm (and Add,
// bit for bit, for the residual).
func TestRMSNorm(t *testing.T) {
	g := openGPU(t)
	rd := ref{refdev.New()}
	r := rand.New(rand.NewPCG(9, 10))
	var m maxRel
	const eps = 1e-6
	for _, dim := range []int{1, 7, 37, 128, 1000, 4099} {
		for _, rows := range []int{1, 3} {
			x, w, delta := randF32(r, rows*dim, 3), randF32(r, dim, 1.5), randF32(r, rows*dim, 1)
			want := rd.buf(make([]float32, rows*dim))
			rd.d.RMSNorm(want, rd.buf(x), rd.buf(w), rows, dim, eps)
			wantN := rd.down(want)
			resid := rd.buf(x)
			rd.d.Add(resid, rd.buf(delta))
			rd.d.RMSNorm(want, resid, rd.buf(w), rows, dim, eps)
			wantAdd, wantResid := rd.down(want), rd.down(resid)

			pw, pd := g.upload(f32Bytes(w)), g.upload(f32Bytes(delta))
			for _, block := range []uint32{32, 128, 256, 1024} {
				px, pout := g.upload(f32Bytes(x)), g.alloc(4*rows*dim)
				g.launch("rmsnorm", uint32(rows), block, cuda.Ptr(pout), cuda.Ptr(px), cuda.Ptr(pw), cuda.I32(int32(dim)), cuda.F32(eps))
				m.check(t, "rmsnorm", g.getF32(pout, rows*dim), wantN)
				sameBits(t, "rmsnorm input", g.getF32(px, rows*dim), x)

				g.launch("rmsnorm", uint32(rows), block, cuda.Ptr(px), cuda.Ptr(px), cuda.Ptr(pw), cuda.I32(int32(dim)), cuda.F32(eps))
				m.check(t, "rmsnorm in place", g.getF32(px, rows*dim), wantN)

				g.put(px, f32Bytes(x))
				g.launch("add_rmsnorm", uint32(rows), block, cuda.Ptr(pout), cuda.Ptr(px), cuda.Ptr(pd), cuda.Ptr(pw), cuda.I32(int32(dim)), cuda.F32(eps))
				sameBits(t, "add_rmsnorm resid", g.getF32(px, rows*dim), wantResid)
				m.check(t, "add_rmsnorm", g.getF32(pout, rows*dim), wantAdd)
			}
		}
	}
	t.Logf("largest relative error against refdev: %.3g", m.v)
}

// ropeTables are the [T][nPairs] cos and sin tables of pos·invFreq, as
// the CUDA device computes them for the kernels.
func ropeTables(pos []int32, invFreq []float32) (cs, sn []float32) {
	for _, p := range pos {
		for _, f := range invFreq {
			s, c := math.Sincos(float64(float32(p) * f))
			cs, sn = append(cs, float32(c)), append(sn, float32(s))
		}
	}
	return cs, sn
}

func invFreqs(nPairs, headDim int) []float32 {
	f := make([]float32, nPairs)
	for i := range f {
		f[i] = float32(math.Pow(10000, -float64(2*i)/float64(headDim)))
	}
	return f
}

// TestRoPE rotates full and partial head dims, adjacent and neox pairs,
// against refdev's RoPE.
func TestRoPE(t *testing.T) {
	g := openGPU(t)
	rd := ref{refdev.New()}
	r := rand.New(rand.NewPCG(11, 12))
	var m maxRel
	for _, c := range []struct{ T, heads, headDim, nPairs int }{{1, 1, 2, 1}, {3, 5, 10, 5}, {4, 3, 10, 3}, {2, 7, 64, 32}, {1, 2, 128, 16}} {
		pos := make([]int32, c.T)
		for i := range pos {
			pos[i] = int32(r.IntN(5000))
		}
		invFreq := invFreqs(c.nPairs, 2*c.nPairs)
		cs, sn := ropeTables(pos, invFreq)
		pcs, psn := g.upload(f32Bytes(cs)), g.upload(f32Bytes(sn))
		for _, neox := range []bool{false, true} {
			x := randF32(r, c.T*c.heads*c.headDim, 3)
			want := rd.buf(x)
			rd.d.RoPE(want, c.T, c.heads, c.headDim, pos, invFreq, neox)
			for _, block := range []uint32{32, 96} {
				px := g.upload(f32Bytes(x))
				g.launch("rope", uint32(c.T), block, cuda.Ptr(px), cuda.Ptr(pcs), cuda.Ptr(psn), cuda.I32(int32(c.heads)),
					cuda.I32(int32(c.headDim)), cuda.I32(int32(c.nPairs)), cuda.I32(b2i(neox)))
				m.check(t, "rope", g.getF32(px, len(x)), rd.down(want))
			}
		}
	}
	t.Logf("largest relative error against refdev: %.3g", m.v)
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// TestAddBiasAddSiLU: add_bias and add bit for bit, silu_mul within
// elemTol, against refdev, over odd lengths, misaligned starts and grids
// smaller than the data.
func TestAddBiasAddSiLU(t *testing.T) {
	g := openGPU(t)
	rd := ref{refdev.New()}
	r := rand.New(rand.NewPCG(13, 14))
	var m maxRel
	for _, n := range []int{1, 5, 64, 1027} {
		for _, skew := range []int{0, 1} {
			a, b := randF32(r, n, 20), randF32(r, n, 3)
			pa := g.upload(f32Bytes(append(make([]float32, skew), a...))) + cuda.DevPtr(4*skew)
			pb := g.upload(f32Bytes(append(make([]float32, skew), b...))) + cuda.DevPtr(4*skew)

			want := rd.buf(a)
			rd.d.Add(want, rd.buf(b))
			g.launch("add", 2, 64, cuda.Ptr(pa), cuda.Ptr(pb), cuda.I64(int64(n)))
			sameBits(t, "add", g.getF32(pa, n), rd.down(want))

			g.put(pa, f32Bytes(a))
			want = rd.buf(a)
			rd.d.SiLUMul(want, rd.buf(b))
			g.launch("silu_mul", uint32((n+255)/256), 256, cuda.Ptr(pa), cuda.Ptr(pb), cuda.I64(int64(n)))
			m.check(t, "silu_mul", g.getF32(pa, n), rd.down(want))
		}
		const rows = 3
		x, bias := randF32(r, rows*n, 5), randF32(r, n, 5)
		want := rd.buf(x)
		rd.d.AddBias(want, rd.buf(bias), rows, n)
		px := g.upload(f32Bytes(x))
		g.launch("add_bias", rows, 32, cuda.Ptr(px), cuda.Ptr(g.upload(f32Bytes(bias))), cuda.I32(int32(n)))
		sameBits(t, "add_bias", g.getF32(px, rows*n), rd.down(want))
	}
	t.Logf("largest relative error of silu_mul against refdev: %.3g", m.v)
}

// TestQKVPost runs the fused qkv_post and, on the same emulated device, the
// unfused sequence it stands for (add_bias, rmsnorm per head, rope,
// write_kv), which must agree on q, k and the pool rows: bit for bit where
// both sum the squares in the same order (no norm, or a head dim rmsnorm
// does not vectorize: it runs on one warp here, as qkv_post's per-head
// sums), within elemTol otherwise; and the result against refdev's chain
// within elemTol, with and
// without biases and norms, adjacent and neox pairs, partial rotary dims,
// odd head dims and several block sizes.
func TestQKVPost(t *testing.T) {
	g := openGPU(t)
	rd := ref{refdev.New()}
	r := rand.New(rand.NewPCG(15, 16))
	var m maxRel
	const eps = 1e-6
	for _, c := range []struct{ T, heads, kvHeads, headDim, nPairs int }{
		{1, 2, 1, 8, 4}, {3, 4, 2, 10, 5}, {5, 6, 2, 64, 32}, {2, 3, 3, 37, 9},
	} {
		qDim, kvDim := c.heads*c.headDim, c.kvHeads*c.headDim
		const blocks, bs = 4, 4
		table := []int32{2, 0, 3}
		start := r.IntN(bs)
		pos := make([]int32, c.T)
		slots := make([]int32, c.T)
		for i := range pos {
			p := start + i
			pos[i] = int32(p)
			slots[i] = table[p/bs]*bs + int32(p%bs)
		}
		invFreq := invFreqs(c.nPairs, 2*c.nPairs)
		cs, sn := ropeTables(pos, invFreq)
		pcs, psn, pslots := g.upload(f32Bytes(cs)), g.upload(f32Bytes(sn)), g.upload(i32Bytes(slots))
		poolN := blocks * bs * kvDim
		for _, opt := range []struct{ bias, norm, neox bool }{{false, false, false}, {true, false, true}, {false, true, false}, {true, true, true}} {
			q, k, v := randF32(r, c.T*qDim, 3), randF32(r, c.T*kvDim, 3), randF32(r, c.T*kvDim, 3)
			bq, bk, bv := randF32(r, qDim, 1), randF32(r, kvDim, 1), randF32(r, kvDim, 1)
			qn, kn := randF32(r, c.headDim, 2), randF32(r, c.headDim, 2)

			// refdev, call by call.
			rq, rk, rv := rd.buf(q), rd.buf(k), rd.buf(v)
			if opt.bias {
				rd.d.AddBias(rq, rd.buf(bq), c.T, qDim)
				rd.d.AddBias(rk, rd.buf(bk), c.T, kvDim)
				rd.d.AddBias(rv, rd.buf(bv), c.T, kvDim)
			}
			if opt.norm {
				rd.d.RMSNorm(rq, rq, rd.buf(qn), c.T*c.heads, c.headDim, eps)
				rd.d.RMSNorm(rk, rk, rd.buf(kn), c.T*c.kvHeads, c.headDim, eps)
			}
			rd.d.RoPE(rq, c.T, c.heads, c.headDim, pos, invFreq, opt.neox)
			rd.d.RoPE(rk, c.T, c.kvHeads, c.headDim, pos, invFreq, opt.neox)
			pool, err := rd.d.AllocKV(blocks, bs, kvDim)
			if err != nil {
				t.Fatal(err)
			}
			rd.d.WriteKV(pool, rk, rv, table, start, c.T)

			pbq, pbk, pbv := g.upload(f32Bytes(bq)), g.upload(f32Bytes(bk)), g.upload(f32Bytes(bv))
			pqn, pkn := g.upload(f32Bytes(qn)), g.upload(f32Bytes(kn))

			// The unfused kernels.
			uq, uk, uv := g.upload(f32Bytes(q)), g.upload(f32Bytes(k)), g.upload(f32Bytes(v))
			uK, uV := g.upload(make([]byte, 4*poolN)), g.upload(make([]byte, 4*poolN))
			if opt.bias {
				g.launch("add_bias", uint32(c.T), 64, cuda.Ptr(uq), cuda.Ptr(pbq), cuda.I32(int32(qDim)))
				g.launch("add_bias", uint32(c.T), 64, cuda.Ptr(uk), cuda.Ptr(pbk), cuda.I32(int32(kvDim)))
				g.launch("add_bias", uint32(c.T), 64, cuda.Ptr(uv), cuda.Ptr(pbv), cuda.I32(int32(kvDim)))
			}
			if opt.norm {
				g.launch("rmsnorm", uint32(c.T*c.heads), 32, cuda.Ptr(uq), cuda.Ptr(uq), cuda.Ptr(pqn), cuda.I32(int32(c.headDim)), cuda.F32(eps))
				g.launch("rmsnorm", uint32(c.T*c.kvHeads), 32, cuda.Ptr(uk), cuda.Ptr(uk), cuda.Ptr(pkn), cuda.I32(int32(c.headDim)), cuda.F32(eps))
			}
			for _, x := range []struct {
				p     cuda.DevPtr
				heads int
			}{{uq, c.heads}, {uk, c.kvHeads}} {
				g.launch("rope", uint32(c.T), 64, cuda.Ptr(x.p), cuda.Ptr(pcs), cuda.Ptr(psn), cuda.I32(int32(x.heads)),
					cuda.I32(int32(c.headDim)), cuda.I32(int32(c.nPairs)), cuda.I32(b2i(opt.neox)))
			}
			g.launch("write_kv", uint32(c.T), 64, cuda.Ptr(uK), cuda.Ptr(uV), cuda.Ptr(uk), cuda.Ptr(uv), cuda.Ptr(pslots),
				cuda.I32(int32(c.T)), cuda.I32(int32(kvDim)))
			unfused := [][]float32{g.getF32(uq, len(q)), g.getF32(uk, len(k)), g.getF32(uK, poolN), g.getF32(uV, poolN)}

			maybe := func(on bool, p cuda.DevPtr) cuda.Arg {
				if on {
					return cuda.Ptr(p)
				}
				return cuda.Ptr(0)
			}
			for _, block := range []uint32{32, 64, 256} {
				fq, fk, fv := g.upload(f32Bytes(q)), g.upload(f32Bytes(k)), g.upload(f32Bytes(v))
				fK, fV := g.upload(make([]byte, 4*poolN)), g.upload(make([]byte, 4*poolN))
				g.launch("qkv_post", uint32(c.T), block, cuda.Ptr(fq), cuda.Ptr(fk), cuda.Ptr(fv),
					maybe(opt.bias, pbq), maybe(opt.bias, pbk), maybe(opt.bias, pbv), maybe(opt.norm, pqn), maybe(opt.norm, pkn), cuda.F32(eps),
					cuda.Ptr(pcs), cuda.Ptr(psn), cuda.I32(int32(c.nPairs)), cuda.I32(b2i(opt.neox)),
					cuda.I32(int32(c.heads)), cuda.I32(int32(c.kvHeads)), cuda.I32(int32(c.headDim)), cuda.Ptr(fK), cuda.Ptr(fV), cuda.Ptr(pslots))
				fused := [][]float32{g.getF32(fq, len(q)), g.getF32(fk, len(k)), g.getF32(fK, poolN), g.getF32(fV, poolN)}
				want := [][]float32{rd.down(rq), rd.down(rk), rd.down(pool.K), rd.down(pool.V)}
				for i, name := range []string{"q", "k", "K pool", "V pool"} {
					if !opt.norm || c.headDim%4 != 0 {
						sameBits(t, "qkv_post "+name+" against the unfused kernels", fused[i], unfused[i])
					}
					m.check(t, "qkv_post "+name+" against the unfused kernels", fused[i], unfused[i])
					m.check(t, "qkv_post "+name+" against refdev", fused[i], want[i])
				}
				sameBits(t, "qkv_post leaves v", g.getF32(fv, len(v)), v)
			}
		}
	}
	t.Logf("largest relative error against refdev: %.3g", m.v)
}
