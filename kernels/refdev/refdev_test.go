package refdev_test

import (
	"testing"

	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/kernels/devicetest"
	"github.com/batchd/batchd/kernels/refdev"
)

// TestReferenceContract runs the Device contract suite on the reference
// device.
func TestReferenceContract(t *testing.T) {
	devicetest.Run(t, devicetest.Harness{New: func(*testing.T) kernels.Device { return refdev.New() }})
}

// The reference device keeps its memory to itself: a CPU buffer handed to
// it is refused, not read through.
func TestReferenceRefusesForeignBuffers(t *testing.T) {
	cpu := kernels.NewCPU(1)
	defer cpu.Close()
	host, _ := kernels.NewCPUDevice(cpu).Alloc(4)
	d := refdev.New()
	own, _ := d.Alloc(4)
	defer func() {
		if recover() == nil {
			t.Fatal("Add with a CPU buffer did not panic on the reference device")
		}
	}()
	d.Add(own, host)
}
