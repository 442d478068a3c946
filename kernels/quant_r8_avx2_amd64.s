//go:build goexperiment.simd && amd64

#include "textflag.h"

// Eight-row kernels for the 32-value block formats on AVX2 (see
// quant_r8_avx2_amd64.go): quant_r16_avx512_amd64.s's scheme in 256-bit
// registers, with VPMADDUBSW+VPMADDWD for the sums (no VNNI).
//
// An unpacker lays 8 weight rows side by side, per block 320 bytes:
//     0: g[8]  8 × 32 bytes: lane p of g[k] holds the quants 4k..4k+3 of
//              row P(p) as unsigned bytes u
//   256: dw    8 float32: lane p = row P(p)'s scale d
//   288: mv    8 float32: lane p = row P(p)'s minimum m (those types)
// where P(p) = 2·(p mod 4) + p/4; after the n blocks, 32 bytes per block
// stage the rows' float16 scales (and minimums). Q8_0 lays out 544 bytes
// per block, |w| in g and the signed quants in a second plane at 288 (see
// R8_TOKS).
//
// A dot kernel then takes every token over those blocks: per token and
// block, each activation dword is broadcast to the 8 rows, VPMADDUBSW
// multiplies and adds pairs, four groups add up in int16 (|u| ≤ 31, so
// |Σ| ≤ 4·2·31·127 fits) and VPMADDWD widens; with the token's -o·Σy the
// block's exact integer sum Σ(u-o)·y for all 8 rows, converted once:
// acc += float(Σ)·(d·dx) (then + m·s), in block order. (Q8_0's sum Σw·y,
// exact the same way, widens every group: R8_TOKS.)

// ---- unpacking --------------------------------------------------------------
//
// R8-R11 = rows 0, 2, 4, 6 of the current block; R12 = rb; DI = the block's
// scratch; BX = its staging; DX = the prefetch pointer; CX = blocks left;
// Y15 = 0x0f bytes.

#define R8_UNPACK_PROLOGUE R8_UNPACK_PROLOGUE_B(320)

#define R8_UNPACK_PROLOGUE_B(BLK) \
	MOVQ dst+0(FP), DI; \
	MOVQ w+8(FP), R8; \
	MOVQ rb+16(FP), R12; \
	MOVQ n+24(FP), CX; \
	MOVQ pf+32(FP), DX; \
	LEAQ (R8)(R12*2), R9; \
	LEAQ (R9)(R12*2), R10; \
	LEAQ (R10)(R12*2), R11; \
	MOVQ CX, BX; \
	IMULQ $BLK, BX; \
	ADDQ DI, BX; \
	MOVQ BX, R15; \
	VMOVDQU r8nib<>(SB), Y15

// R8_LOAD: Y0-Y3 = the 16 bytes at OFF of rows [0|1], [2|3], [4|5], [6|7].
#define R8_ROWS2(P, OFF, Y, X) \
	VMOVDQU OFF(P), X; \
	VINSERTI128 $1, OFF(P)(R12*1), Y, Y

#define R8_LOAD(OFF) \
	R8_ROWS2(R8, OFF, Y0, X0); \
	R8_ROWS2(R9, OFF, Y1, X1); \
	R8_ROWS2(R10, OFF, Y2, X2); \
	R8_ROWS2(R11, OFF, Y3, X3)

// R8_T4 transposes the dwords of Y0-Y3 within each 128-bit lane: Yk lane
// 4L+i = dword k of row 2i+L.
#define R8_T4 \
	VPUNPCKLDQ Y1, Y0, Y4; \
	VPUNPCKHDQ Y1, Y0, Y5; \
	VPUNPCKLDQ Y3, Y2, Y6; \
	VPUNPCKHDQ Y3, Y2, Y7; \
	VPUNPCKLQDQ Y6, Y4, Y0; \
	VPUNPCKHQDQ Y6, Y4, Y1; \
	VPUNPCKLQDQ Y7, Y5, Y2; \
	VPUNPCKHQDQ Y7, Y5, Y3

// R8_T0: R8_T4's first output (dword 0 of each row) into Y0, through
// Y12/Y13.
#define R8_T0 \
	VPUNPCKLDQ Y1, Y0, Y12; \
	VPUNPCKLDQ Y3, Y2, Y13; \
	VPUNPCKLQDQ Y13, Y12, Y0

// R8_NIBS: the low nibbles of Y0-Y3 into Y8-Y11 (groups 0-3), the high
// ones into Y4-Y7 (groups 4-7).
#define R8_NIB(YT, YL, YH) \
	VPSRLW $4, YT, YH; \
	VPAND Y15, YT, YL; \
	VPAND Y15, YH, YH

#define R8_NIBS \
	R8_NIB(Y0, Y8, Y4); \
	R8_NIB(Y1, Y9, Y5); \
	R8_NIB(Y2, Y10, Y6); \
	R8_NIB(Y3, Y11, Y7)

#define R8_STORE8 \
	VMOVDQU Y8, 0(DI); \
	VMOVDQU Y9, 32(DI); \
	VMOVDQU Y10, 64(DI); \
	VMOVDQU Y11, 96(DI); \
	VMOVDQU Y4, 128(DI); \
	VMOVDQU Y5, 160(DI); \
	VMOVDQU Y6, 192(DI); \
	VMOVDQU Y7, 224(DI)

// R8_HALVES copies the 8 rows' 2 bytes at OFF to TO(BX), lane order.
#define R8_H(P, OFF, TO) MOVWLZX OFF(P), AX; MOVW AX, TO(BX)
#define R8_HI(P, OFF, TO) MOVWLZX OFF(P)(R12*1), AX; MOVW AX, TO(BX)
#define R8_HALVES(OFF, TO) \
	R8_H(R8, OFF, TO+0); R8_H(R9, OFF, TO+2); R8_H(R10, OFF, TO+4); R8_H(R11, OFF, TO+6); \
	R8_HI(R8, OFF, TO+8); R8_HI(R9, OFF, TO+10); R8_HI(R10, OFF, TO+12); R8_HI(R11, OFF, TO+14)

#define R8_B(P, OFF, TO) MOVBLZX OFF(P), AX; MOVB AX, TO(BX)
#define R8_BI(P, OFF, TO) MOVBLZX OFF(P)(R12*1), AX; MOVB AX, TO(BX)
#define R8_BYTES(OFF, TO) \
	R8_B(R8, OFF, TO+0); R8_B(R9, OFF, TO+1); R8_B(R10, OFF, TO+2); R8_B(R11, OFF, TO+3); \
	R8_BI(R8, OFF, TO+4); R8_BI(R9, OFF, TO+5); R8_BI(R10, OFF, TO+6); R8_BI(R11, OFF, TO+7)

// R8_NEXT prefetches the next group's 8·BYTES bytes (at most 192: three
// lines) and steps to the next block; R8_NEXT_B with BLK scratch bytes per
// block and the prefetches PF.
#define R8_NEXT(BYTES) R8_NEXT_B(BYTES, 320, R8_PF3)

#define R8_PF3 \
	PREFETCHT1 0(DX); \
	PREFETCHT1 64(DX); \
	PREFETCHT1 128(DX)

// R8_PF5: five lines, for Q8_0's 8·34 bytes.
#define R8_PF5 \
	R8_PF3; \
	PREFETCHT1 192(DX); \
	PREFETCHT1 256(DX)

#define R8_NEXT_B(BYTES, BLK, PF) \
	PF; \
	ADDQ $(8*BYTES), DX; \
	ADDQ $BYTES, R8; \
	ADDQ $BYTES, R9; \
	ADDQ $BYTES, R10; \
	ADDQ $BYTES, R11; \
	ADDQ $BLK, DI; \
	ADDQ $32, BX

// R8_FIFTH adds 16 to the bytes of group YG whose bit 4k+i of the rows'
// qh (Y0, lane order) is set: byte k/2 of each dword to all four (CTL),
// the bit of each byte kept (MASK), compared, 0x10 where set.
#define R8_BIT(YG, CTL, MASK) \
	VPSHUFB CTL, Y0, Y12; \
	VPAND MASK, Y12, Y12; \
	VPCMPEQB MASK, Y12, Y12; \
	VPAND r8x10<>(SB), Y12, Y12; \
	VPOR Y12, YG, YG

#define R8_FIFTH \
	R8_BIT(Y8, r8qhctl<>+0(SB), r8qhmask<>+0(SB)); \
	R8_BIT(Y9, r8qhctl<>+0(SB), r8qhmask<>+32(SB)); \
	R8_BIT(Y10, r8qhctl<>+32(SB), r8qhmask<>+0(SB)); \
	R8_BIT(Y11, r8qhctl<>+32(SB), r8qhmask<>+32(SB)); \
	R8_BIT(Y4, r8qhctl<>+64(SB), r8qhmask<>+0(SB)); \
	R8_BIT(Y5, r8qhctl<>+64(SB), r8qhmask<>+32(SB)); \
	R8_BIT(Y6, r8qhctl<>+96(SB), r8qhmask<>+0(SB)); \
	R8_BIT(Y7, r8qhctl<>+96(SB), r8qhmask<>+32(SB))

#define R8_LOOKUP \
	VPSHUFB Y8, Y14, Y8; \
	VPSHUFB Y9, Y14, Y9; \
	VPSHUFB Y10, Y14, Y10; \
	VPSHUFB Y11, Y14, Y11; \
	VPSHUFB Y4, Y14, Y4; \
	VPSHUFB Y5, Y14, Y5; \
	VPSHUFB Y6, Y14, Y6; \
	VPSHUFB Y7, Y14, Y7

// R8_SCALES converts the staged float16 scales (and with MIN minimums);
// R8_SCALES_B with BLK scratch bytes per block.
#define R8_SCALES(MIN) R8_SCALES_B(MIN, 320)

#define R8_SCALES_B(MIN, BLK) \
	MOVQ dst+0(FP), DI; \
	MOVQ n+24(FP), CX; \
r8scales:; \
	VCVTPH2PS 0(R15), Y8; \
	VMOVUPS Y8, 256(DI); \
	MIN; \
	ADDQ $32, R15; \
	ADDQ $BLK, DI; \
	DECQ CX; \
	JNZ r8scales; \
	VZEROUPPER; \
	RET

#define R8_MINS VCVTPH2PS 16(R15), Y9; VMOVUPS Y9, 288(DI)
#define R8_NOMINS

// ---- dot kernels ------------------------------------------------------------
//
// func r8Dot*(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)
// As r16Dot*: acc nt × 8 float32; tokens four at a time (Y0-Y3,
// activations R8-R11, corrections R12-R15), then one at a time; per block
// the 8 groups in Y4-Y11, temporaries Y12-Y15.

#define R8_W \
	VMOVDQU 0(SI), Y4; \
	VMOVDQU 32(SI), Y5; \
	VMOVDQU 64(SI), Y6; \
	VMOVDQU 96(SI), Y7; \
	VMOVDQU 128(SI), Y8; \
	VMOVDQU 160(SI), Y9; \
	VMOVDQU 192(SI), Y10; \
	VMOVDQU 224(SI), Y11

// R8_G4: YS = Σ over groups YA..YD (int16) of the token's dwords at OFF..
#define R8_G4(X, OFF, YA, YB, YC, YD, YS) \
	VPBROADCASTD OFF(X), Y12; \
	VPMADDUBSW Y12, YA, YS; \
	VPBROADCASTD OFF+4(X), Y12; \
	VPMADDUBSW Y12, YB, Y15; \
	VPADDW Y15, YS, YS; \
	VPBROADCASTD OFF+8(X), Y12; \
	VPMADDUBSW Y12, YC, Y15; \
	VPADDW Y15, YS, YS; \
	VPBROADCASTD OFF+12(X), Y12; \
	VPMADDUBSW Y12, YD, Y15; \
	VPADDW Y15, YS, YS; \
	VPMADDWD r8ones<>(SB), YS, YS

// R8_SUM: Y13 = the block's int32 sums, without the correction.
#define R8_SUM(X) \
	R8_G4(X, 8, Y4, Y5, Y6, Y7, Y13); \
	R8_G4(X, 24, Y8, Y9, Y10, Y11, Y14); \
	VPADDD Y14, Y13, Y13

#define R8_TOK(X, C, ACC) \
	R8_SUM(X); \
	VPBROADCASTD (C), Y14; \
	VPADDD Y14, Y13, Y13; \
	VCVTDQ2PS Y13, Y13; \
	VBROADCASTSS 0(X), Y14; \
	VMULPS 256(SI), Y14, Y14; \
	VFMADD231PS Y14, Y13, ACC

#define R8_TOKM(X, C, ACC) \
	R8_SUM(X); \
	VCVTDQ2PS Y13, Y13; \
	VBROADCASTSS 0(X), Y14; \
	VMULPS 256(SI), Y14, Y14; \
	VFMADD231PS Y14, Y13, ACC; \
	VBROADCASTSS 4(X), Y14; \
	VFMADD231PS 288(SI), Y14, ACC

// -- Q8_0 (r8DotS), 544 bytes per block: g[8] = |w| at 0 (as unsigned
// bytes: -128 gives 128), dw at 256, sw[8] = the signed w at 288.
//
// Its bytes as u = w+128 would saturate VPMADDUBSW's pair sums (2·255·127
// > 32767), so the sum takes the sign trick: each broadcast activation
// dword takes w's signs (VPSIGNB: y·sign(w), 0 where w is 0) and
// VPMADDUBSW multiplies |w| ≤ 128 by that, Σ|w|·y·sign(w) = Σw·y. A pair
// sum, ≤ 2·128·127 = 32512, fits int16 but two do not, so each group
// widens (VPMADDWD by ones, Y15) before the int32 add; the block's sum is
// exact with no offset term. |y| ≤ 127 (the quantizer's d = max|x|/127), so
// y·sign(w) never wraps. A nibble split (u = 16h+l, two planes of VPMADDUBSW
// adding up in int16) is exact too but measured ~8% slower (avx2 forced on
// an AVX-512 Xeon).
// R8S_G: YS (int32) += group G's sums, |w| in YW; R8S_G0 sets YS. R8_TOKS
// leaves C unread (no offset).
#define R8S_G(X, G, YW, YS) \
	VPBROADCASTD (8+4*(G))(X), Y12; \
	VPSIGNB (288+32*(G))(SI), Y12, Y12; \
	VPMADDUBSW Y12, YW, Y12; \
	VPMADDWD Y15, Y12, Y12; \
	VPADDD Y12, YS, YS

#define R8S_G0(X, G, YW, YS) \
	VPBROADCASTD (8+4*(G))(X), Y12; \
	VPSIGNB (288+32*(G))(SI), Y12, Y12; \
	VPMADDUBSW Y12, YW, Y12; \
	VPMADDWD Y15, Y12, YS

#define R8_TOKS(X, C, ACC) \
	R8S_G0(X, 0, Y4, Y13); \
	R8S_G0(X, 4, Y8, Y14); \
	R8S_G(X, 1, Y5, Y13); \
	R8S_G(X, 5, Y9, Y14); \
	R8S_G(X, 2, Y6, Y13); \
	R8S_G(X, 6, Y10, Y14); \
	R8S_G(X, 3, Y7, Y13); \
	R8S_G(X, 7, Y11, Y14); \
	VPADDD Y14, Y13, Y13; \
	VCVTDQ2PS Y13, Y13; \
	VBROADCASTSS 0(X), Y14; \
	VMULPS 256(SI), Y14, Y14; \
	VFMADD231PS Y14, Y13, ACC

// R8_DOT_B is R8_DOT with BLK scratch bytes per block, INIT run first.
#define R8_DOT(TOK) R8_DOT_B(TOK, 320, R8_NOINIT)
#define R8_NOINIT

#define R8_DOT_B(TOK, BLK, INIT) \
	INIT; \
	MOVQ acc+0(FP), DI; \
	MOVQ nt+48(FP), BX; \
r8d4:; \
	CMPQ BX, $4; \
	JLT r8d1; \
	MOVQ x+16(FP), R8; \
	MOVQ xs+24(FP), AX; \
	LEAQ (R8)(AX*1), R9; \
	LEAQ (R9)(AX*1), R10; \
	LEAQ (R10)(AX*1), R11; \
	LEAQ (R8)(AX*4), DX; \
	MOVQ DX, x+16(FP); \
	MOVQ c+32(FP), R12; \
	MOVQ cs+40(FP), AX; \
	LEAQ (R12)(AX*1), R13; \
	LEAQ (R13)(AX*1), R14; \
	LEAQ (R14)(AX*1), R15; \
	LEAQ (R12)(AX*4), DX; \
	MOVQ DX, c+32(FP); \
	VMOVUPS 0(DI), Y0; \
	VMOVUPS 32(DI), Y1; \
	VMOVUPS 64(DI), Y2; \
	VMOVUPS 96(DI), Y3; \
	MOVQ s+8(FP), SI; \
	MOVQ n+56(FP), CX; \
r8d4b:; \
	R8_W; \
	TOK(R8, R12, Y0); \
	TOK(R9, R13, Y1); \
	TOK(R10, R14, Y2); \
	TOK(R11, R15, Y3); \
	ADDQ $BLK, SI; \
	ADDQ $40, R8; \
	ADDQ $40, R9; \
	ADDQ $40, R10; \
	ADDQ $40, R11; \
	ADDQ $4, R12; \
	ADDQ $4, R13; \
	ADDQ $4, R14; \
	ADDQ $4, R15; \
	DECQ CX; \
	JNZ r8d4b; \
	VMOVUPS Y0, 0(DI); \
	VMOVUPS Y1, 32(DI); \
	VMOVUPS Y2, 64(DI); \
	VMOVUPS Y3, 96(DI); \
	ADDQ $128, DI; \
	SUBQ $4, BX; \
	JMP r8d4; \
r8d1:; \
	TESTQ BX, BX; \
	JZ r8done; \
	MOVQ x+16(FP), R8; \
	MOVQ xs+24(FP), AX; \
	LEAQ (R8)(AX*1), DX; \
	MOVQ DX, x+16(FP); \
	MOVQ c+32(FP), R12; \
	MOVQ cs+40(FP), AX; \
	LEAQ (R12)(AX*1), DX; \
	MOVQ DX, c+32(FP); \
	VMOVUPS 0(DI), Y0; \
	MOVQ s+8(FP), SI; \
	MOVQ n+56(FP), CX; \
r8d1b:; \
	R8_W; \
	TOK(R8, R12, Y0); \
	ADDQ $BLK, SI; \
	ADDQ $40, R8; \
	ADDQ $4, R12; \
	DECQ CX; \
	JNZ r8d1b; \
	VMOVUPS Y0, 0(DI); \
	ADDQ $32, DI; \
	DECQ BX; \
	JMP r8d1; \
r8done:; \
	VZEROUPPER; \
	RET


// ---- K formats (actQ8K) ---------------------------------------------------
//
// An unpacker lays 8 rows' super-blocks side by side, 2880 bytes each:
//      0: g[64]  lane p of g[G]: the quants 4G..4G+3 of row P(p), unsigned
//   2048: sc[16] int16 pairs (s, s): the scales of the 8 sub-blocks of 32
//                values (Q4_K, Q5_K) or of the 16 of 16 (Q6_K, Q3_K, Q2_K)
//   2560: mp[8]  int16 pairs: the coefficients of the activation's 16-value
//                sums bsum[2i], bsum[2i+1] (the mins, or o·scale for the
//                offset types)
//   2816: d      8 float32
//   2848: dmin   8 float32 (d again without mins)
// and after the n super-blocks 160 bytes each: staged float16 d and dmin
// (32), and the transposed qh/hmask rows of the current segment (128).
// A (row, token, super-block) product is the exact integers
//     isum = Σ_g sc_g·Σ_{i∈g} u_i·y_i,   msum = Σ_i mp_i·bsum_i
// (groups' VPMADDUBSW pair sums added in int16 where they fit, then
// VPMADDWD with the scale pairs), taken into acc as
// acc += float(isum)·(d·dx), acc -= float(msum)·(dmin·dx).

#define KR8_UNPACK_PROLOGUE \
	MOVQ dst+0(FP), DI; \
	MOVQ w+8(FP), R8; \
	MOVQ rb+16(FP), R12; \
	MOVQ n+24(FP), CX; \
	MOVQ pf+32(FP), DX; \
	LEAQ (R8)(R12*2), R9; \
	LEAQ (R9)(R12*2), R10; \
	LEAQ (R10)(R12*2), R11; \
	MOVQ CX, BX; \
	IMULQ $2880, BX; \
	ADDQ DI, BX; \
	MOVQ BX, R15; \
	VMOVDQU r8nib<>(SB), Y15

// KR8_LT: Y0-Y3 = the 16 bytes at OFF of each of the 8 rows, transposed
// (R8_T4); the packed unpackers (the end of this file) redefine it as four
// plain loads.
#define KR8_LT(OFF) \
	R8_LOAD(OFF); \
	R8_T4

#define KR8_STORE4(A, B, C, D, G) \
	VMOVDQU A, (32*(G))(DI); \
	VMOVDQU B, (32*(G)+32)(DI); \
	VMOVDQU C, (32*(G)+64)(DI); \
	VMOVDQU D, (32*(G)+96)(DI)

// KR8_SEG: the 16 bytes at OFF of each row: low nibbles to g[GLO..GLO+3],
// high ones to g[GHI..GHI+3].
#define KR8_SEG(OFF, GLO, GHI) \
	KR8_LT(OFF); \
	R8_NIBS; \
	KR8_STORE4(Y8, Y9, Y10, Y11, GLO); \
	KR8_STORE4(Y4, Y5, Y6, Y7, GHI)

// KR8_QH: the 16 bytes at OFF of each row, transposed, to the staging
// area's 128 bytes at 32(BX).
#define KR8_QH(OFF) \
	KR8_LT(OFF); \
	VMOVDQU Y0, 32(BX); \
	VMOVDQU Y1, 64(BX); \
	VMOVDQU Y2, 96(BX); \
	VMOVDQU Y3, 128(BX)

// KR8_BITS_L/_R: YG |= (qh dword group K of the staging, shifted by S) &
// MASK (bytes).
#define KR8_BITS_L(S, K, MASK, YG) \
	VMOVDQU (32+32*(K))(BX), Y12; \
	VPSLLW $S, Y12, Y12; \
	VPAND MASK, Y12, Y12; \
	VPOR Y12, YG, YG
#define KR8_BITS_R(S, K, MASK, YG) \
	VMOVDQU (32+32*(K))(BX), Y12; \
	VPSRLW $S, Y12, Y12; \
	VPAND MASK, Y12, Y12; \
	VPOR Y12, YG, YG

// KR8_SEGX: KR8_SEG with high bits from the staged qh: LOX/HIX by LOS/HIS.
#define KR8_SEGX(OFF, GLO, GHI, LOX, LOS, HIX, HIS, MASK) \
	KR8_LT(OFF); \
	R8_NIBS; \
	LOX(LOS, 0, MASK, Y8); LOX(LOS, 1, MASK, Y9); LOX(LOS, 2, MASK, Y10); LOX(LOS, 3, MASK, Y11); \
	HIX(HIS, 0, MASK, Y4); HIX(HIS, 1, MASK, Y5); HIX(HIS, 2, MASK, Y6); HIX(HIS, 3, MASK, Y7); \
	KR8_STORE4(Y8, Y9, Y10, Y11, GLO); \
	KR8_STORE4(Y4, Y5, Y6, Y7, GHI)

// KR8_PAIR: YM (int32 within int16) as the pair (m, m) at OFF.
#define KR8_PAIR(YM, OFF) \
	VPSLLD $16, YM, Y13; \
	VPSRLD $16, Y13, YM; \
	VPOR Y13, YM, YM; \
	VMOVDQU YM, OFF(DI)

// KR8_NEXT: prefetch the next group's 8·BYTES bytes (SI walks them), then
// step the rows, the scratch and the staging.
#define KR8_NEXT(BYTES) \
	MOVQ DX, SI; \
	MOVQ $((8*BYTES+63)/64), AX; \
kr8pf:; \
	PREFETCHT1 (SI); \
	ADDQ $64, SI; \
	DECQ AX; \
	JNZ kr8pf; \
	ADDQ $(8*BYTES), DX; \
	ADDQ $BYTES, R8; \
	ADDQ $BYTES, R9; \
	ADDQ $BYTES, R10; \
	ADDQ $BYTES, R11; \
	ADDQ $2880, DI; \
	ADDQ $160, BX

#define KR8_DS(DMIN) \
	MOVQ dst+0(FP), DI; \
	MOVQ n+24(FP), CX; \
kr8ds:; \
	VCVTPH2PS 0(R15), Y8; \
	VMOVUPS Y8, 2816(DI); \
	VCVTPH2PS DMIN(R15), Y8; \
	VMOVUPS Y8, 2848(DI); \
	ADDQ $160, R15; \
	ADDQ $2880, DI; \
	DECQ CX; \
	JNZ kr8ds; \
	VZEROUPPER; \
	RET

// -- dot: one token at a time; Y0 = acc, Y1 = isum, Y2 = msum.

// KR8_G: Y6 (int16) += the pair sums of group G with the dword at OFF.
#define KR8_G(G, OFF, FIRST) \
	VMOVDQU (32*(G))(SI), Y3; \
	VPBROADCASTD OFF(R8), Y4; \
	FIRST(Y4, Y3)
#define KR8_FIRST(YA, YW) VPMADDUBSW YA, YW, Y6
#define KR8_MORE(YA, YW) VPMADDUBSW YA, YW, Y5; VPADDW Y5, Y6, Y6

// KR8_SC: isum += Y6 · the scale pair at sc[J].
#define KR8_SC(J) \
	VPMADDWD (2048+32*(J))(SI), Y6, Y6; \
	VPADDD Y6, Y1, Y1

#define KR8_MIN(I) \
	VPBROADCASTD (260+4*(I))(R8), Y4; \
	VPMADDWD (2560+32*(I))(SI), Y4, Y4; \
	VPADDD Y4, Y2, Y2

#define KR8_FLOAT \
	VBROADCASTSS 0(R8), Y4; \
	VMULPS 2816(SI), Y4, Y5; \
	VCVTDQ2PS Y1, Y1; \
	VFMADD231PS Y5, Y1, Y0; \
	VMULPS 2848(SI), Y4, Y5; \
	VCVTDQ2PS Y2, Y2; \
	VFNMADD231PS Y5, Y2, Y0

#define KR8_DOT(SB) \
	MOVQ acc+0(FP), DI; \
	MOVQ nt+48(FP), BX; \
	MOVQ x+16(FP), DX; \
kr8t:; \
	MOVQ DX, R8; \
	VMOVUPS 0(DI), Y0; \
	MOVQ s+8(FP), SI; \
	MOVQ n+56(FP), CX; \
kr8b:; \
	VPXOR Y1, Y1, Y1; \
	VPXOR Y2, Y2, Y2; \
	SB; \
	KR8_MIN(0); KR8_MIN(1); KR8_MIN(2); KR8_MIN(3); \
	KR8_MIN(4); KR8_MIN(5); KR8_MIN(6); KR8_MIN(7); \
	KR8_FLOAT; \
	ADDQ $2880, SI; \
	ADDQ $292, R8; \
	DECQ CX; \
	JNZ kr8b; \
	VMOVUPS Y0, 0(DI); \
	ADDQ $32, DI; \
	ADDQ xs+24(FP), DX; \
	DECQ BX; \
	JNZ kr8t; \
	VZEROUPPER; \
	RET

#define KR8_SB32 \
	KR8_G(0, 4, KR8_FIRST); \
	KR8_G(1, 8, KR8_MORE); \
	KR8_G(2, 12, KR8_MORE); \
	KR8_G(3, 16, KR8_MORE); \
	KR8_SC(0); \
	KR8_G(4, 20, KR8_FIRST); \
	KR8_G(5, 24, KR8_MORE); \
	KR8_G(6, 28, KR8_MORE); \
	KR8_G(7, 32, KR8_MORE); \
	KR8_SC(0); \
	KR8_G(8, 36, KR8_FIRST); \
	KR8_G(9, 40, KR8_MORE); \
	KR8_G(10, 44, KR8_MORE); \
	KR8_G(11, 48, KR8_MORE); \
	KR8_SC(1); \
	KR8_G(12, 52, KR8_FIRST); \
	KR8_G(13, 56, KR8_MORE); \
	KR8_G(14, 60, KR8_MORE); \
	KR8_G(15, 64, KR8_MORE); \
	KR8_SC(1); \
	KR8_G(16, 68, KR8_FIRST); \
	KR8_G(17, 72, KR8_MORE); \
	KR8_G(18, 76, KR8_MORE); \
	KR8_G(19, 80, KR8_MORE); \
	KR8_SC(2); \
	KR8_G(20, 84, KR8_FIRST); \
	KR8_G(21, 88, KR8_MORE); \
	KR8_G(22, 92, KR8_MORE); \
	KR8_G(23, 96, KR8_MORE); \
	KR8_SC(2); \
	KR8_G(24, 100, KR8_FIRST); \
	KR8_G(25, 104, KR8_MORE); \
	KR8_G(26, 108, KR8_MORE); \
	KR8_G(27, 112, KR8_MORE); \
	KR8_SC(3); \
	KR8_G(28, 116, KR8_FIRST); \
	KR8_G(29, 120, KR8_MORE); \
	KR8_G(30, 124, KR8_MORE); \
	KR8_G(31, 128, KR8_MORE); \
	KR8_SC(3); \
	KR8_G(32, 132, KR8_FIRST); \
	KR8_G(33, 136, KR8_MORE); \
	KR8_G(34, 140, KR8_MORE); \
	KR8_G(35, 144, KR8_MORE); \
	KR8_SC(4); \
	KR8_G(36, 148, KR8_FIRST); \
	KR8_G(37, 152, KR8_MORE); \
	KR8_G(38, 156, KR8_MORE); \
	KR8_G(39, 160, KR8_MORE); \
	KR8_SC(4); \
	KR8_G(40, 164, KR8_FIRST); \
	KR8_G(41, 168, KR8_MORE); \
	KR8_G(42, 172, KR8_MORE); \
	KR8_G(43, 176, KR8_MORE); \
	KR8_SC(5); \
	KR8_G(44, 180, KR8_FIRST); \
	KR8_G(45, 184, KR8_MORE); \
	KR8_G(46, 188, KR8_MORE); \
	KR8_G(47, 192, KR8_MORE); \
	KR8_SC(5); \
	KR8_G(48, 196, KR8_FIRST); \
	KR8_G(49, 200, KR8_MORE); \
	KR8_G(50, 204, KR8_MORE); \
	KR8_G(51, 208, KR8_MORE); \
	KR8_SC(6); \
	KR8_G(52, 212, KR8_FIRST); \
	KR8_G(53, 216, KR8_MORE); \
	KR8_G(54, 220, KR8_MORE); \
	KR8_G(55, 224, KR8_MORE); \
	KR8_SC(6); \
	KR8_G(56, 228, KR8_FIRST); \
	KR8_G(57, 232, KR8_MORE); \
	KR8_G(58, 236, KR8_MORE); \
	KR8_G(59, 240, KR8_MORE); \
	KR8_SC(7); \
	KR8_G(60, 244, KR8_FIRST); \
	KR8_G(61, 248, KR8_MORE); \
	KR8_G(62, 252, KR8_MORE); \
	KR8_G(63, 256, KR8_MORE); \
	KR8_SC(7)

#define KR8_SB16 \
	KR8_G(0, 4, KR8_FIRST); \
	KR8_G(1, 8, KR8_MORE); \
	KR8_SC(0); \
	KR8_G(2, 12, KR8_FIRST); \
	KR8_G(3, 16, KR8_MORE); \
	KR8_SC(0); \
	KR8_G(4, 20, KR8_FIRST); \
	KR8_G(5, 24, KR8_MORE); \
	KR8_SC(1); \
	KR8_G(6, 28, KR8_FIRST); \
	KR8_G(7, 32, KR8_MORE); \
	KR8_SC(1); \
	KR8_G(8, 36, KR8_FIRST); \
	KR8_G(9, 40, KR8_MORE); \
	KR8_SC(2); \
	KR8_G(10, 44, KR8_FIRST); \
	KR8_G(11, 48, KR8_MORE); \
	KR8_SC(2); \
	KR8_G(12, 52, KR8_FIRST); \
	KR8_G(13, 56, KR8_MORE); \
	KR8_SC(3); \
	KR8_G(14, 60, KR8_FIRST); \
	KR8_G(15, 64, KR8_MORE); \
	KR8_SC(3); \
	KR8_G(16, 68, KR8_FIRST); \
	KR8_G(17, 72, KR8_MORE); \
	KR8_SC(4); \
	KR8_G(18, 76, KR8_FIRST); \
	KR8_G(19, 80, KR8_MORE); \
	KR8_SC(4); \
	KR8_G(20, 84, KR8_FIRST); \
	KR8_G(21, 88, KR8_MORE); \
	KR8_SC(5); \
	KR8_G(22, 92, KR8_FIRST); \
	KR8_G(23, 96, KR8_MORE); \
	KR8_SC(5); \
	KR8_G(24, 100, KR8_FIRST); \
	KR8_G(25, 104, KR8_MORE); \
	KR8_SC(6); \
	KR8_G(26, 108, KR8_FIRST); \
	KR8_G(27, 112, KR8_MORE); \
	KR8_SC(6); \
	KR8_G(28, 116, KR8_FIRST); \
	KR8_G(29, 120, KR8_MORE); \
	KR8_SC(7); \
	KR8_G(30, 124, KR8_FIRST); \
	KR8_G(31, 128, KR8_MORE); \
	KR8_SC(7); \
	KR8_G(32, 132, KR8_FIRST); \
	KR8_G(33, 136, KR8_MORE); \
	KR8_SC(8); \
	KR8_G(34, 140, KR8_FIRST); \
	KR8_G(35, 144, KR8_MORE); \
	KR8_SC(8); \
	KR8_G(36, 148, KR8_FIRST); \
	KR8_G(37, 152, KR8_MORE); \
	KR8_SC(9); \
	KR8_G(38, 156, KR8_FIRST); \
	KR8_G(39, 160, KR8_MORE); \
	KR8_SC(9); \
	KR8_G(40, 164, KR8_FIRST); \
	KR8_G(41, 168, KR8_MORE); \
	KR8_SC(10); \
	KR8_G(42, 172, KR8_FIRST); \
	KR8_G(43, 176, KR8_MORE); \
	KR8_SC(10); \
	KR8_G(44, 180, KR8_FIRST); \
	KR8_G(45, 184, KR8_MORE); \
	KR8_SC(11); \
	KR8_G(46, 188, KR8_FIRST); \
	KR8_G(47, 192, KR8_MORE); \
	KR8_SC(11); \
	KR8_G(48, 196, KR8_FIRST); \
	KR8_G(49, 200, KR8_MORE); \
	KR8_SC(12); \
	KR8_G(50, 204, KR8_FIRST); \
	KR8_G(51, 208, KR8_MORE); \
	KR8_SC(12); \
	KR8_G(52, 212, KR8_FIRST); \
	KR8_G(53, 216, KR8_MORE); \
	KR8_SC(13); \
	KR8_G(54, 220, KR8_FIRST); \
	KR8_G(55, 224, KR8_MORE); \
	KR8_SC(13); \
	KR8_G(56, 228, KR8_FIRST); \
	KR8_G(57, 232, KR8_MORE); \
	KR8_SC(14); \
	KR8_G(58, 236, KR8_FIRST); \
	KR8_G(59, 240, KR8_MORE); \
	KR8_SC(14); \
	KR8_G(60, 244, KR8_FIRST); \
	KR8_G(61, 248, KR8_MORE); \
	KR8_SC(15); \
	KR8_G(62, 252, KR8_FIRST); \
	KR8_G(63, 256, KR8_MORE); \
	KR8_SC(15)


// Scale decoding: KR8_SM4(J) (Q4_K/Q5_K sub-blocks J and 4+J from the
// 12 scale bytes, transposed in Y0-Y2), KR8_S6(YQ, B0, B1, I) (Q6_K's int8
// scales 2I, 2I+1: bytes B0, B1 of YQ, and their min pair), KR8_S2 and
// KR8_M2 (Q2_K's scale nibbles and min pairs), KR8_S3 and KR8_M3 (Q3_K's
// 6-bit scales and their min pairs).
#define KR8_SM4(J) \
	VPSRLD $(8*J), Y0, Y8; \
	VPAND r8c63<>(SB), Y8, Y8; \
	KR8_PAIR(Y8, (2048+32*(J))); \
	VPSRLD $(8*J), Y1, Y9; \
	VPAND r8c63<>(SB), Y9, Y9; \
	KR8_PAIR(Y9, (2560+32*(J))); \
	VPSRLD $(8*J), Y2, Y8; \
	VPAND r8c15<>(SB), Y8, Y8; \
	VPSRLD $(8*J+6), Y0, Y9; \
	VPAND r8c3<>(SB), Y9, Y9; \
	VPSLLD $4, Y9, Y9; \
	VPOR Y9, Y8, Y8; \
	KR8_PAIR(Y8, (2048+32*(4+J))); \
	VPSRLD $(8*J+4), Y2, Y8; \
	VPAND r8c15<>(SB), Y8, Y8; \
	VPSRLD $(8*J+6), Y1, Y9; \
	VPAND r8c3<>(SB), Y9, Y9; \
	VPSLLD $4, Y9, Y9; \
	VPOR Y9, Y8, Y8; \
	KR8_PAIR(Y8, (2560+32*(4+J)))

#define KR8_SCALEMINS \
	KR8_LT(4); \
	KR8_SM4(0); KR8_SM4(1); KR8_SM4(2); KR8_SM4(3)

#define KR8_S6(YQ, B0, B1, I) \
	VPSLLD $(24-8*(B0)), YQ, Y8; \
	VPSRAD $24, Y8, Y8; \
	VPSLLD $(24-8*(B1)), YQ, Y9; \
	VPSRAD $24, Y9, Y9; \
	VMOVDQA Y8, Y10; \
	KR8_PAIR(Y10, (2048+64*(I))); \
	VMOVDQA Y9, Y10; \
	KR8_PAIR(Y10, (2048+64*(I)+32)); \
	VPSLLD $21, Y8, Y8; \
	VPSRLD $16, Y8, Y8; \
	VPSLLD $21, Y9, Y9; \
	VPOR Y9, Y8, Y8; \
	VMOVDQU Y8, (2560+32*(I))(DI)

#define KR8_SCALES6 \
	KR8_LT(192); \
	KR8_S6(Y0, 0, 1, 0); KR8_S6(Y0, 2, 3, 1); KR8_S6(Y1, 0, 1, 2); KR8_S6(Y1, 2, 3, 3); \
	KR8_S6(Y2, 0, 1, 4); KR8_S6(Y2, 2, 3, 5); KR8_S6(Y3, 0, 1, 6); KR8_S6(Y3, 2, 3, 7)

#define KR8_S2(YQ, B, G) \
	VPSRLD $(8*(B)), YQ, Y8; \
	VPAND r8c15<>(SB), Y8, Y8; \
	KR8_PAIR(Y8, (2048+32*(G)))

#define KR8_M2(YQ, B0, B1, I) \
	VPSRLD $(8*(B0)+4), YQ, Y8; \
	VPAND r8c15<>(SB), Y8, Y8; \
	VPSRLD $(8*(B1)+4), YQ, Y9; \
	VPAND r8c15<>(SB), Y9, Y9; \
	VPSLLD $16, Y9, Y9; \
	VPOR Y9, Y8, Y8; \
	VMOVDQU Y8, (2560+32*(I))(DI)

#define KR8_SCALES2 \
	R8_LOAD(0); \
	R8_T4; \
	KR8_S2(Y0, 0, 0); KR8_S2(Y0, 1, 1); KR8_S2(Y0, 2, 2); KR8_S2(Y0, 3, 3); \
	KR8_S2(Y1, 0, 4); KR8_S2(Y1, 1, 5); KR8_S2(Y1, 2, 6); KR8_S2(Y1, 3, 7); \
	KR8_S2(Y2, 0, 8); KR8_S2(Y2, 1, 9); KR8_S2(Y2, 2, 10); KR8_S2(Y2, 3, 11); \
	KR8_S2(Y3, 0, 12); KR8_S2(Y3, 1, 13); KR8_S2(Y3, 2, 14); KR8_S2(Y3, 3, 15); \
	KR8_M2(Y0, 0, 1, 0); KR8_M2(Y0, 2, 3, 1); KR8_M2(Y1, 0, 1, 2); KR8_M2(Y1, 2, 3, 3); \
	KR8_M2(Y2, 0, 1, 4); KR8_M2(Y2, 2, 3, 5); KR8_M2(Y3, 0, 1, 6); KR8_M2(Y3, 2, 3, 7)

// KR8_S3(J, YT, YLO, LOS, HIS): scale J into YT (kept for the min pair):
// its low nibble from YLO by LOS, its top bits from Y2 by HIS.
#define KR8_S3(J, YT, YLO, LOS, HIS) \
	VPSRLD $LOS, YLO, YT; \
	VPAND r8c15<>(SB), YT, YT; \
	VPSRLD $HIS, Y2, Y9; \
	VPAND r8c3<>(SB), Y9, Y9; \
	VPSLLD $4, Y9, Y9; \
	VPOR Y9, YT, YT; \
	VPSUBD r8c32<>(SB), YT, YT; \
	VMOVDQA YT, Y10; \
	KR8_PAIR(Y10, (2048+32*(J)))

// KR8_M3(I): Q3_K's min pair I, (4·sc[2I], 4·sc[2I+1]) from Y8, Y11.
#define KR8_M3(I) \
	VPSLLD $18, Y8, Y8; \
	VPSRLD $16, Y8, Y8; \
	VPSLLD $18, Y11, Y11; \
	VPOR Y11, Y8, Y8; \
	VMOVDQU Y8, (2560+32*(I))(DI)

// KR8_F2(YK, S, G): 2-bit field S/2 of the transposed YK as g[G].
#define KR8_F2(YK, S, G) \
	VPSRLW $S, YK, Y8; \
	VPAND r8x03<>(SB), Y8, Y8; \
	VMOVDQU Y8, (32*(G))(DI)

// KR8_F3: KR8_F2 plus the staged hmask bit (dword group K) moved to bit 2
// by SH (VPSLLW or VPSRLW) HS.
#define KR8_F3(YK, S, K, SH, HS, G) \
	VPSRLW $S, YK, Y8; \
	VPAND r8x03<>(SB), Y8, Y8; \
	VMOVDQU (32+32*(K))(BX), Y12; \
	SH $HS, Y12, Y12; \
	VPAND r8x04<>(SB), Y12, Y12; \
	VPOR Y12, Y8, Y8; \
	VMOVDQU Y8, (32*(G))(DI)

// KR8_SEG2(OFF, G0): the 16 bytes at OFF of each row as four 2-bit fields,
// field f of dword group k to g[G0+8f+k].
#define KR8_SEG2(OFF, G0) \
	R8_LOAD(OFF); \
	R8_T4; \
	KR8_F2(Y0, 0, G0); KR8_F2(Y1, 0, G0+1); KR8_F2(Y2, 0, G0+2); KR8_F2(Y3, 0, G0+3); \
	KR8_F2(Y0, 2, G0+8); KR8_F2(Y1, 2, G0+9); KR8_F2(Y2, 2, G0+10); KR8_F2(Y3, 2, G0+11); \
	KR8_F2(Y0, 4, G0+16); KR8_F2(Y1, 4, G0+17); KR8_F2(Y2, 4, G0+18); KR8_F2(Y3, 4, G0+19); \
	KR8_F2(Y0, 6, G0+24); KR8_F2(Y1, 6, G0+25); KR8_F2(Y2, 6, G0+26); KR8_F2(Y3, 6, G0+27)

// KR8_FIELD3: field F of the four dword groups, hmask bits moved by SH HS,
// to g[G..G+3].
#define KR8_FIELD3(F, SH, HS, G) \
	KR8_F3(Y0, 2*(F), 0, SH, HS, G); \
	KR8_F3(Y1, 2*(F), 1, SH, HS, G+1); \
	KR8_F3(Y2, 2*(F), 2, SH, HS, G+2); \
	KR8_F3(Y3, 2*(F), 3, SH, HS, G+3)

// KR8_Q4K, KR8_Q5K, KR8_Q6K: a super-block of 8 rows unpacked but for d and
// dmin, through KR8_LT (raw or packed, whichever is defined where they are used).
#define KR8_Q4K \
	KR8_SCALEMINS \
	KR8_SEG(16, 0, 8) \
	KR8_SEG(32, 4, 12) \
	KR8_SEG(48, 16, 24) \
	KR8_SEG(64, 20, 28) \
	KR8_SEG(80, 32, 40) \
	KR8_SEG(96, 36, 44) \
	KR8_SEG(112, 48, 56) \
	KR8_SEG(128, 52, 60)

#define KR8_Q5K \
	KR8_SCALEMINS \
	KR8_QH(16) \
	KR8_SEGX(48, 0, 8, KR8_BITS_L, 4, KR8_BITS_L, 3, r8x10<>(SB)) \
	KR8_SEGX(80, 16, 24, KR8_BITS_L, 2, KR8_BITS_L, 1, r8x10<>(SB)) \
	KR8_SEGX(112, 32, 40, KR8_BITS_L, 0, KR8_BITS_R, 1, r8x10<>(SB)) \
	KR8_SEGX(144, 48, 56, KR8_BITS_R, 2, KR8_BITS_R, 3, r8x10<>(SB)) \
	KR8_QH(32) \
	KR8_SEGX(64, 4, 12, KR8_BITS_L, 4, KR8_BITS_L, 3, r8x10<>(SB)) \
	KR8_SEGX(96, 20, 28, KR8_BITS_L, 2, KR8_BITS_L, 1, r8x10<>(SB)) \
	KR8_SEGX(128, 36, 44, KR8_BITS_L, 0, KR8_BITS_R, 1, r8x10<>(SB)) \
	KR8_SEGX(160, 52, 60, KR8_BITS_R, 2, KR8_BITS_R, 3, r8x10<>(SB))

#define KR8_Q6K \
	KR8_SCALES6 \
	KR8_QH(128) \
	KR8_SEGX(0, 0, 16, KR8_BITS_L, 4, KR8_BITS_L, 0, r8x30<>(SB)) \
	KR8_SEGX(32, 8, 24, KR8_BITS_L, 2, KR8_BITS_R, 2, r8x30<>(SB)) \
	KR8_QH(144) \
	KR8_SEGX(16, 4, 20, KR8_BITS_L, 4, KR8_BITS_L, 0, r8x30<>(SB)) \
	KR8_SEGX(48, 12, 28, KR8_BITS_L, 2, KR8_BITS_R, 2, r8x30<>(SB)) \
	KR8_QH(160) \
	KR8_SEGX(64, 32, 48, KR8_BITS_L, 4, KR8_BITS_L, 0, r8x30<>(SB)) \
	KR8_SEGX(96, 40, 56, KR8_BITS_L, 2, KR8_BITS_R, 2, r8x30<>(SB)) \
	KR8_QH(176) \
	KR8_SEGX(80, 36, 52, KR8_BITS_L, 4, KR8_BITS_L, 0, r8x30<>(SB)) \
	KR8_SEGX(112, 44, 60, KR8_BITS_L, 2, KR8_BITS_R, 2, r8x30<>(SB))

// ---- the packed 8-row layout --------------------------------------------------
//
// Unpackers of the packed layout (quant_pack_amd64.go) into the same scratch
// as the raw unpackers above, so the dot kernels run unchanged. A packed
// block holds its 8 rows transposed (quant bytes 4k..4k+3 of row P(p) at
// 32k + 4p: R8_T4's output as it is) and each header field in lane order,
// so unpacking is the nibble split (or VPABSB) and one scale conversion.
//
// func r8PUnp*(dst *byte, w unsafe.Pointer, n int)
// w: the group's first packed block to unpack; n blocks, each the format's
// 8·bb bytes after the last. SI = the block; DI = its scratch; CX = blocks
// left; Y15 = 0x0f bytes.

#define P8_PROLOGUE \
	MOVQ dst+0(FP), DI; \
	MOVQ w+8(FP), SI; \
	MOVQ n+16(FP), CX; \
	VMOVDQU r8nib<>(SB), Y15

// P8_LOAD4: Y0-Y3 = the 128 transposed quant bytes at OFF(SI).
#define P8_LOAD4(OFF) \
	VMOVDQU (OFF)(SI), Y0; \
	VMOVDQU (OFF+32)(SI), Y1; \
	VMOVDQU (OFF+64)(SI), Y2; \
	VMOVDQU (OFF+96)(SI), Y3

// P8_HALF: the 8 float16 at OFF(SI), lane order, as float32 at TO(DI).
#define P8_HALF(OFF, TO) \
	VCVTPH2PS OFF(SI), Y8; \
	VMOVUPS Y8, TO(DI)

// P8_PF3 (5): prefetch the block's lines P8_AHEAD bytes on, into L2: the
// hardware prefetchers stop at each 4 KiB page (as P16_PF5).
#define P8_AHEAD 8192
#define P8_PF3 \
	PREFETCHT1 P8_AHEAD(SI); \
	PREFETCHT1 P8_AHEAD+64(SI); \
	PREFETCHT1 P8_AHEAD+128(SI)
#define P8_PF5 \
	P8_PF3; \
	PREFETCHT1 P8_AHEAD+192(SI); \
	PREFETCHT1 P8_AHEAD+256(SI)

#define P8_NEXT(BYTES, BLK) \
	ADDQ $BYTES, SI; \
	ADDQ $BLK, DI; \
	DECQ CX

// The packed K formats' unpackers (at the end of this file, after KR8_LT is
// redefined): KP8_PROLOGUE, KP8_HALVES, KP8_NEXT, KP8_DS.

#define KP8_PROLOGUE \
	MOVQ dst+0(FP), DI; \
	MOVQ w+8(FP), SI; \
	MOVQ n+16(FP), CX; \
	MOVQ CX, BX; \
	IMULQ $2880, BX; \
	ADDQ DI, BX; \
	MOVQ BX, R15; \
	VMOVDQU r8nib<>(SB), Y15

// KP8_HALVES: the 8 rows' float16 in the high (SHIFT 16) or low (0) half of
// their dword at DW·4 to TO(BX), lane order (R8_HALVES's staging).
#define KP8_HALVES(DW, SHIFT, TO) \
	VMOVDQU (32*(DW))(SI), Y8; \
	VPSRLD $SHIFT, Y8, Y8; \
	VPAND r8lo16<>(SB), Y8, Y8; \
	VPACKUSDW Y8, Y8, Y8; \
	VPERMQ $0x08, Y8, Y8; \
	VMOVDQU X8, TO(BX)

// KP8_NEXT: prefetch the lines P8_AHEAD bytes on, then step the block, the
// scratch and the staging.
#define KP8_NEXT(BYTES) \
	LEAQ P8_AHEAD(SI), DX; \
	MOVQ $((8*BYTES+63)/64), AX; \
kp8pf:; \
	PREFETCHT1 (DX); \
	ADDQ $64, DX; \
	DECQ AX; \
	JNZ kp8pf; \
	ADDQ $(8*BYTES), SI; \
	ADDQ $2880, DI; \
	ADDQ $160, BX

// KP8_DS: KR8_DS with this signature's n.
#define KP8_DS(DMIN) \
	MOVQ dst+0(FP), DI; \
	MOVQ n+16(FP), CX; \
kp8ds:; \
	VCVTPH2PS 0(R15), Y8; \
	VMOVUPS Y8, 2816(DI); \
	VCVTPH2PS DMIN(R15), Y8; \
	VMOVUPS Y8, 2848(DI); \
	ADDQ $160, R15; \
	ADDQ $2880, DI; \
	DECQ CX; \
	JNZ kp8ds; \
	VZEROUPPER; \
	RET

// ---- the functions ----------------------------------------------------------

// func r8UnpQ4_0(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
TEXT ·r8UnpQ4_0(SB), NOSPLIT, $0-40
	R8_UNPACK_PROLOGUE
r8q40:
	R8_LOAD(2)
	R8_T4
	R8_NIBS
	R8_STORE8
	R8_HALVES(0, 0)
	R8_NEXT(18)
	DECQ CX
	JNZ  r8q40
	R8_SCALES(R8_NOMINS)

// func r8UnpQ4_1(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
TEXT ·r8UnpQ4_1(SB), NOSPLIT, $0-40
	R8_UNPACK_PROLOGUE
r8q41:
	R8_LOAD(4)
	R8_T4
	R8_NIBS
	R8_STORE8
	R8_HALVES(0, 0)
	R8_HALVES(2, 16)
	R8_NEXT(20)
	DECQ CX
	JNZ  r8q41
	R8_SCALES(R8_MINS)

// func r8UnpQ5_0(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
TEXT ·r8UnpQ5_0(SB), NOSPLIT, $0-40
	R8_UNPACK_PROLOGUE
r8q50:
	R8_LOAD(6)
	R8_T4
	R8_NIBS
	R8_LOAD(2)
	R8_T0
	R8_FIFTH
	R8_STORE8
	R8_HALVES(0, 0)
	R8_NEXT(22)
	DECQ CX
	JNZ  r8q50
	R8_SCALES(R8_NOMINS)

// func r8UnpQ5_1(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
TEXT ·r8UnpQ5_1(SB), NOSPLIT, $0-40
	R8_UNPACK_PROLOGUE
r8q51:
	R8_LOAD(8)
	R8_T4
	R8_NIBS
	R8_LOAD(4)
	R8_T0
	R8_FIFTH
	R8_STORE8
	R8_HALVES(0, 0)
	R8_HALVES(2, 16)
	R8_NEXT(24)
	DECQ CX
	JNZ  r8q51
	R8_SCALES(R8_MINS)

// func r8UnpMXFP4(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
// The E8M0 byte e scales by 2^(e-128) (the table's values are doubled):
// float bits (e-1)<<23, or for e < 2 the subnormal 0x200000<<e.
TEXT ·r8UnpMXFP4(SB), NOSPLIT, $0-40
	R8_UNPACK_PROLOGUE
	VBROADCASTI128 r8mxfp4<>(SB), Y14
r8mx:
	R8_LOAD(1)
	R8_T4
	R8_NIBS
	R8_LOOKUP
	R8_STORE8
	R8_BYTES(0, 0)
	R8_NEXT(17)
	DECQ CX
	JNZ  r8mx
	MOVQ dst+0(FP), DI
	MOVQ n+24(FP), CX
	VMOVDQU r8mxc<>+0(SB), Y10
	VMOVDQU r8mxc<>+32(SB), Y11
	VMOVDQU r8mxc<>+64(SB), Y12
r8mxs:
	VPMOVZXBD 0(R15), Y8
	VPSUBD Y10, Y8, Y9
	VPSLLD $23, Y9, Y9
	VPSLLVD Y8, Y12, Y13
	VPCMPGTD Y8, Y11, Y14
	VPBLENDVB Y14, Y13, Y9, Y9
	VMOVUPS Y9, 256(DI)
	ADDQ $32, R15
	ADDQ $320, DI
	DECQ CX
	JNZ  r8mxs
	VZEROUPPER
	RET

// func r8UnpQ8_0(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
// Q8_0: d, qs[32]; |w| to g, w to sw (r8DotS's layout).
TEXT ·r8UnpQ8_0(SB), NOSPLIT, $0-40
	R8_UNPACK_PROLOGUE_B(544)
r8q80:
	R8_LOAD(2)
	R8_T4
	VPABSB Y0, Y8
	VPABSB Y1, Y9
	VPABSB Y2, Y10
	VPABSB Y3, Y11
	VMOVDQU Y8, 0(DI)
	VMOVDQU Y9, 32(DI)
	VMOVDQU Y10, 64(DI)
	VMOVDQU Y11, 96(DI)
	VMOVDQU Y0, 288(DI)
	VMOVDQU Y1, 320(DI)
	VMOVDQU Y2, 352(DI)
	VMOVDQU Y3, 384(DI)
	R8_LOAD(18)
	R8_T4
	VPABSB Y0, Y8
	VPABSB Y1, Y9
	VPABSB Y2, Y10
	VPABSB Y3, Y11
	VMOVDQU Y8, 128(DI)
	VMOVDQU Y9, 160(DI)
	VMOVDQU Y10, 192(DI)
	VMOVDQU Y11, 224(DI)
	VMOVDQU Y0, 416(DI)
	VMOVDQU Y1, 448(DI)
	VMOVDQU Y2, 480(DI)
	VMOVDQU Y3, 512(DI)
	R8_HALVES(0, 0)
	R8_NEXT_B(34, 544, R8_PF5)
	DECQ CX
	JNZ  r8q80
	R8_SCALES_B(R8_NOMINS, 544)

// Q4_0 packed: quants 0..127, d 128..143.
TEXT ·r8PUnpQ4_0(SB), NOSPLIT, $0-24
	P8_PROLOGUE
p8q40:
	P8_PF3
	P8_LOAD4(0)
	R8_NIBS
	R8_STORE8
	P8_HALF(128, 256)
	P8_NEXT(144, 320)
	JNZ  p8q40
	VZEROUPPER
	RET

// Q4_1 packed: quants 0..127, d 128..143, m 144..159.
TEXT ·r8PUnpQ4_1(SB), NOSPLIT, $0-24
	P8_PROLOGUE
p8q41:
	P8_PF3
	P8_LOAD4(0)
	R8_NIBS
	R8_STORE8
	P8_HALF(128, 256)
	P8_HALF(144, 288)
	P8_NEXT(160, 320)
	JNZ  p8q41
	VZEROUPPER
	RET

// Q5_0 packed: quants 0..127, d 128..143, qh 144..175.
TEXT ·r8PUnpQ5_0(SB), NOSPLIT, $0-24
	P8_PROLOGUE
p8q50:
	P8_PF3
	P8_LOAD4(0)
	R8_NIBS
	VMOVDQU 144(SI), Y0
	R8_FIFTH
	R8_STORE8
	P8_HALF(128, 256)
	P8_NEXT(176, 320)
	JNZ  p8q50
	VZEROUPPER
	RET

// Q5_1 packed: quants 0..127, d 128..143, m 144..159, qh 160..191.
TEXT ·r8PUnpQ5_1(SB), NOSPLIT, $0-24
	P8_PROLOGUE
p8q51:
	P8_PF3
	P8_LOAD4(0)
	R8_NIBS
	VMOVDQU 160(SI), Y0
	R8_FIFTH
	R8_STORE8
	P8_HALF(128, 256)
	P8_HALF(144, 288)
	P8_NEXT(192, 320)
	JNZ  p8q51
	VZEROUPPER
	RET

// MXFP4 packed: quants 0..127, e 128..135. The scale first (r8UnpMXFP4's
// conversion, in the registers the nibbles do not use yet), then the
// quants through the value table (Y14).
TEXT ·r8PUnpMXFP4(SB), NOSPLIT, $0-24
	P8_PROLOGUE
	VBROADCASTI128 r8mxfp4<>(SB), Y14
p8mx:
	P8_PF3
	VPMOVZXBD 128(SI), Y8
	VPSUBD r8mxc<>+0(SB), Y8, Y9
	VPSLLD $23, Y9, Y9
	VMOVDQU r8mxc<>+64(SB), Y13
	VPSLLVD Y8, Y13, Y13
	VMOVDQU r8mxc<>+32(SB), Y10
	VPCMPGTD Y8, Y10, Y12
	VPBLENDVB Y12, Y13, Y9, Y9
	VMOVUPS Y9, 256(DI)
	P8_LOAD4(0)
	R8_NIBS
	R8_LOOKUP
	R8_STORE8
	P8_NEXT(136, 320)
	JNZ  p8mx
	VZEROUPPER
	RET

// Q8_0 packed: quants 0..255, d 256..271; |w| to g, w to sw (r8UnpQ8_0's
// 544-byte layout).
#define P8_Q8HALF(OFF, G, SW) \
	P8_LOAD4(OFF); \
	VPABSB Y0, Y8; \
	VPABSB Y1, Y9; \
	VPABSB Y2, Y10; \
	VPABSB Y3, Y11; \
	VMOVDQU Y8, G+0(DI); \
	VMOVDQU Y9, G+32(DI); \
	VMOVDQU Y10, G+64(DI); \
	VMOVDQU Y11, G+96(DI); \
	VMOVDQU Y0, SW+0(DI); \
	VMOVDQU Y1, SW+32(DI); \
	VMOVDQU Y2, SW+64(DI); \
	VMOVDQU Y3, SW+96(DI)

TEXT ·r8PUnpQ8_0(SB), NOSPLIT, $0-24
	P8_PROLOGUE
p8q80:
	P8_PF5
	P8_Q8HALF(0, 0, 288)
	P8_Q8HALF(128, 128, 416)
	P8_HALF(256, 256)
	P8_NEXT(272, 544)
	JNZ  p8q80
	VZEROUPPER
	RET

// R8_ONES: r8DotS keeps the int16 ones in Y15.
#define R8_ONES VMOVDQU r8ones<>(SB), Y15

// func r8DotS(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)
TEXT ·r8DotS(SB), NOSPLIT, $0-64
	R8_DOT_B(R8_TOKS, 544, R8_ONES)

TEXT ·r8DotB(SB), NOSPLIT, $0-64
	R8_DOT(R8_TOK)

TEXT ·r8DotMB(SB), NOSPLIT, $0-64
	R8_DOT(R8_TOKM)

// func kr8Dot32(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)
TEXT ·kr8Dot32(SB), NOSPLIT, $0-64
	KR8_DOT(KR8_SB32)

// func kr8Dot16(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)
TEXT ·kr8Dot16(SB), NOSPLIT, $0-64
	KR8_DOT(KR8_SB16)


// func kr8UnpQ4K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
// Q4_K: d, dmin, scales[12], qs[128]; chunk c of qs (32 bytes at 16+32c)
// holds quants 64c.. (low nibbles) and 64c+32.. (high).
TEXT ·kr8UnpQ4K(SB), NOSPLIT, $0-40
	KR8_UNPACK_PROLOGUE
kr8q4:
	KR8_Q4K
	R8_HALVES(0, 0)
	R8_HALVES(2, 16)
	KR8_NEXT(144)
	DECQ CX
	JNZ  kr8q4
	KR8_DS(16)

// func kr8UnpQ5K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
// Q5_K: Q4_K with qh[32] before the quants: the fifth bit of quant 64c+l
// is bit 2c of qh[l], of 64c+32+l bit 2c+1.
TEXT ·kr8UnpQ5K(SB), NOSPLIT, $0-40
	KR8_UNPACK_PROLOGUE
kr8q5:
	KR8_Q5K
	R8_HALVES(0, 0)
	R8_HALVES(2, 16)
	KR8_NEXT(176)
	DECQ CX
	JNZ  kr8q5
	KR8_DS(16)

// func kr8UnpQ6K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
// Q6_K: ql[128], qh[64], scales[16], d. Per half h: quant 128h+l (l < 32)
// is the low nibble of ql[64h+l] with bits 0-1 of qh[32h+l] above it,
// 128h+32+l the low nibble of ql[64h+32+l] with bits 2-3, 128h+64+l and
// 128h+96+l the high nibbles with bits 4-5 and 6-7; the value is u - 32.
TEXT ·kr8UnpQ6K(SB), NOSPLIT, $0-40
	KR8_UNPACK_PROLOGUE
kr8q6:
	KR8_Q6K
	R8_HALVES(208, 0)
	KR8_NEXT(210)
	DECQ CX
	JNZ  kr8q6
	KR8_DS(0)

// func kr8UnpQ2K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
// Q2_K: scales[16] (scale low nibble, min high), qs[64], d, dmin; quant
// 128h+32f+l is 2-bit field f of qs[32h+l].
TEXT ·kr8UnpQ2K(SB), NOSPLIT, $0-40
	KR8_UNPACK_PROLOGUE
kr8q2:
	KR8_SCALES2
	KR8_SEG2(16, 0)
	KR8_SEG2(32, 4)
	KR8_SEG2(48, 32)
	KR8_SEG2(64, 36)
	R8_HALVES(80, 0)
	R8_HALVES(82, 16)
	KR8_NEXT(84)
	DECQ CX
	JNZ  kr8q2
	KR8_DS(16)

// func kr8UnpQ3K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
// Q3_K: hmask[32], qs[64], scales[12], d; quant 128h+32f+l is 2-bit field
// f of qs[32h+l] plus 4 where bit 4h+f of hmask[l] is set, minus 4; the
// 16 scales are 6-bit, minus 32.
TEXT ·kr8UnpQ3K(SB), NOSPLIT, $0-40
	KR8_UNPACK_PROLOGUE
kr8q3:
	// The scales end 2 bytes before the block: load 16 from 94, drop 2.
	R8_LOAD(94)
	VPSRLDQ $2, Y0, Y0
	VPSRLDQ $2, Y1, Y1
	VPSRLDQ $2, Y2, Y2
	VPSRLDQ $2, Y3, Y3
	R8_T4
	KR8_S3(0, Y8, Y0, 0, 0)
	KR8_S3(1, Y11, Y0, 8, 8)
	KR8_M3(0)
	KR8_S3(2, Y8, Y0, 16, 16)
	KR8_S3(3, Y11, Y0, 24, 24)
	KR8_M3(1)
	KR8_S3(4, Y8, Y1, 0, 2)
	KR8_S3(5, Y11, Y1, 8, 10)
	KR8_M3(2)
	KR8_S3(6, Y8, Y1, 16, 18)
	KR8_S3(7, Y11, Y1, 24, 26)
	KR8_M3(3)
	KR8_S3(8, Y8, Y0, 4, 4)
	KR8_S3(9, Y11, Y0, 12, 12)
	KR8_M3(4)
	KR8_S3(10, Y8, Y0, 20, 20)
	KR8_S3(11, Y11, Y0, 28, 28)
	KR8_M3(5)
	KR8_S3(12, Y8, Y1, 4, 6)
	KR8_S3(13, Y11, Y1, 12, 14)
	KR8_M3(6)
	KR8_S3(14, Y8, Y1, 20, 22)
	KR8_S3(15, Y11, Y1, 28, 30)
	KR8_M3(7)
	KR8_QH(0)
	R8_LOAD(32)
	R8_T4
	KR8_FIELD3(0, VPSLLW, 2, 0)
	KR8_FIELD3(1, VPSLLW, 1, 8)
	KR8_FIELD3(2, VPSLLW, 0, 16)
	KR8_FIELD3(3, VPSRLW, 1, 24)
	R8_LOAD(64)
	R8_T4
	KR8_FIELD3(0, VPSRLW, 2, 32)
	KR8_FIELD3(1, VPSRLW, 3, 40)
	KR8_FIELD3(2, VPSRLW, 4, 48)
	KR8_FIELD3(3, VPSRLW, 5, 56)
	KR8_QH(16)
	R8_LOAD(48)
	R8_T4
	KR8_FIELD3(0, VPSLLW, 2, 4)
	KR8_FIELD3(1, VPSLLW, 1, 12)
	KR8_FIELD3(2, VPSLLW, 0, 20)
	KR8_FIELD3(3, VPSRLW, 1, 28)
	R8_LOAD(80)
	R8_T4
	KR8_FIELD3(0, VPSRLW, 2, 36)
	KR8_FIELD3(1, VPSRLW, 3, 44)
	KR8_FIELD3(2, VPSRLW, 4, 52)
	KR8_FIELD3(3, VPSRLW, 5, 60)
	R8_HALVES(108, 0)
	KR8_NEXT(110)
	DECQ CX
	JNZ  kr8q3
	KR8_DS(0)

// func r8Store(out *float32, outStride int, acc *float32, nt int)
TEXT ·r8Store(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), DX
	SHLQ $2, DX
	MOVQ acc+16(FP), SI
	MOVQ nt+24(FP), CX
	VMOVDQU r8perm<>(SB), Y1
r8st:
	VPERMD 0(SI), Y1, Y0
	VMOVUPS Y0, 0(DI)
	ADDQ $32, SI
	ADDQ DX, DI
	DECQ CX
	JNZ  r8st
	VZEROUPPER
	RET

// r8nib: 0x0f bytes.
DATA r8nib<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA r8nib<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA r8nib<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA r8nib<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL r8nib<>(SB), RODATA|NOPTR, $32

// r8x10: 0x10 bytes.
DATA r8x10<>+0(SB)/8, $0x1010101010101010
DATA r8x10<>+8(SB)/8, $0x1010101010101010
DATA r8x10<>+16(SB)/8, $0x1010101010101010
DATA r8x10<>+24(SB)/8, $0x1010101010101010
GLOBL r8x10<>(SB), RODATA|NOPTR, $32

// r8ones: int16 ones.
DATA r8ones<>+0(SB)/8, $0x0001000100010001
DATA r8ones<>+8(SB)/8, $0x0001000100010001
DATA r8ones<>+16(SB)/8, $0x0001000100010001
DATA r8ones<>+24(SB)/8, $0x0001000100010001
GLOBL r8ones<>(SB), RODATA|NOPTR, $32

// r8qhctl: per k/2, VPSHUFB controls giving each dword byte k/2 of itself ×4.
DATA r8qhctl<>+0(SB)/8, $0x0404040400000000
DATA r8qhctl<>+8(SB)/8, $0x0c0c0c0c08080808
DATA r8qhctl<>+16(SB)/8, $0x0404040400000000
DATA r8qhctl<>+24(SB)/8, $0x0c0c0c0c08080808
DATA r8qhctl<>+32(SB)/8, $0x0505050501010101
DATA r8qhctl<>+40(SB)/8, $0x0d0d0d0d09090909
DATA r8qhctl<>+48(SB)/8, $0x0505050501010101
DATA r8qhctl<>+56(SB)/8, $0x0d0d0d0d09090909
DATA r8qhctl<>+64(SB)/8, $0x0606060602020202
DATA r8qhctl<>+72(SB)/8, $0x0e0e0e0e0a0a0a0a
DATA r8qhctl<>+80(SB)/8, $0x0606060602020202
DATA r8qhctl<>+88(SB)/8, $0x0e0e0e0e0a0a0a0a
DATA r8qhctl<>+96(SB)/8, $0x0707070703030303
DATA r8qhctl<>+104(SB)/8, $0x0f0f0f0f0b0b0b0b
DATA r8qhctl<>+112(SB)/8, $0x0707070703030303
DATA r8qhctl<>+120(SB)/8, $0x0f0f0f0f0b0b0b0b
GLOBL r8qhctl<>(SB), RODATA|NOPTR, $128

// r8qhmask: per k mod 2, each dword's bytes i keep bit 4·(k mod 2)+i.
DATA r8qhmask<>+0(SB)/8, $0x0804020108040201
DATA r8qhmask<>+8(SB)/8, $0x0804020108040201
DATA r8qhmask<>+16(SB)/8, $0x0804020108040201
DATA r8qhmask<>+24(SB)/8, $0x0804020108040201
DATA r8qhmask<>+32(SB)/8, $0x8040201080402010
DATA r8qhmask<>+40(SB)/8, $0x8040201080402010
DATA r8qhmask<>+48(SB)/8, $0x8040201080402010
DATA r8qhmask<>+56(SB)/8, $0x8040201080402010
GLOBL r8qhmask<>(SB), RODATA|NOPTR, $64

// r8mxfp4: kvaluesMXFP4 + 12.
DATA r8mxfp4<>+0(SB)/8, $0x181412100f0e0d0c
DATA r8mxfp4<>+8(SB)/8, $0x00040608090a0b0c
GLOBL r8mxfp4<>(SB), RODATA|NOPTR, $16

// r8mxc: dwords 1, 2 and 0x200000 (MXFP4's scale decoding).
DATA r8mxc<>+0(SB)/8, $0x0000000100000001
DATA r8mxc<>+8(SB)/8, $0x0000000100000001
DATA r8mxc<>+16(SB)/8, $0x0000000100000001
DATA r8mxc<>+24(SB)/8, $0x0000000100000001
DATA r8mxc<>+32(SB)/8, $0x0000000200000002
DATA r8mxc<>+40(SB)/8, $0x0000000200000002
DATA r8mxc<>+48(SB)/8, $0x0000000200000002
DATA r8mxc<>+56(SB)/8, $0x0000000200000002
DATA r8mxc<>+64(SB)/8, $0x0020000000200000
DATA r8mxc<>+72(SB)/8, $0x0020000000200000
DATA r8mxc<>+80(SB)/8, $0x0020000000200000
DATA r8mxc<>+88(SB)/8, $0x0020000000200000
GLOBL r8mxc<>(SB), RODATA|NOPTR, $96

// r8perm: result lane q takes accumulator lane P⁻¹(q) ([0, 4, 1, 5, 2, 6, 3, 7]).
DATA r8perm<>+0(SB)/8, $0x0000000400000000
DATA r8perm<>+8(SB)/8, $0x0000000500000001
DATA r8perm<>+16(SB)/8, $0x0000000600000002
DATA r8perm<>+24(SB)/8, $0x0000000700000003
GLOBL r8perm<>(SB), RODATA|NOPTR, $32

// r8c63, r8c15, r8c3, r8c32: dword constants.
DATA r8c63<>+0(SB)/8, $0x0000003f0000003f
DATA r8c63<>+8(SB)/8, $0x0000003f0000003f
DATA r8c63<>+16(SB)/8, $0x0000003f0000003f
DATA r8c63<>+24(SB)/8, $0x0000003f0000003f
GLOBL r8c63<>(SB), RODATA|NOPTR, $32
DATA r8c15<>+0(SB)/8, $0x0000000f0000000f
DATA r8c15<>+8(SB)/8, $0x0000000f0000000f
DATA r8c15<>+16(SB)/8, $0x0000000f0000000f
DATA r8c15<>+24(SB)/8, $0x0000000f0000000f
GLOBL r8c15<>(SB), RODATA|NOPTR, $32
DATA r8c3<>+0(SB)/8, $0x0000000300000003
DATA r8c3<>+8(SB)/8, $0x0000000300000003
DATA r8c3<>+16(SB)/8, $0x0000000300000003
DATA r8c3<>+24(SB)/8, $0x0000000300000003
GLOBL r8c3<>(SB), RODATA|NOPTR, $32
DATA r8c32<>+0(SB)/8, $0x0000002000000020
DATA r8c32<>+8(SB)/8, $0x0000002000000020
DATA r8c32<>+16(SB)/8, $0x0000002000000020
DATA r8c32<>+24(SB)/8, $0x0000002000000020
GLOBL r8c32<>(SB), RODATA|NOPTR, $32

// r8x30, r8x03, r8x04: byte masks.
DATA r8x30<>+0(SB)/8, $0x3030303030303030
DATA r8x30<>+8(SB)/8, $0x3030303030303030
DATA r8x30<>+16(SB)/8, $0x3030303030303030
DATA r8x30<>+24(SB)/8, $0x3030303030303030
GLOBL r8x30<>(SB), RODATA|NOPTR, $32
DATA r8x03<>+0(SB)/8, $0x0303030303030303
DATA r8x03<>+8(SB)/8, $0x0303030303030303
DATA r8x03<>+16(SB)/8, $0x0303030303030303
DATA r8x03<>+24(SB)/8, $0x0303030303030303
GLOBL r8x03<>(SB), RODATA|NOPTR, $32
DATA r8x04<>+0(SB)/8, $0x0404040404040404
DATA r8x04<>+8(SB)/8, $0x0404040404040404
DATA r8x04<>+16(SB)/8, $0x0404040404040404
DATA r8x04<>+24(SB)/8, $0x0404040404040404
GLOBL r8x04<>(SB), RODATA|NOPTR, $32

// ---- the packed 8-row layout of the K formats ---------------------------------
//
// Q4_K, Q5_K and Q6_K packed (quant_pack_amd64.go): each super-block of the
// 8 rows dword-transposed whole, bytes 4k..4k+3 of row P(p) at 32k + 4p
// (Q6_K's 210 bytes padded to 212), so the 16 bytes at OFF of every row,
// transposed, are the 128 at 8·OFF: the raw unpackers' bodies run on four
// plain loads (KR8_LT redefined) and the scales' float16 come out of their
// dwords (KP8_HALVES). Same scratch, same results.
//
// func kr8PUnp*(dst *byte, w unsafe.Pointer, n int)
// SI = the super-block; DI = its scratch; BX = its staging; CX = left.

#undef KR8_LT
#define KR8_LT(OFF) P8_LOAD4(8*(OFF))

// func kr8PUnpQ4K(dst *byte, w unsafe.Pointer, n int)
TEXT ·kr8PUnpQ4K(SB), NOSPLIT, $0-24
	KP8_PROLOGUE
kp8q4:
	KR8_Q4K
	KP8_HALVES(0, 0, 0)
	KP8_HALVES(0, 16, 16)
	KP8_NEXT(144)
	DECQ CX
	JNZ  kp8q4
	KP8_DS(16)

// func kr8PUnpQ5K(dst *byte, w unsafe.Pointer, n int)
TEXT ·kr8PUnpQ5K(SB), NOSPLIT, $0-24
	KP8_PROLOGUE
kp8q5:
	KR8_Q5K
	KP8_HALVES(0, 0, 0)
	KP8_HALVES(0, 16, 16)
	KP8_NEXT(176)
	DECQ CX
	JNZ  kp8q5
	KP8_DS(16)

// func kr8PUnpQ6K(dst *byte, w unsafe.Pointer, n int)
TEXT ·kr8PUnpQ6K(SB), NOSPLIT, $0-24
	KP8_PROLOGUE
kp8q6:
	KR8_Q6K
	KP8_HALVES(52, 0, 0)
	KP8_NEXT(212)
	DECQ CX
	JNZ  kp8q6
	KP8_DS(0)

// r8lo16: the low 16 bits of each dword.
DATA r8lo16<>+0(SB)/8, $0x0000ffff0000ffff
DATA r8lo16<>+8(SB)/8, $0x0000ffff0000ffff
DATA r8lo16<>+16(SB)/8, $0x0000ffff0000ffff
DATA r8lo16<>+24(SB)/8, $0x0000ffff0000ffff
GLOBL r8lo16<>(SB), RODATA|NOPTR, $32
