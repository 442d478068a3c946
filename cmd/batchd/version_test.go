package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/kernels/cuda"
)

// batchd version names the version, the backend auto picks, every backend's
// state and the CPU's features, one fact per line.
func TestVersionNamesTheKernels(t *testing.T) {
	code, stdout, _ := cli(t, "version")
	if code != exitOK {
		t.Fatalf("version: exit %d", code)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	backends := kernels.Backends()
	const head = 5 // version, build, device, engines, weights
	if len(lines) != head+2+len(backends) {
		t.Fatalf("version printed %d lines, want %d:\n%s", len(lines), head+2+len(backends), stdout)
	}
	if lines[0] != "batchd "+version {
		t.Errorf("first line %q, want %q", lines[0], "batchd "+version)
	}
	// The test binary is built by go test, which stamps no vcs settings:
	// the commit is unknown, the Go version is this toolchain's.
	if want := ", " + runtime.Version(); !strings.HasPrefix(lines[1], "build: commit ") || !strings.HasSuffix(lines[1], want) {
		t.Errorf("build line %q, want build: commit C, DATE%s", lines[1], want)
	}
	if !strings.HasPrefix(lines[2], "device: auto (default; ") && !strings.HasPrefix(lines[2], "device: "+os.Getenv("BATCHD_DEVICE")+" (from BATCHD_DEVICE)") {
		t.Errorf("device line %q", lines[2])
	}
	if want := "; cuda: " + cuda.Describe(); !strings.HasSuffix(lines[2], want) || !strings.Contains(lines[2], "built: auto, cpu, cuda, reference") {
		t.Errorf("device line %q, want the devices and %q", lines[2], want)
	}
	if !strings.HasPrefix(lines[3], "engines: native (default") {
		t.Errorf("engines line %q", lines[3])
	}
	if want := "weights: GGUF F32 F16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS BF16 MXFP4; safetensors F32 F16 BF16"; lines[4] != want {
		t.Errorf("weights line %q, want %q", lines[4], want)
	}
	lines = lines[head-1:] // the rest as before: kernels, backends, cpu
	var usable []string
	for i, b := range backends {
		line := lines[2+i]
		if f := strings.Fields(line); len(f) < 2 || f[0] != b.Name {
			t.Errorf("line %q does not start with backend %s", line, b.Name)
			continue
		}
		switch {
		case b.Usable():
			usable = append(usable, b.Name)
			if !strings.Contains(line, "built, usable") {
				t.Errorf("usable backend %s: %q", b.Name, line)
			}
		case !b.Built:
			if !strings.Contains(line, "not built") {
				t.Errorf("backend %s not built: %q", b.Name, line)
			}
		default:
			if !strings.Contains(line, "this CPU lacks "+strings.Join(b.Missing, " ")) {
				t.Errorf("backend %s lacks %v: %q", b.Name, b.Missing, line)
			}
		}
	}
	want := fmt.Sprintf("kernels: %s (auto); available: %s", kernels.BestBackend(), strings.Join(usable, ", "))
	if lines[1] != want {
		t.Errorf("kernels line %q, want %q", lines[1], want)
	}
	cpu := lines[len(lines)-1]
	if !strings.HasPrefix(cpu, "cpu: ") || !strings.Contains(cpu, " ("+runtime.GOARCH+"): ") {
		t.Errorf("cpu line %q, want cpu: MODEL (%s): FEATURES", cpu, runtime.GOARCH)
	}
	for _, f := range kernels.Features() {
		if !strings.Contains(cpu, " "+f) {
			t.Errorf("cpu line %q lacks feature %s", cpu, f)
		}
	}

	// Without /proc/cpuinfo (or a model line in it) the CPU is unknown.
	var b bytes.Buffer
	writeVersion(&b, buildOf(nil), "", cpuModel(""))
	if !strings.Contains(b.String(), "cpu: unknown CPU ("+runtime.GOARCH+"): ") {
		t.Errorf("no cpuinfo:\n%s", b.String())
	}
}

// The commit and date come from the ldflags variables when the build set
// them, else from Go's vcs stamp; a modified checkout says so; the device
// named by BATCHD_DEVICE is the one reported.
func TestVersionBuild(t *testing.T) {
	stamped := &debug.BuildInfo{Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-11-30T10:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	var b bytes.Buffer
	writeVersion(&b, buildOf(stamped), "reference", "X")
	for _, want := range []string{
		"build: commit 0123abcd (modified), 2026-11-30T10:00:00Z, " + runtime.Version() + "\n",
		"device: reference (from BATCHD_DEVICE); built: auto, cpu, cuda, reference; cuda: " + cuda.Describe(),
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("version lacks %q:\n%s", want, b.String())
		}
	}
	commit, buildDate = "feedbeef", "2026-12-01"
	t.Cleanup(func() { commit, buildDate = "", "" })
	if got := buildOf(stamped); got.commit != "feedbeef" || got.date != "2026-12-01" {
		t.Errorf("ldflags commit and date: %+v", got)
	}
	commit, buildDate = "", ""
	if got := buildOf(&debug.BuildInfo{}); got.commit != "unknown" || got.date != "unknown" || got.modified {
		t.Errorf("no stamp: %+v", got)
	}
}

func TestCPUModel(t *testing.T) {
	for _, tc := range []struct{ cpuinfo, want string }{
		{"processor\t: 0\nvendor_id\t: GenuineIntel\nmodel\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n",
			"Intel(R) Xeon(R) Platinum 8480+"},
		{"processor\t: 0\nBogoMIPS\t: 108.00\nCPU implementer\t: 0x41\n\nHardware\t: BCM2835\nRevision\t: c03111\nModel\t\t: Raspberry Pi 4 Model B Rev 1.1\n",
			"Raspberry Pi 4 Model B Rev 1.1"},
		{"processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n", "unknown CPU"},
		{"model name\t:\n", "unknown CPU"},
		{"", "unknown CPU"},
	} {
		if got := cpuModel(tc.cpuinfo); got != tc.want {
			t.Errorf("cpuModel(%q) = %q, want %q", tc.cpuinfo, got, tc.want)
		}
	}
}
