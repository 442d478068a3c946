//go:build goexperiment.simd && amd64

package kernels

import "unsafe"

// Assembly tiles (tiles_amd64.s). Same arguments and results as the
// archsimd tiles of the same shape; AVX-512F, plus AVX512-VNNI for q8VNNI*.

//go:noescape
func q8VNNITile4x4(res *[16]float32, w0, w1, w2, w3, qs unsafe.Pointer, qStride int, xs unsafe.Pointer, sStride, nb int)

//go:noescape
func q8VNNIRow1(res *float32, w, qs, xs unsafe.Pointer, nb int)

//go:noescape
func f32Tile4x4asm(res *[16]float32, w0, w1, w2, w3, x unsafe.Pointer, ldx, cols int)

//go:noescape
func f16Row1asm(res *float32, w, x unsafe.Pointer, cols int)

//go:noescape
func bf16Row1asm(res *float32, w, x unsafe.Pointer, cols int)

//go:noescape
func cvtF16asm(dst *float32, src unsafe.Pointer, n int)

func cvtF16RowAsm(dst []float32, src unsafe.Pointer, n int) {
	if n > 0 {
		cvtF16asm(&dst[:n][0], src, n)
	}
}
