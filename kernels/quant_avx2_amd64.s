//go:build goexperiment.simd && amd64

#include "textflag.h"

// The avx2 backend's IQ4_NL kernels (AVX2, FMA and F16C only: no AVX-512
// instruction, no VNNI; the other 32-value formats run the 8-row kernels of
// quant_r8_avx2_amd64.s), four weight rows against one token of actQ8x32
// activations (40-byte blocks: float32 d, float32 s, 32 int8), each weight
// block unpacked in registers and never stored.
//
// Per block and row: the magnitudes of the 32 grid values as bytes, the
// activations taking their signs, VPMADDUBSW with the 32 int8
// activations, VPMADDWD with ones: 8 int32 lane sums, exact. The lanes are
// then converted and fused-multiply-added, scaled by dw·da (float32
// product), into the row's 8-lane accumulator. At the end a row's result
// is ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)).
// Every output takes these steps in this order whatever rows and tokens a
// call covers: the results are batch-invariant.
//
// Registers: R8-R11 the rows, R12 the activations, CX blocks left, DX the
// prefetch distance, AX res. Y0-Y3 accumulators, Y4 0x0f bytes, Y5 the
// offset bytes or the grid, Y6 int16 ones, Y7 the offset's pair products
// (or sa), Y8 the activations, Y9 da, Y10-Y11 scratch, X12-X15 the min
// accumulators.

DATA qa2c0f<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA qa2c0f<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA qa2c0f<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA qa2c0f<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL qa2c0f<>(SB), RODATA|NOPTR, $32

DATA qa2ones<>+0(SB)/8, $0x0001000100010001
DATA qa2ones<>+8(SB)/8, $0x0001000100010001
DATA qa2ones<>+16(SB)/8, $0x0001000100010001
DATA qa2ones<>+24(SB)/8, $0x0001000100010001
GLOBL qa2ones<>(SB), RODATA|NOPTR, $32

#define QA_ENTER \
	MOVQ w0+8(FP), R8; \
	MOVQ w1+16(FP), R9; \
	MOVQ w2+24(FP), R10; \
	MOVQ w3+32(FP), R11; \
	MOVQ x+40(FP), R12; \
	MOVQ res+0(FP), AX; \
	MOVQ n+48(FP), CX; \
	MOVQ pf+56(FP), DX; \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS X12, X12, X12; \
	VXORPS X13, X13, X13; \
	VXORPS X14, X14, X14; \
	VXORPS X15, X15, X15; \
	VMOVDQU qa2c0f<>(SB), Y4; \
	VMOVDQU qa2ones<>(SB), Y6

// QA_HSUM: X = the lanes of Y summed (lane 0), X10 scratch.
#define QA_HSUM(Y, X) \
	VEXTRACTF128 $1, Y, X10; \
	VADDPS X10, X, X; \
	VHADDPS X, X, X; \
	VHADDPS X, X, X

#define QA_DONE \
	QA_HSUM(Y0, X0); \
	QA_HSUM(Y1, X1); \
	QA_HSUM(Y2, X2); \
	QA_HSUM(Y3, X3); \
	VADDSS X12, X0, X0; \
	VADDSS X13, X1, X1; \
	VADDSS X14, X2, X2; \
	VADDSS X15, X3, X3; \
	VMOVSS X0, 0(AX); \
	VMOVSS X1, 4(AX); \
	VMOVSS X2, 8(AX); \
	VMOVSS X3, 12(AX); \
	VZEROUPPER; \
	RET

// QA_NIB: the 16 bytes of nibbles at OFF(R) as 32 bytes in Y10: the low
// nibbles (values 0-15) in the low lane, the high ones (16-31) in the high.
#define QA_NIB(R, OFF) \
	VMOVDQU OFF(R), X10; \
	VPSRLW $4, X10, X11; \
	VINSERTI128 $1, X11, Y10, Y10; \
	VPAND Y4, Y10, Y10

// QA_FMA: ACC += float(lane sums in Y10) · (float16 d at 0(R) · da).
#define QA_FMA(R, ACC) \
	VPMADDWD Y6, Y10, Y10; \
	VCVTDQ2PS Y10, Y10; \
	VPBROADCASTW (R), X11; \
	VCVTPH2PS X11, Y11; \
	VMULPS Y9, Y11, Y11; \
	VFMADD231PS Y11, Y10, ACC

// Per block: the activations and da, then each row.
#define QA_ACT \
	VMOVDQU 8(R12), Y8; \
	VBROADCASTSS (R12), Y9

#define QA_NEXT(LOOP) \
	ADDQ $40, R12; \
	DECQ CX; \
	JNZ  LOOP

// QA_GRID: Y10 = |grid[u]|, Y11 = the activations with the grid values' signs.
#define QA_GRID \
	VPSHUFB Y10, Y5, Y10; \
	VPSIGNB Y10, Y8, Y11; \
	VPABSB Y10, Y10; \
	VPMADDUBSW Y11, Y10, Y10

#define IQ4ROW(R, ACC) \
	PREFETCHT0 (R)(DX*1); \
	QA_NIB(R, 2); \
	QA_GRID; \
	QA_FMA(R, ACC); \
	ADDQ $18, R

#define QB_ENTER \
	MOVQ res+0(FP), AX; \
	MOVQ buf+8(FP), SI; \
	MOVQ x+16(FP), R12; \
	MOVQ n+32(FP), CX; \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS X12, X12, X12; \
	VXORPS X13, X13, X13; \
	VXORPS X14, X14, X14; \
	VXORPS X15, X15, X15; \
	VMOVDQU qa2ones<>(SB), Y6

// QB_SCALE: ACC += float(lane sums in Y10) · (the record's d · da).
#define QB_SCALE(ACC) \
	VPMADDWD Y6, Y10, Y10; \
	VCVTDQ2PS Y10, Y10; \
	VMULPS 32(SI), Y9, Y11; \
	VFMADD231PS Y11, Y10, ACC

#define QB_GRID(ACC) \
	VMOVDQU (SI), Y10; \
	VPSIGNB Y10, Y8, Y11; \
	VPABSB Y10, Y10; \
	VPMADDUBSW Y11, Y10, Y10; \
	QB_SCALE(ACC); \
	ADDQ $64, SI

// func qa2UnpQ4_0(dst, w0, w1, w2, w3 unsafe.Pointer, n int) (likewise the others)
#define QU_ENTER \
	MOVQ dst+0(FP), DI; \
	MOVQ w0+8(FP), R8; \
	MOVQ w1+16(FP), R9; \
	MOVQ w2+24(FP), R10; \
	MOVQ w3+32(FP), R11; \
	MOVQ n+40(FP), CX; \
	VMOVDQU qa2c0f<>(SB), Y4

#define QU_LOOP(ROW, LOOP) \
LOOP: \
	ROW(R8); \
	ROW(R9); \
	ROW(R10); \
	ROW(R11); \
	DECQ CX; \
	JNZ  LOOP; \
	VZEROUPPER; \
	RET

// QU_D: the float16 d at 0(R) in 8 lanes at 32(DI).
#define QU_D(R) \
	VPBROADCASTW (R), X11; \
	VCVTPH2PS X11, Y11; \
	VMOVDQU Y11, 32(DI)

#define QUIQ4(R) QA_NIB(R, 2); VPSHUFB Y10, Y5, Y10; VMOVDQU Y10, (DI); QU_D(R); ADDQ $18, R; ADDQ $64, DI

// func qa2IQ4NLRows4(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)
TEXT ·qa2IQ4NLRows4(SB), NOSPLIT, $0-64
	QA_ENTER
	VMOVDQU ·qaIQ4Grid(SB), Y5
	TESTQ CX, CX
	JZ   iq4done
iq4loop:
	QA_ACT
	IQ4ROW(R8, Y0)
	IQ4ROW(R9, Y1)
	IQ4ROW(R10, Y2)
	IQ4ROW(R11, Y3)
	QA_NEXT(iq4loop)
iq4done:
	QA_DONE

// ---- Several tokens: the four rows are unpacked once (qa2Unp*) into
// records, block by block, rows 0-3 in turn: the 32 weights as bytes (u,
// or the grid formats' signed values), the block scale as float32 in 8
// lanes, and for Q4_1 and Q5_1 the min in 4 lanes. Then each token runs
// qa2Buf* over the records: the same integer sums and the same float steps
// as the single-token kernels above (products commute), so the results are
// bit-identical to theirs.

TEXT ·qa2UnpIQ4NL(SB), NOSPLIT, $0-48
	QU_ENTER
	VMOVDQU ·qaIQ4Grid(SB), Y5
	QU_LOOP(QUIQ4, quiq4loop)

// func qa2BufGrid(res *[4]float32, buf, x, off unsafe.Pointer, n int):
// IQ4_NL and MXFP4 (off unused).
TEXT ·qa2BufGrid(SB), NOSPLIT, $0-40
	QB_ENTER
qbgloop:
	QA_ACT
	QB_GRID(Y0)
	QB_GRID(Y1)
	QB_GRID(Y2)
	QB_GRID(Y3)
	QA_NEXT(qbgloop)
	QA_DONE
