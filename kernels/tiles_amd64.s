//go:build goexperiment.simd && amd64

#include "textflag.h"

// Matmul tiles for AVX-512 that archsimd cannot express well: the compiler
// allocates only Z0-Z14 (a 4x4 tile of 16 accumulators spills), and
// VPDPBUSD (AVX512-VNNI) and VCVTPH2PS are not exposed. Each tile follows the
// package's reduction order exactly (see simd_amd64.go), so its results are
// bit-identical to the archsimd tiles:
//   - float: acc[lane] = fma(w, x, acc[lane]) over 16-column chunks, the
//     last chunk zero-padded;
//   - Q8_0: per block pair, isum[lane] = exact Σ w·x over 4 bytes, then
//     acc[lane] = fma(float(isum), dw·dx, acc[lane]);
//   - HSUM: (lo8 + hi8), (lo4 + hi4), two horizontal adds.
// Accumulator of token t, row r is Z(4t+r).

// HSUM reduces Z to its lane sum and stores it at OFF(AX). Clobbers Z,
// Z16 and X17 (the horizontal adds are VEX-only, hence in place on Z).
#define HSUM(Z, Y, X, OFF) \
	VEXTRACTF64X4 $1, Z, Y16; \
	VADDPS Y16, Y, Y; \
	VEXTRACTF32X4 $1, Y, X17; \
	VADDPS X17, X, X; \
	VHADDPS X, X, X; \
	VHADDPS X, X, X; \
	VMOVSS X, OFF(AX)

#define HSUM4(OFF) \
	HSUM(Z0, Y0, X0, OFF+0); \
	HSUM(Z1, Y1, X1, OFF+4); \
	HSUM(Z2, Y2, X2, OFF+8); \
	HSUM(Z3, Y3, X3, OFF+12)

#define HSUM16 \
	HSUM4(0); \
	HSUM(Z4, Y4, X4, 16); \
	HSUM(Z5, Y5, X5, 20); \
	HSUM(Z6, Y6, X6, 24); \
	HSUM(Z7, Y7, X7, 28); \
	HSUM(Z8, Y8, X8, 32); \
	HSUM(Z9, Y9, X9, 36); \
	HSUM(Z10, Y10, X10, 40); \
	HSUM(Z11, Y11, X11, 44); \
	HSUM(Z12, Y12, X12, 48); \
	HSUM(Z13, Y13, X13, 52); \
	HSUM(Z14, Y14, X14, 56); \
	HSUM(Z15, Y15, X15, 60)

#define ZERO16 \
	VPXORD Z0, Z0, Z0; VPXORD Z1, Z1, Z1; VPXORD Z2, Z2, Z2; VPXORD Z3, Z3, Z3; \
	VPXORD Z4, Z4, Z4; VPXORD Z5, Z5, Z5; VPXORD Z6, Z6, Z6; VPXORD Z7, Z7, Z7; \
	VPXORD Z8, Z8, Z8; VPXORD Z9, Z9, Z9; VPXORD Z10, Z10, Z10; VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; VPXORD Z13, Z13, Z13; VPXORD Z14, Z14, Z14; VPXORD Z15, Z15, Z15

// ---- Q8_0 with VNNI --------------------------------------------------------
//
// VPDPBUSD multiplies unsigned by signed bytes. The weight bytes are made
// unsigned by flipping their sign bit (w' = w+128); the extra 128·Σx per lane
// is subtracted by starting each sum at -128·Σx, computed once per token and
// block pair with the same instruction. Z29 holds 0x80 bytes, Z30 zero.

// QW loads row R's block pair at DX: Z(W) = w' (64 bytes), Z(D) = [dw0 ×8, dw1 ×8].
#define QW(R, ZW, YW, ZD) \
	VMOVDQU64 2(R)(DX*1), YW; \
	VINSERTI64X4 $1, 36(R)(DX*1), ZW, ZW; \
	VPXORD Z29, ZW, ZW; \
	VPBROADCASTW (R)(DX*1), X27; \
	VPBROADCASTW 34(R)(DX*1), X28; \
	VINSERTI32X4 $1, X28, Y27, Y27; \
	VCVTPH2PS Y27, ZD

// QWH is QW for a final odd block: the missing block is zero (w' = 0x80,
// which the correction cancels since x is zero-padded there; scale 0).
#define QWH(R, ZW, YW, ZD) \
	VMOVDQU64 2(R)(DX*1), YW; \
	VPXORD Z29, ZW, ZW; \
	VPBROADCASTW (R)(DX*1), X27; \
	VCVTPH2PS Y27, ZD

// QX loads a token's block pair: Z24 = x, Z25 = -128·Σx per lane, Z26 = dx.
#define QX(QADDR, SADDR) \
	VMOVDQU64 QADDR, Z24; \
	VPXORD Z25, Z25, Z25; \
	VPDPBUSD Z24, Z29, Z25; \
	VPSUBD Z25, Z30, Z25; \
	VMOVUPS SADDR, Z26

// QMAC: ACC = fma(float(Σ w·x), dw·dx, ACC) for row (ZW, ZD) and the token in Z24-26.
#define QMAC(ZW, ZD, ACC) \
	VMOVDQA32 Z25, Z27; \
	VPDPBUSD Z24, ZW, Z27; \
	VCVTDQ2PS Z27, Z27; \
	VMULPS Z26, ZD, Z28; \
	VFMADD231PS Z28, Z27, ACC

#define QMAC4(A0, A1, A2, A3) \
	QMAC(Z16, Z20, A0); \
	QMAC(Z17, Z21, A1); \
	QMAC(Z18, Z22, A2); \
	QMAC(Z19, Z23, A3)

#define QCONST \
	MOVL $0x80808080, DX; \
	VPBROADCASTD DX, Z29; \
	VPXORD Z30, Z30, Z30; \
	XORQ DX, DX

// func q8VNNITile4x4(res *[16]float32, w0, w1, w2, w3, qs unsafe.Pointer, qStride int, xs unsafe.Pointer, sStride, nb int)
TEXT ·q8VNNITile4x4(SB), NOSPLIT, $0-80
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ w2+24(FP), R10
	MOVQ w3+32(FP), R11
	MOVQ qs+40(FP), R12
	MOVQ qStride+48(FP), R13
	MOVQ xs+56(FP), BX
	MOVQ sStride+64(FP), SI
	LEAQ (R13)(R13*2), AX
	ADDQ R12, AX
	LEAQ (SI)(SI*2), DI
	ADDQ BX, DI
	ZERO16
	QCONST
	MOVQ nb+72(FP), CX
	SHRQ $1, CX
	JZ   q44tail

q44loop:
	QW(R8, Z16, Y16, Z20)
	QW(R9, Z17, Y17, Z21)
	QW(R10, Z18, Y18, Z22)
	QW(R11, Z19, Y19, Z23)
	QX((R12), (BX))
	QMAC4(Z0, Z1, Z2, Z3)
	QX((R12)(R13*1), (BX)(SI*1))
	QMAC4(Z4, Z5, Z6, Z7)
	QX((R12)(R13*2), (BX)(SI*2))
	QMAC4(Z8, Z9, Z10, Z11)
	QX((AX), (DI))
	QMAC4(Z12, Z13, Z14, Z15)
	ADDQ $68, DX
	ADDQ $64, R12
	ADDQ $64, AX
	ADDQ $64, BX
	ADDQ $64, DI
	DECQ CX
	JNZ  q44loop

q44tail:
	MOVQ nb+72(FP), CX
	ANDQ $1, CX
	JZ   q44done
	QWH(R8, Z16, Y16, Z20)
	QWH(R9, Z17, Y17, Z21)
	QWH(R10, Z18, Y18, Z22)
	QWH(R11, Z19, Y19, Z23)
	QX((R12), (BX))
	QMAC4(Z0, Z1, Z2, Z3)
	QX((R12)(R13*1), (BX)(SI*1))
	QMAC4(Z4, Z5, Z6, Z7)
	QX((R12)(R13*2), (BX)(SI*2))
	QMAC4(Z8, Z9, Z10, Z11)
	QX((AX), (DI))
	QMAC4(Z12, Z13, Z14, Z15)

q44done:
	MOVQ res+0(FP), AX
	HSUM16
	VZEROUPPER
	RET

// Q8ROWDIST is how far ahead of its row q8VNNIRow1 prefetches.
#define Q8ROWDIST 4096

// func q8VNNIRow1(res *float32, w, qs, xs unsafe.Pointer, nb int)
//
// One row × one token: the single-token matvec one row at a time (see
// ROWDIST below), same products and order as q8Tile4x1 (avx512_amd64.go).
TEXT ·q8VNNIRow1(SB), NOSPLIT, $0-40
	MOVQ w+8(FP), R8
	MOVQ qs+16(FP), R12
	MOVQ xs+24(FP), BX
	VPXORD Z0, Z0, Z0
	QCONST
	MOVQ nb+32(FP), CX
	SHRQ $1, CX
	JZ   q11tail

q11loop:
	PREFETCHT0 Q8ROWDIST(R8)(DX*1)
	QX((R12), (BX))
	QW(R8, Z16, Y16, Z20)
	QMAC(Z16, Z20, Z0)
	ADDQ $68, DX
	ADDQ $64, R12
	ADDQ $64, BX
	DECQ CX
	JNZ  q11loop

q11tail:
	MOVQ nb+32(FP), CX
	ANDQ $1, CX
	JZ   q11done
	QX((R12), (BX))
	QWH(R8, Z16, Y16, Z20)
	QMAC(Z16, Z20, Z0)

q11done:
	MOVQ res+0(FP), AX
	HSUM(Z0, Y0, X0, 0)
	VZEROUPPER
	RET

// ---- float32 4 rows × 4 tokens ---------------------------------------------

#define FMAC4(ZX, A0, A1, A2, A3) \
	VFMADD231PS ZX, Z16, A0; \
	VFMADD231PS ZX, Z17, A1; \
	VFMADD231PS ZX, Z18, A2; \
	VFMADD231PS ZX, Z19, A3

// func f32Tile4x4asm(res *[16]float32, w0, w1, w2, w3, x unsafe.Pointer, ldx, cols int)
TEXT ·f32Tile4x4asm(SB), NOSPLIT, $0-64
	MOVQ w0+8(FP), R8
	MOVQ w1+16(FP), R9
	MOVQ w2+24(FP), R10
	MOVQ w3+32(FP), R11
	MOVQ x+40(FP), R12
	MOVQ ldx+48(FP), SI
	LEAQ (R12)(SI*1), R13
	LEAQ (R13)(SI*1), AX
	LEAQ (AX)(SI*1), BX
	ZERO16
	XORQ DX, DX
	MOVQ cols+56(FP), CX
	SHRQ $4, CX
	JZ   f44tail

f44loop:
	VMOVUPS (R8)(DX*1), Z16
	VMOVUPS (R9)(DX*1), Z17
	VMOVUPS (R10)(DX*1), Z18
	VMOVUPS (R11)(DX*1), Z19
	VMOVUPS (R12)(DX*1), Z20
	VMOVUPS (R13)(DX*1), Z21
	FMAC4(Z20, Z0, Z1, Z2, Z3)
	VMOVUPS (AX)(DX*1), Z22
	FMAC4(Z21, Z4, Z5, Z6, Z7)
	VMOVUPS (BX)(DX*1), Z23
	FMAC4(Z22, Z8, Z9, Z10, Z11)
	FMAC4(Z23, Z12, Z13, Z14, Z15)
	ADDQ $64, DX
	DECQ CX
	JNZ  f44loop

f44tail:
	MOVQ cols+56(FP), CX
	ANDQ $15, CX
	JZ   f44done
	MOVL $1, DI
	SHLL CX, DI
	DECL DI
	KMOVW DI, K1
	VMOVUPS.Z (R8)(DX*1), K1, Z16
	VMOVUPS.Z (R9)(DX*1), K1, Z17
	VMOVUPS.Z (R10)(DX*1), K1, Z18
	VMOVUPS.Z (R11)(DX*1), K1, Z19
	VMOVUPS.Z (R12)(DX*1), K1, Z20
	VMOVUPS.Z (R13)(DX*1), K1, Z21
	VMOVUPS.Z (AX)(DX*1), K1, Z22
	VMOVUPS.Z (BX)(DX*1), K1, Z23
	FMAC4(Z20, Z0, Z1, Z2, Z3)
	FMAC4(Z21, Z4, Z5, Z6, Z7)
	FMAC4(Z22, Z8, Z9, Z10, Z11)
	FMAC4(Z23, Z12, Z13, Z14, Z15)

f44done:
	MOVQ res+0(FP), AX
	HSUM16
	VZEROUPPER
	RET

// ---- F16 / BF16 conversions ------------------------------------------------

// CVTH converts 16 halves at ADDR to float32 in Z (F16).
#define CVTH(ADDR, Z) VCVTPH2PS ADDR, Z

// CVTB converts 16 bfloat16 at ADDR to float32 in Z: widen and shift.
#define CVTB(ADDR, Z) VPMOVZXWD ADDR, Z; VPSLLD $16, Z, Z

// TAILMASK sets K1 to the low CX%16 bits, jumping to DONE when zero.
#define TAILMASK(DONE) \
	ANDQ $15, CX; \
	JZ   DONE; \
	MOVL $1, DI; \
	SHLL CX, DI; \
	DECL DI; \
	KMOVW DI, K1

// ---- F16 / BF16 1 row × 1 token ---------------------------------------------
//
// A single token's matvec reads each row once: one row at a time is one
// sequential stream, which the prefetchers follow better than four rows
// side by side (about 9% more bandwidth measured on Zen 5), with a software
// prefetch ROWDIST bytes ahead. The one accumulator takes the 16-column
// chunks in order, as the 4-row tiles do: results are bit-identical.

#define ROWDIST 4096

// ROW1 needs AX = res, R8 = w, R12 = x, R13 = cols.
#define ROW1(CVT, LOOP, ONE, TAIL, DONE) \
	VPXORD Z0, Z0, Z0; \
	XORQ DX, DX; \
	MOVQ R13, CX; \
	SHRQ $5, CX; \
	JZ   ONE; \
LOOP: \
	PREFETCHT0 ROWDIST(R8)(DX*1); \
	CVT((R8)(DX*1), Z16); \
	CVT(32(R8)(DX*1), Z17); \
	VFMADD231PS (R12)(DX*2), Z16, Z0; \
	VFMADD231PS 64(R12)(DX*2), Z17, Z0; \
	ADDQ $64, DX; \
	DECQ CX; \
	JNZ  LOOP; \
ONE: \
	MOVQ R13, CX; \
	TESTQ $16, CX; \
	JZ   TAIL; \
	CVT((R8)(DX*1), Z16); \
	VFMADD231PS (R12)(DX*2), Z16, Z0; \
	ADDQ $32, DX; \
TAIL: \
	MOVQ R13, CX; \
	TAILMASK(DONE); \
	VMOVUPS.Z (R12)(DX*2), K1, Z20; \
	VMOVDQU16.Z (R8)(DX*1), K1, Y16; \
	CVT(Y16, Z16); \
	VFMADD231PS Z20, Z16, Z0; \
DONE: \
	HSUM(Z0, Y0, X0, 0); \
	VZEROUPPER; \
	RET

// func f16Row1asm(res *float32, w, x unsafe.Pointer, cols int)
TEXT ·f16Row1asm(SB), NOSPLIT, $0-32
	MOVQ res+0(FP), AX
	MOVQ w+8(FP), R8
	MOVQ x+16(FP), R12
	MOVQ cols+24(FP), R13
	ROW1(CVTH, f11loop, f11one, f11tail, f11done)

// func bf16Row1asm(res *float32, w, x unsafe.Pointer, cols int)
TEXT ·bf16Row1asm(SB), NOSPLIT, $0-32
	MOVQ res+0(FP), AX
	MOVQ w+8(FP), R8
	MOVQ x+16(FP), R12
	MOVQ cols+24(FP), R13
	ROW1(CVTB, b11loop, b11one, b11tail, b11done)

// func cvtF16asm(dst *float32, src unsafe.Pointer, n int)
TEXT ·cvtF16asm(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	XORQ DX, DX
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   cvttail

cvtloop:
	VCVTPH2PS (SI)(DX*1), Z0
	VMOVUPS Z0, (DI)(DX*2)
	ADDQ $32, DX
	DECQ CX
	JNZ  cvtloop

cvttail:
	MOVQ n+16(FP), CX
	ANDQ $15, CX
	JZ   cvtdone
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K1
	VMOVDQU16.Z (SI)(DX*1), K1, Y0
	VCVTPH2PS Y0, Z0
	VMOVUPS Z0, K1, (DI)(DX*2)

cvtdone:
	VZEROUPPER
	RET
