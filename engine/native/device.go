package native

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/kernels/cuda"
	"github.com/batchd/batchd/kernels/refdev"
)

// The devices a model can run on (Config.Device).
const (
	// DeviceAuto runs on the first NVIDIA GPU when this binary can use one
	// (built with CUDA support, a driver and a GPU present), else on the
	// CPU, saying why: the default.
	DeviceAuto = "auto"
	// DeviceCPU runs on this machine's cores with the CPU kernels
	// (kernels.CPUDevice).
	DeviceCPU = "cpu"
	// DeviceCUDA runs on an NVIDIA GPU (package kernels/cuda): "cuda" is
	// GPU 0, "cuda:N" GPU N. Without a usable GPU the engine refuses to
	// start, naming what is missing.
	DeviceCUDA = "cuda"
	// DeviceReference runs on the plain-Go reference device (package
	// kernels/refdev): single-threaded and far slower, for tests and for
	// checking another device against.
	DeviceReference = "reference"
)

// defaultDevice is the device of a Config whose Device is "" and of
// NewModel. Only tests change it (BATCHD_DEVICE, see device_test.go), so
// that the whole suite runs on another device.
var defaultDevice = DeviceAuto

// testDevices are devices only tests open (the emulated CUDA device),
// registered by the tests themselves.
var testDevices = map[string]func() (kernels.Device, error){}

// errDeviceName is what parseDevice wraps.
var errDeviceName = errors.New("native.device: must be auto, cpu, cuda, cuda:N or reference")

// parseDevice splits a device name into its kind and, for cuda, the GPU's
// ordinal.
func parseDevice(name string) (kind string, ordinal int, err error) {
	switch name {
	case "", DeviceAuto:
		return DeviceAuto, 0, nil
	case DeviceCPU, DeviceReference, DeviceCUDA:
		return name, 0, nil
	}
	if _, ok := testDevices[name]; ok {
		return name, 0, nil
	}
	if rest, ok := strings.CutPrefix(name, DeviceCUDA+":"); ok {
		n, err := strconv.Atoi(rest)
		if err == nil && n >= 0 && rest == strconv.Itoa(n) {
			return DeviceCUDA, n, nil
		}
	}
	return "", 0, fmt.Errorf("%w, got %q", errDeviceName, name)
}

// openCUDA opens GPU ordinal as a kernels.Device (a variable so that tests
// can stand in for a GPU they do not have).
var openCUDA = func(ordinal int) (kernels.Device, error) {
	d, err := cuda.Open(ordinal)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// openDevice opens the device called name; the CPU device runs on cpu,
// which the caller keeps owning. auto falls back to the CPU, logging why
// to log (when non-nil).
func openDevice(name string, cpu *kernels.CPU, log *slog.Logger) (kernels.Device, error) {
	kind, ordinal, err := parseDevice(name)
	if err != nil {
		return nil, err
	}
	switch kind {
	case DeviceCPU:
		return kernels.NewCPUDevice(cpu), nil
	case DeviceReference:
		return refdev.New(), nil
	case DeviceCUDA:
		dev, err := openCUDA(ordinal)
		if err != nil {
			return nil, fmt.Errorf("native.device %s: %w", name, err)
		}
		return dev, nil
	case DeviceAuto:
		dev, err := openCUDA(0)
		if err == nil {
			return dev, nil
		}
		if log != nil {
			log.Info("no usable NVIDIA GPU: running on the CPU", "reason", err.Error())
		}
		return kernels.NewCPUDevice(cpu), nil
	}
	return testDevices[kind]()
}

// deviceMemory is implemented by devices with their own memory (the CUDA
// device): what is free there sizes the KV cache.
type deviceMemory interface {
	MemInfo() (free, total int64, err error)
}
