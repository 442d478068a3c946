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

// The four-row kernels of the quant tiles (neon_quant_arm64.go):
//
//	func neonDots4SDOT(w, a *byte, astride, tstride, nblocks, ngb, nv, ntok int, out *int32)
//	func neonDots4NEON(w, a *byte, astride, tstride, nblocks, ngb, nv, ntok int, out *int32)
//
// Four weight rows, neonChunk (1024) bytes apart from w, each nblocks
// blocks of ngb groups of nv·16 int8 values stored back to back, against
// ntok (1 or 2) tokens' activations: block b of token j at a + b·astride +
// j·tstride. Each weight vector is loaded once for both tokens and each
// activation vector once for all four rows. Per block and group, out gets
// eight int32 sums: token 0's rows 0-3, then token 1's (left alone when
// ntok is 1). Registers: V0-V3 weights, V4-V5 activations, V6-V7 the
// plain NEON path's products, V16-V19 token 0's accumulators and V20-V23
// token 1's, V24-V25 the reduction.

#define SDOT(d, n, m) WORD $(0x4E809400 | ((m)<<16) | ((n)<<5) | (d))
#define SMULL(d, n, m) WORD $(0x0E20C000 | ((m)<<16) | ((n)<<5) | (d))
#define SMULL2(d, n, m) WORD $(0x4E20C000 | ((m)<<16) | ((n)<<5) | (d))
#define SADALP(d, n) WORD $(0x4E606800 | ((n)<<5) | (d))

// acc += the four-lane dot of weights w and activations a.
#define PRODSDOT(acc, w, a) SDOT(acc, w, a)
#define PRODNEON(acc, w, a) SMULL(6, w, a); SMULL2(7, w, a); SADALP(acc, 6); SADALP(acc, 7)

#define LOADW \
	VLD1.P 16(R9), [V0.B16] \
	VLD1.P 16(R10), [V1.B16] \
	VLD1.P 16(R11), [V2.B16] \
	VLD1.P 16(R12), [V3.B16]

// Four accumulators from V(acc) on, summed across lanes, to one vector of
// row sums stored at R8.
#define STORE4(a0, a1, a2, a3) \
	VADDP a1.S4, a0.S4, V24.S4 \
	VADDP a3.S4, a2.S4, V25.S4 \
	VADDP V25.S4, V24.S4, V24.S4 \
	VST1.P [V24.S4], 16(R8)

#define DOTS4BODY(PROD) \
	CBZ  R4, done \
	CMP  $2, R7 \
	BEQ  two \
one: \
	MOVD R1, R13 \
	MOVD R5, R15 \
onegroup: \
	VEOR V16.B16, V16.B16, V16.B16 \
	VEOR V17.B16, V17.B16, V17.B16 \
	VEOR V18.B16, V18.B16, V18.B16 \
	VEOR V19.B16, V19.B16, V19.B16 \
	MOVD R6, R19 \
onevec: \
	LOADW \
	VLD1.P 16(R13), [V4.B16] \
	PROD(16, 0, 4); PROD(17, 1, 4); PROD(18, 2, 4); PROD(19, 3, 4) \
	SUBS $1, R19, R19 \
	BNE  onevec \
	STORE4(V16, V17, V18, V19) \
	ADD  $16, R8 \
	SUBS $1, R15, R15 \
	BNE  onegroup \
	ADD  R2, R1, R1 \
	SUBS $1, R4, R4 \
	BNE  one \
	RET \
two: \
	MOVD R1, R13 \
	ADD  R3, R1, R14 \
	MOVD R5, R15 \
twogroup: \
	VEOR V16.B16, V16.B16, V16.B16 \
	VEOR V17.B16, V17.B16, V17.B16 \
	VEOR V18.B16, V18.B16, V18.B16 \
	VEOR V19.B16, V19.B16, V19.B16 \
	VEOR V20.B16, V20.B16, V20.B16 \
	VEOR V21.B16, V21.B16, V21.B16 \
	VEOR V22.B16, V22.B16, V22.B16 \
	VEOR V23.B16, V23.B16, V23.B16 \
	MOVD R6, R19 \
twovec: \
	LOADW \
	VLD1.P 16(R13), [V4.B16] \
	VLD1.P 16(R14), [V5.B16] \
	PROD(16, 0, 4); PROD(17, 1, 4); PROD(18, 2, 4); PROD(19, 3, 4) \
	PROD(20, 0, 5); PROD(21, 1, 5); PROD(22, 2, 5); PROD(23, 3, 5) \
	SUBS $1, R19, R19 \
	BNE  twovec \
	STORE4(V16, V17, V18, V19) \
	STORE4(V20, V21, V22, V23) \
	SUBS $1, R15, R15 \
	BNE  twogroup \
	ADD  R2, R1, R1 \
	SUBS $1, R4, R4 \
	BNE  two \
done: \
	RET

TEXT ·neonDots4SDOT(SB), NOSPLIT, $0-72
	MOVD w+0(FP), R9
	MOVD a+8(FP), R1
	MOVD astride+16(FP), R2
	MOVD tstride+24(FP), R3
	MOVD nblocks+32(FP), R4
	MOVD ngb+40(FP), R5
	MOVD nv+48(FP), R6
	MOVD ntok+56(FP), R7
	MOVD out+64(FP), R8
	ADD  $1024, R9, R10
	ADD  $1024, R10, R11
	ADD  $1024, R11, R12
	DOTS4BODY(PRODSDOT)

TEXT ·neonDots4NEON(SB), NOSPLIT, $0-72
	MOVD w+0(FP), R9
	MOVD a+8(FP), R1
	MOVD astride+16(FP), R2
	MOVD tstride+24(FP), R3
	MOVD nblocks+32(FP), R4
	MOVD ngb+40(FP), R5
	MOVD nv+48(FP), R6
	MOVD ntok+56(FP), R7
	MOVD out+64(FP), R8
	ADD  $1024, R9, R10
	ADD  $1024, R10, R11
	ADD  $1024, R11, R12
	DOTS4BODY(PRODNEON)

// func neonNib16(dst, src *byte, sstride, n int, kv *[16]int8)
//
// The 4-bit codes of n 16-byte pieces (sstride bytes apart from src) to
// 32 int8 each at dst: the low nibbles' values, then the high ones', each
// looked up in kv (TBL).
TEXT ·neonNib16(SB), NOSPLIT, $0-40
	MOVD dst+0(FP), R0
	MOVD src+8(FP), R1
	MOVD sstride+16(FP), R2
	MOVD n+24(FP), R3
	MOVD kv+32(FP), R4
	CBZ  R3, nibdone
	VLD1 (R4), [V31.B16]
	VMOVI $15, V30.B16

nib:
	VLD1 (R1), [V0.B16]
	ADD  R2, R1, R1
	VAND V30.B16, V0.B16, V1.B16
	VUSHR $4, V0.B16, V2.B16
	VTBL V1.B16, [V31.B16], V1.B16
	VTBL V2.B16, [V31.B16], V2.B16
	VST1.P [V1.B16, V2.B16], 32(R0)
	SUBS $1, R3, R3
	BNE  nib

nibdone:
	RET

// func neonNib32(dst, src *byte, n int)
//
// The 4-bit codes of n 32-byte pieces stored back to back at src (Q4_K's
// layout) to 64 int8 each at dst: the 32 low nibbles, then the 32 high.
TEXT ·neonNib32(SB), NOSPLIT, $0-24
	MOVD dst+0(FP), R0
	MOVD src+8(FP), R1
	MOVD n+16(FP), R3
	CBZ  R3, nib32done
	VMOVI $15, V30.B16

nib32:
	VLD1.P 32(R1), [V0.B16, V1.B16]
	VAND V30.B16, V0.B16, V2.B16
	VAND V30.B16, V1.B16, V3.B16
	VUSHR $4, V0.B16, V4.B16
	VUSHR $4, V1.B16, V5.B16
	VST1.P [V2.B16, V3.B16, V4.B16, V5.B16], 64(R0)
	SUBS $1, R3, R3
	BNE  nib32

nib32done:
	RET
