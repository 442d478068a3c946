package kernels

import "slices"

// Features lists the CPU features the kernels look at that this machine has,
// spelled as /proc/cpuinfo spells them ("avx2", "fma", "avx512_vnni", ...).
// It is read once from CPUID (amd64) or the kernel's hwcaps (arm64); nothing
// here executes a vector instruction.
func Features() []string { return slices.Clone(cpuFeatures) }

// HasFeature says whether Features includes name.
func HasFeature(name string) bool { return slices.Contains(cpuFeatures, name) }

// AfterSIMD clears the upper halves of the vector registers that the SIMD
// kernels leave dirty: until then scalar (SSE) float code, math.Exp's above
// all, runs several times slower. A no-op where no AVX code can have run.
func AfterSIMD() { afterSIMD() }
