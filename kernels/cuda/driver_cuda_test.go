//go:build cuda && linux && (amd64 || arm64)

package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ebitengine/purego"
)

// haveLibcuda reports whether this machine has an NVIDIA driver library.
func haveLibcuda() bool {
	for _, n := range cudaLibNames {
		if _, err := purego.Dlopen(n, dlopenFlags); err == nil {
			return true
		}
	}
	return false
}

func TestOpenDriverWithoutLibcuda(t *testing.T) {
	if haveLibcuda() {
		t.Skip("this machine has libcuda: TestOpenDriverOnGPU covers it")
	}
	t.Setenv(LibsEnv, t.TempDir())
	d, err := OpenDriver(0, nil)
	if d != nil || !errors.Is(err, ErrNoDevice) {
		t.Fatalf("got %v, %v; want an error wrapping ErrNoDevice", d, err)
	}
	if !strings.Contains(err.Error(), "libcuda.so.1 not found (is the NVIDIA driver installed?)") {
		t.Errorf("error does not name libcuda: %v", err)
	}
	if l := LibraryPaths(); l.CUDA != "" || l.CublasLt != "" {
		t.Errorf("LibraryPaths = %+v after finding nothing", l)
	}
}

// TestFindCublasLtInEnvDir plants a real shared library, a copy of libm
// named libcublasLt.so.12 (a stand-in: only the search is under test), in a
// directory named by BATCHD_CUDA_LIBS and checks the search loads it.
func TestFindCublasLtInEnvDir(t *testing.T) {
	libm := "/lib/" + map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH] + "-linux-gnu/libm.so.6"
	raw, err := os.ReadFile(libm)
	if err != nil {
		t.Skipf("no %s to plant: %v", libm, err)
	}
	dir := t.TempDir()
	planted := filepath.Join(dir, "libcublasLt.so.12")
	if err := os.WriteFile(planted, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(LibsEnv, "/nonexistent/batchd-test:"+dir)
	h, path, err := findCublasLt()
	if err != nil {
		t.Fatal(err)
	}
	if h == 0 || path != planted {
		t.Fatalf("found %q (handle %#x), want the planted %q", path, h, planted)
	}
}

func TestFindCublasLtMissing(t *testing.T) {
	for _, n := range cublasLtLibNames {
		if _, err := purego.Dlopen(n, dlopenFlags); err == nil {
			t.Skipf("this machine has %s", n)
		}
	}
	dir := t.TempDir()
	t.Setenv(LibsEnv, dir)
	_, _, err := findCublasLt()
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("got %v, want an error wrapping ErrNoDevice", err)
	}
	for _, want := range []string{"libcublasLt not found", LibsEnv, filepath.Join(dir, "libcublasLt.so.12")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
}

// TestOpenDriverOnGPU runs only where there is a GPU (scripts/gpu-check.sh
// on the H200): copies, memset, GEMMs against the host, and a captured
// graph replayed on new inputs.
func TestOpenDriverOnGPU(t *testing.T) {
	if !haveLibcuda() {
		t.Skip("no libcuda on this machine: the GPU path is checked by scripts/gpu-check.sh")
	}
	d, err := OpenDriver(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	t.Logf("%s, libraries %+v", d.Name(), LibraryPaths())
	if d.Arch() < 70 || d.Name() == "" {
		t.Fatalf("name %q arch %d", d.Name(), d.Arch())
	}
	free, total, err := d.MemInfo()
	if err != nil || free <= 0 || free > total {
		t.Fatalf("MemInfo %d of %d, %v", free, total, err)
	}

	// A copy through more chunks than there are staging slots.
	n := int64(stagingSlots+3) * stagingSlotBytes
	buf, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(buf)
	src := make([]byte, n)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	if err := d.CopyIn(buf, src); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(src)
	clear(src) // CopyIn's src may be reused on return
	got := make([]byte, n)
	if err := d.CopyOut(got, buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("CopyOut does not give back what CopyIn put")
	}
	if err := d.Memset(buf+1, 100); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyOut(got[:102], buf); err != nil {
		t.Fatal(err)
	}
	if got[0] != want[0] || got[101] != want[101] || !bytes.Equal(got[1:101], make([]byte, 100)) {
		t.Fatal("Memset did not zero exactly its range")
	}
	if err := d.Launch("x", Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0); err == nil || !strings.Contains(err.Error(), "without a kernel module") {
		t.Fatalf("Launch without a module: %v", err)
	}

	for _, et := range []ElemType{ElemF32, ElemF16, ElemBF16} {
		t.Run(et.String(), func(t *testing.T) { gemmOnGPU(t, d, et) })
	}
}

func gemmOnGPU(t *testing.T, d Driver, et ElemType) {
	const m, n, k = 3, 5, 7
	rng := rand.New(rand.NewPCG(5, 6))
	// Small integers: exact in every element type and in the sums.
	vals := func(cnt int) []float32 {
		v := make([]float32, cnt)
		for i := range v {
			v[i] = float32(rng.IntN(9) - 4)
		}
		return v
	}
	encode := func(v []float32) []byte {
		var raw []byte
		for _, f := range v {
			switch et {
			case ElemF32:
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
			case ElemBF16:
				raw = binary.LittleEndian.AppendUint16(raw, uint16(math.Float32bits(f)>>16))
			case ElemF16:
				raw = binary.LittleEndian.AppendUint16(raw, smallIntF16(f))
			}
		}
		return raw
	}
	upload := func(v []float32) DevPtr {
		raw := encode(v)
		p, err := d.Alloc(int64(len(raw)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Free(p) })
		if err := d.CopyIn(p, raw); err != nil {
			t.Fatal(err)
		}
		return p
	}
	w, x := vals(n*k), vals(m*k)
	wp, xp := upload(w), upload(x)
	out, err := d.Alloc(m * n * 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(out) })
	g := Gemm{M: m, N: n, K: k, W: wp, X: xp, Out: out, Type: et}
	check := func(what string, x []float32) {
		t.Helper()
		raw := make([]byte, m*n*4)
		if err := d.CopyOut(raw, out); err != nil {
			t.Fatal(err)
		}
		for i := range m {
			for j := range n {
				var want float32
				for kk := range k {
					want += x[i*k+kk] * w[j*k+kk]
				}
				if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[(i*n+j)*4:])); got != want {
					t.Fatalf("%s: out[%d][%d] = %v, want %v", what, i, j, got, want)
				}
			}
		}
	}
	if err := d.Gemm(g); err != nil {
		t.Fatal(err)
	}
	check("gemm", x)

	graph, err := d.Capture(func() error { return d.Gemm(g) })
	if err != nil {
		t.Fatal(err)
	}
	defer graph.Destroy()
	// The graph reads the captured buffers as they are at replay.
	x2 := vals(m * k)
	if err := d.CopyIn(xp, encode(x2)); err != nil {
		t.Fatal(err)
	}
	if err := d.Replay(graph); err != nil {
		t.Fatal(err)
	}
	check("replay", x2)
}

// smallIntF16 is the IEEE half of an integer in [-4, 4].
func smallIntF16(f float32) uint16 {
	if f == 0 {
		return 0
	}
	var sign uint16
	if f < 0 {
		sign, f = 0x8000, -f
	}
	e := 0
	for f >= 2 {
		f /= 2
		e++
	}
	mant := uint16((f - 1) * 1024)
	return sign | uint16(e+15)<<10 | mant
}
