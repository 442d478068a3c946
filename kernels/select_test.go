package kernels

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// TestBackendSelection: auto is the fastest usable backend, every usable one
// can be forced, and asking for one the binary or CPU lacks is an error
// naming what is missing; BATCHD_KERNELS, when set, is what auto picks in
// a test binary. BATCHD_EXPECT_BACKEND, when set, is the backend
// auto must pick here (CI sets it for its emulated CPUs).
func TestBackendSelection(t *testing.T) {
	t.Logf("auto picks %s; CPU features: %s", BestBackend(), strings.Join(Features(), " "))
	if want := os.Getenv("BATCHD_EXPECT_BACKEND"); want != "" && BestBackend() != want {
		t.Fatalf("auto picks %s, BATCHD_EXPECT_BACKEND says %s (CPU features: %s)", BestBackend(), want, strings.Join(Features(), " "))
	}
	var firstUsable string
	for _, b := range Backends() {
		if b.Usable() && firstUsable == "" {
			firstUsable = b.Name
		}
		cpu, err := NewCPUBackend(1, b.Name)
		switch {
		case b.Usable():
			if err != nil {
				t.Errorf("%s is usable here, but: %v", b.Name, err)
				continue
			}
			if cpu.Backend() != b.Name {
				t.Errorf("NewCPUBackend(%s) runs %s", b.Name, cpu.Backend())
			}
			cpu.Close()
		case err == nil:
			t.Errorf("NewCPUBackend(%s) succeeded; built %v, missing %v", b.Name, b.Built, b.Missing)
			cpu.Close()
		case !errors.Is(err, ErrBackendUnavailable):
			t.Errorf("NewCPUBackend(%s): %v does not wrap ErrBackendUnavailable", b.Name, err)
		case b.Built && !strings.Contains(err.Error(), strings.Join(b.Missing, ", ")):
			t.Errorf("NewCPUBackend(%s): %v does not name the missing %v", b.Name, err, b.Missing)
		case !b.Built && !strings.Contains(err.Error(), "not built"):
			t.Errorf("NewCPUBackend(%s): %v does not say it is not built", b.Name, err)
		}
	}
	if forced := strings.ToLower(strings.TrimSpace(os.Getenv(testBackendEnv))); forced != "" {
		if BestBackend() != forced {
			t.Errorf("%s=%s, but auto picks %s", testBackendEnv, forced, BestBackend())
		}
	} else if BestBackend() != firstUsable {
		t.Errorf("auto picks %s, the fastest usable backend is %s", BestBackend(), firstUsable)
	}
	for _, name := range []string{"", "auto", " Auto "} {
		cpu, err := NewCPUBackend(1, name)
		if err != nil || cpu.Backend() != BestBackend() {
			t.Errorf("NewCPUBackend(%q): %v, want %s", name, err, BestBackend())
			continue
		}
		cpu.Close()
	}
	if _, err := NewCPUBackend(1, "sse9"); !errors.Is(err, ErrBackendUnavailable) || !strings.Contains(err.Error(), "sse9") {
		t.Errorf("NewCPUBackend(sse9): %v", err)
	}
}

// TestForcedBackendUnavailable: a test binary told to force a backend it
// cannot run stops at start-up naming it, rather than testing another.
func TestForcedBackendUnavailable(t *testing.T) {
	if os.Getenv(testBackendEnv) != "" {
		t.Skipf("%s is set: this test sets it itself", testBackendEnv)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), testBackendEnv+"=sse9")
	out, err := cmd.CombinedOutput()
	if errors.Is(err, syscall.ENOEXEC) {
		// QEMU's user-mode emulation (ci-emulated.sh) runs this binary but
		// cannot exec it again without binfmt_misc.
		t.Skipf("this test binary cannot run itself here: %v", err)
	}
	if err == nil || !strings.Contains(string(out), testBackendEnv+"=sse9") || !strings.Contains(string(out), "unknown backend") {
		t.Errorf("%s=sse9: %v, output:\n%s", testBackendEnv, err, out)
	}
}
