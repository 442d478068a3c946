// Package nvml lists NVIDIA GPUs through NVML (libnvidia-ml), for
// discovery, memory and utilization metrics. The real listing is behind
// the "nvml" build tag because github.com/NVIDIA/go-nvml needs cgo
// (CGO_ENABLED=1); without it Devices says so. It never imports the
// daemon or the engine.
package nvml

import "errors"

// Info is one GPU as NVML reports it.
type Info struct {
	Index         int
	Name          string
	UUID          string
	MemoryTotal   uint64 // bytes
	MemoryUsed    uint64
	MemoryFree    uint64
	UtilGPU       int // percent of the last sample period a kernel ran; -1 if not supported
	UtilMemory    int // percent of it memory was read or written; -1 if not supported
	DriverVersion string
}

// ErrUnavailable is what Devices wraps when NVML cannot be used: a build
// without the nvml tag, or no NVIDIA driver.
var ErrUnavailable = errors.New("nvml unavailable")
