package native

import (
	"context"
	"os"
	"strings"
	"testing"
)

// BATCHD_DEVICE, when set, runs every model of this package's tests on
// that device (cpu or reference): make test runs the suite once on each.
func init() {
	if d := os.Getenv("BATCHD_DEVICE"); d != "" {
		defaultDevice = d
	}
}

// A device batchd does not have is refused by name, before anything loads.
func TestConfigRefusesUnknownDevice(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Models = []ModelConfig{{Path: "m.gguf"}}
	for _, ok := range []string{"", DeviceCPU, DeviceReference} {
		cfg.Device = ok
		if err := cfg.Validate(); err != nil {
			t.Errorf("device %q: %v", ok, err)
		}
	}
	cfg.Device = "cuda"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "native.device") || !strings.Contains(err.Error(), `"cuda"`) {
		t.Errorf("device cuda: %v, want an error naming native.device and the value", err)
	}
}

// The engine runs its models on the device the config names.
func TestEngineRunsOnConfiguredDevice(t *testing.T) {
	for _, dev := range []string{DeviceCPU, DeviceReference} {
		cfg := DefaultConfig()
		cfg.Models = []ModelConfig{{Path: demoPath(t)}}
		cfg.Device = dev
		e, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Open(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := e.runners[e.order[0]].model.dev.Name()
		e.Close(context.Background())
		if want := map[string]string{DeviceCPU: "cpu ", DeviceReference: "reference"}[dev]; !strings.HasPrefix(got, want) {
			t.Errorf("device %s: the model runs on %q", dev, got)
		}
	}
}
