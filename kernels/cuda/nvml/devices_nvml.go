//go:build nvml

package nvml

import (
	"errors"
	"fmt"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Devices lists every GPU NVML sees. NVML is initialised for the call and
// shut down after it. Init's result is checked before anything else: with
// no driver library, any other NVML call after a failed Init ends the
// process with a symbol lookup error.
func Devices() (_ []Info, err error) {
	if ret := gonvml.Init(); ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("%w: nvmlInit: %v (is the NVIDIA driver installed?)", ErrUnavailable, ret)
	}
	defer func() {
		if ret := gonvml.Shutdown(); ret != gonvml.SUCCESS {
			err = errors.Join(err, fmt.Errorf("nvmlShutdown: %v", ret))
		}
	}()
	driver, ret := gonvml.SystemGetDriverVersion()
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("nvmlSystemGetDriverVersion: %v", ret)
	}
	n, ret := gonvml.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		return nil, fmt.Errorf("nvmlDeviceGetCount: %v", ret)
	}
	out := make([]Info, 0, n)
	for i := range n {
		dev, ret := gonvml.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: nvmlDeviceGetHandleByIndex: %v", i, ret)
		}
		info := Info{Index: i, DriverVersion: driver, UtilGPU: -1, UtilMemory: -1}
		if info.Name, ret = dev.GetName(); ret != gonvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: nvmlDeviceGetName: %v", i, ret)
		}
		if info.UUID, ret = dev.GetUUID(); ret != gonvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: nvmlDeviceGetUUID: %v", i, ret)
		}
		mem, ret := dev.GetMemoryInfo()
		if ret != gonvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: nvmlDeviceGetMemoryInfo: %v", i, ret)
		}
		info.MemoryTotal, info.MemoryUsed, info.MemoryFree = mem.Total, mem.Used, mem.Free
		// Utilization is not supported everywhere (MIG instances, some
		// vGPUs): -1 then, not an error.
		switch util, ret := dev.GetUtilizationRates(); ret {
		case gonvml.SUCCESS:
			info.UtilGPU, info.UtilMemory = int(util.Gpu), int(util.Memory)
		case gonvml.ERROR_NOT_SUPPORTED:
		default:
			return nil, fmt.Errorf("GPU %d: nvmlDeviceGetUtilizationRates: %v", i, ret)
		}
		out = append(out, info)
	}
	return out, nil
}
