//go:build arm64

#include "textflag.h"

// The int8 group dot products of the neon backend (neon_arm64.go):
//
//	func neonDotsSDOT(w *byte, wstride int, a *byte, astride int, nblocks, ngb, nv int, out *int32)
//	func neonDotsNEON(w *byte, wstride int, a *byte, astride int, nblocks, ngb, nv int, out *int32)
//
// For each of nblocks blocks (weights wstride bytes apart, activations
// astride bytes apart), ngb groups of nv·16 int8 values each: the exact
// int32 sum of w[i]·a[i] over the group, stored to out in order. The Go
// assembler has no mnemonics for SDOT, SMULL or SADALP: they are spelled
// as WORDs, with the registers fixed as the comments say.

// SDOT V0.4S, V1.16B, V2.16B: the ARMv8.2 dot product (hwcap asimddp).
#define SDOT_V0_V1_V2 WORD $0x4E829420
// SMULL V3.8H, V1.8B, V2.8B and SMULL2 V4.8H, V1.16B, V2.16B: int8×int8
// products widened to int16 (they cannot overflow it).
#define SMULL_V3_V1_V2 WORD $0x0E22C023
#define SMULL2_V4_V1_V2 WORD $0x4E22C024
// SADALP V0.4S, V3.8H and V0.4S, V4.8H: add adjacent int16 pairs into the
// int32 lanes of V0.
#define SADALP_V0_V3 WORD $0x4E606860
#define SADALP_V0_V4 WORD $0x4E606880

// Both share one loop: per block, per group, per 16-byte vector pair (V1
// weights, V2 activations) accumulated into V0's int32 lanes, then summed.

TEXT ·neonDotsSDOT(SB), NOSPLIT, $0-64
	MOVD w+0(FP), R0
	MOVD wstride+8(FP), R1
	MOVD a+16(FP), R2
	MOVD astride+24(FP), R3
	MOVD nblocks+32(FP), R4
	MOVD ngb+40(FP), R5
	MOVD nv+48(FP), R6
	MOVD out+56(FP), R7
	CBZ R4, done

block:
	MOVD R0, R8
	MOVD R2, R9
	MOVD R5, R10

group:
	VEOR V0.B16, V0.B16, V0.B16
	MOVD R6, R11

vec:
	VLD1.P 16(R8), [V1.B16]
	VLD1.P 16(R9), [V2.B16]
	SDOT_V0_V1_V2
	SUBS $1, R11, R11
	BNE  vec
	VADDV V0.S4, V0
	VMOV  V0.S[0], R12
	MOVW.P R12, 4(R7)
	SUBS $1, R10, R10
	BNE  group
	ADD  R1, R0, R0
	ADD  R3, R2, R2
	SUBS $1, R4, R4
	BNE  block

done:
	RET

TEXT ·neonDotsNEON(SB), NOSPLIT, $0-64
	MOVD w+0(FP), R0
	MOVD wstride+8(FP), R1
	MOVD a+16(FP), R2
	MOVD astride+24(FP), R3
	MOVD nblocks+32(FP), R4
	MOVD ngb+40(FP), R5
	MOVD nv+48(FP), R6
	MOVD out+56(FP), R7
	CBZ R4, done

block:
	MOVD R0, R8
	MOVD R2, R9
	MOVD R5, R10

group:
	VEOR V0.B16, V0.B16, V0.B16
	MOVD R6, R11

vec:
	VLD1.P 16(R8), [V1.B16]
	VLD1.P 16(R9), [V2.B16]
	SMULL_V3_V1_V2
	SMULL2_V4_V1_V2
	SADALP_V0_V3
	SADALP_V0_V4
	SUBS $1, R11, R11
	BNE  vec
	VADDV V0.S4, V0
	VMOV  V0.S[0], R12
	MOVW.P R12, 4(R7)
	SUBS $1, R10, R10
	BNE  group
	ADD  R1, R0, R0
	ADD  R3, R2, R2
	SUBS $1, R4, R4
	BNE  block

done:
	RET
