package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/batchd/batchd/kernels"
)

// cmdVersion prints the version, the CPU kernels this binary has and this
// machine can run, and the CPU features the choice was made from.
func cmdVersion(_ context.Context, _ []string, stdout, _ io.Writer) int {
	raw, _ := os.ReadFile("/proc/cpuinfo") // absent on some systems: the model is then unknown
	writeVersion(stdout, cpuModel(string(raw)))
	return exitOK
}

func writeVersion(w io.Writer, model string) {
	fmt.Fprintln(w, "batchd", version)
	var usable []string
	for _, b := range kernels.Backends() {
		if b.Usable() {
			usable = append(usable, b.Name)
		}
	}
	fmt.Fprintf(w, "kernels: %s (auto); available: %s\n", kernels.BestBackend(), strings.Join(usable, ", "))
	for _, b := range kernels.Backends() {
		var state string
		switch {
		case !b.Built:
			state = "not built (it needs amd64 and GOEXPERIMENT=simd at build time)"
		case len(b.Missing) > 0:
			state = "built, not usable: this CPU lacks " + strings.Join(b.Missing, " ")
		case len(b.Requires) > 0:
			state = "built, usable (" + strings.Join(b.Requires, " ") + ")"
		default:
			state = "built, usable"
		}
		fmt.Fprintf(w, "  %-8s %s\n", b.Name, state)
	}
	features := strings.Join(kernels.Features(), " ")
	if features == "" {
		features = "none of those the kernels use"
	}
	fmt.Fprintf(w, "cpu: %s (%s): %s\n", model, runtime.GOARCH, features)
}

// cpuModel is the CPU's name from the text of /proc/cpuinfo, or "unknown
// CPU" when it names none.
func cpuModel(cpuinfo string) string {
	// x86 and some ARM kernels say "model name"; others (Raspberry Pi,
	// MIPS, RISC-V) use one of the rest.
	keys := []string{"model name", "Model", "cpu model", "Hardware", "uarch"}
	found := map[string]string{}
	for _, line := range strings.Split(cpuinfo, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if _, seen := found[k]; !seen && v != "" {
			found[k] = v
		}
	}
	for _, k := range keys {
		if v := found[k]; v != "" {
			return v
		}
	}
	return "unknown CPU"
}
