//go:build goexperiment.simd && amd64

package kernels

import (
	"math/bits"
	"simd/archsimd"
)

// best is the backend NewCPU and the package-level kernels use; detectSIMD
// in simd_amd64.go upgrades it from the CPU's features.
var best = portable

// simdBuilt lists the SIMD backends this binary has, fastest first;
// simdBackends those of them this machine can run. Building the backend
// values runs no vector code (only CPUID through archsimd.X86).
var simdBuilt = []*backend{amxBE, avx512, avx512Go, avx2}

var simdBackends []*backend

func trailingZeros16(x uint16) int { return bits.TrailingZeros16(x) }

// Constants of the float32 exp (Cephes expf).
const (
	expLo = -87.33654
	expHi = 88.3762626647949
	log2e = 1.44269504088896341
	ln2Hi = 0.693359375
	ln2Lo = -2.12194440e-4
	expC5 = 1.9875691500e-4
	expC4 = 1.3981999507e-3
	expC3 = 8.3334519073e-3
	expC2 = 4.1665795894e-2
	expC1 = 1.6666665459e-1
	expC0 = 5.0000001201e-1
)

// afterSIMD runs VZEROUPPER, which needs AVX: only when a SIMD backend can
// have run (best may be portable in a test binary that forced it while
// tests still run the SIMD backends by name).
func afterSIMD() {
	if len(simdBackends) > 0 {
		archsimd.ClearAVXUpperBits()
	}
}
