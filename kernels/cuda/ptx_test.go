package cuda

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestPTXChoice(t *testing.T) {
	for _, c := range []struct {
		arch   int
		target string
	}{{80, "sm_80"}, {86, "sm_80"}, {89, "sm_80"}, {90, "sm_90a"}, {100, "sm_90a"}} {
		ptx, target, err := PTX(c.arch)
		if err != nil || target != c.target || !bytes.Contains(ptx, []byte(".target "+c.target+"\n")) {
			t.Errorf("PTX(%d) = %d bytes, %q, %v; want the %s module", c.arch, len(ptx), target, err, c.target)
		}
	}
	if _, _, err := PTX(75); err == nil || !strings.Contains(err.Error(), "7.5") || !strings.Contains(err.Error(), "Ampere") {
		t.Errorf("PTX(75): %v, want an error naming 7.5 and Ampere", err)
	}
}

// TestPTXFresh runs scripts/gen-ptx.sh --check: the committed PTX is what
// the kernels compile to. It needs clang-19 (BATCHD_REQUIRE_CLANG=1 makes
// its absence a failure, as in CI).
func TestPTXFresh(t *testing.T) {
	if _, err := exec.LookPath("clang-19"); err != nil {
		if os.Getenv("BATCHD_REQUIRE_CLANG") == "1" {
			t.Fatal("clang-19 is not on PATH and BATCHD_REQUIRE_CLANG=1")
		}
		t.Skip("skipping the PTX freshness check: clang-19 is not on PATH (apt install clang-19)")
	}
	if _, err := os.Stat("../../scripts/gen-ptx.sh"); err != nil {
		// A prebuilt test binary run outside a checkout (gpu-check.sh).
		t.Skip("skipping the PTX freshness check: not run from a checkout of batchd")
	}
	out, err := exec.Command("bash", "../../scripts/gen-ptx.sh", "--check").CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/gen-ptx.sh --check: %v\n%s", err, out)
	}
}
