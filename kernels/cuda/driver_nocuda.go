//go:build !(cuda && linux && (amd64 || arm64))

package cuda

import "fmt"

// OpenDriver fails in this build: without the "cuda" tag the binary stays
// static and never loads libcuda.
func OpenDriver(ordinal int, ptx func(arch int) ([]byte, error)) (Driver, error) {
	return nil, fmt.Errorf("%w: this batchd was built without CUDA support: build it with `make build-cuda` (go build -tags cuda)", ErrNoDevice)
}

// Built is whether this binary can use NVIDIA GPUs (the "cuda" tag).
const Built = false
