package cuda

import (
	_ "embed"
	"fmt"
)

// The kernels as PTX, written by scripts/gen-ptx.sh from csrc/batchd.cu.
var (
	//go:embed ptx/sm_80.ptx
	ptxSM80 []byte
	//go:embed ptx/sm_90a.ptx
	ptxSM90a []byte
)

// PTX returns the kernel module for a GPU of compute capability arch
// (major·10+minor) and its target name: sm_90a's for Hopper and newer,
// sm_80's (which the driver JIT-compiles for any later GPU) otherwise.
// GPUs before Ampere are refused.
func PTX(arch int) ([]byte, string, error) {
	switch {
	case arch >= 90:
		return ptxSM90a, "sm_90a", nil
	case arch >= 80:
		return ptxSM80, "sm_80", nil
	}
	return nil, "", fmt.Errorf("compute capability %d.%d: batchd's CUDA kernels need an Ampere (sm_80) or newer GPU", arch/10, arch%10)
}
