// bench.cu: what `batchd bench gpu` measures the GPU's ceilings with.
#include "common.cuh"

// copy_f32: dst[i] = src[i], 16 bytes a thread when both are 16-byte
// aligned and n is a multiple of 4 (the benchmark's buffers are), else one
// float. Launch: 1-D grid-stride, block 256.
KERNEL void copy_f32(float* dst, const float* src, long long n) {
	if (((uintptr_t)dst | (uintptr_t)src) % 16 == 0 && n % 4 == 0) {
		struct f4 { float a, b, c, d; };
		f4* d4 = (f4*)dst;
		const f4* s4 = (const f4*)src;
		GRID_STRIDE(i, n / 4) { d4[i] = s4[i]; }
		return;
	}
	GRID_STRIDE(i, n) { dst[i] = src[i]; }
}
