// Package kernels owns the numeric operations the native engine's decoder
// runs on: matrix–vector and matrix–matrix products over F32, F16, BF16 and
// ggml's block quantizations (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K … Q6_K,
// IQ4_NL, IQ4_XS, MXFP4), RMSNorm, RoPE, SiLU gating, causal grouped-query attention,
// softmax, argmax and dot products. It must import no other batchd package.
//
// # Code paths
//
// The portable path ("generic") is plain Go, always built and tested. Built
// with GOEXPERIMENT=simd on amd64, two more exist, and on arm64 one; the
// best one the CPU supports is chosen at run time from CPUID or the hwcaps
// (Features, Backends); nothing in this package executes a vector
// instruction before that choice, so the same binary runs on any x86-64 or
// arm64 (TestNoSIMDAtInit keeps it so).
// NewCPUBackend forces a path by name:
//   - amx (AVX-512 with VNNI, AMX-TILE and AMX-INT8, on Linux, which grants
//     the tile state per process: arch_prctl at start-up): avx512, with the
//     block formats' integer sums on the AMX tile unit for work items of 16
//     tokens or more (below).
//   - avx512 (AVX-512 F/BW/DQ/VL): simd/archsimd for most kernels, plus Go
//     assembly (tiles_amd64.s) for the matmul tiles archsimd cannot express
//     well — 4×4 register tiles need all 32 vector registers, Q8_0 uses
//     VPDPBUSD (AVX512-VNNI, when present) and F16 uses VCVTPH2PS.
//   - avx2 (AVX2, FMA, F16C): archsimd, and Go assembly (avx2_amd64.s) for
//     the matmul: a 4-row single-token matvec and 1-row × 12/8/4-token tiles
//     over 256-column panels, each widened weight vector serving every token
//     of the tile.
//   - neon (arm64, Advanced SIMD): the portable path except for the
//     quantized MatMuls (Q8_0 and the block formats), whose int8·int8 group
//     sums run in Go assembly (neon_arm64.s): SDOT where the CPU has the
//     dot-product extension (hwcap asimddp), SMULL/SADALP otherwise. It
//     computes Q8_0 bit for bit as the portable path does.
//
// Without GOEXPERIMENT=simd on amd64, or on other architectures, the
// portable path runs, roughly ten times slower; production builds on amd64
// should set it.
//
// # Determinism
//
// Every output element of MatMul and Attention is reduced in an order that
// depends only on the shapes of the matrix and sequence, never on how many
// tokens are in the call, how the call is split across threads or which tile
// of the blocked kernel computed it. A token's output is therefore
// bit-identical whether it runs alone or batched ("batch invariance"), on
// any one code path. Across paths: amx computes bit for bit what avx512
// does (the tiles yield the same exact integer sums); avx512 and avx2 share
// one reduction order for everything but MatMul (see simd_amd64.go) and
// agree bit for bit there;
// avx2's MatMul over float weights sums each output in 8 lanes instead of 16
// (see avx2_amd64.go), so it agrees with the others within float32
// rounding. The portable path sums in another order with unfused float32
// arithmetic and agrees with them within float32 rounding, not bit for bit;
// its RoPE, Add and Q8_0 activation quantization are bit-identical to the
// SIMD ones.
//
// # NaN and infinities
//
// Every path, and the CUDA kernels (kernels/cuda/csrc), follow one rule;
// TestArgmaxSpecialValues and TestSoftmaxSpecialValues hold each backend to
// it, kernels/cuda's TestArgmaxRows the GPU's argmax.
//   - Argmax scans in index order and moves only to a strictly larger value:
//     +Inf is the largest number, -Inf the smallest, -0 ties +0 (the first
//     wins). A NaN is never larger than anything and nothing is larger than
//     a NaN, so a NaN at index 0 gives 0 and NaNs elsewhere are passed over;
//     a row of only -Inf gives 0.
//   - Softmax subtracts the row's max before exponentiating, in IEEE float
//     arithmetic: a NaN anywhere, a +Inf max (Inf-Inf is NaN) or a row of
//     only -Inf gives NaN in every element; otherwise a -Inf element gets
//     exactly 0. The SIMD exp keeps these edges (0 below its range, NaN
//     kept) rather than clamping them into numbers.
//   - Attention's softmax over each head's scores is the same max
//     subtraction and the same exp, so a NaN or +Inf score (only NaN or Inf
//     in q or k make one) turns that head's output NaN.
//   - MatMul screens nothing: over F32, F16 and BF16 weights a NaN (or an
//     Inf·0) makes the outputs it reaches NaN on every path
//     (TestMatMulPropagatesNaN). The block quantizations quantize the
//     activations to int8 first, which has no defined result for a NaN or
//     Inf.
//
// # Q8_0
//
// Q8_0 products on every path quantize each activation row to Q8_0 (scale
// kept in float32) once per call and run int8·int8 block dot products with
// int32 sums, as llama.cpp does. They differ from a float product with the
// dequantized weights by at most Σ_blocks (max|x_block|/254)·Σ_block|w| (the
// activation rounding) plus float32 accumulation error.
//
// # The other block quantizations
//
// Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and
// MXFP4 are read byte for byte as llama.cpp writes them, memory-mapped, or
// (CPU.Pack, which the native engine calls at load) copied once into a
// packed layout of the same size: on avx512 and amx the 32-value formats'
// rows in groups of 16, on avx2 those and Q4_K, Q5_K and Q6_K in groups of
// 8, each block's rows side by side as the kernels unpack them
// (quant_pack_amd64.go), so that a MatMul streams its weights in one run
// and unpacks them with a nibble split, bit for bit as from the file's
// layout; the engine then hands the file's pages back. No
// dequantized copy of the weights exists on the CPU (quant.go, and
// quant_legacy.go, quant_k.go per family: exact dequantization, a reference
// quantizer, the portable dot). Every path multiplies them in integer
// arithmetic, as the fast CPU engines do: each activation row is quantized
// once per call — for the 32-value formats to blocks of 32 int8 with a
// float32 scale (and its sum, for Q4_1/Q5_1's minimum), for the 256-value
// K-quants and IQ4_XS to ggml's Q8_K (float32 scale per 256, int16 sums per
// 16) — and each block's int8·int8 products are summed exactly in int32,
// scaled by the block's (sub-)scales and added up in float32 in block
// order. The result differs from the float product with the dequantized
// weights by the activation rounding (at most half a step of each
// activation block times Σ|w|) plus float32 accumulation error.
//   - generic: the formats' own dot products in Go.
//   - avx512: sixteen weight rows at a time, each block transposed so that
//     a 512-bit lane holds one row: a token's activation dword is broadcast
//     to the 16 rows and VPDPBUSD (AVX512-VNNI) sums a block for all of them
//     exactly, so a block costs one conversion and two multiplies per 16
//     rows and token, and a K super-block's sub-block sums are scaled in
//     int32 (VPMULLD) before its one float step (quant_r16_avx512_amd64.go).
//     Q8_0 takes this path too where the CPU has VNNI. Without VNNI: the
//     32-value formats the same 16-row path with VPMADDUBSW+VPMADDWD, the
//     K-quants 4-row tiles, IQ4_NL and IQ4_XS the portable dot (their grid
//     values overflow VPMADDUBSW's pair sums).
//   - amx: avx512's kernels, except that every block format's blocks (the
//     K formats' sub-blocks) of 16 tokens × 16 rows are summed by one
//     TDPBSSD/TDPBSUD on the tile unit
//     (quant_amx_amd64.go), which reads avx512's unpacked blocks as its B
//     tile and yields the same exact integers; the float step is avx512's,
//     so amx and avx512 agree bit for bit and a token's result does not
//     depend on whether its item reached 16 tokens.
//   - avx2: the avx512 scheme with eight rows per 256-bit register and
//     VPMADDUBSW+VPMADDWD (quant_r8_avx2_amd64.go), for all but IQ4_NL and
//     IQ4_XS, whose grid values as unsigned bytes would overflow
//     VPMADDUBSW's pair sums: they keep their own 4-row tiles. Q8_0 takes
//     it too, its signed quants by the sign trick (|w| times the
//     activations with w's signs, VPSIGNB), each group's pair sums widened
//     before they add up.
//   - neon: SDOT, or SMULL/SADALP without the dot-product extension.
//
// A backend may unpack a tile's weight rows once for every token of a work
// item (qRowsFn, or qItemsFn for whole items): the weights cost their
// unpacking once per item whatever the batch, which is where batched decode
// and prefill gain. The
// F32-activation route (float weights times float activations) stays for
// F32, F16 and BF16, where it is the more accurate one at no loss of speed;
// a NaN or Inf activation has no defined result in the integer route.
package kernels
