// selftest.cu: small kernels that pin down the CUDA dialect's meaning in
// both builds (thread indexing, shared memory, barriers, shuffles, argument
// passing). Package kernels/cuda/emu's tests run them on the host; on a GPU
// they are the first thing a device check launches.
#include "common.cuh"

// warp_sum adds v over the 32 lanes; every lane gets the total.
DEV float selftest_warp_sum(float v) {
	for (int m = 16; m > 0; m >>= 1) v += SHFL_XOR(v, m);
	return v;
}

// selftest_block_sum: block b = BY·GDX + BX sums in[b·n .. b·n+n) into
// out[b]: per-thread strides, a shuffle reduction per warp, the warp sums
// through shared memory, then warp 0 alone reduces them.
KERNEL void selftest_block_sum(float* out, const float* in, int n) {
	SHARED(float, warpSums, 32);
	int b = BY * GDX + BX;
	int nthreads = BDX * BDY;
	int t = TY * BDX + TX;
	float v = 0;
	for (int i = t; i < n; i += nthreads) v += in[(long long)b * n + i];
	v = selftest_warp_sum(v);
	if ((t & 31) == 0) warpSums[t >> 5] = v;
	SYNC();
	if (t < 32) {
		float w = t < nthreads / 32 ? warpSums[t] : 0.0f;
		w = selftest_warp_sum(w);
		if (t == 0) out[b] = w;
	}
}

// selftest_warp0: only warp 0 of the block shuffles: out[2·BX] is the sum of
// in[32·BX ..+32) (integer butterfly), out[2·BX+1] what lane 5 holds after a
// rotation by one lane (SHFL_I from lane+1).
KERNEL void selftest_warp0(int* out, const int* in) {
	if (TX < 32) {
		int v = in[BX * 32 + TX];
		int rot = SHFL_I(v, (TX + 1) & 31);
		int s = v;
		for (int m = 1; m < 32; m <<= 1) s += SHFL_XOR_I(s, m);
		int fifth = SHFL_I(rot, 5);
		if (TX == 0) {
			out[2 * BX] = s;
			out[2 * BX + 1] = fifth;
		}
	}
}

// selftest_dyn: block BX writes 3·i + BX to dynamic shared slot i < n, then
// out[BX·n + i] = slot n-1-i (another thread's write, after the barrier).
KERNEL void selftest_dyn(int* out, int n) {
	SHARED_DYN(int, selftest_dyn_buf); // a module-wide name in the PTX build: keep it unique
	int* buf = selftest_dyn_buf;
	for (int i = TX; i < n; i += BDX) buf[i] = 3 * i + BX;
	SYNC();
	for (int i = TX; i < n; i += BDX) out[BX * n + i] = buf[n - 1 - i];
}

// selftest_args: parameters of every kind in mixed order, copied out by one
// thread.
KERNEL void selftest_args(long long* out, int a, const int* p, float f, long long b, unsigned u,
                          unsigned long long c, float* q) {
	if (TX == 0 && BX == 0) {
		out[0] = a;
		out[1] = p[0];
		out[2] = (long long)(f * 2.0f);
		out[3] = b;
		out[4] = (long long)u;
		out[5] = (long long)c;
		q[0] = f;
	}
}

// selftest_index: every thread of a 3-D grid of 2-D blocks writes who it is
// (TX | TY<<8 | BX<<16 | BY<<22 | BZ<<28) at its linear index.
KERNEL void selftest_index(int* out) {
	long long block = ((long long)BZ * GDY + BY) * GDX + BX;
	out[block * BDX * BDY + TY * BDX + TX] = TX | TY << 8 | BX << 16 | BY << 22 | BZ << 28;
}

// selftest_early_exit: threads TX >= n return at once; the others meet at a
// barrier (returned threads count as arrived) and read each other's writes:
// out[i] = 2·(n-1-i) for i < n.
KERNEL void selftest_early_exit(int* out, int n) {
	SHARED(int, s, 1024);
	if (TX >= n) return;
	s[TX] = 2 * TX;
	SYNC();
	out[TX] = s[n - 1 - TX];
}

// selftest_bad_shuffle breaks the rules on purpose: half a warp shuffles
// while the other half has returned (mode 0) or waits at a barrier (mode 1).
// The emulation must refuse it (a GPU would hang or return garbage); it is
// never launched on a GPU.
KERNEL void selftest_bad_shuffle(int* out, int mode) {
	if (TX < 16) {
		out[TX] = SHFL_XOR_I(TX, 1);
	} else if (mode == 1) {
		SYNC();
	}
}
