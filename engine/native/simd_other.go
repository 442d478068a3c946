//go:build !(goexperiment.simd && amd64)

package native

// afterSIMD has nothing to do without the SIMD kernels.
func afterSIMD() {}
