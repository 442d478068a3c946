package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// backendsUnderTest is the portable backend plus every SIMD backend this
// machine can run; it logs each built backend it leaves out and what the CPU
// lacks for it.
func backendsUnderTest(t testing.TB) []*backend {
	t.Helper()
	_, logged := untestedLogged.LoadOrStore(t, true) // once per test, however often it asks
	out := []*backend{portable}
	for _, b := range simdBuilt {
		if slices.Contains(simdBackends, b) {
			out = append(out, b)
			continue
		}
		if !logged {
			t.Logf("backend %s not tested here: the CPU lacks %s", b.name, strings.Join(missingFeatures(b), " "))
		}
	}
	return out
}

var untestedLogged sync.Map // testing.TB → true

// skipWithoutSIMD skips t when no SIMD backend can run, saying whether the
// build has none or the CPU lacks what they need.
func skipWithoutSIMD(t testing.TB) {
	t.Helper()
	if len(simdBackends) > 0 {
		return
	}
	if len(simdBuilt) == 0 {
		t.Skip("no SIMD backend in this build (it needs amd64 and GOEXPERIMENT=simd)")
	}
	var why []string
	for _, b := range simdBuilt {
		why = append(why, b.name+" needs "+strings.Join(missingFeatures(b), " "))
	}
	t.Skipf("no SIMD backend runs on this CPU: %s", strings.Join(why, "; "))
}

func randF32(r *rand.Rand, n int, scale float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64()) * scale
	}
	return x
}

// encodeMatrix builds a rows×cols matrix of type t from float values
// (quantized or rounded as the type requires).
func encodeMatrix(t testing.TB, dt DType, rows, cols int, vals []float32) *Matrix {
	t.Helper()
	rb, err := dt.RowBytes(cols)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rows*rb)
	for r := range rows {
		row := vals[r*cols : (r+1)*cols]
		if err := Quantize(dt, data[r*rb:(r+1)*rb], row); err != nil {
			t.Fatal(err)
		}
	}
	m, err := NewMatrix(dt, rows, cols, data)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// dequantized returns the matrix as float32 rows via Matrix.Row.
func dequantized(m *Matrix) []float32 {
	out := make([]float32, m.Rows*m.Cols)
	for r := range m.Rows {
		m.Row(r, out[r*m.Cols:(r+1)*m.Cols])
	}
	return out
}

var allTypes = []DType{F32, F16, BF16, Q8_0}

func bitsEqual(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

func sleepMicro(us int) { time.Sleep(time.Duration(us) * time.Microsecond) }
