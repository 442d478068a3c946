package pipeline

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/batchd/batchd/internal/fsx"
)

// crashChildEnv makes the test binary, run again by
// TestRealReportsTellASIGQUITFromACrash, a process that points its crash
// output at the folder the variable names and then dies as the variable
// crashChildHow says.
const (
	crashChildEnv = "BATCHD_TEST_CRASH_CHILD_DIR"
	crashChildHow = "BATCHD_TEST_CRASH_CHILD_HOW"
)

// The child's side of TestRealReportsTellASIGQUITFromACrash.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("run by TestRealReportsTellASIGQUITFromACrash")
	}
	if err := reportCrashes(dir); err != nil {
		t.Fatal(err)
	}
	switch os.Getenv(crashChildHow) {
	case "sigquit": // what `kill -QUIT` by an operator does
		syscall.Kill(os.Getpid(), syscall.SIGQUIT)
		select {}
	default:
		panic("the child crashes") // unrecovered: the process dies of it
	}
}

// The reports the Go runtime really writes: an operator's SIGQUIT (a
// stack dump) is kept as crash.log.prev but is no crash; a panic is one.
func TestRealReportsTellASIGQUITFromACrash(t *testing.T) {
	for _, tc := range []struct {
		how, first string
		crash      bool
	}{
		{"sigquit", "SIGQUIT: quit", false},
		{"panic", "panic: the child crashes", true},
	} {
		t.Run(tc.how, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashChildHow+"="+tc.how, "GOTRACEBACK=single")
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the child did not die: %v\n%s", err, out)
			}
			first, err := takeCrashReport(dir)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(first, tc.first) || operatorStop(first) == tc.crash {
				t.Fatalf("report's first line %q (operator's stop: %v), want %q (crash: %v)\n%s", first, operatorStop(first), tc.first, tc.crash, out)
			}
			prev, err := os.ReadFile(filepath.Join(dir, crashFile+".prev"))
			if err != nil || !strings.Contains(string(prev), "goroutine ") {
				t.Fatalf("the report was not kept with its stacks: %v\n%s", err, prev)
			}
			if _, err := os.Stat(filepath.Join(dir, crashFile)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the report was not moved aside: %v", err)
			}
		})
	}
}

// Links planted at the crash report and the in-flight table are refused,
// naming the path, and nothing outside is read, truncated or written.
func TestStateFilesRefuseLinks(t *testing.T) {
	for _, name := range []string{crashFile, inflightFile} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			outside := filepath.Join(t.TempDir(), "outside")
			const keep = "panic: not batchd's\nR\x00\x00\x00\x01\x07batch_x\n"
			if err := os.WriteFile(outside, []byte(keep), 0o644); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, name)
			if err := os.Symlink(outside, path); err != nil {
				t.Fatal(err)
			}
			var err error
			if name == crashFile {
				_, err = takeCrashReport(dir)
				if rerr := reportCrashes(dir); !errors.Is(rerr, fsx.ErrLink) {
					t.Errorf("reportCrashes through a link: %v", rerr)
				}
			} else {
				var tab *inflight
				tab, _, err = openInflight(path, 4)
				if err == nil {
					tab.close()
				}
			}
			if !errors.Is(err, fsx.ErrLink) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %v does not refuse the link at %s", err, path)
			}
			if got, _ := os.ReadFile(outside); string(got) != keep {
				t.Errorf("the link's target now holds %q", got)
			}
			if st, err := os.Lstat(path); err != nil || st.Mode()&os.ModeSymlink == 0 {
				t.Errorf("the link was moved or replaced: %v", err)
			}
		})
	}
}
