package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// argmaxRule is doc.go's "NaN and infinities" rule for Argmax, stated on its
// own: a NaN at index 0 gives 0; otherwise NaNs are passed over and the
// first index of the largest remaining value wins, +Inf the largest.
func argmaxRule(x []float32) int {
	if isNaN32(x[0]) {
		return 0
	}
	best := 0
	for i, v := range x {
		if !isNaN32(v) && v > x[best] {
			best = i
		}
	}
	return best
}

func isNaN32(v float32) bool { return v != v }

// specialRows is, for a length n, rows with NaN and ±Inf at the start, in
// the middle and in the tail (every vector-body and tail position is hit
// as n runs over 1..70), alone and mixed, with a larger finite value before
// a NaN in the same lane (which VMAXPS can drop).
func specialRows(r *rand.Rand, n int) map[string][]float32 {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	rows := map[string][]float32{}
	add := func(name string, f func(x []float32)) {
		x := randF32(r, n, 1)
		f(x)
		rows[name] = x
	}
	for _, p := range []struct {
		name string
		at   int
	}{{"start", 0}, {"mid", n / 2}, {"tail", n - 1}} {
		for _, v := range []struct {
			name string
			v    float32
		}{{"NaN", nan}, {"+Inf", inf}, {"-Inf", -inf}} {
			add(v.name+"@"+p.name, func(x []float32) { x[p.at] = v.v })
		}
		add("NaN@"+p.name+"+Inf@last", func(x []float32) { x[p.at] = nan; x[n-1] = inf })
		add("big@0+NaN@"+p.name, func(x []float32) { x[0] = 50; x[p.at] = nan })
		add("-Inf-but@"+p.name, func(x []float32) {
			for i := range x {
				x[i] = -inf
			}
			x[p.at] = -1e30
		})
	}
	add("big-lane+NaN", func(x []float32) { // same lane of an 8- or 16-wide body
		x[min(1, n-1)] = 50
		x[min(17, n-1)] = nan
	})
	for _, v := range []float32{nan, inf, -inf} {
		add(fmt.Sprint("all", v), func(x []float32) {
			for i := range x {
				x[i] = v
			}
		})
	}
	return rows
}

// TestArgmaxSpecialValues: every backend's Argmax, and the package-level one
// whatever backend it runs, follows the one rule for NaN and ±Inf.
func TestArgmaxSpecialValues(t *testing.T) {
	r := rand.New(rand.NewPCG(70, 71))
	for n := 1; n <= 70; n++ {
		for name, x := range specialRows(r, n) {
			want := argmaxRule(x)
			for _, be := range backendsUnderTest(t) {
				if got := be.argmax(x); got != want {
					t.Errorf("%s n=%d %s: argmax %d, the rule says %d", be.name, n, name, got, want)
				}
			}
			if got := Argmax(x); got != want {
				t.Errorf("Argmax (%s) n=%d %s: %d, the rule says %d", BestBackend(), n, name, got, want)
			}
		}
	}
}

// TestSoftmaxSpecialValues: with NaN or ±Inf in the row every backend gives
// what doc.go says, bit for bit where it is NaN or 0 and within float32
// rounding of the portable path elsewhere.
func TestSoftmaxSpecialValues(t *testing.T) {
	r := rand.New(rand.NewPCG(72, 73))
	for n := 1; n <= 70; n++ {
		for name, x := range specialRows(r, n) {
			want := softmaxRule(x)
			for _, be := range backendsUnderTest(t) {
				got := slices.Clone(x)
				be.softmax(got)
				for i := range got {
					g, w := got[i], want[i]
					ok := isNaN32(g) == isNaN32(w) && (w != 0 || g == 0) &&
						(isNaN32(w) || math.Abs(float64(g-w)) <= 1e-6*max(1, float64(w)))
					if !ok {
						t.Errorf("%s n=%d %s: softmax[%d] = %v, want %v (x[%d] = %v)", be.name, n, name, i, g, w, i, x[i])
						break
					}
				}
			}
		}
	}
}

// softmaxRule is doc.go's rule for Softmax: NaN everywhere when the row
// holds a NaN, its max is +Inf or every value is -Inf; otherwise exactly 0
// at -Inf and e^(x-max)/Σ elsewhere.
func softmaxRule(x []float32) []float32 {
	out := make([]float32, len(x))
	m := float32(math.Inf(-1))
	nan := false
	for _, v := range x {
		nan = nan || isNaN32(v)
		m = max(m, v)
	}
	if nan || math.IsInf(float64(m), 0) {
		for i := range out {
			out[i] = float32(math.NaN())
		}
		return out
	}
	var sum float64
	for i, v := range x {
		e := math.Exp(float64(v - m))
		out[i] = float32(e)
		sum += e
	}
	for i := range out {
		out[i] = float32(float64(out[i]) / sum)
	}
	return out
}

// TestMatMulPropagatesNaN: a NaN activation makes every output of its token
// NaN on every backend and float weight type, and leaves the other token's
// outputs numbers (no clamping, no spreading across tokens).
func TestMatMulPropagatesNaN(t *testing.T) {
	for _, dt := range []DType{F32, F16, BF16} {
		for _, cols := range []int{8, 29, 256} {
			m := benchMatrix(dt, 9, cols)
			x := randF32(rand.New(rand.NewPCG(74, uint64(cols))), 2*cols, 1)
			x[cols+cols/2] = float32(math.NaN()) // token 1
			for _, be := range backendsUnderTest(t) {
				cpu := newCPU(1, be)
				out := make([]float32, 2*m.Rows)
				cpu.MatMul(out, x, 2, m)
				cpu.Close()
				for i, v := range out {
					if tok1 := i >= m.Rows; isNaN32(v) != tok1 {
						t.Errorf("%s %v cols=%d: out[%d] = %v", be.name, dt, cols, i, v)
					}
				}
			}
		}
	}
}
