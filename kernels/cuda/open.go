package cuda

import (
	"os"
	"strings"
)

// Open opens GPU ordinal (0 is the first) with batchd's kernels loaded: the
// Device the native engine runs on. Without a usable GPU the error wraps
// ErrNoDevice and says what is missing.
func Open(ordinal int) (*Device, error) {
	drv, err := OpenDriver(ordinal, ModulePTX)
	if err != nil {
		return nil, err
	}
	return NewDevice(drv, graphsWanted()), nil
}

// Describe says what this binary can do with NVIDIA GPUs, for `batchd
// version`: not built in, or built in and what GPU 0 is (or why there is
// none usable).
func Describe() string {
	if !Built {
		return "not built in (make build-cuda builds it)"
	}
	d, err := OpenDriver(0, ModulePTX)
	if err != nil {
		return "built in; " + err.Error()
	}
	defer d.Close()
	return "built in; GPU 0: " + d.Name()
}

// graphsWanted is whether passes replay as CUDA graphs: yes unless
// BATCHD_CUDA_GRAPHS is off (0, false, off, no): for measuring what they
// save, or ruling them out.
func graphsWanted() bool {
	switch strings.ToLower(os.Getenv("BATCHD_CUDA_GRAPHS")) {
	case "0", "false", "off", "no":
		return false
	}
	return true
}

// ModulePTX is batchd's kernel module for a GPU of compute capability arch
// (major·10+minor): what OpenDriver loads.
func ModulePTX(arch int) ([]byte, error) {
	b, _, err := PTX(arch)
	return b, err
}
