package cuda

import "embed"

// Sources is csrc/: the kernels' CUDA C and the host emulation's runtime
// (emu.h, emu/), from which package kernels/cuda/emu builds its harness.
//
//go:embed csrc
var Sources embed.FS
