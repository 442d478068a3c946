//go:build goexperiment.simd && amd64

#include "textflag.h"

// AVX2+FMA+F16C matmul kernels (no AVX-512 instruction anywhere here).
//
// Reduction order of the avx2 matmul: an output element has one 8-lane
// accumulator; lane l takes columns c ≡ l (mod 8) in column order, each by
// one fused multiply-add of a float32 weight and a float32 activation; the
// lanes are then summed as ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)) (HSUM1).
// Q8_0 weights enter as float32(q)·d, which is exact (an 8-bit integer times
// a float16 has at most 19 significant bits), F16 and BF16 by exact
// widening. The single-token kernels and the multi-token tiles therefore form
// the same products in the same order: results are bit-identical whatever
// the number of tokens and however columns are split into panels (a tile
// can resume from stored accumulators).
//
// Column counts are whole 8-column groups (Q8_0: whole 32-column blocks).

// HSUM1 reduces the 8 lanes of Y to one float at OFF(AX). Clobbers Y, X15.
#define HSUM1(Y, X, OFF) \
	VEXTRACTF128 $1, Y, X15; \
	VADDPS X15, X, X; \
	VHADDPS X, X, X; \
	VHADDPS X, X, X; \
	VMOVSS X, OFF(AX)

// ---- one token, four rows at a time ---------------------------------------
//
// Rows R8-R11, activations R12, four accumulator chains (Y0-Y3). The four
// rows lie side by side in memory and the next call takes the four after
// them, so each row prefetches DX = pf bytes ahead: the same columns some
// rows further on. AX holds res; ROWS4_DONE writes the four sums there.

#define ROWS4_DONE \
	HSUM1(Y0, X0, 0); \
	HSUM1(Y1, X1, 4); \
	HSUM1(Y2, X2, 8); \
	HSUM1(Y3, X3, 12); \
	VZEROUPPER; \
	RET

// Q8R: row R's block into ACC; the block's activations are in Y8-Y11.
#define Q8R(R, ACC) \
	PREFETCHT0 (R)(DX*1); \
	VPBROADCASTW (R), X12; \
	VCVTPH2PS X12, Y12; \
	VPMOVSXBD 2(R), Y13; VCVTDQ2PS Y13, Y13; VMULPS Y12, Y13, Y13; VFMADD231PS Y8, Y13, ACC; \
	VPMOVSXBD 10(R), Y14; VCVTDQ2PS Y14, Y14; VMULPS Y12, Y14, Y14; VFMADD231PS Y9, Y14, ACC; \
	VPMOVSXBD 18(R), Y13; VCVTDQ2PS Y13, Y13; VMULPS Y12, Y13, Y13; VFMADD231PS Y10, Y13, ACC; \
	VPMOVSXBD 26(R), Y14; VCVTDQ2PS Y14, Y14; VMULPS Y12, Y14, Y14; VFMADD231PS Y11, Y14, ACC; \
	ADDQ $34, R

// func avx2Q8Rows4(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)
// n: blocks.
TEXT ·avx2Q8Rows4(SB), NOSPLIT, $0-64
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ w2+24(FP), R10
	MOVQ w3+32(FP), R11
	MOVQ x+40(FP), R12
	MOVQ res+0(FP), AX
	MOVQ n+48(FP), CX
	MOVQ pf+56(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JZ   q8r4done

q8r4loop:
	VMOVUPS (R12), Y8
	VMOVUPS 32(R12), Y9
	VMOVUPS 64(R12), Y10
	VMOVUPS 96(R12), Y11
	Q8R(R8, Y0)
	Q8R(R9, Y1)
	Q8R(R10, Y2)
	Q8R(R11, Y3)
	ADDQ $128, R12
	DECQ CX
	JNZ  q8r4loop

q8r4done:
	ROWS4_DONE

// FR: row R's 8-column group, widened by CVT into Y13, into ACC (x in Y8).
#define FR(CVT, R, ACC, STEP) \
	CVT((R), Y13); \
	VFMADD231PS Y8, Y13, ACC; \
	ADDQ $STEP, R

#define CVTF32(ADDR, Y) VMOVUPS ADDR, Y
#define CVTF16(ADDR, Y) VCVTPH2PS ADDR, Y
#define CVTBF16(ADDR, Y) VPMOVZXWD ADDR, Y; VPSLLD $16, Y, Y

// FROWS4 is the float loop over n 8-column groups.
#define FROWS4(CVT, STEP, LOOP, DONE) \
	TESTQ CX, CX; \
	JZ   DONE; \
LOOP: \
	PREFETCHT0 (R8)(DX*1); \
	PREFETCHT0 (R9)(DX*1); \
	PREFETCHT0 (R10)(DX*1); \
	PREFETCHT0 (R11)(DX*1); \
	VMOVUPS (R12), Y8; \
	FR(CVT, R8, Y0, STEP); \
	FR(CVT, R9, Y1, STEP); \
	FR(CVT, R10, Y2, STEP); \
	FR(CVT, R11, Y3, STEP); \
	ADDQ $32, R12; \
	DECQ CX; \
	JNZ  LOOP; \
DONE: \
	ROWS4_DONE

// func avx2F32Rows4(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)
// n: 8-column groups (likewise F16, BF16).
TEXT ·avx2F32Rows4(SB), NOSPLIT, $0-64
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ w2+24(FP), R10
	MOVQ w3+32(FP), R11
	MOVQ x+40(FP), R12
	MOVQ res+0(FP), AX
	MOVQ n+48(FP), CX
	MOVQ pf+56(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	FROWS4(CVTF32, 32, f32r4loop, f32r4done)

// func avx2F16Rows4(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)
TEXT ·avx2F16Rows4(SB), NOSPLIT, $0-64
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ w2+24(FP), R10
	MOVQ w3+32(FP), R11
	MOVQ x+40(FP), R12
	MOVQ res+0(FP), AX
	MOVQ n+48(FP), CX
	MOVQ pf+56(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	FROWS4(CVTF16, 16, f16r4loop, f16r4done)

// func avx2BF16Rows4(res *[4]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)
TEXT ·avx2BF16Rows4(SB), NOSPLIT, $0-64
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ w2+24(FP), R10
	MOVQ w3+32(FP), R11
	MOVQ x+40(FP), R12
	MOVQ res+0(FP), AX
	MOVQ n+48(FP), CX
	MOVQ pf+56(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	FROWS4(CVTBF16, 16, bf16r4loop, bf16r4done)

// ---- one row × many tokens -------------------------------------------------
//
// Each weight group of 8 columns is widened once and multiplied with every
// token's activations: 12, 8 or 4 accumulators (Y0-Y11). The activations
// come packed per tile (avx2PackX): for each 8-column group, the N tokens'
// 8 values one after the other, so every FMA reads a fixed displacement from
// one pointer (R10) — no indexed addressing, which Intel cores split into
// two µops for a three-operand instruction.
//
// A tile covers one panel of columns. flags bit 0: start from the raw
// accumulators stored at acc (else zero); bit 1: the last panel — write the
// reduced results to acc[0..N) (else store the raw accumulators back).
// Each step prefetches its weights pf bytes ahead (DX): the same columns of
// a row further on, which the tiles of the next rows read.

// XFMA: ACC += YW · the activations at OFF(R10).
#define XFMA(OFF, YW, ACC) VFMADD231PS OFF(R10), YW, ACC

#define FMAS4(OFF, YW) \
	XFMA(OFF, YW, Y0); XFMA(OFF+32, YW, Y1); XFMA(OFF+64, YW, Y2); XFMA(OFF+96, YW, Y3)
#define FMAS8(OFF, YW) \
	FMAS4(OFF, YW); \
	XFMA(OFF+128, YW, Y4); XFMA(OFF+160, YW, Y5); XFMA(OFF+192, YW, Y6); XFMA(OFF+224, YW, Y7)
#define FMAS12(OFF, YW) \
	FMAS8(OFF, YW); \
	XFMA(OFF+256, YW, Y8); XFMA(OFF+288, YW, Y9); XFMA(OFF+320, YW, Y10); XFMA(OFF+352, YW, Y11)

#define LD4(A, B, C, D, OFF) \
	VMOVUPS OFF(AX), A; VMOVUPS OFF+32(AX), B; VMOVUPS OFF+64(AX), C; VMOVUPS OFF+96(AX), D
#define ST4(A, B, C, D, OFF) \
	VMOVUPS A, OFF(AX); VMOVUPS B, OFF+32(AX); VMOVUPS C, OFF+64(AX); VMOVUPS D, OFF+96(AX)
#define Z4(A, B, C, D) VXORPS A, A, A; VXORPS B, B, B; VXORPS C, C, C; VXORPS D, D, D
#define H4(A, XA, B, XB, C, XC, D, XD, OFF) \
	HSUM1(A, XA, OFF); HSUM1(B, XB, OFF+4); HSUM1(C, XC, OFF+8); HSUM1(D, XD, OFF+12)

#define LOAD12 LD4(Y0, Y1, Y2, Y3, 0); LD4(Y4, Y5, Y6, Y7, 128); LD4(Y8, Y9, Y10, Y11, 256)
#define STORE12 ST4(Y0, Y1, Y2, Y3, 0); ST4(Y4, Y5, Y6, Y7, 128); ST4(Y8, Y9, Y10, Y11, 256)
#define ZERO12 Z4(Y0, Y1, Y2, Y3); Z4(Y4, Y5, Y6, Y7); Z4(Y8, Y9, Y10, Y11)
#define RED12 \
	H4(Y0, X0, Y1, X1, Y2, X2, Y3, X3, 0); \
	H4(Y4, X4, Y5, X5, Y6, X6, Y7, X7, 16); \
	H4(Y8, X8, Y9, X9, Y10, X10, Y11, X11, 32)
#define LOAD8 LD4(Y0, Y1, Y2, Y3, 0); LD4(Y4, Y5, Y6, Y7, 128)
#define STORE8 ST4(Y0, Y1, Y2, Y3, 0); ST4(Y4, Y5, Y6, Y7, 128)
#define ZERO8 Z4(Y0, Y1, Y2, Y3); Z4(Y4, Y5, Y6, Y7)
#define RED8 \
	H4(Y0, X0, Y1, X1, Y2, X2, Y3, X3, 0); \
	H4(Y4, X4, Y5, X5, Y6, X6, Y7, X7, 16)
#define LOAD4 LD4(Y0, Y1, Y2, Y3, 0)
#define STORE4 ST4(Y0, Y1, Y2, Y3, 0)
#define ZERO4 Z4(Y0, Y1, Y2, Y3)
#define RED4 H4(Y0, X0, Y1, X1, Y2, X2, Y3, X3, 0)

// TILE is a whole tile after the arguments are loaded (AX = acc, R8 = w,
// R10 = packed activations, CX = steps, BX = flags, DX = pf): LOAD or ZERO
// the accumulators, BODY per step (a Q8_0 block or an 8-column group; it
// advances R8 and R10), then STORE or RED.
#define TILE(LOAD, ZERO, STORE, RED, BODY, L0, L1, L2, L3, L4) \
	TESTQ $1, BX; \
	JZ   L0; \
	LOAD; \
	JMP  L1; \
L0: \
	ZERO; \
L1: \
	TESTQ CX, CX; \
	JZ   L3; \
L2: \
	BODY; \
	DECQ CX; \
	JNZ  L2; \
L3: \
	TESTQ $2, BX; \
	JNZ  L4; \
	STORE; \
	VZEROUPPER; \
	RET; \
L4: \
	RED; \
	VZEROUPPER; \
	RET

// Q8 step: one block (32 columns, 4 groups of N tokens × 32 bytes).
#define Q8W(OFF, Y) \
	VPMOVSXBD OFF(R8), Y; VCVTDQ2PS Y, Y; VMULPS Y12, Y, Y
#define Q8STEP(FMAS, XB) \
	PREFETCHT0 (R8)(DX*1); \
	VPBROADCASTW (R8), X12; \
	VCVTPH2PS X12, Y12; \
	Q8W(2, Y13); FMAS(0, Y13); \
	Q8W(10, Y14); FMAS(XB, Y14); \
	Q8W(18, Y13); FMAS(2*XB, Y13); \
	Q8W(26, Y14); FMAS(3*XB, Y14); \
	ADDQ $34, R8; \
	ADDQ $(4*XB), R10

// Float step: one 8-column group (XB bytes of packed activations).
#define FSTEP(CVT, WSTEP, FMAS, XB) \
	PREFETCHT0 (R8)(DX*1); \
	CVT((R8), Y13); \
	FMAS(0, Y13); \
	ADDQ $WSTEP, R8; \
	ADDQ $XB, R10

// FSTEP32 is FSTEP for float32 weights, without the prefetch: they are the
// widened panels, already in cache, or (rarely) a float32 model.
#define FSTEP32(FMAS, XB) \
	VMOVUPS (R8), Y13; \
	FMAS(0, Y13); \
	ADDQ $32, R8; \
	ADDQ $XB, R10

#define Q8S12 Q8STEP(FMAS12, 384)
#define Q8S8 Q8STEP(FMAS8, 256)
#define Q8S4 Q8STEP(FMAS4, 128)
#define F32S12 FSTEP32(FMAS12, 384)
#define F32S8 FSTEP32(FMAS8, 256)
#define F32S4 FSTEP32(FMAS4, 128)
#define F16S12 FSTEP(CVTF16, 16, FMAS12, 384)
#define F16S8 FSTEP(CVTF16, 16, FMAS8, 256)
#define F16S4 FSTEP(CVTF16, 16, FMAS4, 128)
#define BF16S12 FSTEP(CVTBF16, 16, FMAS12, 384)
#define BF16S8 FSTEP(CVTBF16, 16, FMAS8, 256)
#define BF16S4 FSTEP(CVTBF16, 16, FMAS4, 128)

// func avx2Q8Tile12(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)
TEXT ·avx2Q8Tile12(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), AX
	MOVQ w+8(FP), R8
	MOVQ xp+16(FP), R10
	MOVQ n+24(FP), CX
	MOVQ flags+32(FP), BX
	MOVQ pf+40(FP), DX
	TILE(LOAD12, ZERO12, STORE12, RED12, Q8S12, q8t12z, q8t12s, q8t12l, q8t12e, q8t12r)

// func avx2Q8Tile8(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)
TEXT ·avx2Q8Tile8(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), AX
	MOVQ w+8(FP), R8
	MOVQ xp+16(FP), R10
	MOVQ n+24(FP), CX
	MOVQ flags+32(FP), BX
	MOVQ pf+40(FP), DX
	TILE(LOAD8, ZERO8, STORE8, RED8, Q8S8, q8t8z, q8t8s, q8t8l, q8t8e, q8t8r)

// func avx2Q8Tile4(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)
TEXT ·avx2Q8Tile4(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), AX
	MOVQ w+8(FP), R8
	MOVQ xp+16(FP), R10
	MOVQ n+24(FP), CX
	MOVQ flags+32(FP), BX
	MOVQ pf+40(FP), DX
	TILE(LOAD4, ZERO4, STORE4, RED4, Q8S4, q8t4z, q8t4s, q8t4l, q8t4e, q8t4r)

// func avx2F32Tile12(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)
TEXT ·avx2F32Tile12(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), AX
	MOVQ w+8(FP), R8
	MOVQ xp+16(FP), R10
	MOVQ n+24(FP), CX
	MOVQ flags+32(FP), BX
	MOVQ pf+40(FP), DX
	TILE(LOAD12, ZERO12, STORE12, RED12, F32S12, f32t12z, f32t12s, f32t12l, f32t12e, f32t12r)

// func avx2F32Tile8(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)
TEXT ·avx2F32Tile8(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), AX
	MOVQ w+8(FP), R8
	MOVQ xp+16(FP), R10
	MOVQ n+24(FP), CX
	MOVQ flags+32(FP), BX
	MOVQ pf+40(FP), DX
	TILE(LOAD8, ZERO8, STORE8, RED8, F32S8, f32t8z, f32t8s, f32t8l, f32t8e, f32t8r)

// func avx2F32Tile4(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)
TEXT ·avx2F32Tile4(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), AX
	MOVQ w+8(FP), R8
	MOVQ xp+16(FP), R10
	MOVQ n+24(FP), CX
	MOVQ flags+32(FP), BX
	MOVQ pf+40(FP), DX
	TILE(LOAD4, ZERO4, STORE4, RED4, F32S4, f32t4z, f32t4s, f32t4l, f32t4e, f32t4r)

// func avx2F16Tile12(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)
TEXT ·avx2F16Tile12(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), AX
	MOVQ w+8(FP), R8
	MOVQ xp+16(FP), R10
	MOVQ n+24(FP), CX
	MOVQ flags+32(FP), BX
	MOVQ pf+40(FP), DX
	TILE(LOAD12, ZERO12, STORE12, RED12, F16S12, f16t12z, f16t12s, f16t12l, f16t12e, f16t12r)

// func avx2F16Tile8(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)
TEXT ·avx2F16Tile8(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), AX
	MOVQ w+8(FP), R8
	MOVQ xp+16(FP), R10
	MOVQ n+24(FP), CX
	MOVQ flags+32(FP), BX
	MOVQ pf+40(FP), DX
	TILE(LOAD8, ZERO8, STORE8, RED8, F16S8, f16t8z, f16t8s, f16t8l, f16t8e, f16t8r)

// func avx2F16Tile4(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)
TEXT ·avx2F16Tile4(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), AX
	MOVQ w+8(FP), R8
	MOVQ xp+16(FP), R10
	MOVQ n+24(FP), CX
	MOVQ flags+32(FP), BX
	MOVQ pf+40(FP), DX
	TILE(LOAD4, ZERO4, STORE4, RED4, F16S4, f16t4z, f16t4s, f16t4l, f16t4e, f16t4r)

// func avx2BF16Tile12(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)
TEXT ·avx2BF16Tile12(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), AX
	MOVQ w+8(FP), R8
	MOVQ xp+16(FP), R10
	MOVQ n+24(FP), CX
	MOVQ flags+32(FP), BX
	MOVQ pf+40(FP), DX
	TILE(LOAD12, ZERO12, STORE12, RED12, BF16S12, bf16t12z, bf16t12s, bf16t12l, bf16t12e, bf16t12r)

// func avx2BF16Tile8(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)
TEXT ·avx2BF16Tile8(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), AX
	MOVQ w+8(FP), R8
	MOVQ xp+16(FP), R10
	MOVQ n+24(FP), CX
	MOVQ flags+32(FP), BX
	MOVQ pf+40(FP), DX
	TILE(LOAD8, ZERO8, STORE8, RED8, BF16S8, bf16t8z, bf16t8s, bf16t8l, bf16t8e, bf16t8r)

// func avx2BF16Tile4(acc *[96]float32, w, xp unsafe.Pointer, n, flags, pf int)
TEXT ·avx2BF16Tile4(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), AX
	MOVQ w+8(FP), R8
	MOVQ xp+16(FP), R10
	MOVQ n+24(FP), CX
	MOVQ flags+32(FP), BX
	MOVQ pf+40(FP), DX
	TILE(LOAD4, ZERO4, STORE4, RED4, BF16S4, bf16t4z, bf16t4s, bf16t4l, bf16t4e, bf16t4r)

// ---- widening a panel once for several token groups ------------------------

// func avx2Q8Unpack(dst *float32, w unsafe.Pointer, nb, pf int)
// dst[32b+i] = float32(q_b[i])·d_b, exactly as the kernels above form it.
TEXT ·avx2Q8Unpack(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), R8
	MOVQ nb+16(FP), CX
	MOVQ pf+24(FP), DX
	TESTQ CX, CX
	JZ   q8udone

q8uloop:
	PREFETCHT0 (R8)(DX*1)
	VPBROADCASTW (R8), X12
	VCVTPH2PS X12, Y12
	VPMOVSXBD 2(R8), Y0
	VPMOVSXBD 10(R8), Y1
	VPMOVSXBD 18(R8), Y2
	VPMOVSXBD 26(R8), Y3
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
	ADDQ $34, R8
	DECQ CX
	JNZ  q8uloop

q8udone:
	VZEROUPPER
	RET

// func avx2CvtF16(dst *float32, src unsafe.Pointer, n8, pf int)
// Widens 8·n8 halves.
TEXT ·avx2CvtF16(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n8+16(FP), CX
	MOVQ pf+24(FP), DX
	TESTQ CX, CX
	JZ   cvt8done

cvt8loop:
	PREFETCHT0 (SI)(DX*1)
	VCVTPH2PS (SI), Y0
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  cvt8loop

cvt8done:
	VZEROUPPER
	RET
