package kernels

import (
	"errors"

	"golang.org/x/sys/cpu"
)

// cpuid executes CPUID with EAX=leaf, ECX=sub (cpuid_amd64.s).
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// xgetbv0 reads XCR0 (cpuid_amd64.s); only where CPUID says OSXSAVE.
func xgetbv0() (eax, edx uint32)

var cpuFeatures = amd64Features()

func amd64Features() []string {
	x := cpu.X86
	_, _, ecx1, _ := cpuid(1, 0)
	f16c := x.HasAVX && ecx1&(1<<29) != 0 // usable only with the OS saving YMM state, as HasAVX checks
	var out []string
	for _, f := range []struct {
		name string
		has  bool
	}{
		{"sse4_2", x.HasSSE42}, {"avx", x.HasAVX}, {"avx2", x.HasAVX2}, {"fma", x.HasFMA}, {"f16c", f16c},
		{"avx_vnni", x.HasAVXVNNI},
		{"avx512f", x.HasAVX512F}, {"avx512bw", x.HasAVX512BW}, {"avx512dq", x.HasAVX512DQ},
		{"avx512vl", x.HasAVX512VL}, {"avx512_vnni", x.HasAVX512VNNI}, {"avx512_bf16", x.HasAVX512BF16},
	} {
		if f.has {
			out = append(out, f.name)
		}
	}
	if amxErr = amxUsable(x.HasAMXTile && x.HasAMXInt8, ecx1); amxErr == nil {
		out = append(out, "amx_tile", "amx_int8")
	}
	return out
}

// amxErr says why the AMX tiles cannot be used here (nil when they can).
var amxErr error

// amxUsable enables the AMX tiles where the CPU has them (cpuid says
// AMX-TILE and AMX-INT8), the OS manages their state (XCR0 bits 17 and 18:
// XTILECFG, XTILEDATA) and grants this process the tile data; before the
// grant a tile instruction would fault, so nothing runs one unless this
// returns nil.
func amxUsable(cpuHas bool, ecx1 uint32) error {
	if !cpuHas {
		return errors.New("the CPU lacks AMX-TILE and AMX-INT8")
	}
	if ecx1&(1<<27) == 0 { // OSXSAVE
		return errors.New("the OS does not enable XSAVE")
	}
	if xcr0, _ := xgetbv0(); xcr0&(3<<17) != 3<<17 {
		return errors.New("the OS does not manage the AMX tile state (XCR0)")
	}
	return requestAMX()
}
