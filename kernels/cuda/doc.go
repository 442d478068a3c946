// Package cuda runs the native engine's decoder on an NVIDIA GPU: a
// kernels.Device over a Driver. The real Driver (build tag "cuda") finds and
// loads libcuda and libcublasLt when the daemon starts, through purego, so
// the default build stays a static binary that needs neither a GPU nor the
// CUDA toolkit; the kernels are CUDA C in csrc/, compiled to PTX for sm_80
// and sm_90a by clang (scripts/gen-ptx.sh) and embedded.
//
// Sampling stays on the host: the sampling kernels of csrc/sampling.cu
// (KernelArgmaxRows, KernelSampleRows) are staged, tested on the emulation
// but called by nothing yet; sampling.go says what remains to wire them.
package cuda
