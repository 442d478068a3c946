package kernels_test

import (
	"os"
	"testing"

	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/kernels/devicetest"
)

// TestCPUDeviceContract runs the Device contract suite on the CPU device,
// on every code path this machine can run (on the one BATCHD_KERNELS
// names, when it is set), with two threads so that work is split.
func TestCPUDeviceContract(t *testing.T) {
	var paths []string
	if os.Getenv("BATCHD_KERNELS") != "" {
		paths = []string{kernels.BackendAuto}
	} else {
		for _, b := range kernels.Backends() {
			if b.Usable() {
				paths = append(paths, b.Name)
			}
		}
	}
	for _, path := range paths {
		t.Run(path, func(t *testing.T) {
			devicetest.Run(t, devicetest.Harness{New: func(t *testing.T) kernels.Device {
				cpu, err := kernels.NewCPUBackend(2, path)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(cpu.Close)
				return kernels.NewCPUDevice(cpu)
			}})
		})
	}
}
