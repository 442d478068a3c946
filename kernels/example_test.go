package kernels_test

import (
	"fmt"

	"github.com/batchd/batchd/kernels"
)

// A Q8_0 weight matrix times two activation rows.
func ExampleCPU_MatMul() {
	const rows, cols = 2, 32
	w := make([]float32, rows*cols)
	for c := range cols {
		w[c] = 1                   // row 0: all ones
		w[cols+c] = float32(c % 2) // row 1: 0, 1, 0, 1, ...
	}
	data := make([]byte, rows*kernels.Q8BlockBytes)
	for r := range rows {
		if err := kernels.QuantizeQ8_0(data[r*kernels.Q8BlockBytes:], w[r*cols:(r+1)*cols]); err != nil {
			panic(err)
		}
	}
	m, err := kernels.NewMatrix(kernels.Q8_0, rows, cols, data)
	if err != nil {
		panic(err)
	}
	x := make([]float32, 2*cols) // token 0: all 0.5; token 1: all 2
	for c := range cols {
		x[c], x[cols+c] = 0.5, 2
	}
	cpu := kernels.NewCPU(2)
	defer cpu.Close()
	out := make([]float32, 2*rows) // out[t*rows+r]
	cpu.MatMul(out, x, 2, m)
	fmt.Printf("%.4g\n", out) // Q8_0 is approximate: the scale 1/127 is a float16
	// Output: [16 8 64 32]
}
