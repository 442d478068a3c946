// Package devicetest is the contract suite every kernels.Device passes
// (the CPU device, kernels/refdev, kernels/cuda): each method of the
// interface, and of FamilyDevice, FusedDevice and PassDevice where the
// device implements them, run on the device and checked against a plain
// float64 computation in this package, under one tolerance policy. An
// implementation's own test calls Run with a Harness; its other tests keep
// what only it has (the CPU's code paths, CUDA's graphs and kernels).
//
// # Tolerances
//
// The reference is float64 over the device's float32 inputs, with the
// weights as the matrix stores them (Matrix.Row's exact dequantization,
// which package kernels' own tests pin) and RoPE's angle pos·invFreq
// rounded to float32, as the Device contract has it. One policy covers
// every device; "|Δ|" is |got − reference|:
//
//   - Exact, bit for bit with the float32 result: Upload, Download,
//     CopyRows, WriteKV and WriteKVSegments (the pool's rows), Add, AddBias,
//     Scale, the residual of AddRMSNorm, Embed of F32, F16 and BF16 weights,
//     and a device against itself: a token's MatMul and attention results
//     alone, batched or in chunks (batch invariance).
//   - Embed of a block quantization: |Δ| ≤ 2⁻⁸·|w| (a device may keep such
//     weights as BF16, whose unit roundoff that is).
//   - Elementwise functions (RMSNorm, RoPE, SiLUMul, GELUMul, SwiGLUOAI,
//     SoftCap, the norm of AddRMSNorm, QKVPost's q and k): |Δ| ≤
//     ElemTol·max(1, |reference|).
//   - Attention (PagedAttention, PagedAttentionOpts, PagedAttentionSegments):
//     |Δ| ≤ ElemTol·(1 + Σ_p a_p·|v_p|), a_p the reference's softmax
//     weights: the output is a convex combination of V rows.
//   - MatMul of a row of weights w with activations x:
//     |Δ| ≤ MatMulRel(type)·Σ_c|x_c·w_c| + A, where MatMulRel is 1e-5 (float32
//     sums in any fixed order) for F32, plus F16's unit roundoff 2⁻¹¹ for
//     F16 and BF16's 2⁻⁸ for BF16 (a device may round the activations to the
//     weight's type), and 2⁻⁷ for the block quantizations (weights and
//     activations in BF16); and for the block quantizations
//     A = Σ_blocks max|x_block|/254·Σ_block|w|, half a step of int8
//     activation blocks of the type's block size (a device may quantize the
//     activations as the CPU does), 0 for the others.
//
// The Device interface has no sampling operations (argmax and the seeded
// draw run on the host); kernels/cuda's staged sampling kernels are
// checked by that package's own tests.
package devicetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/batchd/batchd/kernels"
)

// ElemTol is the relative tolerance of elementwise functions and attention
// (see the package doc): a few float32 roundings and a vector exp, rsqrt or
// sincos that rounds differently from the standard library's.
const ElemTol = 1e-5

// MatMulRel is the tolerance of MatMul over weights of type t relative to
// Σ|x·w| (see the package doc).
func MatMulRel(t kernels.DType) float64 {
	const sum = 1e-5
	switch {
	case t == kernels.F32:
		return sum
	case t == kernels.F16:
		return sum + 0x1p-11
	case t == kernels.BF16:
		return sum + 0x1p-8
	}
	return sum + 0x1p-7
}

// Harness gives the suite one implementation.
type Harness struct {
	// New returns a fresh device; the suite closes it when the subtest
	// that asked for it ends.
	New func(t *testing.T) kernels.Device
	// Types are the weight types the device's UploadMatrix takes; nil is
	// every type package kernels has (AllTypes).
	Types []kernels.DType
}

// AllTypes is F32, F16, BF16 and every block quantization.
func AllTypes() []kernels.DType {
	return append([]kernels.DType{kernels.F32, kernels.F16, kernels.BF16}, kernels.QuantTypes()...)
}

// Run runs the contract suite.
func Run(t *testing.T, h Harness) {
	types := h.Types
	if types == nil {
		types = AllTypes()
	}
	t.Run("Buffers", func(t *testing.T) { testBuffers(t, h.open(t)) })
	t.Run("MatMulAndEmbed", func(t *testing.T) {
		for _, dt := range types {
			t.Run(dt.String(), func(t *testing.T) { testMatMul(t, h.open(t), dt) })
		}
	})
	t.Run("RMSNorm", func(t *testing.T) { testRMSNorm(t, h.open(t)) })
	t.Run("RoPE", func(t *testing.T) { testRoPE(t, h.open(t)) })
	t.Run("Elementwise", func(t *testing.T) { testElementwise(t, h.open(t)) })
	t.Run("WriteKV", func(t *testing.T) { testWriteKV(t, h.open(t)) })
	t.Run("PagedAttention", func(t *testing.T) { testAttention(t, h.open(t)) })
	t.Run("Family", func(t *testing.T) {
		d := h.open(t)
		if _, ok := d.d.(kernels.FamilyDevice); !ok {
			t.Skipf("%s is not a FamilyDevice", d.d.Name())
		}
		testFamily(t, d)
	})
	t.Run("Fused", func(t *testing.T) {
		d := h.open(t)
		if _, ok := d.d.(kernels.FusedDevice); !ok {
			t.Skipf("%s is not a FusedDevice", d.d.Name())
		}
		testFused(t, d)
	})
}

// dev is the device under test in one subtest.
type dev struct {
	t *testing.T
	d kernels.Device
}

func (h Harness) open(t *testing.T) *dev {
	t.Helper()
	d := h.New(t)
	t.Cleanup(d.Close)
	return &dev{t: t, d: d}
}

// zeros is a fresh buffer of n floats.
func (d *dev) zeros(n int) kernels.Buf {
	d.t.Helper()
	b, err := d.d.Alloc(n)
	if err != nil {
		d.t.Fatalf("Alloc(%d): %v", n, err)
	}
	return b
}

// buf is a fresh buffer holding x.
func (d *dev) buf(x []float32) kernels.Buf {
	d.t.Helper()
	b := d.zeros(len(x))
	d.d.Upload(b, x)
	return b
}

// get downloads b.
func (d *dev) get(b kernels.Buf) []float32 {
	out := make([]float32, b.Len())
	d.d.Download(out, b)
	return out
}

// weight uploads m.
func (d *dev) weight(m *kernels.Matrix) kernels.Weight {
	d.t.Helper()
	w, err := d.d.UploadMatrix(m)
	if err != nil {
		d.t.Fatalf("UploadMatrix %v %dx%d: %v", m.Type, m.Rows, m.Cols, err)
	}
	return w
}

func randVec(r *rand.Rand, n int, scale float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64()) * scale
	}
	return x
}

// exact fails unless got equals want bit for bit (any NaN equals any NaN).
func exact(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
			t.Fatalf("%s: [%d] = %v, want exactly %v", what, i, g, w)
		}
	}
}

// within fails at the first element where |got[i] − want[i]| > tol[i] (or
// got is NaN where want is not), and logs the worst |Δ|/tol.
func within(t *testing.T, what string, got []float32, want, tol []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst := 0.0
	for i, w := range want {
		d := math.Abs(float64(got[i]) - w)
		if !(d <= tol[i]) {
			t.Fatalf("%s: [%d] = %v, reference %v: |Δ| %.3g > tolerance %.3g", what, i, got[i], w, d, tol[i])
		}
		if tol[i] > 0 {
			worst = max(worst, d/tol[i])
		}
	}
	t.Logf("%s: worst |Δ| is %.2f of the tolerance", what, worst)
}

// elemTol is the tolerance of an elementwise function's results want.
func elemTol(want []float64) []float64 {
	tol := make([]float64, len(want))
	for i, w := range want {
		tol[i] = ElemTol * max(1, math.Abs(w))
	}
	return tol
}

// near checks an elementwise function's results.
func near(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	within(t, what, got, want, elemTol(want))
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

func name(format string, a ...any) string { return fmt.Sprintf(format, a...) }
