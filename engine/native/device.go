package native

import (
	"fmt"

	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/kernels/refdev"
)

// The devices a model can run on (Config.Device).
const (
	// DeviceCPU runs on this machine's cores with the CPU kernels
	// (kernels.CPUDevice): the default, and the fast one.
	DeviceCPU = "cpu"
	// DeviceReference runs on the plain-Go reference device (package
	// kernels/refdev): single-threaded and far slower, for tests and for
	// checking another device against.
	DeviceReference = "reference"
)

// defaultDevice is the device of a Config whose Device is "" and of
// NewModel. Only tests change it (BATCHD_DEVICE, see device_test.go), so
// that the whole suite runs on another device.
var defaultDevice = DeviceCPU

// openDevice opens the device called name; the CPU device runs on cpu,
// which the caller keeps owning.
func openDevice(name string, cpu *kernels.CPU) (kernels.Device, error) {
	switch name {
	case "", DeviceCPU:
		return kernels.NewCPUDevice(cpu), nil
	case DeviceReference:
		return refdev.New(), nil
	}
	return nil, fmt.Errorf("native.device: must be %s or %s, got %q", DeviceCPU, DeviceReference, name)
}
