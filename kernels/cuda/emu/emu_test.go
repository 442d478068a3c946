package emu

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/kernels/cuda"
)

// open starts a harness for one test, skipping when no compiler exists
// (unless BATCHD_REQUIRE_CLANG=1, as CI sets it).
func open(t *testing.T, o Options) *Driver {
	t.Helper()
	d, err := OpenOptions(o)
	if errors.Is(err, ErrNoCompiler) && os.Getenv("BATCHD_REQUIRE_CLANG") != "1" {
		t.Skipf("skipping the CUDA emulation tests: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

func alloc(t *testing.T, d *Driver, n int) cuda.DevPtr {
	t.Helper()
	p, err := d.Alloc(int64(n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(p) })
	return p
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func i32bytes(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

func copyIn(t *testing.T, d *Driver, p cuda.DevPtr, b []byte) {
	t.Helper()
	if err := d.CopyIn(p, b); err != nil {
		t.Fatal(err)
	}
}

func readF32(t *testing.T, d *Driver, p cuda.DevPtr, n int) []float32 {
	t.Helper()
	b := make([]byte, 4*n)
	if err := d.CopyOut(b, p); err != nil {
		t.Fatal(err)
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func readI32(t *testing.T, d *Driver, p cuda.DevPtr, n int) []int32 {
	t.Helper()
	b := make([]byte, 4*n)
	if err := d.CopyOut(b, p); err != nil {
		t.Fatal(err)
	}
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func mustLaunch(t *testing.T, d *Driver, name string, grid, block cuda.Dim3, shared uint32, args ...cuda.Arg) {
	t.Helper()
	if err := d.Launch(name, grid, block, shared, args...); err != nil {
		t.Fatal(err)
	}
}

// TestBlockSum sums known integers per block over a 2-D grid, with blocks
// of several shapes: per-warp shuffles, shared memory, a barrier and a
// warp-0-only final reduction.
func TestBlockSum(t *testing.T) {
	d := open(t, Options{})
	const gx, gy, n = 3, 2, 1000
	in := make([]float32, gx*gy*n)
	for i := range in {
		in[i] = float32(i % 997)
	}
	pin, pout := alloc(t, d, 4*len(in)), alloc(t, d, 4*gx*gy)
	copyIn(t, d, pin, f32bytes(in))
	for _, block := range []cuda.Dim3{d3(32, 1, 1), d3(256, 1, 1), d3(64, 4, 1), d3(1024, 1, 1)} {
		mustLaunch(t, d, "selftest_block_sum", d3(gx, gy, 1), block, 0, cuda.Ptr(pout), cuda.Ptr(pin), cuda.I32(n))
		got := readF32(t, d, pout, gx*gy)
		for b := range got {
			var want float32
			for i := range n {
				want += in[b*n+i] // exact: integer sums below 2²⁴
			}
			if got[b] != want {
				t.Errorf("block %v: out[%d] = %v, want %v", block, b, got[b], want)
			}
		}
	}
}

// TestWarp0 shuffles in warp 0 only, while the block's other warps return.
func TestWarp0(t *testing.T) {
	d := open(t, Options{})
	const blocks = 4
	in := make([]int32, 32*blocks)
	for i := range in {
		in[i] = int32(i*i + 7)
	}
	pin, pout := alloc(t, d, 4*len(in)), alloc(t, d, 4*2*blocks)
	copyIn(t, d, pin, i32bytes(in))
	mustLaunch(t, d, "selftest_warp0", d3(blocks, 1, 1), d3(128, 1, 1), 0, cuda.Ptr(pout), cuda.Ptr(pin))
	got := readI32(t, d, pout, 2*blocks)
	for b := range blocks {
		var sum int32
		for l := range 32 {
			sum += in[b*32+l]
		}
		if got[2*b] != sum || got[2*b+1] != in[b*32+6] {
			t.Errorf("block %d: sum %d, lane 5 after rotation %d; want %d, %d", b, got[2*b], got[2*b+1], sum, in[b*32+6])
		}
	}
}

// TestDynamicShared reverses through dynamic shared memory, which needs the
// barrier between the writes and the reads of other threads.
func TestDynamicShared(t *testing.T) {
	d := open(t, Options{})
	const blocks, n = 3, 700
	pout := alloc(t, d, 4*blocks*n)
	mustLaunch(t, d, "selftest_dyn", d3(blocks, 1, 1), d3(96, 1, 1), 4*n, cuda.Ptr(pout), cuda.I32(n))
	got := readI32(t, d, pout, blocks*n)
	for b := range blocks {
		for i := range n {
			if want := int32(3*(n-1-i) + b); got[b*n+i] != want {
				t.Fatalf("out[%d][%d] = %d, want %d", b, i, got[b*n+i], want)
			}
		}
	}
}

// TestEarlyExit: threads that returned count as arrived at a barrier.
func TestEarlyExit(t *testing.T) {
	d := open(t, Options{})
	const n = 45
	p := alloc(t, d, 4*128)
	mustLaunch(t, d, "selftest_early_exit", d3(1, 1, 1), d3(128, 1, 1), 0, cuda.Ptr(p), cuda.I32(n))
	got := readI32(t, d, p, n)
	for i := range n {
		if want := int32(2 * (n - 1 - i)); got[i] != want {
			t.Fatalf("out[%d] = %d, want %d", i, got[i], want)
		}
	}
}

// TestMixedArgs passes every parameter kind in mixed order, with values
// whose high bits would show a wrong width.
func TestMixedArgs(t *testing.T) {
	d := open(t, Options{})
	pout, pp, pq := alloc(t, d, 6*8), alloc(t, d, 4), alloc(t, d, 4)
	copyIn(t, d, pp, i32bytes([]int32{-12345}))
	mustLaunch(t, d, "selftest_args", d3(1, 1, 1), d3(32, 1, 1), 0,
		cuda.Ptr(pout), cuda.I32(-7), cuda.Ptr(pp), cuda.F32(21.25), cuda.I64(-1<<40-3), cuda.U32(0xfffffff0),
		cuda.U64(1<<62+5), cuda.Ptr(pq))
	b := make([]byte, 6*8)
	if err := d.CopyOut(b, pout); err != nil {
		t.Fatal(err)
	}
	want := []int64{-7, -12345, 42, -1<<40 - 3, 0xfffffff0, 1<<62 + 5}
	for i, w := range want {
		if g := int64(binary.LittleEndian.Uint64(b[8*i:])); g != w {
			t.Errorf("out[%d] = %d, want %d", i, g, w)
		}
	}
	if q := readF32(t, d, pq, 1)[0]; q != 21.25 {
		t.Errorf("q[0] = %v, want 21.25", q)
	}
}

// TestIndex checks every thread's indices on a 3-D grid of 2-D blocks.
func TestIndex(t *testing.T) {
	d := open(t, Options{})
	grid, block := d3(3, 2, 2), d3(16, 4, 1)
	n := 3 * 2 * 2 * 16 * 4
	pout := alloc(t, d, 4*n)
	mustLaunch(t, d, "selftest_index", grid, block, 0, cuda.Ptr(pout))
	got := readI32(t, d, pout, n)
	i := 0
	for bz := range 2 {
		for by := range 2 {
			for bx := range 3 {
				for ty := range 4 {
					for tx := range 16 {
						if want := int32(tx | ty<<8 | bx<<16 | by<<22 | bz<<28); got[i] != want {
							t.Fatalf("out[%d] = %#x, want %#x", i, got[i], want)
						}
						i++
					}
				}
			}
		}
	}
}

// TestMisuse: a half-warp shuffle, unknown kernels, wrong arguments and
// bad blocks are errors naming what is wrong, and the driver stays usable.
func TestMisuse(t *testing.T) {
	d := open(t, Options{})
	p := alloc(t, d, 4*64)
	one := d3(1, 1, 1)
	for _, c := range []struct {
		name  string
		block cuda.Dim3
		args  []cuda.Arg
		want  string
	}{
		{"selftest_bad_shuffle", d3(64, 1, 1), []cuda.Arg{cuda.Ptr(p), cuda.I32(0)}, "kernel selftest_bad_shuffle: deadlock in block (0,0,0): 16 lanes of warp 0 wait at a warp shuffle while lane 16 (thread 16,0) has returned"},
		{"selftest_bad_shuffle", d3(64, 1, 1), []cuda.Arg{cuda.Ptr(p), cuda.I32(1)}, "while lane 16 (thread 16,0) waits at SYNC()"},
		{"no_such_kernel", d3(32, 1, 1), nil, "launch no_such_kernel: no such kernel"},
		{"selftest_dyn", d3(32, 1, 1), []cuda.Arg{cuda.Ptr(p)}, "launch selftest_dyn: 1 arguments, the kernel (csrc/selftest.cu) takes 2"},
		{"selftest_dyn", d3(32, 1, 1), []cuda.Arg{cuda.Ptr(p), cuda.I64(3)}, "argument 1 (int n) is 8 bytes, the kernel takes 4"},
		{"selftest_index", d3(48, 1, 1), []cuda.Arg{cuda.Ptr(p)}, "multiple of 32 threads"},
		{"selftest_index", d3(32, 1, 2), []cuda.Arg{cuda.Ptr(p)}, "2-D block"},
	} {
		err := d.Launch(c.name, one, c.block, 0, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("launch %s %v: error %v, want one containing %q", c.name, c.block, err, c.want)
		}
	}
	mustLaunch(t, d, "selftest_index", one, d3(64, 1, 1), 0, cuda.Ptr(p))
	if got := readI32(t, d, p, 64); got[63] != 63 {
		t.Errorf("after the errors, out[63] = %d, want 63", got[63])
	}
	if err := d.CopyIn(p+4*63, make([]byte, 8)); err == nil || !strings.Contains(err.Error(), "not inside one allocation") {
		t.Errorf("copy past an allocation: error %v", err)
	}
}

// TestMemoryBudget: MemInfo reports the configured budget, and Alloc past it
// fails with kernels.ErrDeviceMemory.
func TestMemoryBudget(t *testing.T) {
	d := open(t, Options{Memory: 1 << 20})
	p := alloc(t, d, 600<<10)
	free, total, err := d.MemInfo()
	if err != nil || free != (1<<20)-(600<<10) || total != 1<<20 {
		t.Fatalf("MemInfo = %d, %d, %v", free, total, err)
	}
	if _, err := d.Alloc(600 << 10); !errors.Is(err, kernels.ErrDeviceMemory) {
		t.Fatalf("alloc past the budget: %v, want kernels.ErrDeviceMemory", err)
	}
	d.Free(p)
	q, err := d.Alloc(1 << 20)
	if err != nil {
		t.Fatalf("alloc of the whole budget after a free: %v", err)
	}
	d.Free(q)
}

// gemmRef is the plain Go loop the double must match bit for bit: float32
// products summed over k in order.
func gemmRef(x, w []float32, m, n, k int) []float32 {
	out := make([]float32, m*n)
	for i := range m {
		for j := range n {
			var acc float32
			for l := range k {
				acc += float32(x[i*k+l] * w[j*k+l])
			}
			out[i*n+j] = acc
		}
	}
	return out
}

// TestGemm runs the cuBLASLt double on f32, bf16 and f16 operands against
// a Go loop over the same (rounded) values.
func TestGemm(t *testing.T) {
	d := open(t, Options{})
	const m, n, k = 5, 7, 67
	for _, typ := range []cuda.ElemType{cuda.ElemF32, cuda.ElemBF16, cuda.ElemF16} {
		x, w := make([]float32, m*k), make([]float32, n*k)
		for i := range x {
			x[i] = float32(math.Sin(float64(i)*0.37)) * 3
		}
		for i := range w {
			w[i] = float32(math.Cos(float64(i)*0.11)) / 2
		}
		enc := func(v []float32) []byte {
			if typ == cuda.ElemF32 {
				return f32bytes(v)
			}
			b := make([]byte, 2*len(v))
			for i, f := range v {
				var h uint16
				if typ == cuda.ElemBF16 {
					h = kernels.F32ToBF16(f)
					v[i] = kernels.BF16ToF32(h)
				} else {
					h = kernels.F32ToF16(f)
					v[i] = kernels.F16ToF32(h)
				}
				binary.LittleEndian.PutUint16(b[2*i:], h)
			}
			return b
		}
		px, pw, po := alloc(t, d, len(x)*typ.Size()), alloc(t, d, len(w)*typ.Size()), alloc(t, d, 4*m*n)
		copyIn(t, d, px, enc(x))
		copyIn(t, d, pw, enc(w))
		if err := d.Gemm(cuda.Gemm{M: m, N: n, K: k, W: pw, X: px, Out: po, Type: typ}); err != nil {
			t.Fatal(err)
		}
		got, want := readF32(t, d, po, m*n), gemmRef(x, w, m, n, k)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%v: out[%d] = %v, want %v", typ, i, got[i], want[i])
			}
		}
	}
}

// TestCaptureReplay records a launch and a GEMM, then replays them on new
// input data copied into the same buffers.
func TestCaptureReplay(t *testing.T) {
	d := open(t, Options{})
	const n = 256
	pin, psum := alloc(t, d, 4*n), alloc(t, d, 4)
	px, pw, po := alloc(t, d, 4*2), alloc(t, d, 4*2), alloc(t, d, 4)
	g, err := d.Capture(func() error {
		if err := d.Launch("selftest_block_sum", d3(1, 1, 1), d3(128, 1, 1), 0, cuda.Ptr(psum), cuda.Ptr(pin), cuda.I32(n)); err != nil {
			return err
		}
		return d.Gemm(cuda.Gemm{M: 1, N: 1, K: 2, W: pw, X: px, Out: po, Type: cuda.ElemF32})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	for round := range 3 {
		in := make([]float32, n)
		var want float32
		for i := range in {
			in[i] = float32(i*(round+1) + round)
			want += in[i]
		}
		copyIn(t, d, pin, f32bytes(in))
		copyIn(t, d, px, f32bytes([]float32{float32(round), 2}))
		copyIn(t, d, pw, f32bytes([]float32{10, 0.5}))
		if err := d.Replay(g); err != nil {
			t.Fatal(err)
		}
		if got := readF32(t, d, psum, 1)[0]; got != want {
			t.Errorf("round %d: sum %v, want %v", round, got, want)
		}
		if got := readF32(t, d, po, 1)[0]; got != float32(10*round+1) {
			t.Errorf("round %d: gemm %v, want %v", round, got, 10*round+1)
		}
	}
	// Capture checks launches as it records them, and refuses other calls.
	if _, err := d.Capture(func() error { return d.Launch("nope", d3(1, 1, 1), d3(32, 1, 1), 0) }); err == nil || !strings.Contains(err.Error(), "no such kernel") {
		t.Errorf("capture of an unknown kernel: %v", err)
	}
	if _, err := d.Capture(func() error { return d.Sync() }); err == nil || !strings.Contains(err.Error(), "may only Launch and Gemm") {
		t.Errorf("Sync inside Capture: %v", err)
	}
}

// TestCrash: a kernel that faults kills the harness; the error says so with
// the kernel's name from its stderr, and later calls fail too.
func TestCrash(t *testing.T) {
	d := open(t, Options{})
	err := d.Launch("selftest_args", d3(1, 1, 1), d3(32, 1, 1), 0,
		cuda.Ptr(8), cuda.I32(0), cuda.Ptr(8), cuda.F32(0), cuda.I64(0), cuda.U32(0), cuda.U64(0), cuda.Ptr(8))
	if err == nil || !strings.Contains(err.Error(), "harness died") || !strings.Contains(err.Error(), "in kernel selftest_args") {
		t.Fatalf("launch that faults: %v", err)
	}
	if err := d.Sync(); err == nil || !strings.Contains(err.Error(), "harness died") {
		t.Fatalf("sync after the crash: %v", err)
	}
}

// TestParseRefusesTypes: a kernel parameter the launcher cannot pass is an
// error naming the kernel and the parameter.
func TestParseRefusesTypes(t *testing.T) {
	_, err := parseParam("double scale")
	if err == nil || !strings.Contains(err.Error(), `type "double"`) {
		t.Fatalf("double parameter: %v", err)
	}
	p, err := parseParam(" const float *__restrict__ x")
	if err != nil || p.ctype != "const float*" || p.size != 8 || p.name != "x" {
		t.Fatalf("pointer parameter: %+v, %v", p, err)
	}
}

func d3(x, y, z uint32) cuda.Dim3 { return cuda.Dim3{X: x, Y: y, Z: z} }
