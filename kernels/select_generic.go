//go:build !(goexperiment.simd && amd64)

package kernels

// best is the backend NewCPU and the package-level kernels use: without
// GOEXPERIMENT=simd on amd64 only the portable one exists.
var best = portable

// simdBackends is empty: no SIMD backend is built.
var simdBackends []*backend
