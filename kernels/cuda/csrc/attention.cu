// attention.cu: causal grouped-query attention over the paged KV cache, one
// kernel for chunked prefill and for decode (kernels.CPU.PagedAttention's
// semantics, kernels/attention_paged.go).
#include "common.cuh"

// ATT_TILE positions are scored, softmaxed and summed per step.
#define ATT_TILE 64
// ATT_MAX_HEAD_DIM bounds headDim: a lane holds headDim/32 K values.
#define ATT_MAX_HEAD_DIM 256

// paged_attention: out[t][h][:] = Σ_p softmax_p(scale·q[t][h]·K[p]) · V[p]
// over the positions p = 0..tokPos[t] of sequence tokSeq[t], for every query
// head h of the KV head BY.
//
// Launch: grid (nTok, nKVHeads); block (B, 1, 1) with B a multiple of 32,
// at most 1024 (128 is the intended size: 4 warps); dynamic shared bytes
//   4 · (2·G·headDim + G·ATT_TILE + 3·G),   G = nHeads/nKVHeads
// (the group's queries, its output accumulators, one tile of scores and
// each head's running max, sum and rescale factor). For Qwen2.5-0.5B
// (G 7, headDim 64) that is 5,460 bytes; G·headDim ≤ 4096 stays within the
// default 48 KiB. headDim > ATT_MAX_HEAD_DIM or nHeads not a multiple of
// nKVHeads: the block writes nothing (the host refuses such models first).
//
// One block is one token's G query heads that share KV head BY: each K and V
// row is loaded once for all of them. Positions go in tiles of ATT_TILE:
//   1. scores: warp w takes positions w, w+nWarps, ... of the tile; its lanes
//      split headDim (lane, lane+32, ...), hold that slice of the K row in
//      registers and reduce each head's dot product with butterfly shuffles;
//      score = dot·scale, as the CPU computes it;
//   2. online softmax: a warp per head takes the tile's max, rescales the
//      running sum by exp(mOld − mNew) and turns the scores into weights
//      exp(s − mNew);
//   3. values: thread i of the block owns accumulators i, i+B, ... of the
//      G·headDim outputs (consecutive threads, consecutive dims: coalesced
//      V loads), multiplies them by the head's rescale factor and adds the
//      tile's weighted V rows in position order.
// The output is acc/sum, in float32 throughout. The CPU takes the max over
// all positions first; the running max changes only the rounding (≈1e-7
// relative).
//
// Chunked prefill uses this kernel as it is (a block per prompt token, each
// reading its causal prefix): tiles of several queries sharing K/V loads in
// shared memory (FlashAttention-style) would cut the K/V traffic of long
// prompts by the chunk length.
//
// Not built: a split-KV (flash-decoding) variant. At small batch and long
// context there are only nTok·nKVHeads blocks (a single decode of a 2-KV-head
// model is 2 blocks on a 132-SM GPU), each walking every position alone. The
// variant adds a grid dimension over position ranges (e.g. 512 positions per
// split): each split writes its unnormalised accumulators with its own max
// and sum to a scratch buffer [nTok][nHeads][splits][headDim+2], and a second
// small kernel merges the splits (rescaling each by exp(m_s − max_s m_s))
// into out — the host picks the number of splits from nTok·nKVHeads against
// the SM count and the longest context.
KERNEL void paged_attention(float* out, const float* q, const float* K, const float* V, const int* tokSeq,
                            const int* tokPos, const int* tables, int maxBlocks, int nHeads, int nKVHeads,
                            int headDim, int blockSize, float scale) {
	SHARED(long long, rowOf, ATT_TILE); // the tile's pool rows
	SHARED_DYN(float, att_dyn);         // a module-wide name in the PTX build
	const int D = headDim;
	if (D <= 0 || D > ATT_MAX_HEAD_DIM || nKVHeads <= 0 || nHeads % nKVHeads != 0 || blockSize <= 0) return;
	const int G = nHeads / nKVHeads;
	const int t = BX, kvh = BY;
	const int tid = TX, lane = TX & 31, warp = TX >> 5, nWarps = BDX >> 5;
	const int GD = G * D;

	float* qs = att_dyn;          // [G][D] the group's queries
	float* acc = qs + GD;         // [G][D] output accumulators
	float* sc = acc + GD;         // [G][ATT_TILE] scores, then weights
	float* runMax = sc + G * ATT_TILE; // [G]
	float* runSum = runMax + G;        // [G]
	float* rescale = runSum + G;       // [G]

	const long long stride = (long long)nKVHeads * D; // floats per pool row
	const float* qg = q + ((long long)t * nHeads + (long long)kvh * G) * D;
	for (int i = tid; i < GD; i += BDX) {
		qs[i] = qg[i];
		acc[i] = 0.0f;
	}
	for (int g = tid; g < G; g += BDX) {
		runMax[g] = -__builtin_inff();
		runSum[g] = 0.0f;
	}
	const int n = tokPos[t] + 1; // positions attended: 0..tokPos[t]
	const int* table = tables + (long long)tokSeq[t] * maxBlocks;
	const float* Kh = K + (long long)kvh * D;
	const float* Vh = V + (long long)kvh * D;
	SYNC();

	for (int p0 = 0; p0 < n; p0 += ATT_TILE) {
		const int cnt = n - p0 < ATT_TILE ? n - p0 : ATT_TILE;
		// 1. Scores.
		for (int j = warp; j < cnt; j += nWarps) {
			const int p = p0 + j;
			const long long row = (long long)table[p / blockSize] * blockSize + p % blockSize;
			if (lane == 0) rowOf[j] = row;
			const float* kr = Kh + row * stride;
			float kv[ATT_MAX_HEAD_DIM / 32];
#pragma unroll
			for (int c = 0; c < ATT_MAX_HEAD_DIM / 32; c++) {
				int d = lane + 32 * c;
				kv[c] = d < D ? kr[d] : 0.0f;
			}
			for (int g = 0; g < G; g++) {
				const float* qh = qs + g * D;
				float s = 0.0f;
#pragma unroll
				for (int c = 0; c < ATT_MAX_HEAD_DIM / 32; c++) {
					int d = lane + 32 * c;
					if (d < D) s += qh[d] * kv[c];
				}
				for (int m = 16; m > 0; m >>= 1) s += SHFL_XOR(s, m);
				if (lane == 0) sc[g * ATT_TILE + j] = s * scale;
			}
		}
		SYNC();
		// 2. Online softmax, a warp per head.
		for (int g = warp; g < G; g += nWarps) {
			float* s = sc + g * ATT_TILE;
			float m = -__builtin_inff();
			for (int j = lane; j < cnt; j += 32) m = s[j] > m ? s[j] : m;
			for (int k = 16; k > 0; k >>= 1) {
				float o = SHFL_XOR(m, k);
				m = o > m ? o : m;
			}
			const float mOld = runMax[g];
			const float mNew = mOld > m ? mOld : m;
			float sum = 0.0f;
			for (int j = lane; j < ATT_TILE; j += 32) {
				float e = j < cnt ? fexp(s[j] - mNew) : 0.0f;
				s[j] = e;
				sum += e;
			}
			for (int k = 16; k > 0; k >>= 1) sum += SHFL_XOR(sum, k);
			if (lane == 0) {
				// exp(−Inf − x) = 0: the first tile starts the sums afresh.
				const float r = mOld == -__builtin_inff() ? 0.0f : fexp(mOld - mNew);
				rescale[g] = r;
				runSum[g] = runSum[g] * r + sum;
				runMax[g] = mNew;
			}
		}
		SYNC();
		// 3. Values, in position order.
		for (int i = tid; i < GD; i += BDX) {
			const int g = i / D, d = i - g * D;
			const float* w = sc + g * ATT_TILE;
			float a = acc[i] * rescale[g];
			for (int j = 0; j < cnt; j++) a += w[j] * Vh[rowOf[j] * stride + d];
			acc[i] = a;
		}
		SYNC(); // sc, rowOf and rescale are rewritten by the next tile
	}

	// acc·(1/sum), as the CPU scales.
	float* og = out + ((long long)t * nHeads + (long long)kvh * G) * D;
	for (int i = tid; i < GD; i += BDX) og[i] = acc[i] * fdiv(1.0f, runSum[i / D]);
}
