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
// stage the rows' float16 scales (and minimums).
//
// A dot kernel then takes every token over those blocks: per token and
// block, each activation dword is broadcast to the 8 rows, VPMADDUBSW
// multiplies and adds pairs, four groups add up in int16 (|u| ≤ 31, so
// |Σ| ≤ 4·2·31·127 fits) and VPMADDWD widens; with the token's -o·Σy the
// block's exact integer sum Σ(u-o)·y for all 8 rows, converted once:
// acc += float(Σ)·(d·dx) (then + m·s), in block order.

// ---- unpacking --------------------------------------------------------------
//
// R8-R11 = rows 0, 2, 4, 6 of the current block; R12 = rb; DI = the block's
// scratch; BX = its staging; DX = the prefetch pointer; CX = blocks left;
// Y15 = 0x0f bytes.

#define R8_UNPACK_PROLOGUE \
	MOVQ dst+0(FP), DI; \
	MOVQ w+8(FP), R8; \
	MOVQ rb+16(FP), R12; \
	MOVQ n+24(FP), CX; \
	MOVQ pf+32(FP), DX; \
	LEAQ (R8)(R12*2), R9; \
	LEAQ (R9)(R12*2), R10; \
	LEAQ (R10)(R12*2), R11; \
	MOVQ CX, BX; \
	IMULQ $320, BX; \
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
// lines) and steps to the next block.
#define R8_NEXT(BYTES) \
	PREFETCHT0 0(DX); \
	PREFETCHT0 64(DX); \
	PREFETCHT0 128(DX); \
	ADDQ $(8*BYTES), DX; \
	ADDQ $BYTES, R8; \
	ADDQ $BYTES, R9; \
	ADDQ $BYTES, R10; \
	ADDQ $BYTES, R11; \
	ADDQ $320, DI; \
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

// R8_SCALES converts the staged float16 scales (and with MIN minimums).
#define R8_SCALES(MIN) \
	MOVQ dst+0(FP), DI; \
	MOVQ n+24(FP), CX; \
r8scales:; \
	VCVTPH2PS 0(R15), Y8; \
	VMOVUPS Y8, 256(DI); \
	MIN; \
	ADDQ $32, R15; \
	ADDQ $320, DI; \
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

#define R8_DOT(TOK) \
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
	ADDQ $320, SI; \
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
	ADDQ $320, SI; \
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

// ---- the functions ----------------------------------------------------------

// func r8UnpQ4_0(dst *byte, w unsafe.Pointer, rb, n int, pf unsafe.Pointer)
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

// func r8UnpQ4_1(dst *byte, w unsafe.Pointer, rb, n int, pf unsafe.Pointer)
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

// func r8UnpQ5_0(dst *byte, w unsafe.Pointer, rb, n int, pf unsafe.Pointer)
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

// func r8UnpQ5_1(dst *byte, w unsafe.Pointer, rb, n int, pf unsafe.Pointer)
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

// func r8UnpMXFP4(dst *byte, w unsafe.Pointer, rb, n int, pf unsafe.Pointer)
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

TEXT ·r8DotB(SB), NOSPLIT, $0-64
	R8_DOT(R8_TOK)

TEXT ·r8DotMB(SB), NOSPLIT, $0-64
	R8_DOT(R8_TOKM)

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
