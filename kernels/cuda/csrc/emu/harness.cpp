// harness.cpp: the process package kernels/cuda/emu drives over a pipe.
//
// The Go side generates the translation unit that includes this file: the
// runtime, batchd.cu and a table emu_kernels[] of one wrapper per KERNEL
// that calls it with typed arguments. Requests arrive on stdin, one reply
// per request on stdout (little-endian):
//   request: u8 op, then the op's fields
//   reply:   u8 status (0 ok, 1 error + u32 length + message), then data
// "Device" memory is this process's memory; pointers travel as u64.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { OP_ALLOC = 1, OP_FREE, OP_MEMSET, OP_COPYIN, OP_COPYOUT, OP_LAUNCH, OP_GEMM, OP_SYNC };

const char* emu_current_kernel();

static void rd(void* p, size_t n) {
	if (n && fread(p, 1, n, stdin) != n) exit(0); // the driver closed the pipe
}
static void wr(const void* p, size_t n) {
	if (n && fwrite(p, 1, n, stdout) != n) exit(1);
}
static uint64_t rd64() {
	uint64_t v;
	rd(&v, 8);
	return v;
}
static uint32_t rd32() {
	uint32_t v;
	rd(&v, 4);
	return v;
}
static void ok() {
	uint8_t s = 0;
	wr(&s, 1);
}
static void fail(const char* msg) {
	uint8_t s = 1;
	uint32_t n = (uint32_t)strlen(msg);
	wr(&s, 1);
	wr(&n, 4);
	wr(msg, n);
}

static float gemm_elem(const void* p, int type, size_t i) {
	switch (type) {
	case 1: return ((const float*)p)[i];
	case 2: return f16_to_f32(((const uint16_t*)p)[i]);
	default: return bf16_to_f32(((const uint16_t*)p)[i]);
	}
}

// The crash handler names the kernel that faulted; the Go side shows
// stderr's tail when the pipe breaks.
static void on_fault(int sig) {
	const char* k = emu_current_kernel();
	const char* what = sig == SIGSEGV ? "segmentation fault" : sig == SIGBUS ? "bus error" : "fatal signal";
	char buf[256];
	int n = snprintf(buf, sizeof buf, "emu harness: %s in kernel %s (an out-of-bounds access?)\n", what,
	                 k ? k : "(none: outside a kernel)");
	if (n > 0) (void)!write(2, buf, (size_t)n);
	_exit(70);
}

int main() {
	static char altstack[64 << 10];
	stack_t ss = {};
	ss.ss_sp = altstack;
	ss.ss_size = sizeof altstack;
	sigaltstack(&ss, NULL);
	struct sigaction sa = {};
	sa.sa_handler = on_fault;
	sa.sa_flags = SA_ONSTACK;
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
	sigaction(SIGFPE, &sa, NULL);
	sigaction(SIGILL, &sa, NULL);

	static uint64_t args[64];
	static char err[1024];
	for (;;) {
		uint8_t op;
		rd(&op, 1);
		switch (op) {
		case OP_ALLOC: {
			uint64_t n = rd64();
			void* p = NULL;
			if (posix_memalign(&p, 256, n ? n : 1) != 0) {
				fail("host allocation failed");
				break;
			}
			ok();
			uint64_t v = (uint64_t)(uintptr_t)p;
			wr(&v, 8);
			break;
		}
		case OP_FREE:
			free((void*)(uintptr_t)rd64());
			ok();
			break;
		case OP_MEMSET: {
			uint64_t p = rd64(), n = rd64();
			memset((void*)(uintptr_t)p, 0, n);
			ok();
			break;
		}
		case OP_COPYIN: {
			uint64_t p = rd64(), n = rd64();
			rd((void*)(uintptr_t)p, n);
			ok();
			break;
		}
		case OP_COPYOUT: {
			uint64_t p = rd64(), n = rd64();
			ok();
			wr((void*)(uintptr_t)p, n);
			break;
		}
		case OP_LAUNCH: {
			uint32_t k = rd32();
			uint32_t d[7];
			for (int i = 0; i < 7; i++) d[i] = rd32();
			uint32_t nargs = rd32();
			if (nargs > 64 || k >= emu_nkernels) {
				fprintf(stderr, "emu harness: bad launch request (kernel %u, %u args)\n", k, nargs);
				return 2;
			}
			for (uint32_t i = 0; i < nargs; i++) args[i] = rd64();
			if (emu_launch(emu_kernels[k].name, emu_kernels[k].fn, args, (int)d[0], (int)d[1], (int)d[2], (int)d[3],
			               (int)d[4], (int)d[5], d[6], err, sizeof err) != 0)
				fail(err);
			else
				ok();
			break;
		}
		case OP_GEMM: {
			int M = (int)rd32(), N = (int)rd32(), K = (int)rd32(), type = (int)rd32();
			const void* W = (const void*)(uintptr_t)rd64();
			const void* X = (const void*)(uintptr_t)rd64();
			float* out = (float*)(uintptr_t)rd64();
			for (int m = 0; m < M; m++)
				for (int n = 0; n < N; n++) {
					float acc = 0;
					for (int k = 0; k < K; k++)
						acc += gemm_elem(X, type, (size_t)m * K + k) * gemm_elem(W, type, (size_t)n * K + k);
					out[(size_t)m * N + n] = acc;
				}
			ok();
			break;
		}
		case OP_SYNC: ok(); break;
		default: fprintf(stderr, "emu harness: unknown request %u\n", op); return 2;
		}
		fflush(stdout);
	}
}
