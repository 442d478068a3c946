package nvml

import (
	"errors"
	"os"
	"testing"
)

// haveNVML reports whether this machine has NVML's library, by file: the
// test must not call into NVML to find out.
func haveNVML() bool {
	for _, p := range []string{
		"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1",
		"/usr/lib64/libnvidia-ml.so.1", "/usr/lib/libnvidia-ml.so.1",
	} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// TestDevicesWithoutDriver: on a machine without the NVIDIA driver (or in
// a build without the tag) Devices returns ErrUnavailable; in the nvml
// build that proves Init was checked first, since any later NVML call
// would have ended this test process.
func TestDevicesWithoutDriver(t *testing.T) {
	if haveNVML() {
		t.Skip("this machine has libnvidia-ml: TestDevicesOnGPU covers it")
	}
	devs, err := Devices()
	if !errors.Is(err, ErrUnavailable) || devs != nil {
		t.Fatalf("got %v, %v; want an error wrapping ErrUnavailable", devs, err)
	}
	t.Log(err)
}

func TestDevicesOnGPU(t *testing.T) {
	if !haveNVML() {
		t.Skip("no libnvidia-ml on this machine")
	}
	devs, err := Devices()
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("NVML unavailable here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		t.Logf("%+v", d)
		if d.Name == "" || d.UUID == "" || d.MemoryTotal == 0 || d.MemoryUsed > d.MemoryTotal || d.DriverVersion == "" {
			t.Errorf("implausible %+v", d)
		}
	}
}
