package kernels

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// Backend names NewCPUBackend accepts. Auto is the fastest built path the
// CPU supports; the others force one path.
const (
	BackendAuto    = "auto"
	BackendAMX     = "amx"
	BackendAVX512  = "avx512"
	BackendAVX2    = "avx2"
	BackendNEON    = "neon"
	BackendGeneric = "generic"
)

// ErrBackendUnavailable is returned (wrapped) when a backend is asked for that
// this binary does not have or this CPU cannot run.
var ErrBackendUnavailable = errors.New("kernel backend unavailable")

// BackendInfo describes one code path as this binary and CPU see it.
type BackendInfo struct {
	Name string
	// Built says the binary has this path (see BuildNeeds).
	Built bool
	// BuildNeeds is what a binary needs at build time to have the path
	// ("amd64 and GOEXPERIMENT=simd", "arm64"); empty when always built.
	BuildNeeds string
	// Missing names the CPU features the path needs and this CPU lacks
	// (/proc/cpuinfo spelling); empty when it can run here.
	Missing []string
	// Requires is every feature the path needs.
	Requires []string
}

// Usable says the path can run on this machine.
func (b BackendInfo) Usable() bool { return b.Built && len(b.Missing) == 0 }

// selectable is every user-facing backend, fastest first, with what it needs.
// Each runs on one architecture, so the order is by speed within one.
var selectable = []struct {
	name, build string
	requires    []string
}{
	// amx is avx512 with the AMX tile unit for the block formats.
	{BackendAMX, simdBuild, []string{"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "amx_tile", "amx_int8"}},
	{BackendAVX512, simdBuild, []string{"avx512f", "avx512bw", "avx512dq", "avx512vl"}},
	{BackendAVX2, simdBuild, []string{"avx2", "fma", "f16c"}},
	{BackendNEON, "arm64", []string{"asimd"}}, // SDOT where asimddp, inside
	{BackendGeneric, "", nil},
}

const simdBuild = "amd64 and GOEXPERIMENT=simd"

// Backends lists the selectable code paths, fastest first.
func Backends() []BackendInfo {
	var out []BackendInfo
	for _, s := range selectable {
		out = append(out, BackendInfo{Name: s.name, Requires: s.requires, BuildNeeds: s.build,
			Built: builtBackend(s.name) != nil, Missing: lacking(s.requires)})
	}
	return out
}

// lacking is the part of requires this CPU lacks.
func lacking(requires []string) []string {
	var out []string
	for _, f := range requires {
		if !HasFeature(f) {
			out = append(out, f)
		}
	}
	return out
}

// missingFeatures is what the CPU lacks for backend b, of the family its
// name starts with (avx512-go is avx512's); nil when it can run here.
func missingFeatures(b *backend) []string {
	fam, _, _ := strings.Cut(b.name, "-")
	bi, ok := backendInfo(fam)
	if !ok {
		return []string{"(unknown backend family " + fam + ")"}
	}
	return bi.Missing
}

// backendInfo is Backends' entry for name.
func backendInfo(name string) (BackendInfo, bool) {
	all := Backends()
	i := slices.IndexFunc(all, func(b BackendInfo) bool { return b.Name == name })
	if i < 0 {
		return BackendInfo{}, false
	}
	return all[i], true
}

// testBackendEnv names the environment variable that, in a test binary
// only, forces best (what NewCPU, NewCPUBackend("auto") and the
// package-level kernels use) to one backend: "amx", "avx512", "avx2", "neon" or
// "generic".
// It lets every test of this package and of its users (kernels/cuda's
// references, the engine's) run once per code path. A daemon reads the same
// variable as its configuration instead (daemon/config.go).
const testBackendEnv = "BATCHD_KERNELS"

func init() {
	detectSIMD()
	if !testing.Testing() {
		return
	}
	name := os.Getenv(testBackendEnv)
	if name == "" {
		return
	}
	be, err := resolveBackend(name)
	if err != nil {
		// A silent fallback would pass the tests on a path they were not
		// asked to cover.
		panic(fmt.Sprintf("kernels: %s=%s in a test binary: %v", testBackendEnv, name, err))
	}
	best = be
}

// BestBackend is the name of the path Auto chooses here (in a test binary,
// the one BATCHD_KERNELS forces).
func BestBackend() string { return best.name }

// builtBackend returns the backend of that name if this binary has it.
func builtBackend(name string) *backend {
	if name == portable.name {
		return portable
	}
	for _, b := range simdBuilt {
		if b.name == name {
			return b
		}
	}
	return nil
}

// resolveBackend maps a selectable name to a backend this CPU can run.
func resolveBackend(name string) (*backend, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" || name == BackendAuto {
		return best, nil
	}
	bi, ok := backendInfo(name)
	if !ok {
		return nil, fmt.Errorf("%w: unknown backend %q (want auto, amx, avx512, avx2, neon or generic)", ErrBackendUnavailable, name)
	}
	if !bi.Built {
		return nil, fmt.Errorf("%w: %s: not built into this binary (it needs %s at build time)", ErrBackendUnavailable, name, bi.BuildNeeds)
	}
	if len(bi.Missing) > 0 {
		return nil, fmt.Errorf("%w: %s: this CPU lacks %s (it has: %s)", ErrBackendUnavailable, name,
			strings.Join(bi.Missing, ", "), strings.Join(Features(), " "))
	}
	return builtBackend(name), nil
}

// NewCPUBackend is NewCPU on a chosen code path: "auto" (or "") for the best
// this CPU supports, or "amx", "avx512", "avx2", "neon", "generic". Asking for a path the
// binary lacks or the CPU cannot run is an error wrapping
// ErrBackendUnavailable that names the missing features.
func NewCPUBackend(threads int, name string) (*CPU, error) {
	be, err := resolveBackend(name)
	if err != nil {
		return nil, err
	}
	return newCPU(threads, be), nil
}

// Backend is the name of the code path this CPU runs ("avx2", "neon", ...).
func (c *CPU) Backend() string { return c.be.name }
