// emu.h: the host fiber runtime common.cuh's BATCHD_EMU mode runs kernels on.
//
// Every CUDA thread of a block is a fiber (emu/runtime.cpp); the blocks of a
// grid run one after another on one OS thread. SYNC() is a block barrier
// (threads that returned count as arrived, as on the GPU), the SHFL_* macros
// exchange values between the 32 lanes of a warp, which all wait for each
// other. Misuse the GPU would hang on or leave undefined (a warp shuffle some
// lanes of the warp never reach, a barrier others can never join) aborts the
// launch with an error naming the kernel and the block.
#pragma once

#include <stddef.h>
#include <stdint.h>

struct EmuThread {
	int tx, ty, bx, by, bz, bdx, bdy, gdx, gdy;
};

extern EmuThread* emu_cur;

static inline EmuThread* emu_thread() { return emu_cur; }
static inline int emu_lane() { return (emu_cur->ty * emu_cur->bdx + emu_cur->tx) & 31; }

void* emu_shared(size_t bytes);
void* emu_shared_dyn();
void emu_sync();
float emu_shfl_f32(float v, int srcLane);
int emu_shfl_i32(int v, int srcLane);

// emu_launch runs fn(args) on every thread of a gdx×gdy×gdz grid of
// bdx×bdy blocks with shared bytes of dynamic shared memory. It returns 0,
// or -1 with a message in err (errlen bytes, NUL-terminated).
typedef void (*EmuKernel)(const uint64_t* args);
int emu_launch(const char* name, EmuKernel fn, const uint64_t* args, int gdx, int gdy, int gdz, int bdx,
               int bdy, int bdz, unsigned shared, char* err, size_t errlen);
