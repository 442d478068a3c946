// runtime.cpp: the fiber runtime behind emu.h (see there).
//
// Fibers are created once with makecontext and live for the whole process:
// each loops over "run the current kernel as my thread, then report done".
// Switching uses _setjmp/_longjmp (no signal-mask syscall per switch, unlike
// swapcontext), so shuffles and barriers cost a few nanoseconds each.
#include "../emu.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

enum { EMU_MAX_THREADS = 1024, EMU_STACK = 64 << 10, EMU_STATIC_SHARED = 64 << 10, EMU_DYN_SHARED = 228 << 10 };

enum EmuState { ST_RUN, ST_SYNC, ST_SHFL, ST_DONE };

struct EmuFiber {
	EmuThread t;
	ucontext_t uc;
	jmp_buf jb;
	char* stack;
	int started;      // entered at least once since (re)creation
	int state;        // EmuState
	size_t cursor;    // static shared bytes this thread has declared
	uint32_t shflVal; // value offered to the warp
	int shflSrc;      // lane asked for
	uint32_t shflOut; // value received
};

EmuThread* emu_cur;

static EmuFiber emu_fibers[EMU_MAX_THREADS];
static int emu_nfibers; // fibers created so far
static EmuFiber* emu_self;
static jmp_buf emu_sched;
static ucontext_t emu_sched_uc;

static struct {
	const char* name;
	EmuKernel fn;
	const uint64_t* args;
	int nthreads;
	unsigned dyn;
} emu_run;

static unsigned char* emu_arena; // static shared, then dynamic shared
static size_t emu_static_high;   // most static shared bytes any block declared
static char emu_abort_msg[512];
static int emu_aborted;

// emu_fail records the first error of the launch; the scheduler stops the
// block at its next decision.
static void emu_fail(const char* fmt, ...) {
	if (emu_aborted) return;
	emu_aborted = 1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(emu_abort_msg, sizeof emu_abort_msg, fmt, ap);
	va_end(ap);
}

static void emu_yield(int state) {
	emu_self->state = state;
	if (!_setjmp(emu_self->jb)) _longjmp(emu_sched, 1);
}

static void emu_fiber_main() {
	for (;;) {
		EmuFiber* f = emu_self;
		f->cursor = 0;
		emu_run.fn(emu_run.args);
		emu_yield(ST_DONE);
	}
}

static void emu_fiber_create(EmuFiber* f) {
	if (!f->stack) {
		// A guard page below the stack turns an overflow into a crash,
		// not a silent overwrite of another fiber.
		long page = sysconf(_SC_PAGESIZE);
		char* m = (char*)mmap(NULL, EMU_STACK + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED) {
			fprintf(stderr, "emu: mmap of a fiber stack failed\n");
			abort();
		}
		mprotect(m, page, PROT_NONE);
		f->stack = m + page;
	}
	getcontext(&f->uc);
	f->uc.uc_stack.ss_sp = f->stack;
	f->uc.uc_stack.ss_size = EMU_STACK;
	f->uc.uc_link = NULL;
	makecontext(&f->uc, emu_fiber_main, 0);
	f->started = 0;
}

// emu_resume runs f until it yields.
static void emu_resume(EmuFiber* f) {
	emu_self = f;
	emu_cur = &f->t;
	f->state = ST_RUN;
	if (!_setjmp(emu_sched)) {
		if (!f->started) {
			f->started = 1;
			swapcontext(&emu_sched_uc, &f->uc);
		} else {
			_longjmp(f->jb, 1);
		}
	}
}

void* emu_shared(size_t bytes) {
	EmuFiber* f = emu_self;
	size_t off = f->cursor;
	size_t end = off + ((bytes + 15) & ~(size_t)15);
	if (end > EMU_STATIC_SHARED) {
		emu_fail("kernel %s: more than %d bytes of static shared memory", emu_run.name, EMU_STATIC_SHARED);
		emu_yield(ST_DONE);
	}
	f->cursor = end;
	if (end > emu_static_high) emu_static_high = end;
	return emu_arena + off;
}

void* emu_shared_dyn() { return emu_arena + EMU_STATIC_SHARED; }

void emu_sync() { emu_yield(ST_SYNC); }

static uint32_t emu_shfl(uint32_t v, int src) {
	emu_self->shflVal = v;
	emu_self->shflSrc = src;
	emu_yield(ST_SHFL);
	return emu_self->shflOut;
}

float emu_shfl_f32(float v, int srcLane) {
	uint32_t u;
	memcpy(&u, &v, 4);
	u = emu_shfl(u, srcLane);
	float r;
	memcpy(&r, &u, 4);
	return r;
}

int emu_shfl_i32(int v, int srcLane) { return (int)emu_shfl((uint32_t)v, srcLane); }

static const char* emu_state_name(int s) {
	switch (s) {
	case ST_SYNC: return "waits at SYNC()";
	case ST_SHFL: return "waits at a warp shuffle";
	case ST_DONE: return "has returned";
	}
	return "runs";
}

// emu_block runs one block to completion; 0 or -1 (emu_abort_msg set).
static int emu_block() {
	int n = emu_run.nthreads;
	for (int i = 0; i < n; i++) emu_fibers[i].state = ST_RUN;
	for (;;) {
		for (int i = 0; i < n && !emu_aborted; i++)
			if (emu_fibers[i].state == ST_RUN) emu_resume(&emu_fibers[i]);
		if (emu_aborted) return -1;
		int progress = 0, done = 0, sync = 0;
		for (int w = 0; w < n; w += 32) {
			EmuFiber* lanes = &emu_fibers[w];
			int atShfl = 0;
			for (int l = 0; l < 32; l++) atShfl += lanes[l].state == ST_SHFL;
			if (atShfl == 0) continue;
			if (atShfl == 32) {
				for (int l = 0; l < 32; l++) lanes[l].shflOut = lanes[lanes[l].shflSrc & 31].shflVal;
				for (int l = 0; l < 32; l++) lanes[l].state = ST_RUN;
				progress = 1;
				continue;
			}
			// Some lanes wait for the warp while others cannot come: they
			// returned, or wait at a barrier the shuffling lanes never reach.
			for (int l = 0; l < 32; l++) {
				if (lanes[l].state != ST_SHFL) {
					EmuThread* t = &lanes[l].t;
					emu_fail("kernel %s: deadlock in block (%d,%d,%d): %d lanes of warp %d wait at a warp shuffle "
					         "while lane %d (thread %d,%d) %s; every lane of a warp must reach SHFL_* together",
					         emu_run.name, t->bx, t->by, t->bz, atShfl, w / 32, l, t->tx, t->ty,
					         emu_state_name(lanes[l].state));
					return -1;
				}
			}
		}
		if (progress) continue;
		for (int i = 0; i < n; i++) {
			done += emu_fibers[i].state == ST_DONE;
			sync += emu_fibers[i].state == ST_SYNC;
		}
		if (done == n) return 0;
		if (sync + done == n) {
			for (int i = 0; i < n; i++)
				if (emu_fibers[i].state == ST_SYNC) emu_fibers[i].state = ST_RUN;
			continue;
		}
		emu_fail("kernel %s: no thread can run", emu_run.name); // unreachable: every state is handled above
		return -1;
	}
}

int emu_launch(const char* name, EmuKernel fn, const uint64_t* args, int gdx, int gdy, int gdz, int bdx, int bdy,
               int bdz, unsigned shared, char* err, size_t errlen) {
	int n = bdx * bdy * bdz;
	if (bdz != 1 || bdx <= 0 || bdy <= 0 || n % 32 != 0 || n > EMU_MAX_THREADS) {
		snprintf(err, errlen, "kernel %s: block %dx%dx%d: the emulation needs a 2-D block of a multiple of 32 threads, at most %d",
		         name, bdx, bdy, bdz, EMU_MAX_THREADS);
		return -1;
	}
	if (gdx <= 0 || gdy <= 0 || gdz <= 0) {
		snprintf(err, errlen, "kernel %s: empty grid %dx%dx%d", name, gdx, gdy, gdz);
		return -1;
	}
	if (shared > EMU_DYN_SHARED) {
		snprintf(err, errlen, "kernel %s: %u bytes of dynamic shared memory, the emulation has %d", name, shared,
		         EMU_DYN_SHARED);
		return -1;
	}
	if (!emu_arena) emu_arena = (unsigned char*)malloc(EMU_STATIC_SHARED + EMU_DYN_SHARED);
	while (emu_nfibers < n) emu_fiber_create(&emu_fibers[emu_nfibers++]);
	emu_run.name = name;
	emu_run.fn = fn;
	emu_run.args = args;
	emu_run.nthreads = n;
	emu_run.dyn = shared;
	emu_aborted = 0;
	for (int bz = 0; bz < gdz; bz++)
		for (int by = 0; by < gdy; by++)
			for (int bx = 0; bx < gdx; bx++) {
				// Shared memory starts as garbage on the GPU: a pattern (NaN,
				// -1) here, so a kernel that reads before writing shows it.
				memset(emu_arena, 0xff, emu_static_high);
				memset(emu_arena + EMU_STATIC_SHARED, 0xff, shared);
				for (int i = 0; i < n; i++) {
					EmuThread* t = &emu_fibers[i].t;
					*t = EmuThread{i % bdx, i / bdx, bx, by, bz, bdx, bdy, gdx, gdy};
				}
				if (emu_block() != 0) {
					snprintf(err, errlen, "%s", emu_abort_msg);
					// The block's fibers stopped mid-kernel: start them afresh.
					for (int i = 0; i < emu_nfibers; i++) emu_fiber_create(&emu_fibers[i]);
					emu_cur = NULL;
					return -1;
				}
			}
	emu_cur = NULL;
	return 0;
}

// emu_current_kernel names the kernel running now, for the crash handler.
const char* emu_current_kernel() { return emu_cur ? emu_run.name : NULL; }
