package main

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/batchd/batchd/kernels"
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
	if len(lines) != 3+len(backends) {
		t.Fatalf("version printed %d lines, want %d:\n%s", len(lines), 3+len(backends), stdout)
	}
	if lines[0] != "batchd "+version {
		t.Errorf("first line %q, want %q", lines[0], "batchd "+version)
	}
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
	writeVersion(&b, cpuModel(""))
	if !strings.Contains(b.String(), "cpu: unknown CPU ("+runtime.GOARCH+"): ") {
		t.Errorf("no cpuinfo:\n%s", b.String())
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
