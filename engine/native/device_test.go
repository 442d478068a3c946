package native

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/batchd/batchd/kernels"
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

// A steady-state forward pass allocates nothing on the host: scratch and
// KV are device buffers grown once, views are values, and the CPU device
// hands out its logits without a copy.
func TestForwardDoesNotAllocate(t *testing.T) {
	if defaultDevice != DeviceCPU {
		t.Skipf("allocation-free steady state is the CPU device's promise; running on %s", defaultDevice)
	}
	cpu := kernels.NewCPU(2)
	t.Cleanup(cpu.Close)
	m := loadOn(t, demoPath(t), cpu)
	kv, table := m.scratchKV(64)
	var s scratch
	b := batch{kv: kv, tokens: []int32{5, 9, 11, 3}, pos: []int32{0, 1, 2, 3},
		segs: []segment{{blocks: table, n: 2}, {blocks: table, first: 2, n: 2, start: 2}}, logitRows: []int{1, 3}}
	m.forward(&b, &s)
	if n := testing.AllocsPerRun(5, func() { m.forward(&b, &s) }); n != 0 {
		t.Errorf("forward allocates %v times per call", n)
	}
}
