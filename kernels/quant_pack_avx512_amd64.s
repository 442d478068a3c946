//go:build goexperiment.simd && amd64

#include "textflag.h"
#include "quant_r16_avx512_amd64.h"

// Unpackers of the packed 16-row layout (quant_pack_amd64.go) into the
// 16-row kernels' scratch (quant_r16_avx512_amd64.s): the same 640 bytes
// per block, so the dot kernels, VNNI and AMX alike, run unchanged. A
// packed block already holds its 16 rows transposed (quant bytes 4k..4k+3
// of row P(p) at 64k + 4p) and each header field in lane order, so
// unpacking is a nibble split (or a byte flip) and one scale conversion:
// no gathers from 16 rows, no 4×4 transposes, and the weights stream from
// memory in one run.
//
// func r16PUnp*(dst *byte, w unsafe.Pointer, n int)
// w: the group's first packed block to unpack; n blocks, each the format's
// 16·bb bytes after the last.

#define P16_PROLOGUE \
	MOVQ dst+0(FP), DI; \
	MOVQ w+8(FP), SI; \
	MOVQ n+16(FP), CX; \
	MOVL $0x0f0f0f0f, AX; \
	VPBROADCASTD AX, Z30

// P16_LOAD4: Z0-Z3 = the 256 transposed quant bytes at SI.
#define P16_LOAD4 \
	VMOVDQU64 0(SI), Z0; \
	VMOVDQU64 64(SI), Z1; \
	VMOVDQU64 128(SI), Z2; \
	VMOVDQU64 192(SI), Z3

// P16_HALF: the 16 float16 at OFF(SI), lane order, as float32 at TO(DI).
#define P16_HALF(OFF, TO) \
	VCVTPH2PS OFF(SI), Z8; \
	VMOVUPS Z8, TO(DI)

// P16_PF5 (6, 9): prefetch the block's lines P16_AHEAD bytes on, into L2
// (8 KiB ahead into L2 beat 2-16 KiB and L1 at one token here). The packed
// weights stream in one run, but the hardware prefetchers stop at each 4
// KiB page: one-token decode would wait on memory at every page.
#define P16_AHEAD 8192
#define P16_PF5 \
	PREFETCHT1 P16_AHEAD(SI); \
	PREFETCHT1 P16_AHEAD+64(SI); \
	PREFETCHT1 P16_AHEAD+128(SI); \
	PREFETCHT1 P16_AHEAD+192(SI); \
	PREFETCHT1 P16_AHEAD+256(SI)
#define P16_PF6 \
	P16_PF5; \
	PREFETCHT1 P16_AHEAD+320(SI)
#define P16_PF9 \
	P16_PF6; \
	PREFETCHT1 P16_AHEAD+384(SI); \
	PREFETCHT1 P16_AHEAD+448(SI); \
	PREFETCHT1 P16_AHEAD+512(SI)

#define P16_NEXT(BYTES) \
	ADDQ $BYTES, SI; \
	ADDQ $640, DI; \
	DECQ CX

// P16_FIFTH: R16_FIFTH with the rows' qh (lane order) at OFF(SI).
#define P16_FIFTH(OFF) \
	VMOVDQU64 OFF(SI), Z0; \
	R16_FIFTH

// Q4_0 packed: quants 0..255, d 256..287.
TEXT ·r16PUnpQ4_0(SB), NOSPLIT, $0-24
	P16_PROLOGUE
p16q40:
	P16_PF5
	P16_LOAD4
	R16_NIBS4
	R16_STORE8
	P16_HALF(256, 512)
	P16_NEXT(288)
	JNZ  p16q40
	VZEROUPPER
	RET

// IQ4_NL packed: Q4_0's layout, the nibbles mapped through the grid.
TEXT ·r16PUnpIQ4NL(SB), NOSPLIT, $0-24
	P16_PROLOGUE
	VBROADCASTI32X4 ·r16iq4nl(SB), Z29
p16iq4:
	P16_PF5
	P16_LOAD4
	R16_NIBS4
	R16_LOOKUP
	R16_STORE8
	P16_HALF(256, 512)
	P16_NEXT(288)
	JNZ  p16iq4
	VZEROUPPER
	RET

// Q4_1 packed: quants 0..255, d 256..287, m 288..319.
TEXT ·r16PUnpQ4_1(SB), NOSPLIT, $0-24
	P16_PROLOGUE
p16q41:
	P16_PF5
	P16_LOAD4
	R16_NIBS4
	R16_STORE8
	P16_HALF(256, 512)
	P16_HALF(288, 576)
	P16_NEXT(320)
	JNZ  p16q41
	VZEROUPPER
	RET

// Q5_0 packed: quants 0..255, d 256..287, qh 288..351.
TEXT ·r16PUnpQ5_0(SB), NOSPLIT, $0-24
	P16_PROLOGUE
	R16_FIFTH_CONSTS
p16q50:
	P16_PF6
	P16_LOAD4
	R16_NIBS4
	P16_FIFTH(288)
	R16_STORE8
	P16_HALF(256, 512)
	P16_NEXT(352)
	JNZ  p16q50
	VZEROUPPER
	RET

// Q5_1 packed: quants 0..255, d 256..287, m 288..319, qh 320..383.
TEXT ·r16PUnpQ5_1(SB), NOSPLIT, $0-24
	P16_PROLOGUE
	R16_FIFTH_CONSTS
p16q51:
	P16_PF6
	P16_LOAD4
	R16_NIBS4
	P16_FIFTH(320)
	R16_STORE8
	P16_HALF(256, 512)
	P16_HALF(288, 576)
	P16_NEXT(384)
	JNZ  p16q51
	VZEROUPPER
	RET

// Q8_0 packed: quants 0..511 (bytes 4k.. of the 32 at 64k), d 512..543;
// the scratch holds them as unsigned u = w XOR 0x80.
TEXT ·r16PUnpQ8_0(SB), NOSPLIT, $0-24
	P16_PROLOGUE
	MOVL $0x80808080, AX
	VPBROADCASTD AX, Z31
p16q80:
	P16_PF9
	VPXORD 0(SI), Z31, Z16
	VPXORD 64(SI), Z31, Z17
	VPXORD 128(SI), Z31, Z18
	VPXORD 192(SI), Z31, Z19
	VPXORD 256(SI), Z31, Z20
	VPXORD 320(SI), Z31, Z21
	VPXORD 384(SI), Z31, Z22
	VPXORD 448(SI), Z31, Z23
	R16_STORE8
	P16_HALF(512, 512)
	P16_NEXT(544)
	JNZ  p16q80
	VZEROUPPER
	RET

// MXFP4 packed: quants 0..255, the E8M0 exponents 256..271 (see
// r16UnpMXFP4 for the scale).
TEXT ·r16PUnpMXFP4(SB), NOSPLIT, $0-24
	P16_PROLOGUE
	VBROADCASTI32X4 ·r16mxfp4(SB), Z29
	R16_E8M0_CONSTS
p16mx:
	P16_PF5
	P16_LOAD4
	R16_NIBS4
	R16_LOOKUP
	R16_STORE8
	R16_E8M0(256(SI))
	P16_NEXT(272)
	JNZ  p16mx
	VZEROUPPER
	RET
