package cuda

import "fmt"

// cuBLASLt's enums as the C headers number them (cublas_api.h,
// library_types.h), for the plan below.
type (
	ltOp     int32 // cublasOperation_t
	dataType int32 // cudaDataType_t
)

const (
	opN ltOp = 0 // CUBLAS_OP_N
	opT ltOp = 1 // CUBLAS_OP_T

	cudaR32F  dataType = 0  // CUDA_R_32F
	cudaR16F  dataType = 2  // CUDA_R_16F
	cudaR16BF dataType = 14 // CUDA_R_16BF
)

// cudaType is e's cudaDataType_t.
func (e ElemType) cudaType() (dataType, error) {
	switch e {
	case ElemF32:
		return cudaR32F, nil
	case ElemF16:
		return cudaR16F, nil
	case ElemBF16:
		return cudaR16BF, nil
	}
	return 0, fmt.Errorf("gemm element type %d: want f32, f16 or bf16", e)
}

// ltLayout is a cublasLtMatrixLayout_t's parameters: a column-major
// Rows×Cols matrix with leading dimension LD.
type ltLayout struct {
	Type       dataType
	Rows, Cols uint64
	LD         int64
}

// gemmPlan is how a row-major Gemm maps onto cuBLASLt's column-major
// D = op(A)·op(B): A is W, B is X, C and D are Out.
type gemmPlan struct {
	OpA, OpB ltOp
	A, B, C  ltLayout
}

// planGemm maps g. cuBLAS is column-major, and a row-major R×C matrix is
// the same bytes as a column-major C×R one, so:
//   - W, row-major N×K, is column-major K×N (ld K); opA = T makes it N×K;
//   - X, row-major M×K, is column-major K×M (ld K); opB = N keeps it;
//   - D = Wᵀᵀ·X is column-major N×M (ld N): Out row-major M×N.
//
// This is the "TN" shape cuBLASLt's fastest kernels are written for.
func planGemm(g Gemm) (gemmPlan, error) {
	if g.M <= 0 || g.N <= 0 || g.K <= 0 {
		return gemmPlan{}, fmt.Errorf("gemm %d×%d×%d: every dimension must be positive", g.M, g.N, g.K)
	}
	if g.W == 0 || g.X == 0 || g.Out == 0 {
		return gemmPlan{}, fmt.Errorf("gemm %d×%d×%d: a nil operand (W %#x, X %#x, Out %#x)", g.M, g.N, g.K, g.W, g.X, g.Out)
	}
	t, err := g.Type.cudaType()
	if err != nil {
		return gemmPlan{}, err
	}
	m, n, k := uint64(g.M), uint64(g.N), uint64(g.K)
	return gemmPlan{
		OpA: opT,
		OpB: opN,
		A:   ltLayout{Type: t, Rows: k, Cols: n, LD: int64(k)},
		B:   ltLayout{Type: t, Rows: k, Cols: m, LD: int64(k)},
		C:   ltLayout{Type: cudaR32F, Rows: n, Cols: m, LD: int64(n)},
	}, nil
}
