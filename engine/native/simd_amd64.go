//go:build goexperiment.simd && amd64

package native

import "simd/archsimd"

// afterSIMD clears the upper halves of the vector registers that the
// kernels' AVX code leaves dirty: until then the scalar (SSE) float code
// that follows, math.Exp's above all, runs several times slower.
func afterSIMD() { archsimd.ClearAVXUpperBits() }
