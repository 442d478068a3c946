//go:build goexperiment.simd && amd64

#include "textflag.h"

// AVX-512BW integer tiles for the K-quants on CPUs without AVX512-VNNI
// (see quant_avx512_amd64.go).
//
// Two phases per chunk of super-blocks. An unpacker per format decodes four
// weight rows into a scratch layout shared by all K formats, 512 bytes per
// row and block:
//     0: u[256]  the quants as unsigned bytes 0..63, in value order
//   256: sc01    32 int16: the 16-value group scales, laid out for the
//                packed sums of chunks 0 and 1 (see KPAIRB)
//   320: sc23    the same for chunks 2 and 3
//   384: dv      16 float32: D1 ×8, D2 ×8
//   448: m16     16 int16: each group's min coefficient
// so that a row · token block product is
//     dx·(D1·Σ_g sc_g·Σ_{i∈g} u_i·y_i + D2·Σ_g m_g·bsum_g).
// The dot kernels then run that layout against 4 (or 1) tokens: each row's
// unpacked block is loaded once and used for every token.
//
// Per row, token and block the instruction sequence is fixed (KPAIRB), so
// a product does not depend on how many rows or tokens share the tile.

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

// KPAIRB: one row × one token × one block. The four 64-value chunk sums
// (VPMADDUBSW then VPMADDWD with Z26 = int16 ones: 16 int32, each over 4
// values, |t| ≤ 4·63·127) pack pairwise to int16 (lane L of pack(t0,t1)
// holds groups L and 4+L), are scaled by group and summed; the min term
// takes the bsums.
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

// func kDot1BW(acc *[256]float32, s *byte, x0 unsafe.Pointer, n int)
TEXT ·kDot1BW(SB), NOSPLIT, $0-32
	DOT1_PROLOGUE

kd1bloop:
	DOT1_STEP(KPAIRB)
	DECQ CX
	JNZ  kd1bloop
	DOT1_EPILOGUE

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
