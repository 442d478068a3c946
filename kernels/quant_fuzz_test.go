package kernels

import (
	"math"
	"testing"
)

// FuzzQuantBlocks decodes arbitrary bytes as every block quantization (a
// file's tensor data is untrusted input) and checks, where the decoded
// weights are finite: the format's integer dot against the float64
// product of the decoded weights and activations, and every backend's
// MatMul against that dot, within float32 rounding of Σ|w·x|.
func FuzzQuantBlocks(f *testing.F) {
	f.Add([]byte{0x00, 0x3c, 0x12, 0x34, 0xff, 0x80, 0x7f, 0x01}, uint8(3))
	f.Add(make([]byte, 300), uint8(1))
	f.Add([]byte{0x00, 0x2c, 0x9a, 0x07, 0x31, 0xc4, 0x66, 0x2b, 0x5e, 0x13}, uint8(4))
	f.Fuzz(func(t *testing.T, seed []byte, rows uint8) {
		if len(seed) == 0 {
			return
		}
		nr := int(rows%5) + 1
		x := make([]float32, 512)
		for i := range x {
			x[i] = float32(int(seed[i%len(seed)])-128) / 37
		}
		for _, dt := range quantTypesWanted {
			fm := quantFormatOf(dt)
			cols := 512
			rb, _ := dt.RowBytes(cols)
			data := make([]byte, nr*rb)
			for i := range data {
				data[i] = seed[(i*7+i/len(seed))%len(seed)] ^ byte(i>>3)
			}
			m, err := NewMatrix(dt, nr, cols, data)
			if err != nil {
				t.Fatal(err)
			}
			wd := dequantized(m)
			finite := true
			for _, v := range wd {
				if math.IsNaN(float64(v)) || math.Abs(float64(v)) > 1e20 {
					finite = false
					break
				}
			}
			if !finite {
				continue // NaN or Inf (MXFP4's largest scales): no defined product
			}
			act := make([]byte, actRowBytes(fm.act, cols))
			quantizeActRow(fm.act, act, x)
			xd := dequantAct(fm.act, act, cols)
			for _, be := range backendsUnderTest(t) {
				c := newCPU(1, be)
				out := make([]float32, nr)
				c.MatMul(out, x, 1, m)
				c.Close()
				for r := range nr {
					var want, mag float64
					for i := range cols {
						p := float64(wd[r*cols+i]) * float64(xd[i])
						want += p
						mag += math.Abs(p)
					}
					dot := fm.blockDot(data[r*rb:], act, cols/fm.block)
					tol := 4e-6*mag + 1e-30
					if d := math.Abs(float64(dot) - want); d > tol {
						t.Fatalf("%v row %d: portable dot %v, want %v", dt, r, dot, want)
					}
					if d := math.Abs(float64(out[r]) - want); d > tol {
						t.Fatalf("%v row %d on %s: MatMul %v, want %v", dt, r, be.name, out[r], want)
					}
				}
			}
		}
	})
}
