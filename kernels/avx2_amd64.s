//go:build goexperiment.simd && amd64

#include "textflag.h"

// AVX2+FMA+F16C matmul kernels (no AVX-512 instruction anywhere here).
//
// Every product is a float32 FMA of a float32 weight and a float32
// activation, accumulated in the package's 16-lane order (simd_amd64.go)
// kept as two 8-lane halves: for each 16-column chunk, lanes 0-7 (LO) take
// columns 0-7 and lanes 8-15 (HI) columns 8-15, chunks in column order; the
// result is hsum8(LO+HI). Q8_0 weights enter as float32(q)·d, which is exact
// (an 8-bit integer times a float16 has at most 19 significant bits), so the
// single-token kernels, which convert as they go, and the packed tiles, which
// convert once per work item, compute the same products in the same order:
// results are bit-identical whatever the number of tokens.
//
// Column counts are whole 16-column chunks (Q8_0 rows are whole 32-column
// blocks); callers handle other shapes.

// HSUM8 reduces the 16-lane accumulator (LO, HI) to one float at OFF(AX).
// Clobbers LO and X15.
#define HSUM8(YLO, XLO, YHI, OFF) \
	VADDPS YHI, YLO, YLO; \
	VEXTRACTF128 $1, YLO, X15; \
	VADDPS X15, XLO, XLO; \
	VHADDPS XLO, XLO, XLO; \
	VHADDPS XLO, XLO, XLO; \
	VMOVSS XLO, OFF(AX)

#define ZERO4 \
	VXORPS Y0, Y0, Y0; VXORPS Y1, Y1, Y1; VXORPS Y2, Y2, Y2; VXORPS Y3, Y3, Y3

#define ZERO12 \
	ZERO4; \
	VXORPS Y4, Y4, Y4; VXORPS Y5, Y5, Y5; VXORPS Y6, Y6, Y6; VXORPS Y7, Y7, Y7; \
	VXORPS Y8, Y8, Y8; VXORPS Y9, Y9, Y9; VXORPS Y10, Y10, Y10; VXORPS Y11, Y11, Y11

// ---- packed float32 rows × tokens -------------------------------------------
//
// Two weight rows (R8, R9) × up to three tokens (R12, R13, R14), DX the byte
// offset, CX the chunks. The accumulator of token t, row r, half h is
// Y(4t+2r+h). Per half: two weight loads, then each token's activation load
// feeds both rows (10 loads per 12 FMAs with three tokens).

#define TOK(XADDR, YX, A0, A1) \
	VMOVUPS XADDR, YX; \
	VFMADD231PS YX, Y12, A0; \
	VFMADD231PS YX, Y13, A1

#define WLOAD(OFF) \
	VMOVUPS OFF(R8)(DX*1), Y12; \
	VMOVUPS OFF(R9)(DX*1), Y13

// func avx2Tile2x3(res *[6]float32, w0, w1, x unsafe.Pointer, ldx, chunks int)
// res[2t+r] = row r · token t.
TEXT ·avx2Tile2x3(SB), NOSPLIT, $0-48
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ x+24(FP), R12
	MOVQ ldx+32(FP), SI
	LEAQ (R12)(SI*1), R13
	LEAQ (R13)(SI*1), R14
	MOVQ chunks+40(FP), CX
	ZERO12
	XORQ DX, DX
	TESTQ CX, CX
	JZ   t23done

t23loop:
	WLOAD(0)
	TOK((R12)(DX*1), Y14, Y0, Y2)
	TOK((R13)(DX*1), Y15, Y4, Y6)
	TOK((R14)(DX*1), Y14, Y8, Y10)
	WLOAD(32)
	TOK(32(R12)(DX*1), Y15, Y1, Y3)
	TOK(32(R13)(DX*1), Y14, Y5, Y7)
	TOK(32(R14)(DX*1), Y15, Y9, Y11)
	ADDQ $64, DX
	DECQ CX
	JNZ  t23loop

t23done:
	MOVQ res+0(FP), AX
	HSUM8(Y0, X0, Y1, 0)
	HSUM8(Y2, X2, Y3, 4)
	HSUM8(Y4, X4, Y5, 8)
	HSUM8(Y6, X6, Y7, 12)
	HSUM8(Y8, X8, Y9, 16)
	HSUM8(Y10, X10, Y11, 20)
	VZEROUPPER
	RET

// func avx2Tile2x2(res *[6]float32, w0, w1, x unsafe.Pointer, ldx, chunks int)
TEXT ·avx2Tile2x2(SB), NOSPLIT, $0-48
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ x+24(FP), R12
	MOVQ ldx+32(FP), SI
	LEAQ (R12)(SI*1), R13
	MOVQ chunks+40(FP), CX
	ZERO4
	VXORPS Y4, Y4, Y4; VXORPS Y5, Y5, Y5; VXORPS Y6, Y6, Y6; VXORPS Y7, Y7, Y7
	XORQ DX, DX
	TESTQ CX, CX
	JZ   t22done

t22loop:
	WLOAD(0)
	TOK((R12)(DX*1), Y14, Y0, Y2)
	TOK((R13)(DX*1), Y15, Y4, Y6)
	WLOAD(32)
	TOK(32(R12)(DX*1), Y14, Y1, Y3)
	TOK(32(R13)(DX*1), Y15, Y5, Y7)
	ADDQ $64, DX
	DECQ CX
	JNZ  t22loop

t22done:
	MOVQ res+0(FP), AX
	HSUM8(Y0, X0, Y1, 0)
	HSUM8(Y2, X2, Y3, 4)
	HSUM8(Y4, X4, Y5, 8)
	HSUM8(Y6, X6, Y7, 12)
	VZEROUPPER
	RET

// ---- one token, weights read directly ---------------------------------------
//
// Two rows at a time (four accumulator chains hide the FMA latency), each
// row one sequential stream with a software prefetch ROWAHEAD bytes ahead.
// The activation chunk (Y8, Y9) is loaded once for both rows.

#define ROWAHEAD 2048

// func avx2F32Rows2(res *[2]float32, w0, w1, x unsafe.Pointer, chunks int)
TEXT ·avx2F32Rows2(SB), NOSPLIT, $0-40
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ x+24(FP), R12
	MOVQ chunks+32(FP), CX
	ZERO4
	XORQ DX, DX
	TESTQ CX, CX
	JZ   f32r2done

f32r2loop:
	PREFETCHT0 ROWAHEAD(R8)(DX*1)
	PREFETCHT0 ROWAHEAD(R9)(DX*1)
	VMOVUPS (R12)(DX*1), Y8
	VMOVUPS 32(R12)(DX*1), Y9
	VFMADD231PS (R8)(DX*1), Y8, Y0
	VFMADD231PS 32(R8)(DX*1), Y9, Y1
	VFMADD231PS (R9)(DX*1), Y8, Y2
	VFMADD231PS 32(R9)(DX*1), Y9, Y3
	ADDQ $64, DX
	DECQ CX
	JNZ  f32r2loop

f32r2done:
	MOVQ res+0(FP), AX
	HSUM8(Y0, X0, Y1, 0)
	HSUM8(Y2, X2, Y3, 4)
	VZEROUPPER
	RET

// HALFROWS2 is the F16/BF16 loop: CVT(ADDR, Y) widens 8 halves to float32.
// DI is the weight byte offset (2 per column), DX the activation one (4).
#define HALFROWS2(CVT, LOOP, DONE) \
	ZERO4; \
	XORQ DX, DX; \
	XORQ DI, DI; \
	TESTQ CX, CX; \
	JZ   DONE; \
LOOP: \
	PREFETCHT0 ROWAHEAD(R8)(DI*1); \
	PREFETCHT0 ROWAHEAD(R9)(DI*1); \
	VMOVUPS (R12)(DX*1), Y8; \
	VMOVUPS 32(R12)(DX*1), Y9; \
	CVT((R8)(DI*1), Y10); \
	CVT(16(R8)(DI*1), Y11); \
	CVT((R9)(DI*1), Y12); \
	CVT(16(R9)(DI*1), Y13); \
	VFMADD231PS Y8, Y10, Y0; \
	VFMADD231PS Y9, Y11, Y1; \
	VFMADD231PS Y8, Y12, Y2; \
	VFMADD231PS Y9, Y13, Y3; \
	ADDQ $64, DX; \
	ADDQ $32, DI; \
	DECQ CX; \
	JNZ  LOOP; \
DONE: \
	MOVQ res+0(FP), AX; \
	HSUM8(Y0, X0, Y1, 0); \
	HSUM8(Y2, X2, Y3, 4); \
	VZEROUPPER; \
	RET

#define CVTH8(ADDR, Y) VCVTPH2PS ADDR, Y
#define CVTB8(ADDR, Y) VPMOVZXWD ADDR, Y; VPSLLD $16, Y, Y

// func avx2F16Rows2(res *[2]float32, w0, w1, x unsafe.Pointer, chunks int)
TEXT ·avx2F16Rows2(SB), NOSPLIT, $0-40
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ x+24(FP), R12
	MOVQ chunks+32(FP), CX
	HALFROWS2(CVTH8, f16r2loop, f16r2done)

// func avx2BF16Rows2(res *[2]float32, w0, w1, x unsafe.Pointer, chunks int)
TEXT ·avx2BF16Rows2(SB), NOSPLIT, $0-40
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ x+24(FP), R12
	MOVQ chunks+32(FP), CX
	HALFROWS2(CVTB8, bf16r2loop, bf16r2done)

// ---- Q8_0 ------------------------------------------------------------------
//
// Q8W(R, OFF, ACC, X): ACC += (float32(q[OFF..OFF+7])·d)·X for the block at
// (R)(SI*1) whose scale, widened, is in Y12.
#define Q8W(R, OFF, ACC, YX) \
	VPMOVSXBD OFF(R)(SI*1), Y13; \
	VCVTDQ2PS Y13, Y13; \
	VMULPS Y12, Y13, Y13; \
	VFMADD231PS YX, Y13, ACC

// Q8ROW: one block of row R into (LO, HI); the block's 32 activations are
// in Y8-Y11.
#define Q8ROW(R, LO, HI) \
	VPBROADCASTW (R)(SI*1), X12; \
	VCVTPH2PS X12, Y12; \
	Q8W(R, 2, LO, Y8); \
	Q8W(R, 10, HI, Y9); \
	Q8W(R, 18, LO, Y10); \
	Q8W(R, 26, HI, Y11)

// func avx2Q8Rows2(res *[2]float32, w0, w1, x unsafe.Pointer, nb int)
TEXT ·avx2Q8Rows2(SB), NOSPLIT, $0-40
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ x+24(FP), R12
	MOVQ nb+32(FP), CX
	ZERO4
	XORQ DX, DX
	XORQ SI, SI
	TESTQ CX, CX
	JZ   q8r2done

q8r2loop:
	PREFETCHT0 ROWAHEAD(R8)(SI*1)
	PREFETCHT0 ROWAHEAD(R9)(SI*1)
	VMOVUPS (R12)(DX*1), Y8
	VMOVUPS 32(R12)(DX*1), Y9
	VMOVUPS 64(R12)(DX*1), Y10
	VMOVUPS 96(R12)(DX*1), Y11
	Q8ROW(R8, Y0, Y1)
	Q8ROW(R9, Y2, Y3)
	ADDQ $128, DX
	ADDQ $34, SI
	DECQ CX
	JNZ  q8r2loop

q8r2done:
	MOVQ res+0(FP), AX
	HSUM8(Y0, X0, Y1, 0)
	HSUM8(Y2, X2, Y3, 4)
	VZEROUPPER
	RET

// func avx2Q8Unpack(dst *float32, w unsafe.Pointer, nb int)
// dst[32b+i] = float32(q_b[i])·d_b, exactly as the Q8 kernels above form it.
TEXT ·avx2Q8Unpack(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), R8
	MOVQ nb+16(FP), CX
	XORQ SI, SI
	TESTQ CX, CX
	JZ   q8udone

q8uloop:
	VPBROADCASTW (R8)(SI*1), X12
	VCVTPH2PS X12, Y12
	VPMOVSXBD 2(R8)(SI*1), Y0
	VPMOVSXBD 10(R8)(SI*1), Y1
	VPMOVSXBD 18(R8)(SI*1), Y2
	VPMOVSXBD 26(R8)(SI*1), Y3
	VCVTDQ2PS Y0, Y0
	VCVTDQ2PS Y1, Y1
	VCVTDQ2PS Y2, Y2
	VCVTDQ2PS Y3, Y3
	VMULPS Y12, Y0, Y0
	VMULPS Y12, Y1, Y1
	VMULPS Y12, Y2, Y2
	VMULPS Y12, Y3, Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, DI
	ADDQ $34, SI
	DECQ CX
	JNZ  q8uloop

q8udone:
	VZEROUPPER
	RET

// func avx2CvtF16(dst *float32, src unsafe.Pointer, n8 int)
// Converts 8·n8 halves.
TEXT ·avx2CvtF16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n8+16(FP), CX
	XORQ DX, DX
	TESTQ CX, CX
	JZ   cvt8done

cvt8loop:
	VCVTPH2PS (SI)(DX*1), Y0
	VMOVUPS Y0, (DI)(DX*2)
	ADDQ $16, DX
	DECQ CX
	JNZ  cvt8loop

cvt8done:
	VZEROUPPER
	RET
