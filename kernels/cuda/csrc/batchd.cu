// batchd.cu: the one module of batchd's CUDA kernels. scripts/gen-ptx.sh
// compiles it to PTX; package kernels/cuda/emu builds it for the host.
// One line per kernel file:
#include "selftest.cu"
#include "elementwise.cu"
#include "attention.cu"
#include "sampling.cu"
#include "bench.cu"
