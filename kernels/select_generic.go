//go:build !(goexperiment.simd && amd64) && !arm64

package kernels

// best is the backend NewCPU and the package-level kernels use: without
// GOEXPERIMENT=simd on amd64, and off arm64, only the portable one exists.
var best = portable

// simdBuilt and simdBackends are empty: no SIMD backend is built.
var simdBuilt, simdBackends []*backend

func afterSIMD() {}

// detectSIMD has nothing to detect: best stays portable.
func detectSIMD() {}
