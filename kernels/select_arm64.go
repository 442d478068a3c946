//go:build arm64

package kernels

// best is the backend NewCPU and the package-level kernels use: neon where
// the CPU has Advanced SIMD (every arm64 Linux CPU does; the hwcap says so).
var best = portable

// simdBuilt lists the SIMD backends of this binary, simdBackends those this
// machine can run.
var simdBuilt = []*backend{neon}

var simdBackends []*backend

// detectSIMD fills simdBackends from the hwcaps and makes the fastest of
// them best (select.go's init calls it, before any test override).
func detectSIMD() {
	for _, b := range simdBuilt {
		if len(missingFeatures(b)) == 0 {
			simdBackends = append(simdBackends, b)
		}
	}
	if len(simdBackends) > 0 {
		best = simdBackends[0]
	}
}

// afterSIMD has nothing to do: NEON leaves no state that slows scalar code.
func afterSIMD() {}
