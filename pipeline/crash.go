package pipeline

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/batchd/batchd/internal/fsx"
)

// Crash reports. The Go runtime writes what it prints when the process
// dies of an unrecovered panic or a fatal error (a fault, a SIGABRT or
// SIGQUIT, the runtime out of memory) to the file SetCrashOutput names, in
// addition to stderr; a kill -9, an OOM kill or a power cut writes
// nothing. So a report left by the previous process tells a crash from a
// kill, and only a crash makes suspects of the requests in flight: a
// request is failed with engine_crashed only when batchd crashed twice
// while running it, never because an operator or the machine stopped it.
// A SIGQUIT is an operator's too (for its stack dump): its report, which
// starts "SIGQUIT: quit", is kept but is no crash (operatorStop). A
// SIGABRT stays a crash: the runtime's own aborts print the same line.
//
// The report is opened without following a link (fsx.OpenNoFollow): one
// planted at state/crash.log is refused at start, never read as a crash
// or truncated.
const crashFile = "crash.log"

// takeCrashReport returns the first line of the report the previous
// process left in stateDir ("" when it did not crash) and keeps the
// report as crash.log.prev for the operator.
func takeCrashReport(stateDir string) (string, error) {
	path := filepath.Join(stateDir, crashFile)
	f, err := fsx.OpenNoFollow(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read crash report: %w", err)
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if line == "" && err != nil {
		return "", nil // empty: no crash
	}
	if err := os.Rename(path, path+".prev"); err != nil {
		return "", fmt.Errorf("keep crash report: %w", err)
	}
	return strings.TrimSpace(line), nil
}

// operatorStop reports whether the report whose first line is first was
// written for an operator's SIGQUIT (a stack dump), not a crash.
func operatorStop(first string) bool { return strings.HasPrefix(first, "SIGQUIT:") }

// reportCrashes points the process's crash output at stateDir's report
// file (truncated: nothing has crashed yet).
func reportCrashes(stateDir string) error {
	f, err := fsx.OpenNoFollow(filepath.Join(stateDir, crashFile), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("open crash report: %w", err)
	}
	defer f.Close() // SetCrashOutput keeps its own descriptor
	return debug.SetCrashOutput(f, debug.CrashOptions{})
}
