//go:build goexperiment.simd && amd64

#include "textflag.h"

// AMX dot kernels for the 32-value block formats over the 16-row layout of
// quant_r16_avx512_amd64.s (see quant_amx_amd64.go).
//
// Per block, g[0..7] (512 bytes: 8 rows of 64 bytes, lane p of g[k] = the
// quants 4k..4k+3 of row P(p)) is exactly an AMX B tile of K = 32 and 16
// columns, and the activations y[32] of 16 tokens (xs bytes apart) an A
// tile of 16 rows × 32 bytes. One TDPBSSD (signed weights u - o, the
// offset formats after r16Sign) or TDPBSUD (unsigned u, the formats with a
// minimum) leaves in C[m][p] the block's exact integer sum for token m and
// row P(p), the same integer the VNNI kernel builds from -o·Σy and
// VPDPBUSD. The float step is then the VNNI kernel's, operation for
// operation: acc += float(Σ)·(d·dx) (then + m·s).
//
// Blocks go four at a time: their products into tmm4-7 (A and B tiles
// alternating between tmm0/1 and tmm2/3), the four C tiles stored, then
// the four float steps. Loads that follow a tile store wait for it, so the
// stores are batched to wait once per four blocks.
//
// Go's assembler has no AMX mnemonics: they are written as bytes, each for
// the one register choice noted above it (encodings from GNU as 2.40):
// R8 = token 0's activation block, DX = xs, SI = the block's weights, R14
// = 64 (the B and C row stride), DI = the C buffer.

// tileloadd 0x8(%r8,%rdx,1),%tmm0
#define AMX_LOADA0 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x44; BYTE $0x10; BYTE $0x08
// tileloadd (%rsi,%r14,1),%tmm1
#define AMX_LOADB0 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x0c; BYTE $0x36
// tilezero %tmm4
#define AMX_ZERO0 BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xe0
// tdpbssd %tmm1,%tmm0,%tmm4
#define AMX_SS0 BYTE $0xc4; BYTE $0xe2; BYTE $0x73; BYTE $0x5e; BYTE $0xe0
// tdpbsud %tmm1,%tmm0,%tmm4
#define AMX_SU0 BYTE $0xc4; BYTE $0xe2; BYTE $0x72; BYTE $0x5e; BYTE $0xe0
// tilestored %tmm4,(%rdi,%r14,1)
#define AMX_STORE0 BYTE $0xc4; BYTE $0xa2; BYTE $0x7a; BYTE $0x4b; BYTE $0x24; BYTE $0x37
// tileloadd 0x30(%r8,%rdx,1),%tmm2
#define AMX_LOADA1 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x54; BYTE $0x10; BYTE $0x30
// tileloadd 0x280(%rsi,%r14,1),%tmm3
#define AMX_LOADB1 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x9c; BYTE $0x36; BYTE $0x80; BYTE $0x02; BYTE $0x00; BYTE $0x00
// tilezero %tmm5
#define AMX_ZERO1 BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xe8
// tdpbssd %tmm3,%tmm2,%tmm5
#define AMX_SS1 BYTE $0xc4; BYTE $0xe2; BYTE $0x63; BYTE $0x5e; BYTE $0xea
// tdpbsud %tmm3,%tmm2,%tmm5
#define AMX_SU1 BYTE $0xc4; BYTE $0xe2; BYTE $0x62; BYTE $0x5e; BYTE $0xea
// tilestored %tmm5,0x400(%rdi,%r14,1)
#define AMX_STORE1 BYTE $0xc4; BYTE $0xa2; BYTE $0x7a; BYTE $0x4b; BYTE $0xac; BYTE $0x37; BYTE $0x00; BYTE $0x04; BYTE $0x00; BYTE $0x00
// tileloadd 0x58(%r8,%rdx,1),%tmm0
#define AMX_LOADA2 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x44; BYTE $0x10; BYTE $0x58
// tileloadd 0x500(%rsi,%r14,1),%tmm1
#define AMX_LOADB2 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x8c; BYTE $0x36; BYTE $0x00; BYTE $0x05; BYTE $0x00; BYTE $0x00
// tilezero %tmm6
#define AMX_ZERO2 BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xf0
// tdpbssd %tmm1,%tmm0,%tmm6
#define AMX_SS2 BYTE $0xc4; BYTE $0xe2; BYTE $0x73; BYTE $0x5e; BYTE $0xf0
// tdpbsud %tmm1,%tmm0,%tmm6
#define AMX_SU2 BYTE $0xc4; BYTE $0xe2; BYTE $0x72; BYTE $0x5e; BYTE $0xf0
// tilestored %tmm6,0x800(%rdi,%r14,1)
#define AMX_STORE2 BYTE $0xc4; BYTE $0xa2; BYTE $0x7a; BYTE $0x4b; BYTE $0xb4; BYTE $0x37; BYTE $0x00; BYTE $0x08; BYTE $0x00; BYTE $0x00
// tileloadd 0x80(%r8,%rdx,1),%tmm2
#define AMX_LOADA3 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x94; BYTE $0x10; BYTE $0x80; BYTE $0x00; BYTE $0x00; BYTE $0x00
// tileloadd 0x780(%rsi,%r14,1),%tmm3
#define AMX_LOADB3 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x9c; BYTE $0x36; BYTE $0x80; BYTE $0x07; BYTE $0x00; BYTE $0x00
// tilezero %tmm7
#define AMX_ZERO3 BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xf8
// tdpbssd %tmm3,%tmm2,%tmm7
#define AMX_SS3 BYTE $0xc4; BYTE $0xe2; BYTE $0x63; BYTE $0x5e; BYTE $0xfa
// tdpbsud %tmm3,%tmm2,%tmm7
#define AMX_SU3 BYTE $0xc4; BYTE $0xe2; BYTE $0x62; BYTE $0x5e; BYTE $0xfa
// tilestored %tmm7,0xc00(%rdi,%r14,1)
#define AMX_STORE3 BYTE $0xc4; BYTE $0xa2; BYTE $0x7a; BYTE $0x4b; BYTE $0xbc; BYTE $0x37; BYTE $0x00; BYTE $0x0c; BYTE $0x00; BYTE $0x00
// ldtilecfg (%rax)
#define LDTILECFG_AX BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0x00
// tilerelease
#define TILERELEASE BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0xc0

// The tile configuration: palette 1; tmm0, tmm2 A (16 rows × 32 bytes);
// tmm1, tmm3 B (8 × 64); tmm4-7 C (16 × 64).
DATA amxcfg<>+0(SB)/1, $1
DATA amxcfg<>+16(SB)/2, $32
DATA amxcfg<>+18(SB)/2, $64
DATA amxcfg<>+20(SB)/2, $32
DATA amxcfg<>+22(SB)/2, $64
DATA amxcfg<>+24(SB)/2, $64
DATA amxcfg<>+26(SB)/2, $64
DATA amxcfg<>+28(SB)/2, $64
DATA amxcfg<>+30(SB)/2, $64
DATA amxcfg<>+48(SB)/1, $16
DATA amxcfg<>+49(SB)/1, $8
DATA amxcfg<>+50(SB)/1, $16
DATA amxcfg<>+51(SB)/1, $8
DATA amxcfg<>+52(SB)/1, $16
DATA amxcfg<>+53(SB)/1, $16
DATA amxcfg<>+54(SB)/1, $16
DATA amxcfg<>+55(SB)/1, $16
GLOBL amxcfg<>(SB), RODATA|NOPTR, $64

// One token's float step: C row at CB(DI), its activation block at A
// (d at A, s at A+4), accumulator ACC; T0, T1 temporaries.
#define AMX_TOK(CB, D, B, ACC, T0, T1) \
	VCVTDQ2PS CB(DI), T0; \
	VMULPS.BCST D B, Z24, T1; \
	VFMADD231PS T1, T0, ACC

#define AMX_TOKM(CB, D, B, ACC, T0, T1) \
	AMX_TOK(CB, D, B, ACC, T0, T1); \
	VFMADD231PS.BCST D+4 B, Z25, ACC

// The 16 tokens: token m's block at D plus base R8 + m·xs, reached from
// R8-R13 = tokens 0, 3, 6, 9, 12, 15 and DX = xs.
#define AMX_FLOAT(TOK, CB, D) \
	TOK(CB+0, D, (R8), Z0, Z16, Z17); \
	TOK(CB+64, D, (R8)(DX*1), Z1, Z18, Z19); \
	TOK(CB+128, D, (R8)(DX*2), Z2, Z20, Z21); \
	TOK(CB+192, D, (R9), Z3, Z22, Z23); \
	TOK(CB+256, D, (R8)(DX*4), Z4, Z16, Z17); \
	TOK(CB+320, D, (R9)(DX*2), Z5, Z18, Z19); \
	TOK(CB+384, D, (R10), Z6, Z20, Z21); \
	TOK(CB+448, D, (R9)(DX*4), Z7, Z22, Z23); \
	TOK(CB+512, D, (R8)(DX*8), Z8, Z16, Z17); \
	TOK(CB+576, D, (R11), Z9, Z18, Z19); \
	TOK(CB+640, D, (R10)(DX*4), Z10, Z20, Z21); \
	TOK(CB+704, D, (R9)(DX*8), Z11, Z22, Z23); \
	TOK(CB+768, D, (R12), Z12, Z16, Z17); \
	TOK(CB+832, D, (R11)(DX*4), Z13, Z18, Z19); \
	TOK(CB+896, D, (R10)(DX*8), Z14, Z20, Z21); \
	TOK(CB+960, D, (R13), Z15, Z22, Z23)

#define AMX_ACC(OP) \
	OP 0(R15), Z0; OP 64(R15), Z1; OP 128(R15), Z2; OP 192(R15), Z3; \
	OP 256(R15), Z4; OP 320(R15), Z5; OP 384(R15), Z6; OP 448(R15), Z7; \
	OP 512(R15), Z8; OP 576(R15), Z9; OP 640(R15), Z10; OP 704(R15), Z11; \
	OP 768(R15), Z12; OP 832(R15), Z13; OP 896(R15), Z14; OP 960(R15), Z15

#define AMX_STORE \
	VMOVUPS Z0, 0(R15); VMOVUPS Z1, 64(R15); VMOVUPS Z2, 128(R15); VMOVUPS Z3, 192(R15); \
	VMOVUPS Z4, 256(R15); VMOVUPS Z5, 320(R15); VMOVUPS Z6, 384(R15); VMOVUPS Z7, 448(R15); \
	VMOVUPS Z8, 512(R15); VMOVUPS Z9, 576(R15); VMOVUPS Z10, 640(R15); VMOVUPS Z11, 704(R15); \
	VMOVUPS Z12, 768(R15); VMOVUPS Z13, 832(R15); VMOVUPS Z14, 896(R15); VMOVUPS Z15, 960(R15)

#define AMX_SCALES(OFF) VMOVUPS OFF+512(SI), Z24
#define AMX_SCALESM(OFF) VMOVUPS OFF+512(SI), Z24; VMOVUPS OFF+576(SI), Z25

#define AMX_NEXT(BYTES, ACT) \
	ADDQ $BYTES, SI; \
	ADDQ $ACT, R8; \
	ADDQ $ACT, R9; \
	ADDQ $ACT, R10; \
	ADDQ $ACT, R11; \
	ADDQ $ACT, R12; \
	ADDQ $ACT, R13

// AMX_BLK: block J of the batch (weights at 640·J(SI), activations at
// 40·J+8(R8)) into C tile J.
#define AMX_BLK(LA, LB, Z, DP) \
	LA; \
	LB; \
	Z; \
	DP

// AMX_SETUP: the tile configuration (at AX) loaded and the registers
// every AMX kernel keeps: R15 = acc, DX = xs, DI = the C buffer, R14 = 64
// (the B and C row stride), BX = tokens left.
#define AMX_SETUP \
	LDTILECFG_AX; \
	MOVQ acc+0(FP), R15; \
	MOVQ xs+24(FP), DX; \
	MOVQ buf+48(FP), DI; \
	MOVQ $64, R14; \
	MOVQ nt+32(FP), BX

// AMX_BASES: R8-R13 = tokens 0, 3, 6, 9, 12, 15 of the next 16 (from x),
// and x moved past them.
#define AMX_BASES \
	MOVQ x+16(FP), R8; \
	LEAQ (R8)(DX*2), R9; \
	ADDQ DX, R9; \
	LEAQ (R9)(DX*2), R10; \
	ADDQ DX, R10; \
	LEAQ (R10)(DX*2), R11; \
	ADDQ DX, R11; \
	LEAQ (R11)(DX*2), R12; \
	ADDQ DX, R12; \
	LEAQ (R12)(DX*2), R13; \
	ADDQ DX, R13; \
	LEAQ (R13)(DX*1), AX; \
	MOVQ AX, x+16(FP)

// func amxDot*(acc *float32, s *byte, x unsafe.Pointer, xs int, nt, n int, buf *byte)
// acc: nt × 16 float32 (token t's at 64·t, lane order), nt a multiple of
// 16; s: n unpacked blocks; x: token 0's activation block (actQ8x32: d, s,
// y[32]), tokens xs bytes apart; buf: 4 KiB for the C tiles.
#define AMX_DOT(DP0, DP1, DP2, DP3, TOK, SCALES) \
	LEAQ amxcfg<>(SB), AX; \
	AMX_SETUP; \
amxtile:; \
	AMX_BASES; \
	AMX_ACC(VMOVUPS); \
	MOVQ s+8(FP), SI; \
	MOVQ n+40(FP), CX; \
amx4:; \
	CMPQ CX, $4; \
	JLT amx1; \
	AMX_BLK(AMX_LOADA0, AMX_LOADB0, AMX_ZERO0, DP0); \
	AMX_BLK(AMX_LOADA1, AMX_LOADB1, AMX_ZERO1, DP1); \
	AMX_BLK(AMX_LOADA2, AMX_LOADB2, AMX_ZERO2, DP2); \
	AMX_BLK(AMX_LOADA3, AMX_LOADB3, AMX_ZERO3, DP3); \
	AMX_STORE0; \
	AMX_STORE1; \
	AMX_STORE2; \
	AMX_STORE3; \
	SCALES(0); \
	AMX_FLOAT(TOK, 0, 0); \
	SCALES(640); \
	AMX_FLOAT(TOK, 1024, 40); \
	SCALES(1280); \
	AMX_FLOAT(TOK, 2048, 80); \
	SCALES(1920); \
	AMX_FLOAT(TOK, 3072, 120); \
	AMX_NEXT(2560, 160); \
	SUBQ $4, CX; \
	JMP amx4; \
amx1:; \
	TESTQ CX, CX; \
	JZ amxdone; \
	AMX_BLK(AMX_LOADA0, AMX_LOADB0, AMX_ZERO0, DP0); \
	AMX_STORE0; \
	SCALES(0); \
	AMX_FLOAT(TOK, 0, 0); \
	AMX_NEXT(640, 40); \
	DECQ CX; \
	JMP amx1; \
amxdone:; \
	AMX_STORE; \
	ADDQ $1024, R15; \
	SUBQ $16, BX; \
	JNZ amxtile; \
	TILERELEASE; \
	VZEROUPPER; \
	RET

// func amxDotS(acc *float32, s *byte, x unsafe.Pointer, xs int, nt, n int, buf *byte)
TEXT ·amxDotS(SB), NOSPLIT, $0-56
	AMX_DOT(AMX_SS0, AMX_SS1, AMX_SS2, AMX_SS3, AMX_TOK, AMX_SCALES)

// func amxDotM(acc *float32, s *byte, x unsafe.Pointer, xs int, nt, n int, buf *byte)
TEXT ·amxDotM(SB), NOSPLIT, $0-56
	AMX_DOT(AMX_SU0, AMX_SU1, AMX_SU2, AMX_SU3, AMX_TOKM, AMX_SCALESM)

// func r16Sign(s *byte, n, o int)
// Subtracts o from every quant of n unpacked 16-row blocks: u becomes the
// signed value u - o (Q8_0's u = w XOR 0x80 becomes w again).
TEXT ·r16Sign(SB), NOSPLIT, $0-24
	MOVQ s+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ o+16(FP), AX
	VPBROADCASTB AX, Z31
r16sign:
	VMOVDQU64 0(SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVDQU64 256(SI), Z4
	VMOVDQU64 320(SI), Z5
	VMOVDQU64 384(SI), Z6
	VMOVDQU64 448(SI), Z7
	VPSUBB Z31, Z0, Z0
	VPSUBB Z31, Z1, Z1
	VPSUBB Z31, Z2, Z2
	VPSUBB Z31, Z3, Z3
	VPSUBB Z31, Z4, Z4
	VPSUBB Z31, Z5, Z5
	VPSUBB Z31, Z6, Z6
	VPSUBB Z31, Z7, Z7
	VMOVDQU64 Z0, 0(SI)
	VMOVDQU64 Z1, 64(SI)
	VMOVDQU64 Z2, 128(SI)
	VMOVDQU64 Z3, 192(SI)
	VMOVDQU64 Z4, 256(SI)
	VMOVDQU64 Z5, 320(SI)
	VMOVDQU64 Z6, 384(SI)
	VMOVDQU64 Z7, 448(SI)
	ADDQ $640, SI
	DECQ CX
	JNZ  r16sign
	VZEROUPPER
	RET

// ---- K formats ----------------------------------------------------------------
//
// The same tiles over the 16-row K kernels' unpacked super-blocks
// (quant_r16_avx512_amd64.s, "K formats"): per sub-block of 32 values
// (Q4_K, Q5_K, IQ4_XS) or 16 (Q6_K, Q2_K, Q3_K), g[] of that sub-block is a
// B tile of K = 32 (16) and the tokens' y of it an A tile, so one TDPBSUD
// gives each (token, row) its exact Σu·y; the int32 sub-block scale
// multiplies it (VPMULLD) into the token's isum, as VNNI's kernel does
// after its VPDPBUSDs. Then per token the mins (VPDPWSSD over the bsums)
// and the float step of KR_FLOAT, operation for operation.
//
// Registers: as the 32-value kernel (R8-R13 the tokens, DX = xs, SI the
// super-block, R14 = 64, DI the C buffer), R15 = acc, Z0-Z15 the 16 tokens'
// isum; the accumulators stay in memory (acc, read and written once per
// super-block).

// tileloadd 0x4(%r8,%rdx,1),%tmm0
#define KAMX32_A0 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x44; BYTE $0x10; BYTE $0x04
// tileloadd (%rsi,%r14,1),%tmm1
#define KAMX32_B0 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x0c; BYTE $0x36
// tileloadd 0x24(%r8,%rdx,1),%tmm2
#define KAMX32_A1 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x54; BYTE $0x10; BYTE $0x24
// tileloadd 0x200(%rsi,%r14,1),%tmm3
#define KAMX32_B1 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x9c; BYTE $0x36; BYTE $0x00; BYTE $0x02; BYTE $0x00; BYTE $0x00
// tileloadd 0x44(%r8,%rdx,1),%tmm0
#define KAMX32_A2 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x44; BYTE $0x10; BYTE $0x44
// tileloadd 0x400(%rsi,%r14,1),%tmm1
#define KAMX32_B2 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x8c; BYTE $0x36; BYTE $0x00; BYTE $0x04; BYTE $0x00; BYTE $0x00
// tileloadd 0x64(%r8,%rdx,1),%tmm2
#define KAMX32_A3 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x54; BYTE $0x10; BYTE $0x64
// tileloadd 0x600(%rsi,%r14,1),%tmm3
#define KAMX32_B3 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x9c; BYTE $0x36; BYTE $0x00; BYTE $0x06; BYTE $0x00; BYTE $0x00
// tileloadd 0x84(%r8,%rdx,1),%tmm0
#define KAMX32_A4 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x84; BYTE $0x10; BYTE $0x84; BYTE $0x00; BYTE $0x00; BYTE $0x00
// tileloadd 0x800(%rsi,%r14,1),%tmm1
#define KAMX32_B4 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x8c; BYTE $0x36; BYTE $0x00; BYTE $0x08; BYTE $0x00; BYTE $0x00
// tileloadd 0xa4(%r8,%rdx,1),%tmm2
#define KAMX32_A5 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x94; BYTE $0x10; BYTE $0xa4; BYTE $0x00; BYTE $0x00; BYTE $0x00
// tileloadd 0xa00(%rsi,%r14,1),%tmm3
#define KAMX32_B5 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x9c; BYTE $0x36; BYTE $0x00; BYTE $0x0a; BYTE $0x00; BYTE $0x00
// tileloadd 0xc4(%r8,%rdx,1),%tmm0
#define KAMX32_A6 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x84; BYTE $0x10; BYTE $0xc4; BYTE $0x00; BYTE $0x00; BYTE $0x00
// tileloadd 0xc00(%rsi,%r14,1),%tmm1
#define KAMX32_B6 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x8c; BYTE $0x36; BYTE $0x00; BYTE $0x0c; BYTE $0x00; BYTE $0x00
// tileloadd 0xe4(%r8,%rdx,1),%tmm2
#define KAMX32_A7 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x94; BYTE $0x10; BYTE $0xe4; BYTE $0x00; BYTE $0x00; BYTE $0x00
// tileloadd 0xe00(%rsi,%r14,1),%tmm3
#define KAMX32_B7 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x9c; BYTE $0x36; BYTE $0x00; BYTE $0x0e; BYTE $0x00; BYTE $0x00
// tileloadd 0x4(%r8,%rdx,1),%tmm0
#define KAMX16_A0 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x44; BYTE $0x10; BYTE $0x04
// tileloadd (%rsi,%r14,1),%tmm1
#define KAMX16_B0 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x0c; BYTE $0x36
// tileloadd 0x14(%r8,%rdx,1),%tmm2
#define KAMX16_A1 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x54; BYTE $0x10; BYTE $0x14
// tileloadd 0x100(%rsi,%r14,1),%tmm3
#define KAMX16_B1 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x9c; BYTE $0x36; BYTE $0x00; BYTE $0x01; BYTE $0x00; BYTE $0x00
// tileloadd 0x24(%r8,%rdx,1),%tmm0
#define KAMX16_A2 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x44; BYTE $0x10; BYTE $0x24
// tileloadd 0x200(%rsi,%r14,1),%tmm1
#define KAMX16_B2 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x8c; BYTE $0x36; BYTE $0x00; BYTE $0x02; BYTE $0x00; BYTE $0x00
// tileloadd 0x34(%r8,%rdx,1),%tmm2
#define KAMX16_A3 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x54; BYTE $0x10; BYTE $0x34
// tileloadd 0x300(%rsi,%r14,1),%tmm3
#define KAMX16_B3 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x9c; BYTE $0x36; BYTE $0x00; BYTE $0x03; BYTE $0x00; BYTE $0x00
// tileloadd 0x44(%r8,%rdx,1),%tmm0
#define KAMX16_A4 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x44; BYTE $0x10; BYTE $0x44
// tileloadd 0x400(%rsi,%r14,1),%tmm1
#define KAMX16_B4 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x8c; BYTE $0x36; BYTE $0x00; BYTE $0x04; BYTE $0x00; BYTE $0x00
// tileloadd 0x54(%r8,%rdx,1),%tmm2
#define KAMX16_A5 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x54; BYTE $0x10; BYTE $0x54
// tileloadd 0x500(%rsi,%r14,1),%tmm3
#define KAMX16_B5 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x9c; BYTE $0x36; BYTE $0x00; BYTE $0x05; BYTE $0x00; BYTE $0x00
// tileloadd 0x64(%r8,%rdx,1),%tmm0
#define KAMX16_A6 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x44; BYTE $0x10; BYTE $0x64
// tileloadd 0x600(%rsi,%r14,1),%tmm1
#define KAMX16_B6 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x8c; BYTE $0x36; BYTE $0x00; BYTE $0x06; BYTE $0x00; BYTE $0x00
// tileloadd 0x74(%r8,%rdx,1),%tmm2
#define KAMX16_A7 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x54; BYTE $0x10; BYTE $0x74
// tileloadd 0x700(%rsi,%r14,1),%tmm3
#define KAMX16_B7 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x9c; BYTE $0x36; BYTE $0x00; BYTE $0x07; BYTE $0x00; BYTE $0x00
// tileloadd 0x84(%r8,%rdx,1),%tmm0
#define KAMX16_A8 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x84; BYTE $0x10; BYTE $0x84; BYTE $0x00; BYTE $0x00; BYTE $0x00
// tileloadd 0x800(%rsi,%r14,1),%tmm1
#define KAMX16_B8 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x8c; BYTE $0x36; BYTE $0x00; BYTE $0x08; BYTE $0x00; BYTE $0x00
// tileloadd 0x94(%r8,%rdx,1),%tmm2
#define KAMX16_A9 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x94; BYTE $0x10; BYTE $0x94; BYTE $0x00; BYTE $0x00; BYTE $0x00
// tileloadd 0x900(%rsi,%r14,1),%tmm3
#define KAMX16_B9 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x9c; BYTE $0x36; BYTE $0x00; BYTE $0x09; BYTE $0x00; BYTE $0x00
// tileloadd 0xa4(%r8,%rdx,1),%tmm0
#define KAMX16_A10 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x84; BYTE $0x10; BYTE $0xa4; BYTE $0x00; BYTE $0x00; BYTE $0x00
// tileloadd 0xa00(%rsi,%r14,1),%tmm1
#define KAMX16_B10 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x8c; BYTE $0x36; BYTE $0x00; BYTE $0x0a; BYTE $0x00; BYTE $0x00
// tileloadd 0xb4(%r8,%rdx,1),%tmm2
#define KAMX16_A11 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x94; BYTE $0x10; BYTE $0xb4; BYTE $0x00; BYTE $0x00; BYTE $0x00
// tileloadd 0xb00(%rsi,%r14,1),%tmm3
#define KAMX16_B11 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x9c; BYTE $0x36; BYTE $0x00; BYTE $0x0b; BYTE $0x00; BYTE $0x00
// tileloadd 0xc4(%r8,%rdx,1),%tmm0
#define KAMX16_A12 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x84; BYTE $0x10; BYTE $0xc4; BYTE $0x00; BYTE $0x00; BYTE $0x00
// tileloadd 0xc00(%rsi,%r14,1),%tmm1
#define KAMX16_B12 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x8c; BYTE $0x36; BYTE $0x00; BYTE $0x0c; BYTE $0x00; BYTE $0x00
// tileloadd 0xd4(%r8,%rdx,1),%tmm2
#define KAMX16_A13 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x94; BYTE $0x10; BYTE $0xd4; BYTE $0x00; BYTE $0x00; BYTE $0x00
// tileloadd 0xd00(%rsi,%r14,1),%tmm3
#define KAMX16_B13 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x9c; BYTE $0x36; BYTE $0x00; BYTE $0x0d; BYTE $0x00; BYTE $0x00
// tileloadd 0xe4(%r8,%rdx,1),%tmm0
#define KAMX16_A14 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x84; BYTE $0x10; BYTE $0xe4; BYTE $0x00; BYTE $0x00; BYTE $0x00
// tileloadd 0xe00(%rsi,%r14,1),%tmm1
#define KAMX16_B14 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x8c; BYTE $0x36; BYTE $0x00; BYTE $0x0e; BYTE $0x00; BYTE $0x00
// tileloadd 0xf4(%r8,%rdx,1),%tmm2
#define KAMX16_A15 BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x94; BYTE $0x10; BYTE $0xf4; BYTE $0x00; BYTE $0x00; BYTE $0x00
// tileloadd 0xf00(%rsi,%r14,1),%tmm3
#define KAMX16_B15 BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x9c; BYTE $0x36; BYTE $0x00; BYTE $0x0f; BYTE $0x00; BYTE $0x00

// Tile configurations: A 16 × 32 bytes and B 8 × 64 (sub-blocks of 32),
// A 16 × 16 and B 4 × 64 (of 16); C 16 × 64 in tmm4-7.
DATA kamxcfg32<>+0(SB)/1, $1
DATA kamxcfg32<>+16(SB)/2, $32
DATA kamxcfg32<>+18(SB)/2, $64
DATA kamxcfg32<>+20(SB)/2, $32
DATA kamxcfg32<>+22(SB)/2, $64
DATA kamxcfg32<>+24(SB)/2, $64
DATA kamxcfg32<>+26(SB)/2, $64
DATA kamxcfg32<>+28(SB)/2, $64
DATA kamxcfg32<>+30(SB)/2, $64
DATA kamxcfg32<>+48(SB)/1, $16
DATA kamxcfg32<>+49(SB)/1, $8
DATA kamxcfg32<>+50(SB)/1, $16
DATA kamxcfg32<>+51(SB)/1, $8
DATA kamxcfg32<>+52(SB)/1, $16
DATA kamxcfg32<>+53(SB)/1, $16
DATA kamxcfg32<>+54(SB)/1, $16
DATA kamxcfg32<>+55(SB)/1, $16
GLOBL kamxcfg32<>(SB), RODATA|NOPTR, $64

DATA kamxcfg16<>+0(SB)/1, $1
DATA kamxcfg16<>+16(SB)/2, $16
DATA kamxcfg16<>+18(SB)/2, $64
DATA kamxcfg16<>+20(SB)/2, $16
DATA kamxcfg16<>+22(SB)/2, $64
DATA kamxcfg16<>+24(SB)/2, $64
DATA kamxcfg16<>+26(SB)/2, $64
DATA kamxcfg16<>+28(SB)/2, $64
DATA kamxcfg16<>+30(SB)/2, $64
DATA kamxcfg16<>+48(SB)/1, $16
DATA kamxcfg16<>+49(SB)/1, $4
DATA kamxcfg16<>+50(SB)/1, $16
DATA kamxcfg16<>+51(SB)/1, $4
DATA kamxcfg16<>+52(SB)/1, $16
DATA kamxcfg16<>+53(SB)/1, $16
DATA kamxcfg16<>+54(SB)/1, $16
DATA kamxcfg16<>+55(SB)/1, $16
GLOBL kamxcfg16<>(SB), RODATA|NOPTR, $64

// KAMX_SUB: sub-block J's product into C tile C (A, B: its tile loads).
#define KAMX_SUB(A, B, Z, DP) \
	A; \
	B; \
	Z; \
	DP

// KAMX_SCALE: the tokens' isum += sc_J · C tile C (stored at 1024·C(DI)).
#define KAMX_SCALE(C, J) \
	VMOVDQU64 (4096+64*(J))(SI), Z24; \
	VPMULLD (1024*C+0)(DI), Z24, Z27; \
	VPADDD Z27, Z0, Z0; \
	VPMULLD (1024*C+64)(DI), Z24, Z28; \
	VPADDD Z28, Z1, Z1; \
	VPMULLD (1024*C+128)(DI), Z24, Z29; \
	VPADDD Z29, Z2, Z2; \
	VPMULLD (1024*C+192)(DI), Z24, Z30; \
	VPADDD Z30, Z3, Z3; \
	VPMULLD (1024*C+256)(DI), Z24, Z27; \
	VPADDD Z27, Z4, Z4; \
	VPMULLD (1024*C+320)(DI), Z24, Z28; \
	VPADDD Z28, Z5, Z5; \
	VPMULLD (1024*C+384)(DI), Z24, Z29; \
	VPADDD Z29, Z6, Z6; \
	VPMULLD (1024*C+448)(DI), Z24, Z30; \
	VPADDD Z30, Z7, Z7; \
	VPMULLD (1024*C+512)(DI), Z24, Z27; \
	VPADDD Z27, Z8, Z8; \
	VPMULLD (1024*C+576)(DI), Z24, Z28; \
	VPADDD Z28, Z9, Z9; \
	VPMULLD (1024*C+640)(DI), Z24, Z29; \
	VPADDD Z29, Z10, Z10; \
	VPMULLD (1024*C+704)(DI), Z24, Z30; \
	VPADDD Z30, Z11, Z11; \
	VPMULLD (1024*C+768)(DI), Z24, Z27; \
	VPADDD Z27, Z12, Z12; \
	VPMULLD (1024*C+832)(DI), Z24, Z28; \
	VPADDD Z28, Z13, Z13; \
	VPMULLD (1024*C+896)(DI), Z24, Z29; \
	VPADDD Z29, Z14, Z14; \
	VPMULLD (1024*C+960)(DI), Z24, Z30; \
	VPADDD Z30, Z15, Z15

// KAMX_BATCH: sub-blocks J0..J0+3 (their tile loads A0.., B0..) on the
// tiles, stored, and scaled into isum.
#define KAMX_BATCH(A0, B0, A1, B1, A2, B2, A3, B3, J0) \
	KAMX_SUB(A0, B0, AMX_ZERO0, AMX_SU0); \
	KAMX_SUB(A1, B1, AMX_ZERO1, AMX_SU1); \
	KAMX_SUB(A2, B2, AMX_ZERO2, AMX_SU2); \
	KAMX_SUB(A3, B3, AMX_ZERO3, AMX_SU3); \
	AMX_STORE0; \
	AMX_STORE1; \
	AMX_STORE2; \
	AMX_STORE3; \
	KAMX_SCALE(0, J0); \
	KAMX_SCALE(1, J0+1); \
	KAMX_SCALE(2, J0+2); \
	KAMX_SCALE(3, J0+3)

// KAMX_TOK: token M (its activation at ADDR): msum over the bsums (mp in
// Z16-Z23), then KR_FLOAT into its accumulator in memory (d Z25, dmin
// Z26).
#define KAMX_TOK(M, ADDR, IS) \
	VPXORD Z24, Z24, Z24; \
	VPDPWSSD.BCST 260 ADDR, Z16, Z24; \
	VPDPWSSD.BCST 264 ADDR, Z17, Z24; \
	VPDPWSSD.BCST 268 ADDR, Z18, Z24; \
	VPDPWSSD.BCST 272 ADDR, Z19, Z24; \
	VPDPWSSD.BCST 276 ADDR, Z20, Z24; \
	VPDPWSSD.BCST 280 ADDR, Z21, Z24; \
	VPDPWSSD.BCST 284 ADDR, Z22, Z24; \
	VPDPWSSD.BCST 288 ADDR, Z23, Z24; \
	VMOVUPS (64*M)(R15), Z27; \
	VCVTDQ2PS IS, IS; \
	VMULPS.BCST 0 ADDR, Z25, Z28; \
	VFMADD231PS Z28, IS, Z27; \
	VCVTDQ2PS Z24, Z24; \
	VMULPS.BCST 0 ADDR, Z26, Z29; \
	VFNMADD231PS Z29, Z24, Z27; \
	VMOVUPS Z27, (64*M)(R15)

#define KAMX_TOKS \
	KAMX_TOK(0, (R8), Z0); \
	KAMX_TOK(1, (R8)(DX*1), Z1); \
	KAMX_TOK(2, (R8)(DX*2), Z2); \
	KAMX_TOK(3, (R9), Z3); \
	KAMX_TOK(4, (R8)(DX*4), Z4); \
	KAMX_TOK(5, (R9)(DX*2), Z5); \
	KAMX_TOK(6, (R10), Z6); \
	KAMX_TOK(7, (R9)(DX*4), Z7); \
	KAMX_TOK(8, (R8)(DX*8), Z8); \
	KAMX_TOK(9, (R11), Z9); \
	KAMX_TOK(10, (R10)(DX*4), Z10); \
	KAMX_TOK(11, (R9)(DX*8), Z11); \
	KAMX_TOK(12, (R12), Z12); \
	KAMX_TOK(13, (R11)(DX*4), Z13); \
	KAMX_TOK(14, (R10)(DX*8), Z14); \
	KAMX_TOK(15, (R13), Z15)

#define KAMX_ZERO16 \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3; \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPXORD Z6, Z6, Z6; \
	VPXORD Z7, Z7, Z7; \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
	VPXORD Z10, Z10, Z10; \
	VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; \
	VPXORD Z13, Z13, Z13; \
	VPXORD Z14, Z14, Z14; \
	VPXORD Z15, Z15, Z15

#define KAMX_MP \
	VMOVDQU64 5120(SI), Z16; \
	VMOVDQU64 5184(SI), Z17; \
	VMOVDQU64 5248(SI), Z18; \
	VMOVDQU64 5312(SI), Z19; \
	VMOVDQU64 5376(SI), Z20; \
	VMOVDQU64 5440(SI), Z21; \
	VMOVDQU64 5504(SI), Z22; \
	VMOVDQU64 5568(SI), Z23; \
	VMOVUPS 5632(SI), Z25; \
	VMOVUPS 5696(SI), Z26

// func kamxDot*(acc *float32, s *byte, x unsafe.Pointer, xs int, nt, n int, buf *byte)
// As amxDot*, over n unpacked super-blocks and actQ8K activations.
#define KAMX_DOT(CFG, BATCHES) \
	LEAQ CFG(SB), AX; \
	AMX_SETUP; \
kamxtile:; \
	AMX_BASES; \
	MOVQ s+8(FP), SI; \
	MOVQ n+40(FP), CX; \
kamxsb:; \
	KAMX_ZERO16; \
	BATCHES; \
	KAMX_MP; \
	KAMX_TOKS; \
	ADDQ $5760, SI; \
	ADDQ $292, R8; \
	ADDQ $292, R9; \
	ADDQ $292, R10; \
	ADDQ $292, R11; \
	ADDQ $292, R12; \
	ADDQ $292, R13; \
	DECQ CX; \
	JNZ kamxsb; \
	ADDQ $1024, R15; \
	SUBQ $16, BX; \
	JNZ kamxtile; \
	TILERELEASE; \
	VZEROUPPER; \
	RET

#define KAMX_BATCHES32 \
	KAMX_BATCH(KAMX32_A0, KAMX32_B0, KAMX32_A1, KAMX32_B1, KAMX32_A2, KAMX32_B2, KAMX32_A3, KAMX32_B3, 0); \
	KAMX_BATCH(KAMX32_A4, KAMX32_B4, KAMX32_A5, KAMX32_B5, KAMX32_A6, KAMX32_B6, KAMX32_A7, KAMX32_B7, 4)

#define KAMX_BATCHES16 \
	KAMX_BATCH(KAMX16_A0, KAMX16_B0, KAMX16_A1, KAMX16_B1, KAMX16_A2, KAMX16_B2, KAMX16_A3, KAMX16_B3, 0); \
	KAMX_BATCH(KAMX16_A4, KAMX16_B4, KAMX16_A5, KAMX16_B5, KAMX16_A6, KAMX16_B6, KAMX16_A7, KAMX16_B7, 4); \
	KAMX_BATCH(KAMX16_A8, KAMX16_B8, KAMX16_A9, KAMX16_B9, KAMX16_A10, KAMX16_B10, KAMX16_A11, KAMX16_B11, 8); \
	KAMX_BATCH(KAMX16_A12, KAMX16_B12, KAMX16_A13, KAMX16_B13, KAMX16_A14, KAMX16_B14, KAMX16_A15, KAMX16_B15, 12)

// func kamxDot32(acc *float32, s *byte, x unsafe.Pointer, xs int, nt, n int, buf *byte)
TEXT ·kamxDot32(SB), NOSPLIT, $0-56
	KAMX_DOT(kamxcfg32<>, KAMX_BATCHES32)

// func kamxDot16(acc *float32, s *byte, x unsafe.Pointer, xs int, nt, n int, buf *byte)
TEXT ·kamxDot16(SB), NOSPLIT, $0-56
	KAMX_DOT(kamxcfg16<>, KAMX_BATCHES16)
