// elementwise.cu: the conversions, row copies, norms, RoPE and the fused QKV
// tail of the native engine's forward pass. Every formula is the one package
// kernels (kernels.CPU, kernels/refdev) computes, rounding step by rounding
// step where the CPU rounds: products of RoPE are rounded before they are
// added (no FMA contraction, see ew_mul_rn), RMSNorm is
// (x·(1/sqrt(mean(x²)+eps)))·w. Only the order of the sum of squares
// differs (a tree here, index order on the CPU) and the GPU's rsqrt and exp
// are the approximate instructions of common.cuh.
//
// Launch shapes (the caller's; all blocks are 1-D, a multiple of 32 threads,
// at most 1024):
//   - "1-D" kernels take any grid and block and cover n with GRID_STRIDE;
//   - "row" kernels run one block per row (grid.x = rows) and loop the block
//     over the row, so any block size works; a warp per 32 elements (up to
//     256 threads) is the efficient choice.
// Vector (16- or 8-byte) loads and stores are used where the row length and
// the pointers' alignment allow it, checked at run time; otherwise the
// scalar loop runs.
#include "common.cuh"

// A 16-byte vector of four floats (float4 without the CUDA headers).
struct __attribute__((aligned(16))) ew_f4 {
	float x, y, z, w;
};

// Four 16-bit values in one 8-byte word.
struct __attribute__((aligned(8))) ew_h4 {
	uint16_t x, y, z, w;
};

DEV bool ew_aligned(const void* p, uintptr_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

// ew_warp_sum adds v over the 32 lanes of a warp; every lane gets the total.
DEV float ew_warp_sum(float v) {
	for (int m = 16; m > 0; m >>= 1) v += SHFL_XOR(v, m);
	return v;
}

// ew_block_sum adds v over the block (1-D, a multiple of 32 threads); every
// thread gets the same total. red is a SHARED array of 32 floats, used once
// per launch (a second call would need a SYNC() before it).
DEV float ew_block_sum(float v, float* red) {
	v = ew_warp_sum(v);
	int lane = TX & (WARP - 1);
	if (lane == 0) red[TX / WARP] = v;
	SYNC();
	// Every warp reduces the warp totals in the same order: the same bits
	// in every thread, with no second barrier for a broadcast.
	v = lane < BDX / WARP ? red[lane] : 0.0f;
	return ew_warp_sum(v);
}

// f32_to_f16 rounds to nearest even; overflow gives ±Inf, subnormals are
// kept, NaN stays NaN (quieted, payload kept): kernels.F32ToF16 bit for bit.
DEV uint32_t ew_round_shift(uint32_t m, uint32_t shift) {
	uint32_t q = m >> shift;
	uint32_t rem = m & ((1u << shift) - 1u);
	uint32_t half = 1u << (shift - 1u);
	if (rem > half || (rem == half && (q & 1u))) q++;
	return q;
}

DEV uint16_t f32_to_f16(float f) {
	union { uint32_t u; float f; } v;
	v.f = f;
	uint32_t b = v.u;
	uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
	int exp = (int)((b >> 23) & 0xffu);
	uint32_t mant = b & 0x7fffffu;
	if (exp == 0xff) {
		if (mant != 0) return (uint16_t)(sign | 0x7e00u | (mant >> 13));
		return (uint16_t)(sign | 0x7c00u);
	}
	int e = exp - 127 + 15;
	if (e >= 31) return (uint16_t)(sign | 0x7c00u);
	if (e <= 0) {
		if (e < -10) return sign;
		return (uint16_t)(sign | ew_round_shift(mant | 0x800000u, (uint32_t)(14 - e)));
	}
	return (uint16_t)(sign | (((uint32_t)e << 10) + ew_round_shift(mant, 13)));
}

// convert_f32_bf16: out[i] = bf16(in[i]), round to nearest even.
// 1-D: any grid, block 256; four values per thread step when in is 16-byte
// and out 8-byte aligned.
KERNEL void convert_f32_bf16(uint16_t* out, const float* in, long long n) {
	long long n4 = 0;
	if (ew_aligned(in, 16) && ew_aligned(out, 8)) {
		n4 = n / 4;
		GRID_STRIDE(i, n4) {
			ew_f4 v = ((const ew_f4*)in)[i];
			ew_h4 h = {f32_to_bf16(v.x), f32_to_bf16(v.y), f32_to_bf16(v.z), f32_to_bf16(v.w)};
			((ew_h4*)out)[i] = h;
		}
	}
	GRID_STRIDE(i, n - 4 * n4) out[4 * n4 + i] = f32_to_bf16(in[4 * n4 + i]);
}

// convert_f32_f16: out[i] = f16(in[i]) as kernels.F32ToF16 (RNE, overflow
// to ±Inf, subnormals kept). 1-D, block 256, vectorized as convert_f32_bf16.
KERNEL void convert_f32_f16(uint16_t* out, const float* in, long long n) {
	long long n4 = 0;
	if (ew_aligned(in, 16) && ew_aligned(out, 8)) {
		n4 = n / 4;
		GRID_STRIDE(i, n4) {
			ew_f4 v = ((const ew_f4*)in)[i];
			ew_h4 h = {f32_to_f16(v.x), f32_to_f16(v.y), f32_to_f16(v.z), f32_to_f16(v.w)};
			((ew_h4*)out)[i] = h;
		}
	}
	GRID_STRIDE(i, n - 4 * n4) out[4 * n4 + i] = f32_to_f16(in[4 * n4 + i]);
}

// convert_f16_bf16: out[i] = bf16(f32(in[i])). 1-D, block 256; four values
// per step when both are 8-byte aligned.
KERNEL void convert_f16_bf16(uint16_t* out, const uint16_t* in, long long n) {
	long long n4 = 0;
	if (ew_aligned(in, 8) && ew_aligned(out, 8)) {
		n4 = n / 4;
		GRID_STRIDE(i, n4) {
			ew_h4 v = ((const ew_h4*)in)[i];
			ew_h4 h = {f32_to_bf16(f16_to_f32(v.x)), f32_to_bf16(f16_to_f32(v.y)), f32_to_bf16(f16_to_f32(v.z)),
			           f32_to_bf16(f16_to_f32(v.w))};
			((ew_h4*)out)[i] = h;
		}
	}
	GRID_STRIDE(i, n - 4 * n4) out[4 * n4 + i] = f32_to_bf16(f16_to_f32(in[4 * n4 + i]));
}

// dequant_q8_0_bf16: nblocks GGUF Q8_0 blocks (34 bytes: an f16 scale d,
// then 32 int8 q) to bf16: out[32b+i] = bf16(f32(d)·q_i), as
// kernels.DequantizeQ8_0 then kernels.F32ToBF16. 1-D over nblocks·8 groups
// of four values (launch ≥ nblocks·8 threads for one pass, e.g. a grid for
// nblocks·32 at block 256); a warp covers four blocks, reading 136
// contiguous bytes and writing 256.
KERNEL void dequant_q8_0_bf16(uint16_t* out, const uint8_t* q, long long nblocks) {
	bool vec = ew_aligned(out, 8);
	GRID_STRIDE(g, nblocks * 8) {
		long long b = g >> 3;
		int part = (int)(g & 7);
		const uint8_t* blk = q + b * 34;
		float d = f16_to_f32((uint16_t)(blk[0] | (blk[1] << 8)));
		const uint8_t* qs = blk + 2 + 4 * part;
		ew_h4 h = {f32_to_bf16((float)(int8_t)qs[0] * d), f32_to_bf16((float)(int8_t)qs[1] * d),
		           f32_to_bf16((float)(int8_t)qs[2] * d), f32_to_bf16((float)(int8_t)qs[3] * d)};
		uint16_t* o = out + b * 32 + 4 * part;
		if (vec) {
			*(ew_h4*)o = h;
		} else {
			o[0] = h.x;
			o[1] = h.y;
			o[2] = h.z;
			o[3] = h.w;
		}
	}
}

// embed_rows: out row t = row ids[t] of the [*][cols] table w of element
// type wtype (1 f32, 2 f16, 3 bf16), widened to float32 exactly.
// Row kernel: grid.x = number of ids.
KERNEL void embed_rows(float* out, const void* w, int wtype, const int* ids, int cols) {
	long long id = ids[BX];
	float* o = out + (long long)BX * cols;
	if (wtype == 1) {
		const float* src = (const float*)w + id * cols;
		if ((cols & 3) == 0 && ew_aligned(src, 16) && ew_aligned(o, 16)) {
			for (int c = TX; c < cols / 4; c += BDX) ((ew_f4*)o)[c] = ((const ew_f4*)src)[c];
			return;
		}
		for (int c = TX; c < cols; c += BDX) o[c] = src[c];
		return;
	}
	const uint16_t* src = (const uint16_t*)w + id * cols;
	bool f16 = wtype == 2;
	if ((cols & 3) == 0 && ew_aligned(src, 8) && ew_aligned(o, 16)) {
		for (int c = TX; c < cols / 4; c += BDX) {
			ew_h4 h = ((const ew_h4*)src)[c];
			ew_f4 v;
			if (f16) {
				v.x = f16_to_f32(h.x), v.y = f16_to_f32(h.y), v.z = f16_to_f32(h.z), v.w = f16_to_f32(h.w);
			} else {
				v.x = bf16_to_f32(h.x), v.y = bf16_to_f32(h.y), v.z = bf16_to_f32(h.z), v.w = bf16_to_f32(h.w);
			}
			((ew_f4*)o)[c] = v;
		}
		return;
	}
	for (int c = TX; c < cols; c += BDX) o[c] = f16 ? f16_to_f32(src[c]) : bf16_to_f32(src[c]);
}

// ew_copy_row copies width floats from src to dst with the whole block.
DEV void ew_copy_row(float* dst, const float* src, int width) {
	if ((width & 3) == 0 && ew_aligned(src, 16) && ew_aligned(dst, 16)) {
		for (int c = TX; c < width / 4; c += BDX) ((ew_f4*)dst)[c] = ((const ew_f4*)src)[c];
		return;
	}
	for (int c = TX; c < width; c += BDX) dst[c] = src[c];
}

// copy_rows: out row i = x row rows[i], rows of width floats.
// Row kernel: grid.x = number of rows copied.
KERNEL void copy_rows(float* out, const float* x, const int* rows, int width) {
	ew_copy_row(out + (long long)BX * width, x + (long long)rows[BX] * width, width);
}

// write_kv: row i of k and v (width floats each) to row slots[i] of the
// pools K and V; a negative slot is skipped (a padding row).
// Row kernel: grid.x = n.
KERNEL void write_kv(float* K, float* V, const float* k, const float* v, const int* slots, int n, int width) {
	if (BX >= n) return;
	long long s = slots[BX];
	if (s < 0) return;
	ew_copy_row(K + s * width, k + (long long)BX * width, width);
	ew_copy_row(V + s * width, v + (long long)BX * width, width);
}

// add_bias: x row r += bias, rows of n floats. Row kernel: grid.x = rows.
KERNEL void add_bias(float* x, const float* bias, int n) {
	float* r = x + (long long)BX * n;
	if ((n & 3) == 0 && ew_aligned(r, 16) && ew_aligned(bias, 16)) {
		for (int c = TX; c < n / 4; c += BDX) {
			ew_f4 a = ((ew_f4*)r)[c], b = ((const ew_f4*)bias)[c];
			a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
			((ew_f4*)r)[c] = a;
		}
		return;
	}
	for (int c = TX; c < n; c += BDX) r[c] += bias[c];
}

// add: dst[i] += src[i]. 1-D, block 256; four per step when both are
// 16-byte aligned.
KERNEL void add(float* dst, const float* src, long long n) {
	long long n4 = 0;
	if (ew_aligned(dst, 16) && ew_aligned(src, 16)) {
		n4 = n / 4;
		GRID_STRIDE(i, n4) {
			ew_f4 a = ((ew_f4*)dst)[i], b = ((const ew_f4*)src)[i];
			a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
			((ew_f4*)dst)[i] = a;
		}
	}
	GRID_STRIDE(i, n - 4 * n4) dst[4 * n4 + i] += src[4 * n4 + i];
}

// ew_silu_mul is g/(1+exp(−g))·u, as kernels.CPU.SiLUMul.
DEV float ew_silu_mul(float g, float u) { return fdiv(g, 1.0f + fexp(-g)) * u; }

// silu_mul: gate[i] = silu(gate[i])·up[i]. 1-D, block 256; four per step
// when both are 16-byte aligned.
KERNEL void silu_mul(float* gate, const float* up, long long n) {
	long long n4 = 0;
	if (ew_aligned(gate, 16) && ew_aligned(up, 16)) {
		n4 = n / 4;
		GRID_STRIDE(i, n4) {
			ew_f4 g = ((ew_f4*)gate)[i], u = ((const ew_f4*)up)[i];
			g.x = ew_silu_mul(g.x, u.x), g.y = ew_silu_mul(g.y, u.y);
			g.z = ew_silu_mul(g.z, u.z), g.w = ew_silu_mul(g.w, u.w);
			((ew_f4*)gate)[i] = g;
		}
	}
	GRID_STRIDE(i, n - 4 * n4) gate[4 * n4 + i] = ew_silu_mul(gate[4 * n4 + i], up[4 * n4 + i]);
}

// ew_rms_scale is 1/sqrt(ss/dim + eps): the mean and epsilon in float32 as
// the CPU computes them.
DEV float ew_rms_scale(float ss, int dim, float eps) { return frsqrt(ss / (float)dim + eps); }

// ew_norm_row: the block's RMSNorm of one row. When delta is non-null the
// row x is first updated in place, x += delta (add_rmsnorm's residual).
// Each thread reads back in pass 2 exactly the elements it wrote in pass 1,
// so out may alias x.
DEV void ew_norm_row(float* out, float* x, const float* delta, const float* w, int dim, float eps, float* red) {
	bool vec = (dim & 3) == 0 && ew_aligned(out, 16) && ew_aligned(x, 16) && ew_aligned(w, 16) &&
	           (delta == 0 || ew_aligned(delta, 16));
	float ss = 0.0f;
	if (vec) {
		for (int c = TX; c < dim / 4; c += BDX) {
			ew_f4 v = ((const ew_f4*)x)[c];
			if (delta) {
				ew_f4 d = ((const ew_f4*)delta)[c];
				v.x += d.x, v.y += d.y, v.z += d.z, v.w += d.w;
				((ew_f4*)x)[c] = v;
			}
			ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
		}
	} else {
		for (int c = TX; c < dim; c += BDX) {
			float v = x[c];
			if (delta) {
				v += delta[c];
				x[c] = v;
			}
			ss += v * v;
		}
	}
	float scale = ew_rms_scale(ew_block_sum(ss, red), dim, eps);
	if (vec) {
		for (int c = TX; c < dim / 4; c += BDX) {
			ew_f4 v = ((const ew_f4*)x)[c], g = ((const ew_f4*)w)[c];
			v.x = (v.x * scale) * g.x, v.y = (v.y * scale) * g.y;
			v.z = (v.z * scale) * g.z, v.w = (v.w * scale) * g.w;
			((ew_f4*)out)[c] = v;
		}
	} else {
		for (int c = TX; c < dim; c += BDX) out[c] = (x[c] * scale) * w[c];
	}
}

// rmsnorm: out row = (x row · 1/sqrt(mean(x²)+eps)) · w, rows of dim
// floats; out may alias x. Row kernel: grid.x = rows, block 128..1024 (a
// warp per 32 floats up to 256 is the caller's default); one block-wide
// reduction (warp shuffles, then 32 floats of shared memory).
KERNEL void rmsnorm(float* out, const float* x, const float* w, int dim, float eps) {
	SHARED(float, ew_red, 32);
	long long off = (long long)BX * dim;
	ew_norm_row(out + off, (float*)(x + off), 0, w, dim, eps, ew_red);
}

// add_rmsnorm: resid row += delta row, then out row = rmsnorm(resid row)·w.
// Row kernel as rmsnorm.
KERNEL void add_rmsnorm(float* out, float* resid, const float* delta, const float* w, int dim, float eps) {
	SHARED(float, ew_red, 32);
	long long off = (long long)BX * dim;
	ew_norm_row(out + off, resid + off, delta + off, w, dim, eps, ew_red);
}

// ew_mul_rn is a·b rounded on its own: the GPU build would otherwise fuse it
// with the add that follows into an FMA (clang's CUDA default), which rounds
// once where the CPU rounds twice.
#if defined(__CUDA_ARCH__)
DEV float ew_mul_rn(float a, float b) { return __nvvm_mul_rn_f(a, b); }
#else
DEV float ew_mul_rn(float a, float b) { return a * b; }
#endif

// ew_rope_pair rotates pair i of head h of one token's row x: (a,b) →
// (a·c − b·s, a·s + b·c), each product rounded before the sum as the CPU
// does. neox pairs are (i, i+nPairs), the others (2i, 2i+1).
DEV void ew_rope_pair(float* x, float c, float s, int i, int nPairs, int neox, float* K) {
	int a = neox ? i : 2 * i;
	int b = neox ? i + nPairs : 2 * i + 1;
	float x0 = x[a], x1 = x[b];
	float y0 = ew_mul_rn(x0, c) - ew_mul_rn(x1, s);
	float y1 = ew_mul_rn(x0, s) + ew_mul_rn(x1, c);
	x[a] = y0;
	x[b] = y1;
	if (K) {
		K[a] = y0;
		K[b] = y1;
	}
}

// rope: token BX's heads (x is [T][heads][headDim]) rotated pair by pair
// with cs/sn, [T][nPairs] tables of cos and sin of pos·invFreq[i] (host
// computed, as kernels.CPU.RoPE); dimensions ≥ 2·nPairs are untouched.
// Row kernel: grid.x = T, the block looping over heads·nPairs pairs.
KERNEL void rope(float* x, const float* cs, const float* sn, int heads, int headDim, int nPairs, int neox) {
	float* row = x + (long long)BX * heads * headDim;
	const float* c = cs + (long long)BX * nPairs;
	const float* s = sn + (long long)BX * nPairs;
	for (int j = TX; j < heads * nPairs; j += BDX) {
		int h = j / nPairs, i = j - h * nPairs;
		ew_rope_pair(row + h * headDim, c[i], s[i], i, nPairs, neox, 0);
	}
}

// qkv_post: the fused tail of token BX's QKV projections, q [T][heads]
// [headDim], k and v [T][kvHeads][headDim]:
//   1. + bq, bk, bv (when bq is non-null);
//   2. RMSNorm of every q head with qNorm and k head with kNorm (when qNorm
//      is non-null), one warp per head;
//   3. RoPE of q and k (cs/sn as rope's);
//   4. k and v to pool rows slots[BX] of K and V (when K is non-null; a
//      negative slot is skipped), k's rotated pairs as they are computed.
// q, k and the pool rows get the same values as add_bias, rmsnorm, rope and
// write_kv in sequence; v itself is left as it is (v + bv goes only to V).
// Row kernel: grid.x = T, any block (a warp per 32 of (heads+kvHeads)·
// headDim up to 256 is the caller's default); two block barriers, the
// token's rows staying in L1 between the steps.
KERNEL void qkv_post(float* q, float* k, const float* v, const float* bq, const float* bk, const float* bv,
                     const float* qNorm, const float* kNorm, float eps, const float* cs, const float* sn, int nPairs,
                     int neox, int heads, int kvHeads, int headDim, float* K, float* V, const int* slots) {
	int t = BX;
	int qDim = heads * headDim, kvDim = kvHeads * headDim;
	float* qr = q + (long long)t * qDim;
	float* kr = k + (long long)t * kvDim;
	const float* vr = v + (long long)t * kvDim;
	float* Kr = 0;
	float* Vr = 0;
	if (K) {
		long long s = slots[t];
		if (s >= 0) Kr = K + s * kvDim, Vr = V + s * kvDim;
	}

	// 1 and 2. Each thread (warp) reads back only what it wrote.
	if (qNorm) {
		int lane = TX & (WARP - 1);
		for (int h = TX / WARP; h < heads + kvHeads; h += BDX / WARP) {
			bool isq = h < heads;
			int hh = isq ? h : h - heads;
			float* x = (isq ? qr : kr) + hh * headDim;
			const float* b = bq ? (isq ? bq : bk) + hh * headDim : 0;
			const float* w = isq ? qNorm : kNorm;
			float ss = 0.0f;
			for (int c = lane; c < headDim; c += WARP) {
				float e = x[c];
				if (b) {
					e += b[c];
					x[c] = e;
				}
				ss += e * e;
			}
			float scale = ew_rms_scale(ew_warp_sum(ss), headDim, eps);
			for (int c = lane; c < headDim; c += WARP) x[c] = (x[c] * scale) * w[c];
		}
	} else if (bq) {
		for (int c = TX; c < qDim; c += BDX) qr[c] += bq[c];
		for (int c = TX; c < kvDim; c += BDX) kr[c] += bk[c];
	}
	SYNC();

	// 3 and 4: the pairs of q and k; k's unrotated tail and v copied.
	const float* c = cs + (long long)t * nPairs;
	const float* s = sn + (long long)t * nPairs;
	for (int j = TX; j < (heads + kvHeads) * nPairs; j += BDX) {
		int h = j / nPairs, i = j - h * nPairs;
		if (h < heads) {
			ew_rope_pair(qr + h * headDim, c[i], s[i], i, nPairs, neox, 0);
		} else {
			h -= heads;
			ew_rope_pair(kr + h * headDim, c[i], s[i], i, nPairs, neox, Kr ? Kr + h * headDim : 0);
		}
	}
	if (Kr) {
		int rest = headDim - 2 * nPairs;
		if (rest > 0) {
			for (int j = TX; j < kvHeads * rest; j += BDX) {
				int h = j / rest, off = h * headDim + 2 * nPairs + (j - h * rest);
				Kr[off] = kr[off];
			}
		}
		if (bq)
			for (int c = TX; c < kvDim; c += BDX) Vr[c] = vr[c] + bv[c];
		else
			ew_copy_row(Vr, vr, kvDim);
	}
}
