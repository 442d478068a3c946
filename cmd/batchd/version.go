package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/kernels/cuda"
)

// commit and buildDate may be set at build time (-ldflags "-X
// main.commit=... -X main.buildDate=..."); otherwise they come from the
// version control stamp Go puts in binaries built inside a checkout.
var commit, buildDate string

// cmdVersion prints the version, the build (commit, date, Go), the device
// and engines the daemon uses by default, the CPU kernels this binary has
// and this machine can run, and the CPU features the choice was made from.
func cmdVersion(_ context.Context, _ []string, stdout, _ io.Writer) int {
	raw, _ := os.ReadFile("/proc/cpuinfo") // absent on some systems: the model is then unknown
	bi, _ := debug.ReadBuildInfo()
	writeVersion(stdout, buildOf(bi), os.Getenv("BATCHD_DEVICE"), cpuModel(string(raw)))
	return exitOK
}

// build is what `batchd version` says of how the binary was built.
type build struct {
	commit, date, goVersion string
	modified                bool // built from a checkout with uncommitted changes
}

// buildOf reads the build from the ldflags variables, falling back to bi's
// vcs settings; "unknown" where neither says (go install of a module, a
// build outside a checkout, -buildvcs=false).
func buildOf(bi *debug.BuildInfo) build {
	b := build{commit: commit, date: buildDate, goVersion: runtime.Version()}
	if bi != nil {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.commit == "" {
					b.commit = s.Value
				}
			case "vcs.time":
				if b.date == "" {
					b.date = s.Value
				}
			case "vcs.modified":
				b.modified = s.Value == "true"
			}
		}
	}
	if b.commit == "" {
		b.commit = "unknown"
	}
	if b.date == "" {
		b.date = "unknown"
	}
	return b
}

func writeVersion(w io.Writer, b build, envDevice, model string) {
	fmt.Fprintln(w, "batchd", version)
	dirty := ""
	if b.modified {
		dirty = " (modified)"
	}
	fmt.Fprintf(w, "build: commit %s%s, %s, %s\n", b.commit, dirty, b.date, b.goVersion)
	device, why := native.DeviceAuto, "default; native.device or BATCHD_DEVICE chooses"
	if envDevice != "" {
		device, why = envDevice, "from BATCHD_DEVICE"
	}
	fmt.Fprintf(w, "device: %s (%s); built: %s, %s, %s, %s; cuda: %s\n",
		device, why, native.DeviceAuto, native.DeviceCPU, native.DeviceCUDA, native.DeviceReference, cuda.Describe())
	fmt.Fprintln(w, "engines: native (default, runs the models on the device), openai (a remote OpenAI-compatible server)")
	fmt.Fprintf(w, "weights: GGUF %s; safetensors F32 F16 BF16\n", strings.Join(weights.GGUFTypes(), " "))
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
			state = "not built (it needs " + b.BuildNeeds + " at build time)"
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
