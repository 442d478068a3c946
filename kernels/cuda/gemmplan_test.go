package cuda

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// colMajorMatmul is cuBLAS's definition, D = op(A)·op(B), over column-major
// buffers described by the plan's layouts: a model of cuBLASLt (which
// cannot run here) to check that the plan computes the row-major Gemm.
func colMajorMatmul(p gemmPlan, a, b []float64) []float64 {
	at := func(buf []float64, l ltLayout, op ltOp, r, c uint64) float64 {
		if op == opT {
			r, c = c, r
		}
		return buf[c*uint64(l.LD)+r]
	}
	rows, inner := p.A.Cols, p.A.Rows // op(A) is rows×inner
	if p.OpA == opN {
		rows, inner = p.A.Rows, p.A.Cols
	}
	cols := p.B.Cols // op(B) is inner×cols
	if p.OpB == opT {
		cols = p.B.Rows
	}
	if rows != p.C.Rows || cols != p.C.Cols {
		panic("layouts disagree")
	}
	d := make([]float64, p.C.Cols*uint64(p.C.LD))
	for c := range cols {
		for r := range rows {
			var s float64
			for k := range inner {
				s += at(a, p.A, p.OpA, r, k) * at(b, p.B, p.OpB, k, c)
			}
			d[c*uint64(p.C.LD)+r] = s
		}
	}
	return d
}

func TestPlanGemmComputesRowMajor(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range [][3]int{{1, 1, 1}, {1, 7, 5}, {3, 4, 2}, {5, 3, 8}, {16, 9, 33}} {
		m, n, k := s[0], s[1], s[2]
		g := Gemm{M: m, N: n, K: k, W: 1, X: 2, Out: 3, Type: ElemBF16}
		p, err := planGemm(g)
		if err != nil {
			t.Fatal(err)
		}
		w := make([]float64, n*k) // row-major N×K
		x := make([]float64, m*k) // row-major M×K
		for i := range w {
			w[i] = rng.Float64()*2 - 1
		}
		for i := range x {
			x[i] = rng.Float64()*2 - 1
		}
		got := colMajorMatmul(p, w, x)
		for i := range m {
			for j := range n {
				var want float64
				for kk := range k {
					want += x[i*k+kk] * w[j*k+kk]
				}
				if d := got[i*n+j] - want; d > 1e-12 || d < -1e-12 {
					t.Fatalf("%d×%d×%d: out[%d][%d] = %v, want %v", m, n, k, i, j, got[i*n+j], want)
				}
			}
		}
	}
}

func TestPlanGemmTypes(t *testing.T) {
	for _, tc := range []struct {
		e    ElemType
		want dataType
	}{{ElemF32, cudaR32F}, {ElemF16, cudaR16F}, {ElemBF16, cudaR16BF}} {
		p, err := planGemm(Gemm{M: 2, N: 3, K: 4, W: 1, X: 2, Out: 3, Type: tc.e})
		if err != nil {
			t.Fatal(err)
		}
		if p.A.Type != tc.want || p.B.Type != tc.want || p.C.Type != cudaR32F {
			t.Errorf("%s: A %d B %d C %d, want %d %d %d", tc.e, p.A.Type, p.B.Type, p.C.Type, tc.want, tc.want, cudaR32F)
		}
		if p.OpA != opT || p.OpB != opN {
			t.Errorf("%s: ops %d,%d, want TN", tc.e, p.OpA, p.OpB)
		}
	}
}

func TestPlanGemmRefused(t *testing.T) {
	for _, tc := range []struct {
		g    Gemm
		want string
	}{
		{Gemm{M: 0, N: 1, K: 1, W: 1, X: 1, Out: 1, Type: ElemF32}, "must be positive"},
		{Gemm{M: 1, N: 1, K: -1, W: 1, X: 1, Out: 1, Type: ElemF32}, "must be positive"},
		{Gemm{M: 1, N: 1, K: 1, W: 0, X: 1, Out: 1, Type: ElemF32}, "nil operand"},
		{Gemm{M: 1, N: 1, K: 1, W: 1, X: 1, Out: 1, Type: 9}, "element type 9"},
	} {
		if _, err := planGemm(tc.g); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.g, err, tc.want)
		}
	}
}
