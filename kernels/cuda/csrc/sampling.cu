// sampling.cu: greedy and seeded sampling of logits rows on the GPU, the
// same tokens as engine/native/sampler.go's choose() for the branch with
// top_k and top_p off.
#include "common.cuh"

// Block-wide reductions over BDX threads (a multiple of 32, ≤ 1024). red is
// a shared array of at least 33 elements; every thread of the block calls
// them together, and every thread gets the result. They end with a barrier,
// so red may be reused at once.

DEV double samp_shfl_f64(double v, int src) {
	union { double d; int i[2]; } u;
	u.d = v;
	u.i[0] = SHFL_I(u.i[0], src);
	u.i[1] = SHFL_I(u.i[1], src);
	return u.d;
}

DEV float samp_sum_f32(float v, float* red) {
	const int lane = TX & 31, warp = TX >> 5, nWarps = BDX >> 5;
	for (int m = 16; m > 0; m >>= 1) v += SHFL_XOR(v, m);
	if (lane == 0) red[warp] = v;
	SYNC();
	if (warp == 0) {
		float w = lane < nWarps ? red[lane] : 0.0f;
		for (int m = 16; m > 0; m >>= 1) w += SHFL_XOR(w, m);
		if (lane == 0) red[32] = w;
	}
	SYNC();
	v = red[32];
	SYNC();
	return v;
}

// samp_min_i32 (want_max 0) or samp_max_i32 (want_max 1).
DEV int samp_ext_i32(int v, int* red, int wantMax) {
	const int lane = TX & 31, warp = TX >> 5, nWarps = BDX >> 5;
	for (int m = 16; m > 0; m >>= 1) {
		int o = SHFL_XOR_I(v, m);
		v = (wantMax ? o > v : o < v) ? o : v;
	}
	if (lane == 0) red[warp] = v;
	SYNC();
	if (warp == 0) {
		int w = lane < nWarps ? red[lane] : red[0];
		for (int m = 16; m > 0; m >>= 1) {
			int o = SHFL_XOR_I(w, m);
			w = (wantMax ? o > w : o < w) ? o : w;
		}
		if (lane == 0) red[32] = w;
	}
	SYNC();
	v = red[32];
	SYNC();
	return v;
}

// samp_scan_f64 returns the sum of v over the threads before this one (in
// TX order) and sets *total to the sum over all.
DEV double samp_scan_f64(double v, double* red, double* total) {
	const int lane = TX & 31, warp = TX >> 5, nWarps = BDX >> 5;
	double inc = v;
	for (int k = 1; k < 32; k <<= 1) {
		double o = samp_shfl_f64(inc, lane >= k ? lane - k : lane);
		if (lane >= k) inc += o;
	}
	double exc = samp_shfl_f64(inc, lane > 0 ? lane - 1 : 0);
	if (lane == 0) exc = 0.0;
	if (lane == 31) red[warp] = inc;
	SYNC();
	if (warp == 0) {
		double w = lane < nWarps ? red[lane] : 0.0;
		for (int k = 1; k < 32; k <<= 1) {
			double o = samp_shfl_f64(w, lane >= k ? lane - k : lane);
			if (lane >= k) w += o;
		}
		red[lane] = w; // inclusive over warps 0..lane (its own slot: read above)
	}
	SYNC();
	double before = warp > 0 ? red[warp - 1] : 0.0;
	*total = red[nWarps - 1];
	SYNC();
	return before + exc;
}

// samp_argmax is kernels.CPU.Argmax (generic.go's genericArgmax): the first
// index of the largest value, ties to the lowest id; a NaN is never larger
// than anything and nothing is larger than a NaN, so a NaN at 0 gives 0 and
// NaNs elsewhere are passed over. -1 when vocab is 0.
DEV int samp_argmax(const float* x, int vocab, float* redF, int* redI) {
	const int lane = TX & 31, warp = TX >> 5, nWarps = BDX >> 5;
	float bv = 0.0f;
	int bi = -1;
	for (int i = TX; i < vocab; i += BDX) {
		float v = x[i];
		if (v == v && (bi < 0 || v > bv)) {
			bv = v;
			bi = i;
		}
	}
	for (int r = 0; r < 2; r++) {
		for (int m = 16; m > 0; m >>= 1) {
			float ov = SHFL_XOR(bv, m);
			int oi = SHFL_XOR_I(bi, m);
			if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) {
				bv = ov;
				bi = oi;
			}
		}
		if (r == 1) break;
		if (lane == 0) {
			redF[warp] = bv;
			redI[warp] = bi;
		}
		SYNC();
		// Every warp reduces the warps' winners (all get the answer).
		bv = lane < nWarps ? redF[lane] : 0.0f;
		bi = lane < nWarps ? redI[lane] : -1;
	}
	SYNC(); // redF/redI free again
	if (vocab > 0 && x[0] != x[0]) return 0;
	return bi;
}

// argmax_rows: out[r] = the first maximum of logits row r (vocab floats).
// Launch: grid (rows), block B (a multiple of 32, ≤ 1024; 1024 for
// vocabularies of 32k and more), no dynamic shared memory.
KERNEL void argmax_rows(int* out, const float* logits, int vocab) {
	SHARED(float, amRedF, 33);
	SHARED(int, amRedI, 33);
	int best = samp_argmax(logits + (long long)BX * vocab, vocab, amRedF, amRedI);
	if (TX == 0) out[BX] = best;
}

// samp_uniform is sampler.go's counterUniform: splitmix64's finalizer twice
// over seed ^ (pos+1)·golden, the top 53 bits as a float64 in [0,1).
DEV double samp_uniform(unsigned long long seed, int pos) {
	unsigned long long x = seed ^ ((unsigned long long)(long long)pos + 1ull) * 0x9e3779b97f4a7c15ull;
	for (int r = 0; r < 2; r++) {
		x ^= x >> 30;
		x *= 0xbf58476d1ce4e5b9ull;
		x ^= x >> 27;
		x *= 0x94d049bb133111ebull;
		x ^= x >> 31;
	}
	return (double)(x >> 11) * (1.0 / 9007199254740992.0); // exact: / 2^53
}

// samp_scale is x·f rounded to float32 on its own (never fused with the
// subtraction after it into an FMA: the CPU rounds the product first).
DEV float samp_scale(float x, float f) {
#if defined(__clang__)
#pragma clang fp contract(off)
#endif
	return x * f;
}

// sample_rows draws row r's token as sampler.go's choose() does with top_k
// off and top_p 1 (the branch "No ordering needed"):
//   - invTemp[r] ≤ 0 (greedy), or a ±Inf/NaN maximum: the first maximum;
//   - else probs = softmax(logits·invTemp) in float32 (max subtracted, the
//     sum's reciprocal multiplied in, as kernels.CPU.Softmax), thr =
//     minP[r]·probs[best] in float32, and with u = counterUniform(seeds[r],
//     pos[r]) the first id, in id order over the ids with q ≥ thr, q > 0 and
//     a logit above -Inf, at which the float64 running sum of q exceeds
//     u·Σq (the sum over q ≥ thr); the last such id when rounding leaves the
//     target unreached.
// The host passes seeds[r] = the request's seed + choice index and pos[r] =
// the number of tokens before the one drawn, as sampler.go's pick does, and
// invTemp = float32(1/temperature) (≤ 0 below sampler.go's samplingEps).
//
// Launch: grid (rows), block B (a multiple of 32, ≤ 1024; 1024 intended), no
// dynamic shared memory. Thread i owns the contiguous ids [i·c, (i+1)·c),
// c = ceil(vocab/B), for the draw: one block-wide float64 exclusive scan of
// the threads' sums finds the thread whose ids hold the crossing, which
// walks them in order. The exp sums of the softmax differ from the CPU's in
// rounding only (≈1e-7 relative), so the token is the CPU's unless u·Σq
// lies that close to a boundary between two ids.
KERNEL void sample_rows(int* out, const float* logits, int vocab, const unsigned long long* seeds, const int* pos,
                        const float* invTemp, const float* minP) {
	SHARED(float, smRedF, 33);
	SHARED(int, smRedI, 33);
	SHARED(double, smRedD, 33);
	const int r = BX;
	const float* x = logits + (long long)r * vocab;
	const int best = samp_argmax(x, vocab, smRedF, smRedI);
	const float f = invTemp[r];
	if (best < 0 || !(f > 0.0f)) {
		if (TX == 0) out[r] = best;
		return;
	}
	const float xb = x[best];
	if (!(xb - xb == 0.0f)) { // ±Inf or NaN
		if (TX == 0) out[r] = best;
		return;
	}
	const float ninf = -__builtin_inff();
	const bool scaled = f != 1.0f;
	// x·f is monotone in x for f > 0: the scaled row's max is xb·f.
	const float m = scaled ? samp_scale(xb, f) : xb;
	float s = 0.0f;
	for (int i = TX; i < vocab; i += BDX) s += fexp((scaled ? samp_scale(x[i], f) : x[i]) - m);
	const float inv = fdiv(1.0f, samp_sum_f32(s, smRedF));
	const float pmax = fexp(m - m) * inv;
	const float thr = minP[r] * pmax;

	const int per = (vocab + BDX - 1) / BDX;
	const int lo = TX * per < vocab ? TX * per : vocab;
	const int hi = lo + per < vocab ? lo + per : vocab;
	double seg = 0.0;
	int last = -1;
	for (int i = lo; i < hi; i++) {
		const float xi = x[i];
		const float q = fexp((scaled ? samp_scale(xi, f) : xi) - m) * inv;
		if (q >= thr && xi != ninf) {
			seg += (double)q;
			if (q != 0.0f) last = i;
		}
	}
	double total;
	const double before = samp_scan_f64(seg, smRedD, &total);
	const double target = samp_uniform(seeds[r], pos[r]) * total;
	// The first thread whose ids take the running sum past the target.
	const int owner = samp_ext_i32(seg > 0.0 && before + seg > target ? TX : 1 << 30, smRedI, 0);
	const int lastAll = samp_ext_i32(last, smRedI, 1);
	if (owner == 1 << 30) {
		if (TX == 0) out[r] = lastAll >= 0 ? lastAll : best;
		return;
	}
	if (TX != owner) return;
	double rem = target - before;
	for (int i = lo; i < hi; i++) {
		const float xi = x[i];
		const float q = fexp((scaled ? samp_scale(xi, f) : xi) - m) * inv;
		if (q < thr || q == 0.0f || xi == ninf) continue;
		rem -= (double)q;
		if (rem < 0.0) {
			out[r] = i;
			return;
		}
	}
	out[r] = last; // rounding: the crossing is at this thread's end
}
