package native

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/kernels/cuda"
	"github.com/batchd/batchd/kernels/cuda/emu"
)

// BATCHD_DEVICE, when set, runs every model of this package's tests on
// that device (cpu or reference): make test runs the suite once on each.
func init() {
	// cuda-emu is the CUDA device on the host emulation of its kernels
	// (kernels/cuda/emu, a double for the GPU CI lacks), graphs on: the
	// suite runs on it with BATCHD_DEVICE=cuda-emu.
	testDevices["cuda-emu"] = func() (kernels.Device, error) {
		drv, err := emu.Open()
		if err != nil {
			return nil, err
		}
		return cuda.NewDevice(drv, true), nil
	}
	if d := os.Getenv("BATCHD_DEVICE"); d != "" {
		defaultDevice = d
	}
}

// A device batchd does not have is refused by name, before anything loads.
func TestConfigRefusesUnknownDevice(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Models = []ModelConfig{{Path: "m.gguf"}}
	for _, ok := range []string{"", DeviceAuto, DeviceCPU, DeviceReference, DeviceCUDA, "cuda:0", "cuda:3"} {
		cfg.Device = ok
		if err := cfg.Validate(); err != nil {
			t.Errorf("device %q: %v", ok, err)
		}
	}
	for _, bad := range []string{"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:01", "CUDA", "cuda0"} {
		cfg.Device = bad
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "native.device") || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("device %q: %v, want an error naming native.device and the value", bad, err)
		}
	}
}

// Without a usable GPU (no CUDA support built in, no driver, or no GPU:
// this machine), auto runs on the CPU and says why, and an explicit cuda
// refuses to start, naming what is missing.
func TestDeviceWithoutGPU(t *testing.T) {
	if d, err := cuda.Open(0); err == nil {
		d.Close()
		t.Skip("this machine has a usable NVIDIA GPU")
	} else if !errors.Is(err, cuda.ErrNoDevice) {
		t.Fatalf("cuda.Open without a GPU: %v, want an error wrapping cuda.ErrNoDevice", err)
	}
	cpu := kernels.NewCPU(1)
	t.Cleanup(cpu.Close)
	var logs bytes.Buffer
	dev, err := openDevice(DeviceAuto, cpu, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(dev.Name(), "cpu ") {
		t.Errorf("auto without a GPU runs on %q, want the CPU", dev.Name())
	}
	if !strings.Contains(logs.String(), "no usable NVIDIA GPU: running on the CPU") || !strings.Contains(logs.String(), "reason=") {
		t.Errorf("auto's fallback logged %q, want the reason", logs.String())
	}
	for _, name := range []string{DeviceCUDA, "cuda:1"} {
		_, err := openDevice(name, cpu, nil)
		if err == nil || !errors.Is(err, cuda.ErrNoDevice) || !strings.Contains(err.Error(), "native.device "+name+": ") {
			t.Errorf("%s without a GPU: %v, want an error naming native.device and wrapping cuda.ErrNoDevice", name, err)
		}
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
	cpu := kernels.NewCPU(2)
	t.Cleanup(cpu.Close)
	m := loadOn(t, demoPath(t), cpu)
	if _, ok := m.dev.(*kernels.CPUDevice); !ok {
		t.Skipf("allocation-free steady state is the CPU device's promise; running on %s", m.dev.Name())
	}
	kv, table := m.scratchKV(64)
	var s scratch
	b := batch{kv: kv, tokens: []int32{5, 9, 11, 3}, pos: []int32{0, 1, 2, 3},
		segs: []segment{{blocks: table, n: 2}, {blocks: table, first: 2, n: 2, start: 2}}, logitRows: []int{1, 3}}
	m.forward(&b, &s)
	if n := testing.AllocsPerRun(5, func() { m.forward(&b, &s) }); n != 0 {
		t.Errorf("forward allocates %v times per call", n)
	}
}
