// Macros shared by the 16-row unpackers of the file layout
// (quant_r16_avx512_amd64.s) and of the packed one
// (quant_pack_avx512_amd64.s). Z30 = 0x0f bytes; DI = the block's scratch.

// R16_NIBS splits each Zk (k = 0..3) into its low nibbles (quants 4k..,
// into ZLk) and high ones (quants 16+4k.., into ZHk).
#define R16_NIBS(ZT, ZL, ZH) \
	VPSRLW $4, ZT, ZH; \
	VPANDD Z30, ZT, ZL; \
	VPANDD Z30, ZH, ZH

#define R16_NIBS4 \
	R16_NIBS(Z0, Z16, Z20); \
	R16_NIBS(Z1, Z17, Z21); \
	R16_NIBS(Z2, Z18, Z22); \
	R16_NIBS(Z3, Z19, Z23)

#define R16_STORE8 \
	VMOVDQU64 Z16, 0(DI); \
	VMOVDQU64 Z17, 64(DI); \
	VMOVDQU64 Z18, 128(DI); \
	VMOVDQU64 Z19, 192(DI); \
	VMOVDQU64 Z20, 256(DI); \
	VMOVDQU64 Z21, 320(DI); \
	VMOVDQU64 Z22, 384(DI); \
	VMOVDQU64 Z23, 448(DI)

// R16_FIFTH adds 16 to the bytes of Z16-Z23 whose fifth bit is set in the
// rows' 32-bit qh (Z0, lane order): quant j takes bit j, and g[k]'s four
// bytes take bits 4k..4k+3. Z24-Z27 broadcast byte k/2 of each dword to
// its four bytes, Z28/Z29 pick the bits of even/odd k, Z31 = 0x10 bytes.
#define R16_BIT(ZG, CTL, MASK) \
	VPSHUFB CTL, Z0, Z8; \
	VPTESTMB MASK, Z8, K1; \
	VPADDB Z31, ZG, K1, ZG

#define R16_FIFTH \
	R16_BIT(Z16, Z24, Z28); \
	R16_BIT(Z17, Z24, Z29); \
	R16_BIT(Z18, Z25, Z28); \
	R16_BIT(Z19, Z25, Z29); \
	R16_BIT(Z20, Z26, Z28); \
	R16_BIT(Z21, Z26, Z29); \
	R16_BIT(Z22, Z27, Z28); \
	R16_BIT(Z23, Z27, Z29)

#define R16_FIFTH_CONSTS \
	VMOVDQU64 ·r16qhctl+0(SB), Z24; \
	VMOVDQU64 ·r16qhctl+64(SB), Z25; \
	VMOVDQU64 ·r16qhctl+128(SB), Z26; \
	VMOVDQU64 ·r16qhctl+192(SB), Z27; \
	VMOVDQU64 ·r16qhmask+0(SB), Z28; \
	VMOVDQU64 ·r16qhmask+64(SB), Z29; \
	MOVL $0x10101010, AX; \
	VPBROADCASTD AX, Z31

// R16_LOOKUP maps the nibbles of Z16-Z23 through the 16-byte table in
// each lane of Z29.
#define R16_LOOKUP \
	VPSHUFB Z16, Z29, Z16; \
	VPSHUFB Z17, Z29, Z17; \
	VPSHUFB Z18, Z29, Z18; \
	VPSHUFB Z19, Z29, Z19; \
	VPSHUFB Z20, Z29, Z20; \
	VPSHUFB Z21, Z29, Z21; \
	VPSHUFB Z22, Z29, Z22; \
	VPSHUFB Z23, Z29, Z23

// R16_E8M0 converts the 16 rows' MXFP4 E8M0 exponent bytes at SRC (lane
// order) to their float32 scales at 512(DI): e scales by 2^(e-128), and
// ggml halves the table instead, so the values are doubled and the
// exponent is e-1: float bits (e-1)<<23, or for e < 2 the subnormal
// 0x200000<<e. R16_E8M0_CONSTS sets Z10-Z12 for it.
#define R16_E8M0_CONSTS \
	MOVL $1, AX; \
	VPBROADCASTD AX, Z10; \
	MOVL $2, AX; \
	VPBROADCASTD AX, Z11; \
	MOVL $0x200000, AX; \
	VPBROADCASTD AX, Z12

#define R16_E8M0(SRC) \
	VPMOVZXBD SRC, Z8; \
	VPSUBD Z10, Z8, Z9; \
	VPSLLD $23, Z9, Z9; \
	VPCMPUD $1, Z11, Z8, K1; \
	VPSLLVD Z8, Z12, K1, Z9; \
	VMOVUPS Z9, 512(DI)
