// common.cuh: the one CUDA dialect batchd's kernels are written in.
//
// The same source compiles two ways:
//   - for the GPU, by clang as CUDA device code (scripts/gen-ptx.sh:
//     clang-19 -x cuda --cuda-device-only -nocudainc -nocudalib), with no
//     CUDA toolkit headers: the macros below map to clang's NVPTX builtins;
//   - for the host, as C++ with BATCHD_EMU defined (package kernels/cuda/emu),
//     where every CUDA thread of a block runs as a fiber of emu.h's runtime:
//     that is how the kernels are tested on machines without a GPU.
// Kernels use only what this header defines for thread indexing, shared
// memory, barriers, warp shuffles and fast math, so both builds mean the same.
//
// Rules for kernels:
//   - declare with KERNEL (extern "C", a fixed symbol name), helpers with DEV;
//   - block sizes are multiples of 32 (WARP) and at most 1024; every lane of
//     a warp calls SHFL_* together, every thread of a block calls SYNC()
//     together;
//   - static shared arrays with SHARED(type, name, count) at the top of the
//     kernel body (before any branch), dynamic ones with SHARED_DYN;
//   - no atomics, no printf, no libdevice math (none is linked).
#pragma once

#include <stdint.h>

#define WARP 32

#if defined(__CUDA__) && defined(__CUDA_ARCH__)

#define KERNEL extern "C" __attribute__((global))
#define DEV static __attribute__((device)) __attribute__((always_inline)) inline

#define TX ((int)__nvvm_read_ptx_sreg_tid_x())
#define TY ((int)__nvvm_read_ptx_sreg_tid_y())
#define BX ((int)__nvvm_read_ptx_sreg_ctaid_x())
#define BY ((int)__nvvm_read_ptx_sreg_ctaid_y())
#define BZ ((int)__nvvm_read_ptx_sreg_ctaid_z())
#define BDX ((int)__nvvm_read_ptx_sreg_ntid_x())
#define BDY ((int)__nvvm_read_ptx_sreg_ntid_y())
#define GDX ((int)__nvvm_read_ptx_sreg_nctaid_x())
#define GDY ((int)__nvvm_read_ptx_sreg_nctaid_y())

#define SHARED(type, name, count) static __attribute__((shared)) type name[count]
#define SHARED_DYN(type, name) extern __attribute__((shared)) type name[]
#define SYNC() __syncthreads()

// Full-warp shuffles: lane ^ mask, and lane src.
#define SHFL_XOR(v, mask) __nvvm_shfl_sync_bfly_f32(0xffffffffu, (v), (mask), 0x1f)
#define SHFL_XOR_I(v, mask) __nvvm_shfl_sync_bfly_i32(0xffffffffu, (v), (mask), 0x1f)
#define SHFL(v, src) __nvvm_shfl_sync_idx_f32(0xffffffffu, (v), (src), 0x1f)
#define SHFL_I(v, src) __nvvm_shfl_sync_idx_i32(0xffffffffu, (v), (src), 0x1f)

// Fast math: ex2.approx (2 ulp), rsqrt.approx, division.
DEV float fexp(float x) { return __nvvm_ex2_approx_f(x * 1.4426950408889634f); }
DEV float frsqrt(float x) { return __nvvm_rsqrt_approx_f(x); }
DEV float fdiv(float a, float b) { return __nvvm_div_rn_f(a, b); }

#elif defined(BATCHD_EMU)

#include "emu.h"

#define KERNEL extern "C"
#define DEV static inline

#define TX (emu_thread()->tx)
#define TY (emu_thread()->ty)
#define BX (emu_thread()->bx)
#define BY (emu_thread()->by)
#define BZ (emu_thread()->bz)
#define BDX (emu_thread()->bdx)
#define BDY (emu_thread()->bdy)
#define GDX (emu_thread()->gdx)
#define GDY (emu_thread()->gdy)

#define SHARED(type, name, count) type* name = (type*)emu_shared(sizeof(type) * (count))
#define SHARED_DYN(type, name) type* name = (type*)emu_shared_dyn()
#define SYNC() emu_sync()

#define SHFL_XOR(v, mask) emu_shfl_f32((v), emu_lane() ^ (mask))
#define SHFL_XOR_I(v, mask) emu_shfl_i32((v), emu_lane() ^ (mask))
#define SHFL(v, src) emu_shfl_f32((v), (src))
#define SHFL_I(v, src) emu_shfl_i32((v), (src))

#include <math.h>
DEV float fexp(float x) { return expf(x); }
DEV float frsqrt(float x) { return 1.0f / sqrtf(x); }
DEV float fdiv(float a, float b) { return a / b; }

#else
#error "common.cuh: compile as CUDA device code (clang -x cuda --cuda-device-only) or with -DBATCHD_EMU"
#endif

// Bit-exact conversions, the same in both builds (and as package kernels's).
DEV float bf16_to_f32(uint16_t h) {
	union { uint32_t u; float f; } v;
	v.u = (uint32_t)h << 16;
	return v.f;
}

// f32_to_bf16 rounds to nearest even; NaN stays a (quiet) NaN.
DEV uint16_t f32_to_bf16(float f) {
	union { uint32_t u; float f; } v;
	v.f = f;
	if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);
	return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

DEV float f16_to_f32(uint16_t h) {
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t man = h & 0x3ffu;
	union { uint32_t u; float f; } v;
	if (exp == 0) {
		// zero or subnormal: man·2^-24
		v.f = (float)man * 5.9604644775390625e-8f;
		v.u |= sign;
		return v.f;
	}
	if (exp == 31) {
		// Inf, or a NaN quieted as kernels.F16ToF32 (and F16C) quiet it.
		v.u = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0u);
		return v.f;
	}
	v.u = sign | ((exp + 112u) << 23) | (man << 13);
	return v.f;
}

// Grid-stride loop over [0, n) for 1-D launches.
#define GRID_STRIDE(i, n) \
	for (long long i = (long long)BX * BDX + TX; i < (long long)(n); i += (long long)GDX * BDX)
