//go:build goexperiment.simd && amd64

package kernels

import (
	"math"
	"strings"
	"testing"

	"simd/archsimd"
)

// needBackend skips t, naming the missing features, unless the CPU can run
// b's instructions: these tests call b's functions directly.
func needBackend(t *testing.T, b *backend) {
	t.Helper()
	if !canRun(b) {
		t.Skipf("needs %s: the CPU lacks %s", b.name, strings.Join(missingFeatures(b), " "))
	}
}

// TestHalfConversionsExhaustive checks every SIMD half→float32 conversion
// (the AVX-512 and AVX2 integer tricks, VCVTPH2PS, the BF16 shift) against
// the scalar ones for all 65536 inputs: equal bits, or both NaN.
func TestHalfConversionsExhaustive(t *testing.T) {
	src := make([]byte, 2<<16)
	for i := range 1 << 16 {
		src[2*i], src[2*i+1] = byte(i), byte(i>>8)
	}
	p := bptr(src)
	const n = 1 << 16
	check := func(t *testing.T, name string, got []float32, ref func(uint16) float32) {
		t.Helper()
		for i, g := range got {
			want := ref(uint16(i))
			if math.Float32bits(g) != math.Float32bits(want) && !(math.IsNaN(float64(g)) && math.IsNaN(float64(want))) {
				t.Fatalf("%s(%#04x) = %#08x, want %#08x", name, i, math.Float32bits(g), math.Float32bits(want))
			}
		}
	}
	t.Run("avx512", func(t *testing.T) {
		needBackend(t, avx512)
		out := make([]float32, n)
		cvtF16Row512(out, p, n)
		check(t, "f16to32x16", out, F16ToF32)
		clear(out)
		cvtF16RowAsm(out, p, n)
		check(t, "VCVTPH2PS", out, F16ToF32)
		clear(out)
		cvtF16RowAsm(out[:n-5], p, n-5) // masked tail
		check(t, "VCVTPH2PS tail", out[:n-5], F16ToF32)
		if out[n-5] != 0 {
			t.Fatalf("VCVTPH2PS tail wrote past n")
		}
		cvtBF16Row512(out, p, n)
		check(t, "bf16to32x16", out, BF16ToF32)
	})
	t.Run("avx2", func(t *testing.T) {
		needBackend(t, avx2)
		out := make([]float32, n)
		for i := 0; i < n; i += 8 {
			f16to32x8(loadHalf8(p, i)).Store((*[8]float32)(out[i:]))
		}
		check(t, "f16to32x8", out, F16ToF32)
		for i := 0; i < n; i += 8 {
			bf16to32x8(loadHalf8(p, i)).Store((*[8]float32)(out[i:]))
		}
		check(t, "bf16to32x8", out, BF16ToF32)
	})
}

// TestHsum4x16 checks the shared-horizontal-add reduction against hsum16
// (AVX-512 vectors).
func TestHsum4x16(t *testing.T) {
	needBackend(t, avx512)
	var v [4][16]float32
	for i := range v {
		for j := range v[i] {
			v[i][j] = float32(math.Sin(float64(i*16+j))) * float32(math.Pow(10, float64(j%7-3)))
		}
	}
	a, b := archsimd.LoadFloat32x16(&v[0]), archsimd.LoadFloat32x16(&v[1])
	c, d := archsimd.LoadFloat32x16(&v[2]), archsimd.LoadFloat32x16(&v[3])
	var got [4]float32
	hsum4x16(a, b, c, d).Store(&got)
	for i, x := range []archsimd.Float32x16{a, b, c, d} {
		if math.Float32bits(got[i]) != math.Float32bits(hsum16(x)) {
			t.Errorf("hsum4x16[%d] = %g, hsum16 = %g", i, got[i], hsum16(x))
		}
	}
}
