//go:build goexperiment.simd && amd64

#include "textflag.h"
#include "quant_r16_avx512_amd64.h"

// Sixteen-row kernels for the 32-value block formats on AVX-512 (see
// quant_r16_avx512_amd64.go).
//
// An unpacker lays 16 weight rows side by side, per block 640 bytes:
//     0: g[8]  8 × 64 bytes: lane p of g[k] holds the quants 4k..4k+3 of
//              row P(p) as unsigned bytes u (the value is u - o, or d·u + m
//              for the types with a minimum)
//   512: dw    16 float32: lane p = row P(p)'s scale d
//   576: mv    16 float32: lane p = row P(p)'s minimum m (those types)
// where P(p) = 4·(p mod 4) + p/4: the order in which the 4×4 dword
// transpose below leaves the rows. After the n blocks, 64 bytes per block
// stage the rows' float16 scales (and minimums) before one conversion.
//
// A dot kernel then takes every token of the call over those blocks: per
// token and block, a broadcast activation dword times each g[k] (VPDPBUSD)
// sums a block for all 16 rows at once, exactly, starting from the token's
// -o·Σy; one conversion and one FMA scale the 16 sums. So each (row, token,
// block) product is the exact integer Σ(u-o)·y, converted once and added
// as acc += float(Σ)·(d·dx) (then + m·s), in block order: the same
// operations whichever rows and tokens share the call.

// ---- unpacking --------------------------------------------------------------
//
// R8-R11 = rows 0, 4, 8, 12 of the current block; R12-R14 = rb, 2rb, 3rb;
// DI = the block's scratch; BX = its float16 staging; CX = blocks left.

#define R16_UNPACK_PROLOGUE_N(BLK) \
	MOVQ dst+0(FP), DI; \
	MOVQ w+8(FP), R8; \
	MOVQ rb+16(FP), R12; \
	MOVQ n+24(FP), CX; \
	MOVQ pf+32(FP), DX; \
	LEAQ (R12)(R12*1), R13; \
	LEAQ (R13)(R12*1), R14; \
	LEAQ (R8)(R12*4), R9; \
	LEAQ (R9)(R12*4), R10; \
	LEAQ (R10)(R12*4), R11; \
	MOVQ CX, BX; \
	IMULQ $BLK, BX; \
	ADDQ DI, BX; \
	MOVQ BX, R15; \
	MOVL $0x0f0f0f0f, AX; \
	VPBROADCASTD AX, Z30; \
	MOVL $0x80808080, AX; \
	VPBROADCASTD AX, Z31

#define R16_UNPACK_PROLOGUE R16_UNPACK_PROLOGUE_N(640)

// R16_ROWS4: ZD's 128-bit lanes L = the 16 bytes at OFF of row base P + L·rb.
#define R16_ROWS4(P, OFF, ZD, XD) \
	VMOVDQU OFF(P), XD; \
	VINSERTI32X4 $1, OFF(P)(R12*1), ZD, ZD; \
	VINSERTI32X4 $2, OFF(P)(R13*1), ZD, ZD; \
	VINSERTI32X4 $3, OFF(P)(R14*1), ZD, ZD

// R16_LOAD: Z0-Z3 = the 16 bytes at OFF of rows 0-3, 4-7, 8-11, 12-15.
#define R16_LOAD(OFF) \
	R16_ROWS4(R8, OFF, Z0, X0); \
	R16_ROWS4(R9, OFF, Z1, X1); \
	R16_ROWS4(R10, OFF, Z2, X2); \
	R16_ROWS4(R11, OFF, Z3, X3)

// R16_T4 transposes the dwords of Z0-Z3 within each 128-bit lane: Zk lane
// 4L+i = dword k of row 4i+L.
#define R16_T4 \
	VPUNPCKLDQ Z1, Z0, Z4; \
	VPUNPCKHDQ Z1, Z0, Z5; \
	VPUNPCKLDQ Z3, Z2, Z6; \
	VPUNPCKHDQ Z3, Z2, Z7; \
	VPUNPCKLQDQ Z6, Z4, Z0; \
	VPUNPCKHQDQ Z6, Z4, Z1; \
	VPUNPCKLQDQ Z7, Z5, Z2; \
	VPUNPCKHQDQ Z7, Z5, Z3

// R16_T0: only the first output of R16_T4 (dword 0 of each row) into Z0.
#define R16_T0 \
	VPUNPCKLDQ Z1, Z0, Z4; \
	VPUNPCKLDQ Z3, Z2, Z6; \
	VPUNPCKLQDQ Z6, Z4, Z0




// R16_HALVES copies the 16 rows' 2 bytes at OFF to TO(BX), lane order.
#define R16_H(P, OFF, TO) MOVWLZX OFF(P), AX; MOVW AX, TO(BX)
#define R16_HI(P, I, OFF, TO) MOVWLZX OFF(P)(I*1), AX; MOVW AX, TO(BX)
#define R16_HALVES(OFF, TO) \
	R16_H(R8, OFF, TO+0); R16_H(R9, OFF, TO+2); R16_H(R10, OFF, TO+4); R16_H(R11, OFF, TO+6); \
	R16_HI(R8, R12, OFF, TO+8); R16_HI(R9, R12, OFF, TO+10); R16_HI(R10, R12, OFF, TO+12); R16_HI(R11, R12, OFF, TO+14); \
	R16_HI(R8, R13, OFF, TO+16); R16_HI(R9, R13, OFF, TO+18); R16_HI(R10, R13, OFF, TO+20); R16_HI(R11, R13, OFF, TO+22); \
	R16_HI(R8, R14, OFF, TO+24); R16_HI(R9, R14, OFF, TO+26); R16_HI(R10, R14, OFF, TO+28); R16_HI(R11, R14, OFF, TO+30)

// R16_BYTES copies the 16 rows' byte at OFF to TO(BX), lane order.
#define R16_B(P, OFF, TO) MOVBLZX OFF(P), AX; MOVB AX, TO(BX)
#define R16_BI(P, I, OFF, TO) MOVBLZX OFF(P)(I*1), AX; MOVB AX, TO(BX)
#define R16_BYTES(OFF, TO) \
	R16_B(R8, OFF, TO+0); R16_B(R9, OFF, TO+1); R16_B(R10, OFF, TO+2); R16_B(R11, OFF, TO+3); \
	R16_BI(R8, R12, OFF, TO+4); R16_BI(R9, R12, OFF, TO+5); R16_BI(R10, R12, OFF, TO+6); R16_BI(R11, R12, OFF, TO+7); \
	R16_BI(R8, R13, OFF, TO+8); R16_BI(R9, R13, OFF, TO+9); R16_BI(R10, R13, OFF, TO+10); R16_BI(R11, R13, OFF, TO+11); \
	R16_BI(R8, R14, OFF, TO+12); R16_BI(R9, R14, OFF, TO+13); R16_BI(R10, R14, OFF, TO+14); R16_BI(R11, R14, OFF, TO+15)

// R16_PF5 (6, 9) prefetch the lines of the next 16·bb bytes of the next
// group of rows (DX): it is read at the same pace, one group later. Into
// L2 (PREFETCHT1): into L1 they evict the current group's lines (one-token
// decode of the 1.5B Q4_0 shape 20 → 22.8 tok/s here).
#define R16_PF5 \
	PREFETCHT1 0(DX); \
	PREFETCHT1 64(DX); \
	PREFETCHT1 128(DX); \
	PREFETCHT1 192(DX); \
	PREFETCHT1 256(DX)
#define R16_PF6 \
	R16_PF5; \
	PREFETCHT1 320(DX)
#define R16_PF9 \
	R16_PF6; \
	PREFETCHT1 384(DX); \
	PREFETCHT1 448(DX); \
	PREFETCHT1 512(DX)

#define R16_NEXT(BYTES, PF) \
	PF; \
	ADDQ $(16*BYTES), DX; \
	ADDQ $BYTES, R8; \
	ADDQ $BYTES, R9; \
	ADDQ $BYTES, R10; \
	ADDQ $BYTES, R11; \
	ADDQ $640, DI; \
	ADDQ $64, BX





// R16_SCALES converts the staged float16 scales (and, with MIN, minimums)
// of the n blocks: R15 = the staging, DI = the first block.
#define R16_SCALES(MIN) \
	MOVQ dst+0(FP), DI; \
	MOVQ n+24(FP), CX; \
r16scales:; \
	VCVTPH2PS 0(R15), Z8; \
	VMOVUPS Z8, 512(DI); \
	MIN; \
	ADDQ $64, R15; \
	ADDQ $640, DI; \
	DECQ CX; \
	JNZ r16scales; \
	VZEROUPPER; \
	RET

#define R16_MINS VCVTPH2PS 32(R15), Z9; VMOVUPS Z9, 576(DI)
#define R16_NOMINS

// ---- dot kernels ------------------------------------------------------------
//
// func r16Dot*(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)
// acc: nt × 16 float32 (token t's at 64·t, lane order); s: n unpacked
// blocks; x: token 0's activation block (actQ8x32: d, s, y[32]), tokens xs
// bytes apart; c: token 0's -o·Σy (int32) for the block, tokens cs bytes
// apart (unread by the M kernels).
//
// Tokens run four at a time (Z0-Z3, activations R8-R11, corrections
// R12-R15), then one at a time; per block the 8 quant groups are loaded
// once into Z16-Z23, d into Z24, m into Z25.

#define R16_W \
	VMOVDQU64 0(SI), Z16; \
	VMOVDQU64 64(SI), Z17; \
	VMOVDQU64 128(SI), Z18; \
	VMOVDQU64 192(SI), Z19; \
	VMOVDQU64 256(SI), Z20; \
	VMOVDQU64 320(SI), Z21; \
	VMOVDQU64 384(SI), Z22; \
	VMOVDQU64 448(SI), Z23; \
	VMOVUPS 512(SI), Z24; \
	VMOVUPS 576(SI), Z25

// Integer sums, VNNI: TA += Σ_k g[k]·y[4k..4k+3] in two chains (TA, TB).
#define R16_SUMV(X, TA, TB) \
	VPXORD TB, TB, TB; \
	VPDPBUSD.BCST 8(X), Z16, TA; \
	VPDPBUSD.BCST 12(X), Z17, TB; \
	VPDPBUSD.BCST 16(X), Z18, TA; \
	VPDPBUSD.BCST 20(X), Z19, TB; \
	VPDPBUSD.BCST 24(X), Z20, TA; \
	VPDPBUSD.BCST 28(X), Z21, TB; \
	VPDPBUSD.BCST 32(X), Z22, TA; \
	VPDPBUSD.BCST 36(X), Z23, TB; \
	VPADDD TB, TA, TA

// Integer sums, AVX-512BW: pairs of groups in int16 (|u| ≤ 31, so two
// groups' pair sums fit), widened with VPMADDWD (Z31 = int16 ones). TB,
// TC: temporaries; Z30: the broadcast activations.
#define R16_PAIRB(OFF, ZG0, ZG1, TA, TB, TC, X) \
	VPBROADCASTD OFF(X), Z30; \
	VPMADDUBSW Z30, ZG0, TB; \
	VPBROADCASTD OFF+4(X), Z30; \
	VPMADDUBSW Z30, ZG1, TC; \
	VPADDW TC, TB, TB; \
	VPMADDWD Z31, TB, TB; \
	VPADDD TB, TA, TA

#define R16_SUMB(X, TA, TB) \
	R16_PAIRB(8, Z16, Z17, TA, TB, Z29, X); \
	R16_PAIRB(16, Z18, Z19, TA, TB, Z29, X); \
	R16_PAIRB(24, Z20, Z21, TA, TB, Z29, X); \
	R16_PAIRB(32, Z22, Z23, TA, TB, Z29, X)

// One token and block: ACC += float(Σ)·(d·dx), Σ from -o·Σy (C) or 0 (M).
#define R16_TOK(SUM, X, C, ACC, TA, TB) \
	VPBROADCASTD (C), TA; \
	SUM(X, TA, TB); \
	VCVTDQ2PS TA, TA; \
	VMULPS.BCST 0(X), Z24, TB; \
	VFMADD231PS TB, TA, ACC

#define R16_TOKM(SUM, X, C, ACC, TA, TB) \
	VPXORD TA, TA, TA; \
	SUM(X, TA, TB); \
	VCVTDQ2PS TA, TA; \
	VMULPS.BCST 0(X), Z24, TB; \
	VFMADD231PS TB, TA, ACC; \
	VFMADD231PS.BCST 4(X), Z25, ACC

#define R16_DOT(TOK, SUM) \
	MOVQ acc+0(FP), DI; \
	MOVQ nt+48(FP), BX; \
r164:; \
	CMPQ BX, $4; \
	JLT r161; \
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
	VMOVUPS 0(DI), Z0; \
	VMOVUPS 64(DI), Z1; \
	VMOVUPS 128(DI), Z2; \
	VMOVUPS 192(DI), Z3; \
	MOVQ s+8(FP), SI; \
	MOVQ n+56(FP), CX; \
r164b:; \
	R16_W; \
	TOK(SUM, R8, R12, Z0, Z4, Z5); \
	TOK(SUM, R9, R13, Z1, Z6, Z7); \
	TOK(SUM, R10, R14, Z2, Z8, Z9); \
	TOK(SUM, R11, R15, Z3, Z10, Z11); \
	ADDQ $640, SI; \
	ADDQ $40, R8; \
	ADDQ $40, R9; \
	ADDQ $40, R10; \
	ADDQ $40, R11; \
	ADDQ $4, R12; \
	ADDQ $4, R13; \
	ADDQ $4, R14; \
	ADDQ $4, R15; \
	DECQ CX; \
	JNZ r164b; \
	VMOVUPS Z0, 0(DI); \
	VMOVUPS Z1, 64(DI); \
	VMOVUPS Z2, 128(DI); \
	VMOVUPS Z3, 192(DI); \
	ADDQ $256, DI; \
	SUBQ $4, BX; \
	JMP r164; \
r161:; \
	TESTQ BX, BX; \
	JZ r16done; \
	MOVQ x+16(FP), R8; \
	MOVQ xs+24(FP), AX; \
	LEAQ (R8)(AX*1), DX; \
	MOVQ DX, x+16(FP); \
	MOVQ c+32(FP), R12; \
	MOVQ cs+40(FP), AX; \
	LEAQ (R12)(AX*1), DX; \
	MOVQ DX, c+32(FP); \
	VMOVUPS 0(DI), Z0; \
	MOVQ s+8(FP), SI; \
	MOVQ n+56(FP), CX; \
r161b:; \
	R16_W; \
	TOK(SUM, R8, R12, Z0, Z4, Z5); \
	ADDQ $640, SI; \
	ADDQ $40, R8; \
	ADDQ $4, R12; \
	DECQ CX; \
	JNZ r161b; \
	VMOVUPS Z0, 0(DI); \
	ADDQ $64, DI; \
	DECQ BX; \
	JMP r161; \
r16done:; \
	VZEROUPPER; \
	RET


// ---- K formats (actQ8K) ---------------------------------------------------
//
// An unpacker lays 16 rows' super-blocks side by side, 5760 bytes each:
//      0: g[64]  lane p of g[G]: the quants 4G..4G+3 of row P(p), unsigned
//   4096: sc[16] int32 scales of the 8 sub-blocks of 32 values (Q4_K, Q5_K,
//                IQ4_XS) or the 16 of 16 (Q6_K)
//   5120: mp[8]  int16 pairs: the coefficients of the activation's 16-value
//                sums bsum[2i], bsum[2i+1] (the mins; for the types with an
//                offset o instead, o·scale)
//   5632: d      16 float32
//   5696: dmin   16 float32 (d again for the types without mins)
// and after the n super-blocks 64 bytes each of staged float16 d, dmin.
// A (row, token, super-block) product is then the exact integers
//     isum = Σ_g sc_g·Σ_{i∈g} u_i·y_i,   msum = Σ_i mp_i·bsum_i
// taken into acc as acc += float(isum)·(d·dx), acc -= float(msum)·(dmin·dx).

#define KR_BLK 5760

#define KR_UNPACK_PROLOGUE \
	R16_UNPACK_PROLOGUE_N(5760); \
	MOVL $63, AX; \
	VPBROADCASTD AX, Z28; \
	MOVL $15, AX; \
	VPBROADCASTD AX, Z29; \
	MOVL $3, AX; \
	VPBROADCASTD AX, Z27

// KR_SEG: the 16 bytes at OFF of each row: low nibbles to g[GLO..GLO+3],
// high ones to g[GHI..GHI+3].
#define KR_SEG(OFF, GLO, GHI) \
	R16_LOAD(OFF); \
	R16_T4; \
	R16_NIBS(Z0, Z16, Z20); \
	R16_NIBS(Z1, Z17, Z21); \
	R16_NIBS(Z2, Z18, Z22); \
	R16_NIBS(Z3, Z19, Z23); \
	KR_STORE4(Z16, Z17, Z18, Z19, GLO); \
	KR_STORE4(Z20, Z21, Z22, Z23, GHI)

#define KR_STORE4(A, B, C, D, G) \
	VMOVDQU64 A, (64*(G))(DI); \
	VMOVDQU64 B, (64*(G)+64)(DI); \
	VMOVDQU64 C, (64*(G)+128)(DI); \
	VMOVDQU64 D, (64*(G)+192)(DI)

// KR_PAIR: ZM (int32 within int16) as the int16 pair (m, m), stored as
// mp[I].
#define KR_PAIR(ZM, I) \
	VPSLLD $16, ZM, Z10; \
	VPSRLD $16, Z10, ZM; \
	VPORD Z10, ZM, ZM; \
	VMOVDQU64 ZM, (5120+64*(I))(DI)

// Q4_K/Q5_K scales (12 bytes at 4): Z0-Z2 = bytes 0-3, 4-7, 8-11 per row.
#define KR_SM_LO(J) \
	VPSRLD $(8*J), Z0, Z8; \
	VPANDD Z28, Z8, Z8; \
	VMOVDQU64 Z8, (4096+64*J)(DI); \
	VPSRLD $(8*J), Z1, Z9; \
	VPANDD Z28, Z9, Z9; \
	KR_PAIR(Z9, J)

#define KR_SM_HI(J) \
	VPSRLD $(8*J), Z2, Z8; \
	VPANDD Z29, Z8, Z8; \
	VPSRLD $(8*J+6), Z0, Z9; \
	VPANDD Z27, Z9, Z9; \
	VPSLLD $4, Z9, Z9; \
	VPORD Z9, Z8, Z8; \
	VMOVDQU64 Z8, (4096+256+64*J)(DI); \
	VPSRLD $(8*J+4), Z2, Z8; \
	VPANDD Z29, Z8, Z8; \
	VPSRLD $(8*J+6), Z1, Z9; \
	VPANDD Z27, Z9, Z9; \
	VPSLLD $4, Z9, Z9; \
	VPORD Z9, Z8, Z8; \
	KR_PAIR(Z8, 4+J)

#define KR_SCALEMINS \
	R16_LOAD(4); \
	R16_T4; \
	KR_SM_LO(0); KR_SM_LO(1); KR_SM_LO(2); KR_SM_LO(3); \
	KR_SM_HI(0); KR_SM_HI(1); KR_SM_HI(2); KR_SM_HI(3)

// KR_NEXT: prefetch the next group's 16·BYTES bytes (SI walks them), then
// step the rows and the scratch.
#define KR_NEXT(BYTES) \
	MOVQ DX, SI; \
	MOVQ $((16*BYTES+63)/64), AX; \
krpf:; \
	PREFETCHT1 (SI); \
	ADDQ $64, SI; \
	DECQ AX; \
	JNZ krpf; \
	ADDQ $(16*BYTES), DX; \
	ADDQ $BYTES, R8; \
	ADDQ $BYTES, R9; \
	ADDQ $BYTES, R10; \
	ADDQ $BYTES, R11; \
	ADDQ $KR_BLK, DI; \
	ADDQ $64, BX

// KR_DS converts the staged d (and dmin, or d again with DMIN = 0).
#define KR_DS(DMIN) \
	MOVQ dst+0(FP), DI; \
	MOVQ n+24(FP), CX; \
krds:; \
	VCVTPH2PS 0(R15), Z8; \
	VMOVUPS Z8, 5632(DI); \
	VCVTPH2PS DMIN(R15), Z8; \
	VMOVUPS Z8, 5696(DI); \
	ADDQ $64, R15; \
	ADDQ $KR_BLK, DI; \
	DECQ CX; \
	JNZ krds; \
	VZEROUPPER; \
	RET

// -- dot --
// Tokens four at a time: activations R8-R11, isum Z0-Z3, msum Z4-Z7,
// chain temporaries Z8-Z15, acc Z26-Z29; per sub-block the quant groups
// in Z16-Z23 and its scale in Z24.

#define KR_ZERO8 \
	VPXORD Z0, Z0, Z0; VPXORD Z1, Z1, Z1; VPXORD Z2, Z2, Z2; VPXORD Z3, Z3, Z3; \
	VPXORD Z4, Z4, Z4; VPXORD Z5, Z5, Z5; VPXORD Z6, Z6, Z6; VPXORD Z7, Z7, Z7

// KR_G32: IS += Z24·Σ_{k<8} g[k]·y[OFF+4k..] (one token, 32 values).
#define KR_G32(X, OFF, TA, TB, IS) \
	VPXORD TA, TA, TA; \
	VPXORD TB, TB, TB; \
	VPDPBUSD.BCST (OFF)(X), Z16, TA; \
	VPDPBUSD.BCST (OFF+4)(X), Z17, TB; \
	VPDPBUSD.BCST (OFF+8)(X), Z18, TA; \
	VPDPBUSD.BCST (OFF+12)(X), Z19, TB; \
	VPDPBUSD.BCST (OFF+16)(X), Z20, TA; \
	VPDPBUSD.BCST (OFF+20)(X), Z21, TB; \
	VPDPBUSD.BCST (OFF+24)(X), Z22, TA; \
	VPDPBUSD.BCST (OFF+28)(X), Z23, TB; \
	VPADDD TB, TA, TA; \
	VPMULLD Z24, TA, TA; \
	VPADDD TA, IS, IS

#define KR_G16(X, OFF, TA, TB, IS) \
	VPXORD TA, TA, TA; \
	VPXORD TB, TB, TB; \
	VPDPBUSD.BCST (OFF)(X), Z16, TA; \
	VPDPBUSD.BCST (OFF+4)(X), Z17, TB; \
	VPDPBUSD.BCST (OFF+8)(X), Z18, TA; \
	VPDPBUSD.BCST (OFF+12)(X), Z19, TB; \
	VPADDD TB, TA, TA; \
	VPMULLD Z24, TA, TA; \
	VPADDD TA, IS, IS

#define KR_W8(J) \
	VMOVDQU64 (512*J)(SI), Z16; \
	VMOVDQU64 (512*J+64)(SI), Z17; \
	VMOVDQU64 (512*J+128)(SI), Z18; \
	VMOVDQU64 (512*J+192)(SI), Z19; \
	VMOVDQU64 (512*J+256)(SI), Z20; \
	VMOVDQU64 (512*J+320)(SI), Z21; \
	VMOVDQU64 (512*J+384)(SI), Z22; \
	VMOVDQU64 (512*J+448)(SI), Z23; \
	VMOVDQU64 (4096+64*J)(SI), Z24

#define KR_W4(J) \
	VMOVDQU64 (256*J)(SI), Z16; \
	VMOVDQU64 (256*J+64)(SI), Z17; \
	VMOVDQU64 (256*J+128)(SI), Z18; \
	VMOVDQU64 (256*J+192)(SI), Z19; \
	VMOVDQU64 (4096+64*J)(SI), Z24

#define KR_J32_4(J) \
	KR_W8(J); \
	KR_G32(R8, 4+32*J, Z8, Z9, Z0); \
	KR_G32(R9, 4+32*J, Z10, Z11, Z1); \
	KR_G32(R10, 4+32*J, Z12, Z13, Z2); \
	KR_G32(R11, 4+32*J, Z14, Z15, Z3)

#define KR_J32_1(J) \
	KR_W8(J); \
	KR_G32(R8, 4+32*J, Z8, Z9, Z0)

#define KR_J16_4(J) \
	KR_W4(J); \
	KR_G16(R8, 4+16*J, Z8, Z9, Z0); \
	KR_G16(R9, 4+16*J, Z10, Z11, Z1); \
	KR_G16(R10, 4+16*J, Z12, Z13, Z2); \
	KR_G16(R11, 4+16*J, Z14, Z15, Z3)

#define KR_J16_1(J) \
	KR_W4(J); \
	KR_G16(R8, 4+16*J, Z8, Z9, Z0)

#define KR_ALL32_4 \
	KR_J32_4(0); KR_J32_4(1); KR_J32_4(2); KR_J32_4(3); \
	KR_J32_4(4); KR_J32_4(5); KR_J32_4(6); KR_J32_4(7)
#define KR_ALL32_1 \
	KR_J32_1(0); KR_J32_1(1); KR_J32_1(2); KR_J32_1(3); \
	KR_J32_1(4); KR_J32_1(5); KR_J32_1(6); KR_J32_1(7)
#define KR_ALL16_4 \
	KR_J16_4(0); KR_J16_4(1); KR_J16_4(2); KR_J16_4(3); \
	KR_J16_4(4); KR_J16_4(5); KR_J16_4(6); KR_J16_4(7); \
	KR_J16_4(8); KR_J16_4(9); KR_J16_4(10); KR_J16_4(11); \
	KR_J16_4(12); KR_J16_4(13); KR_J16_4(14); KR_J16_4(15)
#define KR_ALL16_1 \
	KR_J16_1(0); KR_J16_1(1); KR_J16_1(2); KR_J16_1(3); \
	KR_J16_1(4); KR_J16_1(5); KR_J16_1(6); KR_J16_1(7); \
	KR_J16_1(8); KR_J16_1(9); KR_J16_1(10); KR_J16_1(11); \
	KR_J16_1(12); KR_J16_1(13); KR_J16_1(14); KR_J16_1(15)

#define KR_MIN_4(I) \
	VMOVDQU64 (5120+64*I)(SI), Z24; \
	VPDPWSSD.BCST (260+4*I)(R8), Z24, Z4; \
	VPDPWSSD.BCST (260+4*I)(R9), Z24, Z5; \
	VPDPWSSD.BCST (260+4*I)(R10), Z24, Z6; \
	VPDPWSSD.BCST (260+4*I)(R11), Z24, Z7

#define KR_MIN_1(I) \
	VMOVDQU64 (5120+64*I)(SI), Z24; \
	VPDPWSSD.BCST (260+4*I)(R8), Z24, Z4

#define KR_MINS_4 \
	KR_MIN_4(0); KR_MIN_4(1); KR_MIN_4(2); KR_MIN_4(3); \
	KR_MIN_4(4); KR_MIN_4(5); KR_MIN_4(6); KR_MIN_4(7)
#define KR_MINS_1 \
	KR_MIN_1(0); KR_MIN_1(1); KR_MIN_1(2); KR_MIN_1(3); \
	KR_MIN_1(4); KR_MIN_1(5); KR_MIN_1(6); KR_MIN_1(7)

// KR_FLOAT: ACC += float(IS)·(d·dx) - float(MS)·(dmin·dx) (Z25 = d, Z24 = dmin).
#define KR_FLOAT(X, IS, MS, ACC) \
	VCVTDQ2PS IS, IS; \
	VMULPS.BCST 0(X), Z25, Z30; \
	VFMADD231PS Z30, IS, ACC; \
	VCVTDQ2PS MS, MS; \
	VMULPS.BCST 0(X), Z24, Z31; \
	VFNMADD231PS Z31, MS, ACC

#define KR_DS_LOAD \
	VMOVUPS 5632(SI), Z25; \
	VMOVUPS 5696(SI), Z24

#define KR_DOT(ALL4, ALL1) \
	MOVQ acc+0(FP), DI; \
	MOVQ nt+48(FP), BX; \
kr4:; \
	CMPQ BX, $4; \
	JLT kr1; \
	MOVQ x+16(FP), R8; \
	MOVQ xs+24(FP), AX; \
	LEAQ (R8)(AX*1), R9; \
	LEAQ (R9)(AX*1), R10; \
	LEAQ (R10)(AX*1), R11; \
	LEAQ (R8)(AX*4), DX; \
	MOVQ DX, x+16(FP); \
	VMOVUPS 0(DI), Z26; \
	VMOVUPS 64(DI), Z27; \
	VMOVUPS 128(DI), Z28; \
	VMOVUPS 192(DI), Z29; \
	MOVQ s+8(FP), SI; \
	MOVQ n+56(FP), CX; \
kr4b:; \
	KR_ZERO8; \
	ALL4; \
	KR_MINS_4; \
	KR_DS_LOAD; \
	KR_FLOAT(R8, Z0, Z4, Z26); \
	KR_FLOAT(R9, Z1, Z5, Z27); \
	KR_FLOAT(R10, Z2, Z6, Z28); \
	KR_FLOAT(R11, Z3, Z7, Z29); \
	ADDQ $KR_BLK, SI; \
	ADDQ $292, R8; \
	ADDQ $292, R9; \
	ADDQ $292, R10; \
	ADDQ $292, R11; \
	DECQ CX; \
	JNZ kr4b; \
	VMOVUPS Z26, 0(DI); \
	VMOVUPS Z27, 64(DI); \
	VMOVUPS Z28, 128(DI); \
	VMOVUPS Z29, 192(DI); \
	ADDQ $256, DI; \
	SUBQ $4, BX; \
	JMP kr4; \
kr1:; \
	TESTQ BX, BX; \
	JZ krdone; \
	MOVQ x+16(FP), R8; \
	MOVQ xs+24(FP), AX; \
	LEAQ (R8)(AX*1), DX; \
	MOVQ DX, x+16(FP); \
	VMOVUPS 0(DI), Z26; \
	MOVQ s+8(FP), SI; \
	MOVQ n+56(FP), CX; \
kr1b:; \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z4, Z4, Z4; \
	ALL1; \
	KR_MINS_1; \
	KR_DS_LOAD; \
	KR_FLOAT(R8, Z0, Z4, Z26); \
	ADDQ $KR_BLK, SI; \
	ADDQ $292, R8; \
	DECQ CX; \
	JNZ kr1b; \
	VMOVUPS Z26, 0(DI); \
	ADDQ $64, DI; \
	DECQ BX; \
	JMP kr1; \
krdone:; \
	VZEROUPPER; \
	RET


// KR_SEGX: KR_SEG with extra high bits from the transposed Z11-Z14 (the
// qh bytes of the same quant positions): LOX/HIX (KR_BITS_L or _R) move
// them by LOS/HIS into the mask Z26 and OR them in.
#define KR_SEGX(OFF, GLO, GHI, LOX, LOS, HIX, HIS) \
	R16_LOAD(OFF); \
	R16_T4; \
	R16_NIBS(Z0, Z16, Z20); \
	R16_NIBS(Z1, Z17, Z21); \
	R16_NIBS(Z2, Z18, Z22); \
	R16_NIBS(Z3, Z19, Z23); \
	LOX(LOS, Z11, Z16); LOX(LOS, Z12, Z17); LOX(LOS, Z13, Z18); LOX(LOS, Z14, Z19); \
	HIX(HIS, Z11, Z20); HIX(HIS, Z12, Z21); HIX(HIS, Z13, Z22); HIX(HIS, Z14, Z23); \
	KR_STORE4(Z16, Z17, Z18, Z19, GLO); \
	KR_STORE4(Z20, Z21, Z22, Z23, GHI)

#define KR_BITS_L(S, ZQ, ZG) \
	VPSLLW $S, ZQ, Z10; \
	VPTERNLOGD $0xf8, Z26, Z10, ZG
#define KR_BITS_R(S, ZQ, ZG) \
	VPSRLW $S, ZQ, Z10; \
	VPTERNLOGD $0xf8, Z26, Z10, ZG

// KR_QH: the 16 bytes at OFF of each row, transposed, into Z11-Z14.
#define KR_QH(OFF) \
	R16_LOAD(OFF); \
	R16_T4; \
	VMOVDQA64 Z0, Z11; \
	VMOVDQA64 Z1, Z12; \
	VMOVDQA64 Z2, Z13; \
	VMOVDQA64 Z3, Z14

// Q6_K scales (16 int8 at 192): sc[4q+b] = byte b of dword q, sign
// extended; mp[i] = (32·sc[2i], 32·sc[2i+1]) (the -32 offset of the
// quants, taken with the activation's 16-value sums).
#define KR_S6(ZQ, B, ZD) \
	VPSLLD $(24-8*(B)), ZQ, ZD; \
	VPSRAD $24, ZD, ZD
#define KR_S6PAIR(ZQ, B0, B1, I) \
	KR_S6(ZQ, B0, Z8); \
	KR_S6(ZQ, B1, Z9); \
	VMOVDQU64 Z8, (4096+128*(I))(DI); \
	VMOVDQU64 Z9, (4096+128*(I)+64)(DI); \
	VPSLLD $21, Z8, Z8; \
	VPSRLD $16, Z8, Z8; \
	VPSLLD $21, Z9, Z9; \
	VPORD Z9, Z8, Z8; \
	VMOVDQU64 Z8, (5120+64*(I))(DI)
#define KR_SCALES6 \
	R16_LOAD(192); \
	R16_T4; \
	KR_S6PAIR(Z0, 0, 1, 0); KR_S6PAIR(Z0, 2, 3, 1); \
	KR_S6PAIR(Z1, 0, 1, 2); KR_S6PAIR(Z1, 2, 3, 3); \
	KR_S6PAIR(Z2, 0, 1, 4); KR_S6PAIR(Z2, 2, 3, 5); \
	KR_S6PAIR(Z3, 0, 1, 6); KR_S6PAIR(Z3, 2, 3, 7)

// IQ4_XS scales: ls_j = nibble j of scales_l (Z1) | bits 2j of scales_h
// (the high half of Z0) << 4, minus 32; mp[j] = 128·ls_j twice (the +128
// of the unsigned table).
#define KR_SXS(J) \
	VPSRLD $(4*J), Z1, Z8; \
	VPANDD Z29, Z8, Z8; \
	VPSRLD $(16+2*J), Z0, Z9; \
	VPANDD Z27, Z9, Z9; \
	VPSLLD $4, Z9, Z9; \
	VPORD Z9, Z8, Z8; \
	VPSUBD Z24, Z8, Z8; \
	VMOVDQU64 Z8, (4096+64*J)(DI); \
	VPSLLD $7, Z8, Z8; \
	KR_PAIR(Z8, J)
#define KR_SCALESXS \
	R16_LOAD(0); \
	R16_T4; \
	KR_SXS(0); KR_SXS(1); KR_SXS(2); KR_SXS(3); \
	KR_SXS(4); KR_SXS(5); KR_SXS(6); KR_SXS(7)

#define KR_LOOKUP8 \
	VPSHUFB Z16, Z25, Z16; \
	VPSHUFB Z17, Z25, Z17; \
	VPSHUFB Z18, Z25, Z18; \
	VPSHUFB Z19, Z25, Z19; \
	VPSHUFB Z20, Z25, Z20; \
	VPSHUFB Z21, Z25, Z21; \
	VPSHUFB Z22, Z25, Z22; \
	VPSHUFB Z23, Z25, Z23

#define KR_SEGXS(OFF, J) \
	R16_LOAD(OFF); \
	R16_T4; \
	R16_NIBS(Z0, Z16, Z20); \
	R16_NIBS(Z1, Z17, Z21); \
	R16_NIBS(Z2, Z18, Z22); \
	R16_NIBS(Z3, Z19, Z23); \
	KR_LOOKUP8; \
	KR_STORE4(Z16, Z17, Z18, Z19, 8*J); \
	KR_STORE4(Z20, Z21, Z22, Z23, 8*J+4)


// KR_HB_L/_R: ZG |= (ZQ shifted by S) & Z25 (the hmask bit, 0x04 bytes).
#define KR_HB_L(S, ZQ, ZG) \
	VPSLLW $S, ZQ, Z10; \
	VPTERNLOGD $0xf8, Z25, Z10, ZG
#define KR_HB_R(S, ZQ, ZG) \
	VPSRLW $S, ZQ, Z10; \
	VPTERNLOGD $0xf8, Z25, Z10, ZG


// Q2_K and Q3_K scales: KR_S2/KR_M2 (Q2_K's scale nibbles, int32, and min
// pairs), KR_S3(J, ZT, ZLO, LOS, HIS) (a Q3_K scale into ZT: low nibble
// from ZLO by LOS, top bits from Z2 by HIS, minus 32) and KR_M3(I) (its
// min pair (4·sc[2I], 4·sc[2I+1]) from Z8, Z11).
#define KR_S2(ZQ, B, G) \
	VPSRLD $(8*(B)), ZQ, Z8; \
	VPANDD Z29, Z8, Z8; \
	VMOVDQU64 Z8, (4096+64*(G))(DI)

#define KR_M2(ZQ, B0, B1, I) \
	VPSRLD $(8*(B0)+4), ZQ, Z8; \
	VPANDD Z29, Z8, Z8; \
	VPSRLD $(8*(B1)+4), ZQ, Z9; \
	VPANDD Z29, Z9, Z9; \
	VPSLLD $16, Z9, Z9; \
	VPORD Z9, Z8, Z8; \
	VMOVDQU64 Z8, (5120+64*(I))(DI)

#define KR_SCALES2 \
	R16_LOAD(0); \
	R16_T4; \
	KR_S2(Z0, 0, 0); KR_S2(Z0, 1, 1); KR_S2(Z0, 2, 2); KR_S2(Z0, 3, 3); \
	KR_S2(Z1, 0, 4); KR_S2(Z1, 1, 5); KR_S2(Z1, 2, 6); KR_S2(Z1, 3, 7); \
	KR_S2(Z2, 0, 8); KR_S2(Z2, 1, 9); KR_S2(Z2, 2, 10); KR_S2(Z2, 3, 11); \
	KR_S2(Z3, 0, 12); KR_S2(Z3, 1, 13); KR_S2(Z3, 2, 14); KR_S2(Z3, 3, 15); \
	KR_M2(Z0, 0, 1, 0); KR_M2(Z0, 2, 3, 1); KR_M2(Z1, 0, 1, 2); KR_M2(Z1, 2, 3, 3); \
	KR_M2(Z2, 0, 1, 4); KR_M2(Z2, 2, 3, 5); KR_M2(Z3, 0, 1, 6); KR_M2(Z3, 2, 3, 7)

#define KR_S3(J, ZT, ZLO, LOS, HIS) \
	VPSRLD $LOS, ZLO, ZT; \
	VPANDD Z29, ZT, ZT; \
	VPSRLD $HIS, Z2, Z9; \
	VPANDD Z27, Z9, Z9; \
	VPSLLD $4, Z9, Z9; \
	VPORD Z9, ZT, ZT; \
	VPSUBD Z24, ZT, ZT; \
	VMOVDQU64 ZT, (4096+64*(J))(DI)

#define KR_M3(I) \
	VPSLLD $18, Z8, Z8; \
	VPSRLD $16, Z8, Z8; \
	VPSLLD $18, Z11, Z11; \
	VPORD Z11, Z8, Z8; \
	VMOVDQU64 Z8, (5120+64*(I))(DI)

// KR_F2(ZK, S, G): 2-bit field S/2 of the transposed ZK (Z26 = 0x03
// bytes) as g[G]; KR_F3 also ORs in the hmask bit of ZH moved to bit 2 by
// HX (KR_HB_L or _R) HS.
#define KR_F2(ZK, S, G) \
	VPSRLW $S, ZK, Z8; \
	VPANDD Z26, Z8, Z8; \
	VMOVDQU64 Z8, (64*(G))(DI)

#define KR_F3(ZK, S, ZH, HX, HS, G) \
	VPSRLW $S, ZK, Z8; \
	VPANDD Z26, Z8, Z8; \
	HX(HS, ZH, Z8); \
	VMOVDQU64 Z8, (64*(G))(DI)

// KR_SEG2(OFF, G0): the 16 bytes at OFF of each row as four 2-bit fields,
// field f of dword group k to g[G0+8f+k].
#define KR_SEG2(OFF, G0) \
	R16_LOAD(OFF); \
	R16_T4; \
	KR_F2(Z0, 0, G0); KR_F2(Z1, 0, G0+1); KR_F2(Z2, 0, G0+2); KR_F2(Z3, 0, G0+3); \
	KR_F2(Z0, 2, G0+8); KR_F2(Z1, 2, G0+9); KR_F2(Z2, 2, G0+10); KR_F2(Z3, 2, G0+11); \
	KR_F2(Z0, 4, G0+16); KR_F2(Z1, 4, G0+17); KR_F2(Z2, 4, G0+18); KR_F2(Z3, 4, G0+19); \
	KR_F2(Z0, 6, G0+24); KR_F2(Z1, 6, G0+25); KR_F2(Z2, 6, G0+26); KR_F2(Z3, 6, G0+27)

// KR_FIELD3: field F of the four dword groups (hmask bits in Z11-Z14
// moved by HX HS) to g[G..G+3].
#define KR_FIELD3(F, HX, HS, G) \
	KR_F3(Z0, 2*(F), Z11, HX, HS, G); \
	KR_F3(Z1, 2*(F), Z12, HX, HS, G+1); \
	KR_F3(Z2, 2*(F), Z13, HX, HS, G+2); \
	KR_F3(Z3, 2*(F), Z14, HX, HS, G+3)

// ---- the functions ---------------------------------------------------------

// func r16UnpQ4_0(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
TEXT ·r16UnpQ4_0(SB), NOSPLIT, $0-40
	R16_UNPACK_PROLOGUE
r16q40:
	R16_LOAD(2)
	R16_T4
	R16_NIBS4
	R16_STORE8
	R16_HALVES(0, 0)
	R16_NEXT(18, R16_PF5)
	DECQ CX
	JNZ  r16q40
	R16_SCALES(R16_NOMINS)

// func r16UnpQ4_1(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
TEXT ·r16UnpQ4_1(SB), NOSPLIT, $0-40
	R16_UNPACK_PROLOGUE
r16q41:
	R16_LOAD(4)
	R16_T4
	R16_NIBS4
	R16_STORE8
	R16_HALVES(0, 0)
	R16_HALVES(2, 32)
	R16_NEXT(20, R16_PF5)
	DECQ CX
	JNZ  r16q41
	R16_SCALES(R16_MINS)

// func r16UnpQ5_0(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
TEXT ·r16UnpQ5_0(SB), NOSPLIT, $0-40
	R16_UNPACK_PROLOGUE
	R16_FIFTH_CONSTS
r16q50:
	R16_LOAD(6)
	R16_T4
	R16_NIBS4
	R16_LOAD(2)
	R16_T0
	R16_FIFTH
	R16_STORE8
	R16_HALVES(0, 0)
	R16_NEXT(22, R16_PF6)
	DECQ CX
	JNZ  r16q50
	R16_SCALES(R16_NOMINS)

// func r16UnpQ5_1(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
TEXT ·r16UnpQ5_1(SB), NOSPLIT, $0-40
	R16_UNPACK_PROLOGUE
	R16_FIFTH_CONSTS
r16q51:
	R16_LOAD(8)
	R16_T4
	R16_NIBS4
	R16_LOAD(4)
	R16_T0
	R16_FIFTH
	R16_STORE8
	R16_HALVES(0, 0)
	R16_HALVES(2, 32)
	R16_NEXT(24, R16_PF6)
	DECQ CX
	JNZ  r16q51
	R16_SCALES(R16_MINS)

// func r16UnpIQ4NL(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
TEXT ·r16UnpIQ4NL(SB), NOSPLIT, $0-40
	R16_UNPACK_PROLOGUE
	VBROADCASTI32X4 ·r16iq4nl(SB), Z29
r16iq4:
	R16_LOAD(2)
	R16_T4
	R16_NIBS4
	R16_LOOKUP
	R16_STORE8
	R16_HALVES(0, 0)
	R16_NEXT(18, R16_PF5)
	DECQ CX
	JNZ  r16iq4
	R16_SCALES(R16_NOMINS)

// func r16UnpQ8_0(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
TEXT ·r16UnpQ8_0(SB), NOSPLIT, $0-40
	R16_UNPACK_PROLOGUE
r16q80:
	R16_LOAD(2)
	R16_T4
	VPXORD Z31, Z0, Z16
	VPXORD Z31, Z1, Z17
	VPXORD Z31, Z2, Z18
	VPXORD Z31, Z3, Z19
	R16_LOAD(18)
	R16_T4
	VPXORD Z31, Z0, Z20
	VPXORD Z31, Z1, Z21
	VPXORD Z31, Z2, Z22
	VPXORD Z31, Z3, Z23
	R16_STORE8
	R16_HALVES(0, 0)
	R16_NEXT(34, R16_PF9)
	DECQ CX
	JNZ  r16q80
	R16_SCALES(R16_NOMINS)

// func r16UnpMXFP4(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
// The E8M0 exponents are staged, then scaled by R16_E8M0.
TEXT ·r16UnpMXFP4(SB), NOSPLIT, $0-40
	R16_UNPACK_PROLOGUE
	VBROADCASTI32X4 ·r16mxfp4(SB), Z29
r16mx:
	R16_LOAD(1)
	R16_T4
	R16_NIBS4
	R16_LOOKUP
	R16_STORE8
	R16_BYTES(0, 0)
	R16_NEXT(17, R16_PF5)
	DECQ CX
	JNZ  r16mx
	MOVQ dst+0(FP), DI
	MOVQ n+24(FP), CX
	R16_E8M0_CONSTS
r16mxs:
	R16_E8M0(0(R15))
	ADDQ $64, R15
	ADDQ $640, DI
	DECQ CX
	JNZ  r16mxs
	VZEROUPPER
	RET

TEXT ·r16DotV(SB), NOSPLIT, $0-64
	R16_DOT(R16_TOK, R16_SUMV)

TEXT ·r16DotMV(SB), NOSPLIT, $0-64
	R16_DOT(R16_TOKM, R16_SUMV)

#define R16_BW_CONSTS \
	MOVL $0x00010001, AX; \
	VPBROADCASTD AX, Z31

TEXT ·r16DotB(SB), NOSPLIT, $0-64
	R16_BW_CONSTS
	R16_DOT(R16_TOK, R16_SUMB)

TEXT ·r16DotMB(SB), NOSPLIT, $0-64
	R16_BW_CONSTS
	R16_DOT(R16_TOKM, R16_SUMB)


// func kr16Dot32(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)
TEXT ·kr16Dot32(SB), NOSPLIT, $0-64
	KR_DOT(KR_ALL32_4, KR_ALL32_1)

// func kr16Dot16(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)
TEXT ·kr16Dot16(SB), NOSPLIT, $0-64
	KR_DOT(KR_ALL16_4, KR_ALL16_1)

// func kr16UnpQ4K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
// Q4_K: d, dmin, scales[12], qs[128]; chunk c of qs (32 bytes at 16+32c)
// holds quants 64c.. (low nibbles) and 64c+32.. (high).
TEXT ·kr16UnpQ4K(SB), NOSPLIT, $0-40
	KR_UNPACK_PROLOGUE
krq4:
	KR_SCALEMINS
	KR_SEG(16, 0, 8)
	KR_SEG(32, 4, 12)
	KR_SEG(48, 16, 24)
	KR_SEG(64, 20, 28)
	KR_SEG(80, 32, 40)
	KR_SEG(96, 36, 44)
	KR_SEG(112, 48, 56)
	KR_SEG(128, 52, 60)
	R16_HALVES(0, 0)
	R16_HALVES(2, 32)
	KR_NEXT(144)
	DECQ CX
	JNZ  krq4
	KR_DS(32)

// func kr16UnpQ5K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
// Q5_K: d, dmin, scales[12], qh[32], qs[128]: Q4_K's layout with the
// fifth bit of quant 64c+l at bit 2c of qh[l], of 64c+32+l at bit 2c+1.
TEXT ·kr16UnpQ5K(SB), NOSPLIT, $0-40
	KR_UNPACK_PROLOGUE
	MOVL $0x10101010, AX
	VPBROADCASTD AX, Z26
krq5:
	KR_SCALEMINS
	KR_QH(16)
	KR_SEGX(48, 0, 8, KR_BITS_L, 4, KR_BITS_L, 3)
	KR_SEGX(80, 16, 24, KR_BITS_L, 2, KR_BITS_L, 1)
	KR_SEGX(112, 32, 40, KR_BITS_L, 0, KR_BITS_R, 1)
	KR_SEGX(144, 48, 56, KR_BITS_R, 2, KR_BITS_R, 3)
	KR_QH(32)
	KR_SEGX(64, 4, 12, KR_BITS_L, 4, KR_BITS_L, 3)
	KR_SEGX(96, 20, 28, KR_BITS_L, 2, KR_BITS_L, 1)
	KR_SEGX(128, 36, 44, KR_BITS_L, 0, KR_BITS_R, 1)
	KR_SEGX(160, 52, 60, KR_BITS_R, 2, KR_BITS_R, 3)
	R16_HALVES(0, 0)
	R16_HALVES(2, 32)
	KR_NEXT(176)
	DECQ CX
	JNZ  krq5
	KR_DS(32)

// func kr16UnpQ6K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
// Q6_K: ql[128], qh[64], scales[16], d. Per half h: quant 128h+l (l < 32)
// is the low nibble of ql[64h+l] with bits 0-1 of qh[32h+l] above it,
// 128h+32+l the low nibble of ql[64h+32+l] with bits 2-3, 128h+64+l and
// 128h+96+l the high nibbles with bits 4-5 and 6-7; the value is u - 32.
TEXT ·kr16UnpQ6K(SB), NOSPLIT, $0-40
	KR_UNPACK_PROLOGUE
	MOVL $0x30303030, AX
	VPBROADCASTD AX, Z26
krq6:
	KR_SCALES6
	KR_QH(128)
	KR_SEGX(0, 0, 16, KR_BITS_L, 4, KR_BITS_L, 0)
	KR_SEGX(32, 8, 24, KR_BITS_L, 2, KR_BITS_R, 2)
	KR_QH(144)
	KR_SEGX(16, 4, 20, KR_BITS_L, 4, KR_BITS_L, 0)
	KR_SEGX(48, 12, 28, KR_BITS_L, 2, KR_BITS_R, 2)
	KR_QH(160)
	KR_SEGX(64, 32, 48, KR_BITS_L, 4, KR_BITS_L, 0)
	KR_SEGX(96, 40, 56, KR_BITS_L, 2, KR_BITS_R, 2)
	KR_QH(176)
	KR_SEGX(80, 36, 52, KR_BITS_L, 4, KR_BITS_L, 0)
	KR_SEGX(112, 44, 60, KR_BITS_L, 2, KR_BITS_R, 2)
	R16_HALVES(208, 0)
	KR_NEXT(210)
	DECQ CX
	JNZ  krq6
	KR_DS(0)

// func kr16UnpIQ4XS(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
// IQ4_XS: d, scales_h, scales_l[4], qs[128]; sub-block j is the low
// nibbles of qs[16j:16j+16], then the high ones, through kvaluesIQ4NL+128.
TEXT ·kr16UnpIQ4XS(SB), NOSPLIT, $0-40
	KR_UNPACK_PROLOGUE
	VBROADCASTI32X4 ·r16iq4nl(SB), Z25
	MOVL $32, AX
	VPBROADCASTD AX, Z24
krxs:
	KR_SCALESXS
	KR_SEGXS(8, 0)
	KR_SEGXS(24, 1)
	KR_SEGXS(40, 2)
	KR_SEGXS(56, 3)
	KR_SEGXS(72, 4)
	KR_SEGXS(88, 5)
	KR_SEGXS(104, 6)
	KR_SEGXS(120, 7)
	R16_HALVES(0, 0)
	KR_NEXT(136)
	DECQ CX
	JNZ  krxs
	KR_DS(0)

// func kr16UnpQ2K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
// Q2_K: scales[16] (scale low nibble, min high), qs[64], d, dmin; quant
// 128h+32f+l is 2-bit field f of qs[32h+l].
TEXT ·kr16UnpQ2K(SB), NOSPLIT, $0-40
	KR_UNPACK_PROLOGUE
	MOVL $0x03030303, AX
	VPBROADCASTD AX, Z26
krq2:
	KR_SCALES2
	KR_SEG2(16, 0)
	KR_SEG2(32, 4)
	KR_SEG2(48, 32)
	KR_SEG2(64, 36)
	R16_HALVES(80, 0)
	R16_HALVES(82, 32)
	KR_NEXT(84)
	DECQ CX
	JNZ  krq2
	KR_DS(32)

// func kr16UnpQ3K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
// Q3_K: hmask[32], qs[64], scales[12], d; quant 128h+32f+l is 2-bit field
// f of qs[32h+l] plus 4 where bit 4h+f of hmask[l] is set, minus 4; the
// 16 scales are 6-bit, minus 32.
TEXT ·kr16UnpQ3K(SB), NOSPLIT, $0-40
	KR_UNPACK_PROLOGUE
	MOVL $0x03030303, AX
	VPBROADCASTD AX, Z26
	MOVL $0x04040404, AX
	VPBROADCASTD AX, Z25
	MOVL $32, AX
	VPBROADCASTD AX, Z24
krq3:
	// The scales end 2 bytes before the block: load 16 from 94, drop 2.
	R16_LOAD(94)
	VPSRLDQ $2, Z0, Z0
	VPSRLDQ $2, Z1, Z1
	VPSRLDQ $2, Z2, Z2
	VPSRLDQ $2, Z3, Z3
	R16_T4
	KR_S3(0, Z8, Z0, 0, 0)
	KR_S3(1, Z11, Z0, 8, 8)
	KR_M3(0)
	KR_S3(2, Z8, Z0, 16, 16)
	KR_S3(3, Z11, Z0, 24, 24)
	KR_M3(1)
	KR_S3(4, Z8, Z1, 0, 2)
	KR_S3(5, Z11, Z1, 8, 10)
	KR_M3(2)
	KR_S3(6, Z8, Z1, 16, 18)
	KR_S3(7, Z11, Z1, 24, 26)
	KR_M3(3)
	KR_S3(8, Z8, Z0, 4, 4)
	KR_S3(9, Z11, Z0, 12, 12)
	KR_M3(4)
	KR_S3(10, Z8, Z0, 20, 20)
	KR_S3(11, Z11, Z0, 28, 28)
	KR_M3(5)
	KR_S3(12, Z8, Z1, 4, 6)
	KR_S3(13, Z11, Z1, 12, 14)
	KR_M3(6)
	KR_S3(14, Z8, Z1, 20, 22)
	KR_S3(15, Z11, Z1, 28, 30)
	KR_M3(7)
	KR_QH(0)
	R16_LOAD(32)
	R16_T4
	KR_FIELD3(0, KR_HB_L, 2, 0)
	KR_FIELD3(1, KR_HB_L, 1, 8)
	KR_FIELD3(2, KR_HB_L, 0, 16)
	KR_FIELD3(3, KR_HB_R, 1, 24)
	R16_LOAD(64)
	R16_T4
	KR_FIELD3(0, KR_HB_R, 2, 32)
	KR_FIELD3(1, KR_HB_R, 3, 40)
	KR_FIELD3(2, KR_HB_R, 4, 48)
	KR_FIELD3(3, KR_HB_R, 5, 56)
	KR_QH(16)
	R16_LOAD(48)
	R16_T4
	KR_FIELD3(0, KR_HB_L, 2, 4)
	KR_FIELD3(1, KR_HB_L, 1, 12)
	KR_FIELD3(2, KR_HB_L, 0, 20)
	KR_FIELD3(3, KR_HB_R, 1, 28)
	R16_LOAD(80)
	R16_T4
	KR_FIELD3(0, KR_HB_R, 2, 36)
	KR_FIELD3(1, KR_HB_R, 3, 44)
	KR_FIELD3(2, KR_HB_R, 4, 52)
	KR_FIELD3(3, KR_HB_R, 5, 60)
	R16_HALVES(108, 0)
	KR_NEXT(110)
	DECQ CX
	JNZ  krq3
	KR_DS(0)

// func r16Store(out *float32, outStride int, acc *float32, nt int)
TEXT ·r16Store(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), DX
	SHLQ $2, DX
	MOVQ acc+16(FP), SI
	MOVQ nt+24(FP), CX
	VMOVDQU64 r16perm<>(SB), Z1
r16st:
	VPERMD 0(SI), Z1, Z0
	VMOVUPS Z0, 0(DI)
	ADDQ $64, SI
	ADDQ DX, DI
	DECQ CX
	JNZ  r16st
	VZEROUPPER
	RET

// r16perm: lane p of the result takes lane P⁻¹(p) = P(p) of the
// accumulators (P is its own inverse).
DATA r16perm<>+0(SB)/8, $0x0000000400000000
DATA r16perm<>+8(SB)/8, $0x0000000c00000008
DATA r16perm<>+16(SB)/8, $0x0000000500000001
DATA r16perm<>+24(SB)/8, $0x0000000d00000009
DATA r16perm<>+32(SB)/8, $0x0000000600000002
DATA r16perm<>+40(SB)/8, $0x0000000e0000000a
DATA r16perm<>+48(SB)/8, $0x0000000700000003
DATA r16perm<>+56(SB)/8, $0x0000000f0000000b
GLOBL r16perm<>(SB), RODATA|NOPTR, $64

// r16qhctl: per k/2, VPSHUFB controls giving each dword byte k/2 of itself ×4.
DATA ·r16qhctl+0(SB)/8, $0x0404040400000000
DATA ·r16qhctl+8(SB)/8, $0x0c0c0c0c08080808
DATA ·r16qhctl+16(SB)/8, $0x0404040400000000
DATA ·r16qhctl+24(SB)/8, $0x0c0c0c0c08080808
DATA ·r16qhctl+32(SB)/8, $0x0404040400000000
DATA ·r16qhctl+40(SB)/8, $0x0c0c0c0c08080808
DATA ·r16qhctl+48(SB)/8, $0x0404040400000000
DATA ·r16qhctl+56(SB)/8, $0x0c0c0c0c08080808
DATA ·r16qhctl+64(SB)/8, $0x0505050501010101
DATA ·r16qhctl+72(SB)/8, $0x0d0d0d0d09090909
DATA ·r16qhctl+80(SB)/8, $0x0505050501010101
DATA ·r16qhctl+88(SB)/8, $0x0d0d0d0d09090909
DATA ·r16qhctl+96(SB)/8, $0x0505050501010101
DATA ·r16qhctl+104(SB)/8, $0x0d0d0d0d09090909
DATA ·r16qhctl+112(SB)/8, $0x0505050501010101
DATA ·r16qhctl+120(SB)/8, $0x0d0d0d0d09090909
DATA ·r16qhctl+128(SB)/8, $0x0606060602020202
DATA ·r16qhctl+136(SB)/8, $0x0e0e0e0e0a0a0a0a
DATA ·r16qhctl+144(SB)/8, $0x0606060602020202
DATA ·r16qhctl+152(SB)/8, $0x0e0e0e0e0a0a0a0a
DATA ·r16qhctl+160(SB)/8, $0x0606060602020202
DATA ·r16qhctl+168(SB)/8, $0x0e0e0e0e0a0a0a0a
DATA ·r16qhctl+176(SB)/8, $0x0606060602020202
DATA ·r16qhctl+184(SB)/8, $0x0e0e0e0e0a0a0a0a
DATA ·r16qhctl+192(SB)/8, $0x0707070703030303
DATA ·r16qhctl+200(SB)/8, $0x0f0f0f0f0b0b0b0b
DATA ·r16qhctl+208(SB)/8, $0x0707070703030303
DATA ·r16qhctl+216(SB)/8, $0x0f0f0f0f0b0b0b0b
DATA ·r16qhctl+224(SB)/8, $0x0707070703030303
DATA ·r16qhctl+232(SB)/8, $0x0f0f0f0f0b0b0b0b
DATA ·r16qhctl+240(SB)/8, $0x0707070703030303
DATA ·r16qhctl+248(SB)/8, $0x0f0f0f0f0b0b0b0b
GLOBL ·r16qhctl(SB), RODATA|NOPTR, $256

// r16qhmask: per k mod 2, each dword's bytes i pick bit 4·(k mod 2)+i.
DATA ·r16qhmask+0(SB)/8, $0x0804020108040201
DATA ·r16qhmask+8(SB)/8, $0x0804020108040201
DATA ·r16qhmask+16(SB)/8, $0x0804020108040201
DATA ·r16qhmask+24(SB)/8, $0x0804020108040201
DATA ·r16qhmask+32(SB)/8, $0x0804020108040201
DATA ·r16qhmask+40(SB)/8, $0x0804020108040201
DATA ·r16qhmask+48(SB)/8, $0x0804020108040201
DATA ·r16qhmask+56(SB)/8, $0x0804020108040201
DATA ·r16qhmask+64(SB)/8, $0x8040201080402010
DATA ·r16qhmask+72(SB)/8, $0x8040201080402010
DATA ·r16qhmask+80(SB)/8, $0x8040201080402010
DATA ·r16qhmask+88(SB)/8, $0x8040201080402010
DATA ·r16qhmask+96(SB)/8, $0x8040201080402010
DATA ·r16qhmask+104(SB)/8, $0x8040201080402010
DATA ·r16qhmask+112(SB)/8, $0x8040201080402010
DATA ·r16qhmask+120(SB)/8, $0x8040201080402010
GLOBL ·r16qhmask(SB), RODATA|NOPTR, $128

// r16iq4nl: kvaluesIQ4NL + 128.
DATA ·r16iq4nl+0(SB)/8, $0x766a5d4f3f2d1801
DATA ·r16iq4nl+8(SB)/8, $0xf1d9c5b5a6998d81
GLOBL ·r16iq4nl(SB), RODATA|NOPTR, $16

// r16mxfp4: kvaluesMXFP4 + 12.
DATA ·r16mxfp4+0(SB)/8, $0x181412100f0e0d0c
DATA ·r16mxfp4+8(SB)/8, $0x00040608090a0b0c
GLOBL ·r16mxfp4(SB), RODATA|NOPTR, $16
