//go:build goexperiment.simd && amd64

#include "textflag.h"

// AVX-512 integer tiles for the K-quants (see quant_avx512_amd64.go).
//
// Two phases per chunk of super-blocks. An unpacker per format decodes four
// weight rows into a scratch layout shared by all K formats, 512 bytes per
// row and block:
//     0: u[256]  the quants as unsigned bytes 0..63, in value order
//   256: sc01    32 int16: the 16-value group scales, laid out for the
//                packed sums of chunks 0 and 1 (see KPAIR*)
//   320: sc23    the same for chunks 2 and 3
//   384: dv      16 float32: D1 ×8, D2 ×8
//   448: m16     16 int16: each group's min coefficient
// so that a row · token block product is
//     dx·(D1·Σ_g sc_g·Σ_{i∈g} u_i·y_i + D2·Σ_g m_g·bsum_g).
// The dot kernels then run that layout against 4 (or 1) tokens: each row's
// unpacked block is loaded once and used for every token.
//
// Per row, token and block the instruction sequence is fixed (KPAIR*), so
// a product does not depend on how many rows or tokens share the tile; the
// VNNI and AVX-512BW sequences compute the same exact integers.

// ---- unpacking -------------------------------------------------------------
//
// Unpackers: DI = dst, R8-R11 = the four rows' current blocks, CX = blocks.
// Each row's scratch is at OFF(DI).

// KFINISH writes a row-block's scales from Z1 (SG: 16 group scales, then 16
// group min coefficients, int16) and Y2 (f16 words: D1 ×8, D2 ×8).
// Z27, Z28 hold the sc01 and sc23 word indexes.
#define KFINISH(OFF) \
	VPERMW Z1, Z27, Z3; \
	VMOVDQU64 Z3, OFF+256(DI); \
	VPERMW Z1, Z28, Z3; \
	VMOVDQU64 Z3, OFF+320(DI); \
	VEXTRACTI64X4 $1, Z1, OFF+448(DI); \
	VCVTPH2PS Y2, Z3; \
	VMOVUPS Z3, OFF+384(DI)

// KDV broadcasts f16 words AX (D1) and BX (D2) into Y2 = [D1 ×8, D2 ×8].
#define KDV \
	VMOVD AX, X2; \
	VPBROADCASTW X2, X2; \
	VMOVD BX, X3; \
	VPBROADCASTW X3, X3; \
	VINSERTI128 $1, X3, Y2, Y2

#define KCONST \
	VMOVDQU64 kIdx01<>(SB), Z27; \
	VMOVDQU64 kIdx23<>(SB), Z28; \
	MOVL $0x30303030, AX; \
	VPBROADCASTD AX, Z29; \
	MOVL $0x0f0f0f0f, AX; \
	VPBROADCASTD AX, Z30; \
	MOVL $0x10101010, AX; \
	VPBROADCASTD AX, Z31

// Q4K_QS: Q4_K's qs[128] at QOFF(W). Chunk c of 64 values is the low
// nibbles of qs[32c:32c+32], then their high nibbles.
#define Q4K_QS(W, QOFF, OFF) \
	VMOVDQU64 QOFF(W), Z4; \
	VPSRLW $4, Z4, Z5; \
	VPANDD Z30, Z4, Z4; \
	VPANDD Z30, Z5, Z5; \
	VSHUFI64X2 $0x44, Z5, Z4, Z6; \
	VMOVDQU64 Z6, OFF+0(DI); \
	VSHUFI64X2 $0xEE, Z5, Z4, Z6; \
	VMOVDQU64 Z6, OFF+64(DI); \
	VMOVDQU64 QOFF+64(W), Z4; \
	VPSRLW $4, Z4, Z5; \
	VPANDD Z30, Z4, Z4; \
	VPANDD Z30, Z5, Z5; \
	VSHUFI64X2 $0x44, Z5, Z4, Z6; \
	VMOVDQU64 Z6, OFF+128(DI); \
	VSHUFI64X2 $0xEE, Z5, Z4, Z6; \
	VMOVDQU64 Z6, OFF+192(DI)

// K4SCALES decodes the 6-bit scales and mins of a Q4_K/Q5_K block (12
// bytes at 4(W)) into Z1 = SG (Z26: the index spreading scale and min j
// over groups 2j, 2j+1) and its d, dmin into Y2 (D2 = -dmin).
// Bytes A = s[0:4], B = s[4:8], C = s[8:12]: scales 0-3 are A&63, mins 0-3
// B&63; scales 4-7 are C's low nibbles with A's top two bits above them,
// mins 4-7 C's high nibbles with B's top two bits.
#define K4SCALES(W) \
	MOVL 4(W), AX; \
	MOVL 8(W), BX; \
	MOVL 12(W), DX; \
	MOVL AX, SI; \
	SHRL $2, SI; \
	ANDL $0x30303030, SI; \
	ANDL $0x3f3f3f3f, AX; \
	MOVL DX, R12; \
	ANDL $0x0f0f0f0f, R12; \
	ORL SI, R12; \
	MOVL BX, SI; \
	SHRL $2, SI; \
	ANDL $0x30303030, SI; \
	ANDL $0x3f3f3f3f, BX; \
	SHRL $4, DX; \
	ANDL $0x0f0f0f0f, DX; \
	ORL SI, DX; \
	SHLQ $32, R12; \
	ORQ R12, AX; \
	SHLQ $32, DX; \
	ORQ DX, BX; \
	VMOVQ AX, X1; \
	VPINSRQ $1, BX, X1, X1; \
	VPMOVZXBW X1, Y1; \
	VPERMW Z1, Z26, Z1; \
	MOVWLZX 0(W), AX; \
	MOVWLZX 2(W), BX; \
	XORL $0x8000, BX; \
	KDV

#define Q4K_ROW(W, OFF) \
	Q4K_QS(W, 16, OFF); \
	K4SCALES(W); \
	KFINISH(OFF)

#define UNPACK_PROLOGUE \
	MOVQ dst+0(FP), DI; \
	MOVQ w0+8(FP), R8; \
	MOVQ w1+16(FP), R9; \
	MOVQ w2+24(FP), R10; \
	MOVQ w3+32(FP), R11; \
	KCONST; \
	MOVQ n+40(FP), CX

// Dot kernel prologues (defined here, above every TEXT, for go vet).
#define DOT4_PROLOGUE \
	MOVQ acc+0(FP), AX; \
	MOVQ s+8(FP), SI; \
	MOVQ x0+16(FP), R8; \
	MOVQ x1+24(FP), R9; \
	MOVQ x2+32(FP), R10; \
	MOVQ x3+40(FP), R11; \
	MOVQ n+48(FP), CX; \
	MOVL $0x00010001, DX; \
	VPBROADCASTD DX, Z26; \
	LOAD16

#define DOT1_PROLOGUE \
	MOVQ acc+0(FP), AX; \
	MOVQ s+8(FP), SI; \
	MOVQ x0+16(FP), R8; \
	MOVQ n+24(FP), CX; \
	MOVL $0x00010001, DX; \
	VPBROADCASTD DX, Z26; \
	VMOVUPS 0(AX), Z0; VMOVUPS 64(AX), Z1; VMOVUPS 128(AX), Z2; VMOVUPS 192(AX), Z3

#define FUNPACK_PROLOGUE \
	MOVQ dst+0(FP), DI; \
	MOVQ w0+8(FP), R8; \
	MOVQ w1+16(FP), R9; \
	MOVQ w2+24(FP), R10; \
	MOVQ w3+32(FP), R11; \
	MOVQ n+40(FP), R13; \
	MOVL $0x0f0f0f0f, AX; \
	VPBROADCASTD AX, Z30; \
	MOVL $0x10101010, AX; \
	VPBROADCASTD AX, Z31; \
	MOVQ R13, CX; \
	SHRQ $1, CX

#define FDOT_PROLOGUE \
	MOVQ acc+0(FP), AX; \
	MOVQ s+8(FP), SI; \
	MOVQ x0+16(FP), R8; \
	MOVQ x1+24(FP), R9; \
	MOVQ x2+32(FP), R10; \
	MOVQ x3+40(FP), R11; \
	MOVQ n+48(FP), CX; \
	MOVQ o+56(FP), DX; \
	VMOVD DX, X27; \
	VPBROADCASTB X27, Z27; \
	MOVL $0x00010001, DX; \
	VPBROADCASTD DX, Z26; \
	VPXORD Z28, Z28, Z28; \
	MOVL $0xff00, DX; \
	KMOVW DX, K3; \
	LOAD16

// FU_PROLOGUE: the fused one-token kernels' (see below).
#define FU_PROLOGUE \
	MOVQ acc+0(FP), AX; \
	MOVQ w0+8(FP), R8; \
	MOVQ w1+16(FP), R9; \
	MOVQ w2+24(FP), R10; \
	MOVQ w3+32(FP), R11; \
	MOVQ x+40(FP), DI; \
	MOVQ n+48(FP), CX; \
	MOVQ o+56(FP), DX; \
	MOVQ pf+64(FP), R12; \
	VMOVD DX, X27; \
	VPBROADCASTB X27, Z27; \
	MOVL $0x00010001, DX; \
	VPBROADCASTD DX, Z26; \
	VPXORD Z28, Z28, Z28; \
	MOVL $0xff00, DX; \
	KMOVW DX, K3; \
	VMOVDQU64 fuShifts<>(SB), Z29; \
	MOVL $0x0f0f0f0f, DX; \
	VPBROADCASTD DX, Z30; \
	MOVL $0x10101010, DX; \
	VPBROADCASTD DX, Z31; \
	VMOVUPS 0(AX), Z0; VMOVUPS 64(AX), Z1; VMOVUPS 128(AX), Z2; VMOVUPS 192(AX), Z3

// KFU_PROLOGUE: the fused one-token K kernels' (see below).
#define KFU_PROLOGUE \
	MOVQ acc+0(FP), R13; \
	MOVQ w0+8(FP), R8; \
	MOVQ w1+16(FP), R9; \
	MOVQ w2+24(FP), R10; \
	MOVQ w3+32(FP), R11; \
	MOVQ x+40(FP), DI; \
	MOVQ n+48(FP), CX; \
	MOVQ pf+56(FP), R14; \
	KCONST; \
	VMOVUPS 0(R13), Z8; VMOVUPS 64(R13), Z9; VMOVUPS 128(R13), Z10; VMOVUPS 192(R13), Z11

// func unpackQ4K(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)
TEXT ·unpackQ4K(SB), NOSPLIT, $0-48
	UNPACK_PROLOGUE
	VMOVDQU64 kIdxK4<>(SB), Z26

q4kloop:
	Q4K_ROW(R8, 0)
	Q4K_ROW(R9, 512)
	Q4K_ROW(R10, 1024)
	Q4K_ROW(R11, 1536)
	ADDQ $144, R8
	ADDQ $144, R9
	ADDQ $144, R10
	ADDQ $144, R11
	ADDQ $2048, DI
	DECQ CX
	JNZ  q4kloop
	VZEROUPPER
	RET

// Q6_K: ql[128], qh[64], scales[16] int8, d. Half h of 128 values: ql at
// 64h, qh at 128+32h. Value 32k+l (k<4, l<32) takes the low (k<2) or high
// nibble of ql[32(k%2)+l] and bits 2k, 2k+1 of qh[l] on top. With H =
// [qh, qh>>2] (64 bytes) the top bits of chunk 2h are (H<<4)&0x30 and those
// of chunk 2h+1 are H&0x30 (word shifts: the masks keep only bits that came
// from the same byte).
#define Q6K_HALF(W, H, OFF) \
	VMOVDQU64 (64*H)(W), Z4; \
	VMOVDQU (128+32*H)(W), Y5; \
	VPSRLW $2, Y5, Y6; \
	VINSERTI64X4 $1, Y6, Z5, Z5; \
	VPSLLW $4, Z5, Z6; \
	VPANDD Z29, Z6, Z6; \
	VPANDD Z29, Z5, Z5; \
	VPANDD Z30, Z4, Z7; \
	VPORD Z6, Z7, Z7; \
	VMOVDQU64 Z7, OFF+(128*H)(DI); \
	VPSRLW $4, Z4, Z4; \
	VPANDD Z30, Z4, Z4; \
	VPORD Z5, Z4, Z4; \
	VMOVDQU64 Z4, OFF+(128*H+64)(DI)

// Q6K_ROW: u = q+32; group g's scale is scales[g], its min coefficient
// 32·scales[g], D1 = d, D2 = -d.
#define Q6K_ROW(W, OFF) \
	Q6K_HALF(W, 0, OFF); \
	Q6K_HALF(W, 1, OFF); \
	VPMOVSXBW 192(W), Y1; \
	VPSLLW $5, Y1, Y3; \
	VINSERTI64X4 $1, Y3, Z1, Z1; \
	MOVWLZX 208(W), AX; \
	MOVL AX, BX; \
	XORL $0x8000, BX; \
	KDV; \
	KFINISH(OFF)

// func unpackQ6K(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)
TEXT ·unpackQ6K(SB), NOSPLIT, $0-48
	UNPACK_PROLOGUE

q6kloop:
	Q6K_ROW(R8, 0)
	Q6K_ROW(R9, 512)
	Q6K_ROW(R10, 1024)
	Q6K_ROW(R11, 1536)
	ADDQ $210, R8
	ADDQ $210, R9
	ADDQ $210, R10
	ADDQ $210, R11
	ADDQ $2048, DI
	DECQ CX
	JNZ  q6kloop
	VZEROUPPER
	RET

// Q5_K: d, dmin, scales[12], qh[32], qs[128]: Q4_K's nibbles at 48, with
// qh[l] bit c' on top of value 32c'+l of each chunk pair. H = [qh, qh>>1]
// has chunk c's bits at bit 2c of each byte; shifted to bit 4 and ORed in
// (VPTERNLOGD 0xF8: A | B&C).
#define Q5K_CHUNK(SRC, OFF) \
	VPTERNLOGD $0xF8, Z31, Z9, SRC; \
	VMOVDQU64 SRC, OFF(DI)

#define Q5K_ROW(W, OFF) \
	VMOVDQU 16(W), Y8; \
	VPSRLW $1, Y8, Y9; \
	VINSERTI64X4 $1, Y9, Z8, Z8; \
	VMOVDQU64 48(W), Z4; \
	VPSRLW $4, Z4, Z5; \
	VPANDD Z30, Z4, Z4; \
	VPANDD Z30, Z5, Z5; \
	VSHUFI64X2 $0x44, Z5, Z4, Z6; \
	VPSLLW $4, Z8, Z9; \
	Q5K_CHUNK(Z6, OFF+0); \
	VSHUFI64X2 $0xEE, Z5, Z4, Z6; \
	VPSLLW $2, Z8, Z9; \
	Q5K_CHUNK(Z6, OFF+64); \
	VMOVDQU64 112(W), Z4; \
	VPSRLW $4, Z4, Z5; \
	VPANDD Z30, Z4, Z4; \
	VPANDD Z30, Z5, Z5; \
	VSHUFI64X2 $0x44, Z5, Z4, Z6; \
	VMOVDQA64 Z8, Z9; \
	Q5K_CHUNK(Z6, OFF+128); \
	VSHUFI64X2 $0xEE, Z5, Z4, Z6; \
	VPSRLW $2, Z8, Z9; \
	Q5K_CHUNK(Z6, OFF+192); \
	K4SCALES(W); \
	KFINISH(OFF)

// func unpackQ5K(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)
TEXT ·unpackQ5K(SB), NOSPLIT, $0-48
	UNPACK_PROLOGUE
	VMOVDQU64 kIdxK4<>(SB), Z26

q5kloop:
	Q5K_ROW(R8, 0)
	Q5K_ROW(R9, 512)
	Q5K_ROW(R10, 1024)
	Q5K_ROW(R11, 1536)
	ADDQ $176, R8
	ADDQ $176, R9
	ADDQ $176, R10
	ADDQ $176, R11
	ADDQ $2048, DI
	DECQ CX
	JNZ  q5kloop
	VZEROUPPER
	RET

// Q2BITS: the 2-bit fields of Q2_K and Q3_K, qs[64] at QOFF(W). Value
// 128h+32k+l is field k of qs[32h+l]: with QQ = [Q, Q>>2] for Q =
// qs[32h:32h+32], chunk 2h is QQ&3 and chunk 2h+1 (QQ>>4)&3. Z25 = 0x03
// bytes. Leaves chunk 2h in Z6, 2h+1 in Z7.
#define Q2BITS(W, QOFF, H) \
	VMOVDQU (QOFF+32*H)(W), Y4; \
	VPSRLW $2, Y4, Y5; \
	VINSERTI64X4 $1, Y5, Z4, Z4; \
	VPANDD Z25, Z4, Z6; \
	VPSRLW $4, Z4, Z7; \
	VPANDD Z25, Z7, Z7

// Q2_K: scales[16], qs[64], d, dmin. u = q; group g's scale and min are
// the nibbles of scales[g]; D1 = d, D2 = -dmin.
#define Q2K_ROW(W, OFF) \
	Q2BITS(W, 16, 0); \
	VMOVDQU64 Z6, OFF+0(DI); \
	VMOVDQU64 Z7, OFF+64(DI); \
	Q2BITS(W, 16, 1); \
	VMOVDQU64 Z6, OFF+128(DI); \
	VMOVDQU64 Z7, OFF+192(DI); \
	VMOVDQU 0(W), X1; \
	VPSRLW $4, X1, X3; \
	VPANDD X30, X1, X1; \
	VPANDD X30, X3, X3; \
	VPMOVZXBW X1, Y1; \
	VPMOVZXBW X3, Y3; \
	VINSERTI64X4 $1, Y3, Z1, Z1; \
	MOVWLZX 80(W), AX; \
	MOVWLZX 82(W), BX; \
	XORL $0x8000, BX; \
	KDV; \
	KFINISH(OFF)

// func unpackQ2K(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)
TEXT ·unpackQ2K(SB), NOSPLIT, $0-48
	UNPACK_PROLOGUE
	MOVL $0x03030303, AX
	VPBROADCASTD AX, Z25

q2kloop:
	Q2K_ROW(R8, 0)
	Q2K_ROW(R9, 512)
	Q2K_ROW(R10, 1024)
	Q2K_ROW(R11, 1536)
	ADDQ $84, R8
	ADDQ $84, R9
	ADDQ $84, R10
	ADDQ $84, R11
	ADDQ $2048, DI
	DECQ CX
	JNZ  q2kloop
	VZEROUPPER
	RET

// Q3_K: hmask[32], qs[64], scales[12], d. u = q+4 = field | 4·hmask bit
// (value i's bit is hmask[i%32] bit i/32, chunk c's bits 2c and 2c+1):
// with HM = [hm, hm>>1], chunk c's bit sits at bit 2c, moved to bit 2
// (Z24 = 0x04 bytes).
#define Q3K_HI(SRC, OFF) \
	VPTERNLOGD $0xF8, Z24, Z9, SRC; \
	VMOVDQU64 SRC, OFF(DI)

// Q3K_SCALES: sixteen 6-bit scales stored +32: scale j's low nibble is
// nibble j/8 of byte j%8, its top bits bits 2(j/4) of byte 8+j%4. With a =
// bytes 0-7 and b = bytes 8-11: scales 0-7 are a's low nibbles | (b&3,
// (b>>2)&3 per byte)<<4, scales 8-15 a's high nibbles | ((b>>4)&3,
// (b>>6)&3)<<4. Group g's scale is scale g-32, its min coefficient 4·that.
#define Q3K_SCALES(W) \
	MOVQ 96(W), AX; \
	MOVL 104(W), BX; \
	MOVQ $0x0f0f0f0f0f0f0f0f, R12; \
	MOVQ AX, DX; \
	SHRQ $4, DX; \
	ANDQ R12, AX; \
	ANDQ R12, DX; \
	MOVL BX, SI; \
	SHRL $2, SI; \
	ANDL $0x03030303, SI; \
	SHLQ $32, SI; \
	MOVL BX, R12; \
	ANDL $0x03030303, R12; \
	ORQ R12, SI; \
	SHLQ $4, SI; \
	ORQ SI, AX; \
	MOVL BX, SI; \
	SHRL $6, SI; \
	ANDL $0x03030303, SI; \
	SHLQ $32, SI; \
	SHRL $4, BX; \
	ANDL $0x03030303, BX; \
	ORQ BX, SI; \
	SHLQ $4, SI; \
	ORQ SI, DX; \
	VMOVQ AX, X1; \
	VPINSRQ $1, DX, X1, X1; \
	VPMOVZXBW X1, Y1; \
	VPSUBW Y23, Y1, Y1; \
	VPSLLW $2, Y1, Y3; \
	VINSERTI64X4 $1, Y3, Z1, Z1; \
	MOVWLZX 108(W), AX; \
	MOVL AX, BX; \
	XORL $0x8000, BX; \
	KDV

#define Q3K_ROW(W, OFF) \
	VMOVDQU 0(W), Y8; \
	VPSRLW $1, Y8, Y9; \
	VINSERTI64X4 $1, Y9, Z8, Z8; \
	Q2BITS(W, 32, 0); \
	VPSLLW $2, Z8, Z9; \
	Q3K_HI(Z6, OFF+0); \
	VMOVDQA64 Z8, Z9; \
	Q3K_HI(Z7, OFF+64); \
	Q2BITS(W, 32, 1); \
	VPSRLW $2, Z8, Z9; \
	Q3K_HI(Z6, OFF+128); \
	VPSRLW $4, Z8, Z9; \
	Q3K_HI(Z7, OFF+192); \
	Q3K_SCALES(W); \
	KFINISH(OFF)

// func unpackQ3K(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)
TEXT ·unpackQ3K(SB), NOSPLIT, $0-48
	UNPACK_PROLOGUE
	MOVL $0x03030303, AX
	VPBROADCASTD AX, Z25
	MOVL $0x04040404, AX
	VPBROADCASTD AX, Z24
	MOVL $0x00200020, AX
	VPBROADCASTD AX, Z23

q3kloop:
	Q3K_ROW(R8, 0)
	Q3K_ROW(R9, 512)
	Q3K_ROW(R10, 1024)
	Q3K_ROW(R11, 1536)
	ADDQ $110, R8
	ADDQ $110, R9
	ADDQ $110, R10
	ADDQ $110, R11
	ADDQ $2048, DI
	DECQ CX
	JNZ  q3kloop
	VZEROUPPER
	RET

// ---- dot kernels -----------------------------------------------------------
//
// SI = scratch, R8-R11 = the tokens' current actQ8K blocks (d, y[256],
// bsums[16]), CX = blocks. Accumulator of token j, row i is Z(4j+i), kept
// in acc (16 floats each) between calls. Per row: Z16-Z19 = u, Z25 = dv,
// Y24 = m16.

// KPAIRV: one row × one token × one block with VNNI. The four 64-value
// chunk sums t_c (16 int32, each over 4 values, |t| ≤ 4·63·127) pack
// pairwise to int16 (lane L of pack(t0,t1) holds groups L and 4+L), are
// scaled by group and summed; the min term takes the bsums.
#define KPAIRV(X, OFF, ACC) \
	VPXORD Z20, Z20, Z20; \
	VPDPBUSD 4(X), Z16, Z20; \
	VPXORD Z21, Z21, Z21; \
	VPDPBUSD 68(X), Z17, Z21; \
	VPXORD Z22, Z22, Z22; \
	VPDPBUSD 132(X), Z18, Z22; \
	VPXORD Z23, Z23, Z23; \
	VPDPBUSD 196(X), Z19, Z23; \
	VPACKSSDW Z21, Z20, Z20; \
	VPACKSSDW Z23, Z22, Z22; \
	VPMADDWD OFF+256(SI), Z20, Z20; \
	VPDPWSSD OFF+320(SI), Z22, Z20; \
	KCOMBINE(X, ACC)

// KPAIRB: KPAIRV with AVX-512BW only (Z26 = int16 ones): the same sums.
#define KPAIRB(X, OFF, ACC) \
	VPMADDUBSW 4(X), Z16, Z20; \
	VPMADDWD Z26, Z20, Z20; \
	VPMADDUBSW 68(X), Z17, Z21; \
	VPMADDWD Z26, Z21, Z21; \
	VPMADDUBSW 132(X), Z18, Z22; \
	VPMADDWD Z26, Z22, Z22; \
	VPMADDUBSW 196(X), Z19, Z23; \
	VPMADDWD Z26, Z23, Z23; \
	VPACKSSDW Z21, Z20, Z20; \
	VPACKSSDW Z23, Z22, Z22; \
	VPMADDWD OFF+256(SI), Z20, Z20; \
	VPMADDWD OFF+320(SI), Z22, Z22; \
	VPADDD Z22, Z20, Z20; \
	KCOMBINE(X, ACC)

// KCOMBINE: Z20 holds the scaled sums (16 int32). Fold them to 8 lanes and
// put the 8 min-term lanes above: ACC += float([S, M])·[D1, D2]·dx.
#define KCOMBINE(X, ACC) \
	VPMADDWD 260(X), Y24, Y21; \
	VEXTRACTI64X4 $1, Z20, Y22; \
	VPADDD Y22, Y20, Y22; \
	VINSERTI64X4 $1, Y21, Z22, Z22; \
	VCVTDQ2PS Z22, Z22; \
	VMULPS.BCST (X), Z25, Z23; \
	VFMADD231PS Z23, Z22, ACC

#define KROWLOAD(OFF) \
	VMOVDQU64 OFF+0(SI), Z16; \
	VMOVDQU64 OFF+64(SI), Z17; \
	VMOVDQU64 OFF+128(SI), Z18; \
	VMOVDQU64 OFF+192(SI), Z19; \
	VMOVUPS OFF+384(SI), Z25; \
	VMOVDQU64 OFF+448(SI), Y24

#define KROW4(PAIR, OFF, A0, A1, A2, A3) \
	KROWLOAD(OFF); \
	PAIR(R8, OFF, A0); \
	PAIR(R9, OFF, A1); \
	PAIR(R10, OFF, A2); \
	PAIR(R11, OFF, A3)

#define LOAD16 \
	VMOVUPS 0(AX), Z0; VMOVUPS 64(AX), Z1; VMOVUPS 128(AX), Z2; VMOVUPS 192(AX), Z3; \
	VMOVUPS 256(AX), Z4; VMOVUPS 320(AX), Z5; VMOVUPS 384(AX), Z6; VMOVUPS 448(AX), Z7; \
	VMOVUPS 512(AX), Z8; VMOVUPS 576(AX), Z9; VMOVUPS 640(AX), Z10; VMOVUPS 704(AX), Z11; \
	VMOVUPS 768(AX), Z12; VMOVUPS 832(AX), Z13; VMOVUPS 896(AX), Z14; VMOVUPS 960(AX), Z15

#define STORE16 \
	VMOVUPS Z0, 0(AX); VMOVUPS Z1, 64(AX); VMOVUPS Z2, 128(AX); VMOVUPS Z3, 192(AX); \
	VMOVUPS Z4, 256(AX); VMOVUPS Z5, 320(AX); VMOVUPS Z6, 384(AX); VMOVUPS Z7, 448(AX); \
	VMOVUPS Z8, 512(AX); VMOVUPS Z9, 576(AX); VMOVUPS Z10, 640(AX); VMOVUPS Z11, 704(AX); \
	VMOVUPS Z12, 768(AX); VMOVUPS Z13, 832(AX); VMOVUPS Z14, 896(AX); VMOVUPS Z15, 960(AX)

#define DOT4_STEP(PAIR) \
	KROW4(PAIR, 0, Z0, Z4, Z8, Z12); \
	KROW4(PAIR, 512, Z1, Z5, Z9, Z13); \
	KROW4(PAIR, 1024, Z2, Z6, Z10, Z14); \
	KROW4(PAIR, 1536, Z3, Z7, Z11, Z15); \
	ADDQ $2048, SI; \
	ADDQ $292, R8; \
	ADDQ $292, R9; \
	ADDQ $292, R10; \
	ADDQ $292, R11

// func kDot4VNNI(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n int)
TEXT ·kDot4VNNI(SB), NOSPLIT, $0-56
	DOT4_PROLOGUE

kd4vloop:
	DOT4_STEP(KPAIRV)
	DECQ CX
	JNZ  kd4vloop
	STORE16
	VZEROUPPER
	RET

// func kDot4BW(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n int)
TEXT ·kDot4BW(SB), NOSPLIT, $0-56
	DOT4_PROLOGUE

kd4bloop:
	DOT4_STEP(KPAIRB)
	DECQ CX
	JNZ  kd4bloop
	STORE16
	VZEROUPPER
	RET

#define DOT1_STEP(PAIR) \
	KROWLOAD(0); \
	PAIR(R8, 0, Z0); \
	KROWLOAD(512); \
	PAIR(R8, 512, Z1); \
	KROWLOAD(1024); \
	PAIR(R8, 1024, Z2); \
	KROWLOAD(1536); \
	PAIR(R8, 1536, Z3); \
	ADDQ $2048, SI; \
	ADDQ $292, R8

#define DOT1_EPILOGUE \
	VMOVUPS Z0, 0(AX); VMOVUPS Z1, 64(AX); VMOVUPS Z2, 128(AX); VMOVUPS Z3, 192(AX); \
	VZEROUPPER; \
	RET

// func kDot1VNNI(acc *[256]float32, s *byte, x0 unsafe.Pointer, n int)
TEXT ·kDot1VNNI(SB), NOSPLIT, $0-32
	DOT1_PROLOGUE

kd1vloop:
	DOT1_STEP(KPAIRV)
	DECQ CX
	JNZ  kd1vloop
	DOT1_EPILOGUE

// func kDot1BW(acc *[256]float32, s *byte, x0 unsafe.Pointer, n int)
TEXT ·kDot1BW(SB), NOSPLIT, $0-32
	DOT1_PROLOGUE

kd1bloop:
	DOT1_STEP(KPAIRB)
	DECQ CX
	JNZ  kd1bloop
	DOT1_EPILOGUE

// ---- 32-value blocks (actQ8x32) ----------------------------------------
//
// Scratch per 64-value chunk (two blocks), row i at 192·i, chunks 768
// bytes apart:
//     0: u[64]  unsigned quants; the value is u - o (o per format) or, for
//               the types with a minimum, d·u + m
//    64: dw     16 float32: block 0's scale ×8, block 1's ×8
//   128: mv     16 float32: block 0's m, 0 ×7, block 1's m, 0 ×7
// An odd last block leaves the second half zero.

// FBLK_* decode one block at W into half OFF (row and half offset) of
// the current chunk at DI. Z30 = 0x0f bytes, Z31 = 0x10 bytes.

// F_NIBBLES: the 16 bytes at OFF(W) as 32 nibble values in Y4.
#define F_NIBBLES(W, QOFF) \
	VMOVDQU QOFF(W), X4; \
	VPSRLW $4, X4, X5; \
	VINSERTI128 $1, X5, Y4, Y4; \
	VPANDD Y30, Y4, Y4

// F_D16: the f16 at DOFF(W), ×8, as float32 at OFF+64.
#define F_D16(W, DOFF, OFF) \
	VPBROADCASTW DOFF(W), X6; \
	VCVTPH2PS X6, Y6; \
	VMOVUPS Y6, OFF+64(DI)

// F_M16: the f16 min at MOFF(W) into lane 0 of mv (the other 7 zero).
#define F_M16(W, MOFF, OFF) \
	MOVWLZX MOFF(W), AX; \
	VMOVD AX, X7; \
	VCVTPH2PS X7, Y7; \
	VMOVUPS Y7, OFF+128(DI)

// F_QH: fifth bits, bit j of the u32 at HOFF(W) onto value j (Y4).
#define F_QH(W, HOFF) \
	MOVL HOFF(W), AX; \
	KMOVD AX, K1; \
	VMOVDQU8.Z Y31, K1, Y6; \
	VPORD Y6, Y4, Y4

#define FBLK_Q4_0(W, OFF) \
	F_NIBBLES(W, 2); \
	VMOVDQU Y4, OFF(DI); \
	F_D16(W, 0, OFF)

#define FBLK_Q4_1(W, OFF) \
	F_NIBBLES(W, 4); \
	VMOVDQU Y4, OFF(DI); \
	F_D16(W, 0, OFF); \
	F_M16(W, 2, OFF)

#define FBLK_Q5_0(W, OFF) \
	F_NIBBLES(W, 6); \
	F_QH(W, 2); \
	VMOVDQU Y4, OFF(DI); \
	F_D16(W, 0, OFF)

#define FBLK_Q5_1(W, OFF) \
	F_NIBBLES(W, 8); \
	F_QH(W, 4); \
	VMOVDQU Y4, OFF(DI); \
	F_D16(W, 0, OFF); \
	F_M16(W, 2, OFF)

// IQ4_NL: u = kvaluesIQ4NL[q]+128 by table lookup (Y29).
#define FBLK_IQ4NL(W, OFF) \
	F_NIBBLES(W, 2); \
	VPSHUFB Y4, Y29, Y4; \
	VMOVDQU Y4, OFF(DI); \
	F_D16(W, 0, OFF)

// MXFP4: u = kvaluesMXFP4[q]+12 (Y29); the E8M0 byte e gives the float
// 2^(e-128): bits (e-1)<<23, or the subnormal 0x200000<<e for e < 2.
#define FBLK_MXFP4(W, OFF) \
	F_NIBBLES(W, 1); \
	VPSHUFB Y4, Y29, Y4; \
	VMOVDQU Y4, OFF(DI); \
	MOVBLZX 0(W), AX; \
	LEAL -1(AX), BX; \
	SHLL $23, BX; \
	MOVL AX, DX; \
	SHLL $21, DX; \
	ADDL $0x200000, DX; \
	CMPL AX, $2; \
	CMOVLCS DX, BX; \
	VMOVD BX, X6; \
	VPBROADCASTD X6, Y6; \
	VMOVUPS Y6, OFF+64(DI)

#define FROW4(BLK, H) \
	BLK(R8, H); \
	BLK(R9, 192+H); \
	BLK(R10, 384+H); \
	BLK(R11, 576+H)

#define FADV(BYTES) \
	ADDQ $BYTES, R8; \
	ADDQ $BYTES, R9; \
	ADDQ $BYTES, R10; \
	ADDQ $BYTES, R11

// FZERO_HALF1 clears the second half (u, dw, mv) of the chunk at DI.
#define FZERO_HALF1 \
	VPXORD Y6, Y6, Y6; \
	VMOVDQU Y6, 32(DI); VMOVDQU Y6, 96(DI); VMOVDQU Y6, 160(DI); \
	VMOVDQU Y6, 224(DI); VMOVDQU Y6, 288(DI); VMOVDQU Y6, 352(DI); \
	VMOVDQU Y6, 416(DI); VMOVDQU Y6, 480(DI); VMOVDQU Y6, 544(DI); \
	VMOVDQU Y6, 608(DI); VMOVDQU Y6, 672(DI); VMOVDQU Y6, 736(DI)

// func unpackQ4_0(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)
TEXT ·unpackQ4_0(SB), NOSPLIT, $0-48
	FUNPACK_PROLOGUE
	JZ   q40tail
q40loop:
	FROW4(FBLK_Q4_0, 0)
	FADV(18)
	FROW4(FBLK_Q4_0, 32)
	FADV(18)
	ADDQ $768, DI
	DECQ CX
	JNZ  q40loop
q40tail:
	TESTQ $1, R13
	JZ   q40done
	FROW4(FBLK_Q4_0, 0)
	FZERO_HALF1
q40done:
	VZEROUPPER
	RET

// func unpackQ4_1(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)
TEXT ·unpackQ4_1(SB), NOSPLIT, $0-48
	FUNPACK_PROLOGUE
	JZ   q41tail
q41loop:
	FROW4(FBLK_Q4_1, 0)
	FADV(20)
	FROW4(FBLK_Q4_1, 32)
	FADV(20)
	ADDQ $768, DI
	DECQ CX
	JNZ  q41loop
q41tail:
	TESTQ $1, R13
	JZ   q41done
	FROW4(FBLK_Q4_1, 0)
	FZERO_HALF1
q41done:
	VZEROUPPER
	RET

// func unpackQ5_0(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)
TEXT ·unpackQ5_0(SB), NOSPLIT, $0-48
	FUNPACK_PROLOGUE
	JZ   q50tail
q50loop:
	FROW4(FBLK_Q5_0, 0)
	FADV(22)
	FROW4(FBLK_Q5_0, 32)
	FADV(22)
	ADDQ $768, DI
	DECQ CX
	JNZ  q50loop
q50tail:
	TESTQ $1, R13
	JZ   q50done
	FROW4(FBLK_Q5_0, 0)
	FZERO_HALF1
q50done:
	VZEROUPPER
	RET

// func unpackQ5_1(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)
TEXT ·unpackQ5_1(SB), NOSPLIT, $0-48
	FUNPACK_PROLOGUE
	JZ   q51tail
q51loop:
	FROW4(FBLK_Q5_1, 0)
	FADV(24)
	FROW4(FBLK_Q5_1, 32)
	FADV(24)
	ADDQ $768, DI
	DECQ CX
	JNZ  q51loop
q51tail:
	TESTQ $1, R13
	JZ   q51done
	FROW4(FBLK_Q5_1, 0)
	FZERO_HALF1
q51done:
	VZEROUPPER
	RET

// func unpackIQ4NL(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)
TEXT ·unpackIQ4NL(SB), NOSPLIT, $0-48
	FUNPACK_PROLOGUE
	VMOVDQU64 iq4nlU<>(SB), Y29
	JZ   iq4tail
iq4loop:
	FROW4(FBLK_IQ4NL, 0)
	FADV(18)
	FROW4(FBLK_IQ4NL, 32)
	FADV(18)
	ADDQ $768, DI
	DECQ CX
	JNZ  iq4loop
iq4tail:
	TESTQ $1, R13
	JZ   iq4done
	FROW4(FBLK_IQ4NL, 0)
	FZERO_HALF1
iq4done:
	VZEROUPPER
	RET

// func unpackMXFP4(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)
TEXT ·unpackMXFP4(SB), NOSPLIT, $0-48
	FUNPACK_PROLOGUE
	VMOVDQU64 mxfp4U<>(SB), Y29
	JZ   mxtail
mxloop:
	FROW4(FBLK_MXFP4, 0)
	FADV(17)
	FROW4(FBLK_MXFP4, 32)
	FADV(17)
	ADDQ $768, DI
	DECQ CX
	JNZ  mxloop
mxtail:
	TESTQ $1, R13
	JZ   mxdone
	FROW4(FBLK_MXFP4, 0)
	FZERO_HALF1
mxdone:
	VZEROUPPER
	RET

// Dot kernels: SI = scratch, R8-R11 = the tokens' current block pairs
// (d, s, y[32] twice), CX = chunks, Z27 = o bytes, Z26 = int16 ones, Z28
// zero. Per token and chunk: Z20 = y, Z21 = -o·Σy per 4 values (so that
// the sums are of (u-o)·y), Z22 = [dx0 ×8, dx1 ×8], Z23 = [s0 ×8, s1 ×8]
// (FTOK_M).

#define FTOK_Y(X) \
	VMOVDQU64 8(X), Y20; \
	VINSERTI64X4 $1, 48(X), Z20, Z20

// FTOK_DX: Z22 = [dx0 ×8, dx1 ×8] (K3 = the upper 8 lanes).
#define FTOK_DX(X) \
	VBROADCASTSS 0(X), Z22; \
	VBROADCASTSS 40(X), K3, Z22

#define FTOK_V(X) \
	FTOK_Y(X); \
	VPXORD Z21, Z21, Z21; \
	VPDPBUSD Z20, Z27, Z21; \
	VPSUBD Z21, Z28, Z21; \
	FTOK_DX(X)

#define FTOK_B(X) \
	FTOK_Y(X); \
	VPMADDUBSW Z20, Z27, Z21; \
	VPMADDWD Z26, Z21, Z21; \
	VPSUBD Z21, Z28, Z21; \
	FTOK_DX(X)

// FTOK_M: the types with a minimum (o = 0): Z21 = 0, Z23 = [s0 ×8, s1 ×8].
#define FTOK_M(X) \
	FTOK_Y(X); \
	VPXORD Z21, Z21, Z21; \
	FTOK_DX(X); \
	VBROADCASTSS 4(X), Z23; \
	VBROADCASTSS 44(X), K3, Z23

// FPAIR*: row (u in ZU, scales at OFF(SI)) × the token: ACC +=
// float(Σ(u-o)·y)·dw·dx, and for the M variants + m·s.
#define FPAIR_V(ZU, OFF, ACC) \
	VMOVDQA64 Z21, Z24; \
	VPDPBUSD Z20, ZU, Z24; \
	FSCALE(OFF, ACC)

#define FPAIR_B(ZU, OFF, ACC) \
	VPMADDUBSW Z20, ZU, Z24; \
	VPMADDWD Z26, Z24, Z24; \
	VPADDD Z21, Z24, Z24; \
	FSCALE(OFF, ACC)

#define FPAIR_MV(ZU, OFF, ACC) \
	FPAIR_V(ZU, OFF, ACC); \
	VFMADD231PS OFF+128(SI), Z23, ACC

#define FPAIR_MB(ZU, OFF, ACC) \
	FPAIR_B(ZU, OFF, ACC); \
	VFMADD231PS OFF+128(SI), Z23, ACC

#define FSCALE(OFF, ACC) \
	VCVTDQ2PS Z24, Z24; \
	VMULPS OFF+64(SI), Z22, Z25; \
	VFMADD231PS Z25, Z24, ACC

#define FLOADU \
	VMOVDQU64 0(SI), Z16; \
	VMOVDQU64 192(SI), Z17; \
	VMOVDQU64 384(SI), Z18; \
	VMOVDQU64 576(SI), Z19

#define FTOKROWS(TOK, PAIR, X, A0, A1, A2, A3) \
	TOK(X); \
	PAIR(Z16, 0, A0); \
	PAIR(Z17, 192, A1); \
	PAIR(Z18, 384, A2); \
	PAIR(Z19, 576, A3)

#define FDOT4_STEP(TOK, PAIR) \
	FLOADU; \
	FTOKROWS(TOK, PAIR, R8, Z0, Z1, Z2, Z3); \
	FTOKROWS(TOK, PAIR, R9, Z4, Z5, Z6, Z7); \
	FTOKROWS(TOK, PAIR, R10, Z8, Z9, Z10, Z11); \
	FTOKROWS(TOK, PAIR, R11, Z12, Z13, Z14, Z15); \
	ADDQ $768, SI; \
	ADDQ $80, R8; \
	ADDQ $80, R9; \
	ADDQ $80, R10; \
	ADDQ $80, R11

#define FDOT1_STEP(TOK, PAIR) \
	FLOADU; \
	FTOKROWS(TOK, PAIR, R8, Z0, Z1, Z2, Z3); \
	ADDQ $768, SI; \
	ADDQ $80, R8

// func fDot4V(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)
TEXT ·fDot4V(SB), NOSPLIT, $0-64
	FDOT_PROLOGUE
fd4v:
	FDOT4_STEP(FTOK_V, FPAIR_V)
	DECQ CX
	JNZ  fd4v
	STORE16
	VZEROUPPER
	RET

// func fDot4B(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)
TEXT ·fDot4B(SB), NOSPLIT, $0-64
	FDOT_PROLOGUE
fd4b:
	FDOT4_STEP(FTOK_B, FPAIR_B)
	DECQ CX
	JNZ  fd4b
	STORE16
	VZEROUPPER
	RET

// func fDot4MV(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)
TEXT ·fDot4MV(SB), NOSPLIT, $0-64
	FDOT_PROLOGUE
fd4mv:
	FDOT4_STEP(FTOK_M, FPAIR_MV)
	DECQ CX
	JNZ  fd4mv
	STORE16
	VZEROUPPER
	RET

// func fDot4MB(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)
TEXT ·fDot4MB(SB), NOSPLIT, $0-64
	FDOT_PROLOGUE
fd4mb:
	FDOT4_STEP(FTOK_M, FPAIR_MB)
	DECQ CX
	JNZ  fd4mb
	STORE16
	VZEROUPPER
	RET

// func fDot1V(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)
TEXT ·fDot1V(SB), NOSPLIT, $0-64
	FDOT_PROLOGUE
fd1v:
	FDOT1_STEP(FTOK_V, FPAIR_V)
	DECQ CX
	JNZ  fd1v
	STORE16
	VZEROUPPER
	RET

// func fDot1B(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)
TEXT ·fDot1B(SB), NOSPLIT, $0-64
	FDOT_PROLOGUE
fd1b:
	FDOT1_STEP(FTOK_B, FPAIR_B)
	DECQ CX
	JNZ  fd1b
	STORE16
	VZEROUPPER
	RET

// func fDot1MV(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)
TEXT ·fDot1MV(SB), NOSPLIT, $0-64
	FDOT_PROLOGUE
fd1mv:
	FDOT1_STEP(FTOK_M, FPAIR_MV)
	DECQ CX
	JNZ  fd1mv
	STORE16
	VZEROUPPER
	RET

// func fDot1MB(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)
TEXT ·fDot1MB(SB), NOSPLIT, $0-64
	FDOT_PROLOGUE
fd1mb:
	FDOT1_STEP(FTOK_M, FPAIR_MB)
	DECQ CX
	JNZ  fd1mb
	STORE16
	VZEROUPPER
	RET

// ---- fused one-token kernels (K blocks, VNNI) ------------------------
//
// As for the 32-value blocks: each row's block is decoded into registers
// in the scratch layout (Z16-Z19 = u chunks, Z12/Z13 = sc01/sc23, Y24 =
// m16, Z25 = dv) by the unpackers' own steps, then KPAIRV's sequence runs
// on them, so each product is the tile's bit for bit. R8-R11 = rows, DI =
// the token's blocks, CX = blocks, R13 = acc, Z8-Z11 = rows 0-3's
// accumulators (acc's first four); AX, BX, DX, SI, R12 are the scale
// decoders' scratch.

// KFU_FINISH: KFINISH into registers.
#define KFU_FINISH \
	VPERMW Z1, Z27, Z12; \
	VPERMW Z1, Z28, Z13; \
	VEXTRACTI64X4 $1, Z1, Y24; \
	VCVTPH2PS Y2, Z25

// KFU_PAIR: KPAIRV with the scales in Z12, Z13.
#define KFU_PAIR(X, ACC) \
	VPXORD Z20, Z20, Z20; \
	VPDPBUSD 4(X), Z16, Z20; \
	VPXORD Z21, Z21, Z21; \
	VPDPBUSD 68(X), Z17, Z21; \
	VPXORD Z22, Z22, Z22; \
	VPDPBUSD 132(X), Z18, Z22; \
	VPXORD Z23, Z23, Z23; \
	VPDPBUSD 196(X), Z19, Z23; \
	VPACKSSDW Z21, Z20, Z20; \
	VPACKSSDW Z23, Z22, Z22; \
	VPMADDWD Z12, Z20, Z20; \
	VPDPWSSD Z13, Z22, Z20; \
	KCOMBINE(X, ACC)

// KFU_Q4K_QS: Q4K_QS's chunks into Z16-Z19.
#define KFU_Q4K_QS(W) \
	VMOVDQU64 16(W), Z4; \
	VPSRLW $4, Z4, Z5; \
	VPANDD Z30, Z4, Z4; \
	VPANDD Z30, Z5, Z5; \
	VSHUFI64X2 $0x44, Z5, Z4, Z16; \
	VSHUFI64X2 $0xEE, Z5, Z4, Z17; \
	VMOVDQU64 80(W), Z4; \
	VPSRLW $4, Z4, Z5; \
	VPANDD Z30, Z4, Z4; \
	VPANDD Z30, Z5, Z5; \
	VSHUFI64X2 $0x44, Z5, Z4, Z18; \
	VSHUFI64X2 $0xEE, Z5, Z4, Z19

#define KFU_Q4K_ROW(W, ACC) \
	PREFETCHT0 (W)(R14*1); \
	PREFETCHT0 64(W)(R14*1); \
	PREFETCHT0 128(W)(R14*1); \
	KFU_Q4K_QS(W); \
	K4SCALES(W); \
	KFU_FINISH; \
	KFU_PAIR(DI, ACC)

// KFU_Q6K_HALF: Q6K_HALF's chunks 2H, 2H+1 into ZA, ZB.
#define KFU_Q6K_HALF(W, H, ZA, ZB) \
	VMOVDQU64 (64*H)(W), Z4; \
	VMOVDQU (128+32*H)(W), Y5; \
	VPSRLW $2, Y5, Y6; \
	VINSERTI64X4 $1, Y6, Z5, Z5; \
	VPSLLW $4, Z5, Z6; \
	VPANDD Z29, Z6, Z6; \
	VPANDD Z29, Z5, Z5; \
	VPANDD Z30, Z4, ZA; \
	VPORD Z6, ZA, ZA; \
	VPSRLW $4, Z4, Z4; \
	VPANDD Z30, Z4, Z4; \
	VPORD Z5, Z4, ZB

#define KFU_Q6K_ROW(W, ACC) \
	PREFETCHT0 (W)(R14*1); \
	PREFETCHT0 64(W)(R14*1); \
	PREFETCHT0 128(W)(R14*1); \
	PREFETCHT0 192(W)(R14*1); \
	KFU_Q6K_HALF(W, 0, Z16, Z17); \
	KFU_Q6K_HALF(W, 1, Z18, Z19); \
	VPMOVSXBW 192(W), Y1; \
	VPSLLW $5, Y1, Y3; \
	VINSERTI64X4 $1, Y3, Z1, Z1; \
	MOVWLZX 208(W), AX; \
	MOVL AX, BX; \
	XORL $0x8000, BX; \
	KDV; \
	KFU_FINISH; \
	KFU_PAIR(DI, ACC)

#define KFU_EPILOGUE \
	VMOVUPS Z8, 0(R13); VMOVUPS Z9, 64(R13); VMOVUPS Z10, 128(R13); VMOVUPS Z11, 192(R13); \
	VZEROUPPER; \
	RET

// func kfuQ4K(acc *[256]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)
TEXT ·kfuQ4K(SB), NOSPLIT, $0-64
	KFU_PROLOGUE
	VMOVDQU64 kIdxK4<>(SB), Z26
kfuq4k:
	KFU_Q4K_ROW(R8, Z8)
	KFU_Q4K_ROW(R9, Z9)
	KFU_Q4K_ROW(R10, Z10)
	KFU_Q4K_ROW(R11, Z11)
	FADV(144)
	ADDQ $292, DI
	DECQ CX
	JNZ  kfuq4k
	KFU_EPILOGUE

// func kfuQ6K(acc *[256]float32, w0, w1, w2, w3, x unsafe.Pointer, n, pf int)
TEXT ·kfuQ6K(SB), NOSPLIT, $0-64
	KFU_PROLOGUE
kfuq6k:
	KFU_Q6K_ROW(R8, Z8)
	KFU_Q6K_ROW(R9, Z9)
	KFU_Q6K_ROW(R10, Z10)
	KFU_Q6K_ROW(R11, Z11)
	FADV(210)
	ADDQ $292, DI
	DECQ CX
	JNZ  kfuq6k
	KFU_EPILOGUE

// ---- fused one-token kernels (32-value blocks) ------------------------
//
// For one token the unpacked scratch is pure overhead: these decode each
// row's block pair straight into Z4 (the scratch's u layout: block 0's 32
// values, then block 1's) and its scales into Z6 ([dw0 ×8, dw1 ×8]), then
// run FPAIR's steps on the same lanes, so every product is bit for bit the
// tile's. R8-R11 = rows, DI = the token's blocks, CX = pairs, Z0-Z3 = the
// accumulators of rows 0-3 (acc's first four), K3 = 0xff00, Z29 = word
// shifts [0 ×8, 4 ×8, 0 ×8, 4 ×8], Z30 = 0x0f bytes, Z31 = 0x10 bytes.

// FU_NIBBLES: qs of block 0 at QOFF(W) and of block 1 BB bytes on, as
// [lo0, hi0, lo1, hi1] nibbles in Z4.
#define FU_NIBBLES(W, BB, QOFF) \
	VBROADCASTI32X4 QOFF(W), Z4; \
	VBROADCASTI32X4 (BB+QOFF)(W), K3, Z4; \
	VPSRLVW Z29, Z4, Z4; \
	VPANDD Z30, Z4, Z4

#define FU_QH_NONE(W, BB)

// FU_QH_Q5_0: the fifth bits (u32 at 2 in each block) added as 0x10.
#define FU_QH_Q5_0(W, BB) \
	MOVL 2(W), DX; \
	MOVL (BB+2)(W), BX; \
	SHLQ $32, BX; \
	ORQ DX, BX; \
	KMOVQ BX, K2; \
	VPADDB Z31, Z4, K2, Z4

#define FU_DOT_V \
	VMOVDQA64 Z21, Z24; \
	VPDPBUSD Z20, Z4, Z24

#define FU_DOT_B \
	VPMADDUBSW Z20, Z4, Z24; \
	VPMADDWD Z26, Z24, Z24; \
	VPADDD Z21, Z24, Z24

// FU_ROW: one row's block pair (BB bytes per block, quants at QOFF, f16
// scale at 0) × the token: FPAIR with the scales decoded here.
#define FU_ROW(W, BB, QOFF, QH, DOT, ACC) \
	FU_NIBBLES(W, BB, QOFF); \
	QH(W, BB); \
	DOT; \
	VCVTDQ2PS Z24, Z24; \
	VPBROADCASTW 0(W), Y6; \
	VPBROADCASTW BB(W), K3, Y6; \
	VCVTPH2PS Y6, Z6; \
	VMULPS Z6, Z22, Z25; \
	VFMADD231PS Z25, Z24, ACC

#define FU_STEP(TOK, BB, QOFF, QH, DOT) \
	PREFETCHT0 (R8)(R12*1); \
	PREFETCHT0 (R9)(R12*1); \
	PREFETCHT0 (R10)(R12*1); \
	PREFETCHT0 (R11)(R12*1); \
	TOK(DI); \
	FU_ROW(R8, BB, QOFF, QH, DOT, Z0); \
	FU_ROW(R9, BB, QOFF, QH, DOT, Z1); \
	FU_ROW(R10, BB, QOFF, QH, DOT, Z2); \
	FU_ROW(R11, BB, QOFF, QH, DOT, Z3); \
	FADV(2*BB); \
	ADDQ $80, DI

#define FU_EPILOGUE \
	VMOVUPS Z0, 0(AX); VMOVUPS Z1, 64(AX); VMOVUPS Z2, 128(AX); VMOVUPS Z3, 192(AX); \
	VZEROUPPER; \
	RET

// func fuQ4_0V(acc *[256]float32, w0, w1, w2, w3, x unsafe.Pointer, n, o, pf int)
TEXT ·fuQ4_0V(SB), NOSPLIT, $0-72
	FU_PROLOGUE
fuq40v:
	FU_STEP(FTOK_V, 18, 2, FU_QH_NONE, FU_DOT_V)
	DECQ CX
	JNZ  fuq40v
	FU_EPILOGUE

// func fuQ4_0B(acc *[256]float32, w0, w1, w2, w3, x unsafe.Pointer, n, o, pf int)
TEXT ·fuQ4_0B(SB), NOSPLIT, $0-72
	FU_PROLOGUE
fuq40b:
	FU_STEP(FTOK_B, 18, 2, FU_QH_NONE, FU_DOT_B)
	DECQ CX
	JNZ  fuq40b
	FU_EPILOGUE

// func fuQ5_0V(acc *[256]float32, w0, w1, w2, w3, x unsafe.Pointer, n, o, pf int)
TEXT ·fuQ5_0V(SB), NOSPLIT, $0-72
	FU_PROLOGUE
fuq50v:
	FU_STEP(FTOK_V, 22, 6, FU_QH_Q5_0, FU_DOT_V)
	DECQ CX
	JNZ  fuq50v
	FU_EPILOGUE

// func fuQ5_0B(acc *[256]float32, w0, w1, w2, w3, x unsafe.Pointer, n, o, pf int)
TEXT ·fuQ5_0B(SB), NOSPLIT, $0-72
	FU_PROLOGUE
fuq50b:
	FU_STEP(FTOK_B, 22, 6, FU_QH_Q5_0, FU_DOT_B)
	DECQ CX
	JNZ  fuq50b
	FU_EPILOGUE

// ---- IQ4_XS (actQ8K) ------------------------------------------------------
//
// IQ4_XS (d, scales_h u16, scales_l[4], qs[128]) unpacks to the 32-value
// layout above, four chunks per super-block (3072 bytes per block of four
// rows): u = kvaluesIQ4NL[q]+128 (o = 128), dw = d·(ls-32) per sub-block of
// 32, ls = nibble j%2 of scales_l[j/2] | bits 2j of scales_h << 4. Sub-block
// j is the low nibbles of qs[16j:16j+16], then the high ones.

// XS_QS: 64 bytes of qs at QOFF(W) (sub-blocks 4h..4h+3) to chunks 2h, 2h+1.
// Z29 = u table, Z30 = 0x0f, Z27/Z28 = qword indexes interleaving the low
// and high nibble lanes of sub-blocks (0,1) and (2,3).
#define XS_QS(W, QOFF, OFF) \
	VMOVDQU64 QOFF(W), Z4; \
	VPSRLW $4, Z4, Z5; \
	VPANDD Z30, Z4, Z4; \
	VPANDD Z30, Z5, Z5; \
	VPSHUFB Z4, Z29, Z4; \
	VPSHUFB Z5, Z29, Z5; \
	VMOVDQA64 Z27, Z6; \
	VPERMI2Q Z5, Z4, Z6; \
	VMOVDQU64 Z6, OFF(DI); \
	VMOVDQA64 Z28, Z6; \
	VPERMI2Q Z5, Z4, Z6; \
	VMOVDQU64 Z6, OFF+768(DI)

// XS_SCALES: the eight sub-block scales d·(ls-32) as float32 in Y1, then
// spread to the four chunks' dw (Z20-Z23: dword indexes; X24: word shifts
// 0, 2, …, 14; X25 = 3 words; X26 = 32 words).
#define XS_SCALES(W, OFF) \
	MOVL 4(W), AX; \
	MOVL AX, BX; \
	ANDL $0x0f0f0f0f, AX; \
	SHRL $4, BX; \
	ANDL $0x0f0f0f0f, BX; \
	VMOVD AX, X1; \
	VMOVD BX, X2; \
	VPUNPCKLBW X2, X1, X1; \
	VPMOVZXBW X1, X1; \
	VPBROADCASTW 2(W), X2; \
	VPSRLVW X24, X2, X2; \
	VPANDD X25, X2, X2; \
	VPSLLW $4, X2, X2; \
	VPORD X2, X1, X1; \
	VPSUBW X26, X1, X1; \
	VPMOVSXWD X1, Y1; \
	VCVTDQ2PS Y1, Y1; \
	VPBROADCASTW 0(W), X2; \
	VCVTPH2PS X2, Y2; \
	VMULPS Y2, Y1, Y1; \
	VPERMPS Z1, Z20, Z3; \
	VMOVUPS Z3, OFF+64(DI); \
	VPERMPS Z1, Z21, Z3; \
	VMOVUPS Z3, OFF+768+64(DI); \
	VPERMPS Z1, Z22, Z3; \
	VMOVUPS Z3, OFF+1536+64(DI); \
	VPERMPS Z1, Z23, Z3; \
	VMOVUPS Z3, OFF+2304+64(DI)

#define XS_ROW(W, OFF) \
	XS_QS(W, 8, OFF); \
	XS_QS(W, 72, OFF+1536); \
	XS_SCALES(W, OFF)

// func unpackIQ4XS(dst *byte, w0, w1, w2, w3 unsafe.Pointer, n int)
TEXT ·unpackIQ4XS(SB), NOSPLIT, $0-48
	FUNPACK_PROLOGUE
	MOVQ R13, CX
	VBROADCASTI32X4 iq4nlU<>(SB), Z29
	VMOVDQU64 xsQ01<>(SB), Z27
	VMOVDQU64 xsQ23<>(SB), Z28
	VMOVDQU64 xsD0<>(SB), Z20
	VMOVDQU64 xsD1<>(SB), Z21
	VMOVDQU64 xsD2<>(SB), Z22
	VMOVDQU64 xsD3<>(SB), Z23
	VMOVDQU64 xsShifts<>(SB), X24
	MOVL $0x00030003, AX
	VPBROADCASTD AX, X25
	MOVL $0x00200020, AX
	VPBROADCASTD AX, X26

xsloop:
	XS_ROW(R8, 0)
	XS_ROW(R9, 192)
	XS_ROW(R10, 384)
	XS_ROW(R11, 576)
	FADV(136)
	ADDQ $3072, DI
	DECQ CX
	JNZ  xsloop
	VZEROUPPER
	RET

// FKTOK: token X's chunk K of its current actQ8K block, as FTOK_V: Z20 = y,
// Z21 = -o·Σy per 4 values, Z22 = dx.
#define FKTOK(X, K) \
	VMOVDQU64 (4+64*K)(X), Z20; \
	VPXORD Z21, Z21, Z21; \
	VPDPBUSD Z20, Z27, Z21; \
	VPSUBD Z21, Z28, Z21; \
	VBROADCASTSS 0(X), Z22

#define FKCHUNK4(K) \
	VMOVDQU64 (768*K)(SI), Z16; \
	VMOVDQU64 (768*K+192)(SI), Z17; \
	VMOVDQU64 (768*K+384)(SI), Z18; \
	VMOVDQU64 (768*K+576)(SI), Z19; \
	FKTOK(R8, K); \
	FPAIR_V(Z16, 768*K, Z0); \
	FPAIR_V(Z17, 768*K+192, Z1); \
	FPAIR_V(Z18, 768*K+384, Z2); \
	FPAIR_V(Z19, 768*K+576, Z3); \
	FKTOK(R9, K); \
	FPAIR_V(Z16, 768*K, Z4); \
	FPAIR_V(Z17, 768*K+192, Z5); \
	FPAIR_V(Z18, 768*K+384, Z6); \
	FPAIR_V(Z19, 768*K+576, Z7); \
	FKTOK(R10, K); \
	FPAIR_V(Z16, 768*K, Z8); \
	FPAIR_V(Z17, 768*K+192, Z9); \
	FPAIR_V(Z18, 768*K+384, Z10); \
	FPAIR_V(Z19, 768*K+576, Z11); \
	FKTOK(R11, K); \
	FPAIR_V(Z16, 768*K, Z12); \
	FPAIR_V(Z17, 768*K+192, Z13); \
	FPAIR_V(Z18, 768*K+384, Z14); \
	FPAIR_V(Z19, 768*K+576, Z15)

#define FKCHUNK1(K) \
	VMOVDQU64 (768*K)(SI), Z16; \
	VMOVDQU64 (768*K+192)(SI), Z17; \
	VMOVDQU64 (768*K+384)(SI), Z18; \
	VMOVDQU64 (768*K+576)(SI), Z19; \
	FKTOK(R8, K); \
	FPAIR_V(Z16, 768*K, Z0); \
	FPAIR_V(Z17, 768*K+192, Z1); \
	FPAIR_V(Z18, 768*K+384, Z2); \
	FPAIR_V(Z19, 768*K+576, Z3)

// func xsDot4V(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)
TEXT ·xsDot4V(SB), NOSPLIT, $0-64
	FDOT_PROLOGUE
xs4v:
	FKCHUNK4(0)
	FKCHUNK4(1)
	FKCHUNK4(2)
	FKCHUNK4(3)
	ADDQ $3072, SI
	ADDQ $292, R8
	ADDQ $292, R9
	ADDQ $292, R10
	ADDQ $292, R11
	DECQ CX
	JNZ  xs4v
	STORE16
	VZEROUPPER
	RET

// func xsDot1V(acc *[256]float32, s *byte, x0, x1, x2, x3 unsafe.Pointer, n, o int)
TEXT ·xsDot1V(SB), NOSPLIT, $0-64
	FDOT_PROLOGUE
xs1v:
	FKCHUNK1(0)
	FKCHUNK1(1)
	FKCHUNK1(2)
	FKCHUNK1(3)
	ADDQ $3072, SI
	ADDQ $292, R8
	DECQ CX
	JNZ  xs1v
	STORE16
	VZEROUPPER
	RET

// ---- reduction -------------------------------------------------------------

// QHSUM reduces the 16 floats at OFF(AX) to their sum at OFF/16(DI):
// (lo8 + hi8), (lo4 + hi4), then two horizontal adds.
#define QHSUM(OFF) \
	VMOVUPS OFF(AX), Z0; \
	VEXTRACTF64X4 $1, Z0, Y1; \
	VADDPS Y1, Y0, Y0; \
	VEXTRACTF32X4 $1, Y0, X1; \
	VADDPS X1, X0, X0; \
	VHADDPS X0, X0, X0; \
	VHADDPS X0, X0, X0; \
	VMOVSS X0, (OFF/16)(DI)

// func qHsum16(res *[16]float32, acc *[256]float32)
TEXT ·qHsum16(SB), NOSPLIT, $0-16
	MOVQ res+0(FP), DI
	MOVQ acc+8(FP), AX
	QHSUM(0); QHSUM(64); QHSUM(128); QHSUM(192)
	QHSUM(256); QHSUM(320); QHSUM(384); QHSUM(448)
	QHSUM(512); QHSUM(576); QHSUM(640); QHSUM(704)
	QHSUM(768); QHSUM(832); QHSUM(896); QHSUM(960)
	VZEROUPPER
	RET

// ---- constants -------------------------------------------------------------

// kIdx01: word p of 128-bit lane L is group L (p < 4) or 4+L (p ≥ 4) of SG.
DATA kIdx01<>+0(SB)/8, $0x0000000000000000
DATA kIdx01<>+8(SB)/8, $0x0004000400040004
DATA kIdx01<>+16(SB)/8, $0x0001000100010001
DATA kIdx01<>+24(SB)/8, $0x0005000500050005
DATA kIdx01<>+32(SB)/8, $0x0002000200020002
DATA kIdx01<>+40(SB)/8, $0x0006000600060006
DATA kIdx01<>+48(SB)/8, $0x0003000300030003
DATA kIdx01<>+56(SB)/8, $0x0007000700070007
GLOBL kIdx01<>(SB), RODATA|NOPTR, $64

// kIdx23: groups 8+L and 12+L.
DATA kIdx23<>+0(SB)/8, $0x0008000800080008
DATA kIdx23<>+8(SB)/8, $0x000c000c000c000c
DATA kIdx23<>+16(SB)/8, $0x0009000900090009
DATA kIdx23<>+24(SB)/8, $0x000d000d000d000d
DATA kIdx23<>+32(SB)/8, $0x000a000a000a000a
DATA kIdx23<>+40(SB)/8, $0x000e000e000e000e
DATA kIdx23<>+48(SB)/8, $0x000b000b000b000b
DATA kIdx23<>+56(SB)/8, $0x000f000f000f000f
GLOBL kIdx23<>(SB), RODATA|NOPTR, $64

// kIdxK4 spreads [sc0..7, m0..7] (32-value sub-blocks) to SG: group g gets
// sc[g/2] (word g/2) and min m[g/2] (word 8+g/2).
DATA kIdxK4<>+0(SB)/8, $0x0001000100000000
DATA kIdxK4<>+8(SB)/8, $0x0003000300020002
DATA kIdxK4<>+16(SB)/8, $0x0005000500040004
DATA kIdxK4<>+24(SB)/8, $0x0007000700060006
DATA kIdxK4<>+32(SB)/8, $0x0009000900080008
DATA kIdxK4<>+40(SB)/8, $0x000b000b000a000a
DATA kIdxK4<>+48(SB)/8, $0x000d000d000c000c
DATA kIdxK4<>+56(SB)/8, $0x000f000f000e000e
GLOBL kIdxK4<>(SB), RODATA|NOPTR, $64

// iq4nlU: kvaluesIQ4NL + 128, in both 128-bit lanes.
DATA iq4nlU<>+0(SB)/8, $0x766a5d4f3f2d1801
DATA iq4nlU<>+8(SB)/8, $0xf1d9c5b5a6998d81
DATA iq4nlU<>+16(SB)/8, $0x766a5d4f3f2d1801
DATA iq4nlU<>+24(SB)/8, $0xf1d9c5b5a6998d81
GLOBL iq4nlU<>(SB), RODATA|NOPTR, $32

// mxfp4U: kvaluesMXFP4 + 12, in both 128-bit lanes.
DATA mxfp4U<>+0(SB)/8, $0x181412100f0e0d0c
DATA mxfp4U<>+8(SB)/8, $0x00040608090a0b0c
DATA mxfp4U<>+16(SB)/8, $0x181412100f0e0d0c
DATA mxfp4U<>+24(SB)/8, $0x00040608090a0b0c
GLOBL mxfp4U<>(SB), RODATA|NOPTR, $32

// xsQ01, xsQ23: qwords of [lo, hi] nibble vectors (hi = 8..15) giving
// [lo j, hi j, lo j+1, hi j+1] for sub-blocks j = 0 and 2 of four.
DATA xsQ01<>+0(SB)/8, $0
DATA xsQ01<>+8(SB)/8, $1
DATA xsQ01<>+16(SB)/8, $8
DATA xsQ01<>+24(SB)/8, $9
DATA xsQ01<>+32(SB)/8, $2
DATA xsQ01<>+40(SB)/8, $3
DATA xsQ01<>+48(SB)/8, $10
DATA xsQ01<>+56(SB)/8, $11
GLOBL xsQ01<>(SB), RODATA|NOPTR, $64

DATA xsQ23<>+0(SB)/8, $4
DATA xsQ23<>+8(SB)/8, $5
DATA xsQ23<>+16(SB)/8, $12
DATA xsQ23<>+24(SB)/8, $13
DATA xsQ23<>+32(SB)/8, $6
DATA xsQ23<>+40(SB)/8, $7
DATA xsQ23<>+48(SB)/8, $14
DATA xsQ23<>+56(SB)/8, $15
GLOBL xsQ23<>(SB), RODATA|NOPTR, $64

// xsD0..3: dword indexes [2k ×8, 2k+1 ×8].
DATA xsD0<>+0(SB)/8, $0x0000000000000000
DATA xsD0<>+8(SB)/8, $0x0000000000000000
DATA xsD0<>+16(SB)/8, $0x0000000000000000
DATA xsD0<>+24(SB)/8, $0x0000000000000000
DATA xsD0<>+32(SB)/8, $0x0000000100000001
DATA xsD0<>+40(SB)/8, $0x0000000100000001
DATA xsD0<>+48(SB)/8, $0x0000000100000001
DATA xsD0<>+56(SB)/8, $0x0000000100000001
GLOBL xsD0<>(SB), RODATA|NOPTR, $64

DATA xsD1<>+0(SB)/8, $0x0000000200000002
DATA xsD1<>+8(SB)/8, $0x0000000200000002
DATA xsD1<>+16(SB)/8, $0x0000000200000002
DATA xsD1<>+24(SB)/8, $0x0000000200000002
DATA xsD1<>+32(SB)/8, $0x0000000300000003
DATA xsD1<>+40(SB)/8, $0x0000000300000003
DATA xsD1<>+48(SB)/8, $0x0000000300000003
DATA xsD1<>+56(SB)/8, $0x0000000300000003
GLOBL xsD1<>(SB), RODATA|NOPTR, $64

DATA xsD2<>+0(SB)/8, $0x0000000400000004
DATA xsD2<>+8(SB)/8, $0x0000000400000004
DATA xsD2<>+16(SB)/8, $0x0000000400000004
DATA xsD2<>+24(SB)/8, $0x0000000400000004
DATA xsD2<>+32(SB)/8, $0x0000000500000005
DATA xsD2<>+40(SB)/8, $0x0000000500000005
DATA xsD2<>+48(SB)/8, $0x0000000500000005
DATA xsD2<>+56(SB)/8, $0x0000000500000005
GLOBL xsD2<>(SB), RODATA|NOPTR, $64

DATA xsD3<>+0(SB)/8, $0x0000000600000006
DATA xsD3<>+8(SB)/8, $0x0000000600000006
DATA xsD3<>+16(SB)/8, $0x0000000600000006
DATA xsD3<>+24(SB)/8, $0x0000000600000006
DATA xsD3<>+32(SB)/8, $0x0000000700000007
DATA xsD3<>+40(SB)/8, $0x0000000700000007
DATA xsD3<>+48(SB)/8, $0x0000000700000007
DATA xsD3<>+56(SB)/8, $0x0000000700000007
GLOBL xsD3<>(SB), RODATA|NOPTR, $64

// xsShifts: word j shifts scales_h right by 2j.
DATA xsShifts<>+0(SB)/8, $0x0006000400020000
DATA xsShifts<>+8(SB)/8, $0x000e000c000a0008
GLOBL xsShifts<>(SB), RODATA|NOPTR, $16

// fuShifts: word shifts 0 (low nibbles) and 4 (high nibbles) for the
// 128-bit lanes [qs0, qs0, qs1, qs1].
DATA fuShifts<>+0(SB)/8, $0
DATA fuShifts<>+8(SB)/8, $0
DATA fuShifts<>+16(SB)/8, $0x0004000400040004
DATA fuShifts<>+24(SB)/8, $0x0004000400040004
DATA fuShifts<>+32(SB)/8, $0
DATA fuShifts<>+40(SB)/8, $0
DATA fuShifts<>+48(SB)/8, $0x0004000400040004
DATA fuShifts<>+56(SB)/8, $0x0004000400040004
GLOBL fuShifts<>(SB), RODATA|NOPTR, $64
