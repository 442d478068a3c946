package cuda_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/kernels/cuda"
)

// TestArgmaxRows: argmax_rows is kernels.Argmax row by row, ties to the
// lowest id, -Inf rows, NaNs (at 0 it wins, elsewhere it is passed over),
// signed zeros, for vocabularies below, at and above the block size.
func TestArgmaxRows(t *testing.T) {
	d := ktOpen(t)
	ninf, nan := float32(math.Inf(-1)), float32(math.NaN())
	for _, vocab := range []int{7, 256, 1000} {
		t.Run(fmt.Sprint("vocab", vocab), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(vocab), 1))
			var rows [][]float32
			row := func(f func(x []float32)) {
				x := randF32(r, vocab, 3)
				f(x)
				rows = append(rows, x)
			}
			row(func(x []float32) {})
			row(func(x []float32) { x[vocab-1] = 9; x[2] = 9; x[vocab/2] = 9 }) // tie: 2
			row(func(x []float32) { x[vocab-1] = 9 })                           // last
			row(func(x []float32) {                                             // all -Inf: 0
				for i := range x {
					x[i] = ninf
				}
			})
			row(func(x []float32) { // -Inf but one
				for i := range x {
					x[i] = ninf
				}
				x[vocab-2] = -1e30
			})
			row(func(x []float32) { x[0] = nan })                 // NaN at 0: 0
			row(func(x []float32) { x[3] = nan; x[vocab-1] = 9 }) // passed over
			row(func(x []float32) {                               // signed zeros tie: the first
				for i := range x {
					x[i] = -1
				}
				x[4] = float32(math.Copysign(0, -1))
				x[1] = 0
			})
			row(func(x []float32) { x[5] = float32(math.Inf(1)); x[6] = float32(math.Inf(1)) })
			flat := make([]float32, 0, len(rows)*vocab)
			for _, x := range rows {
				flat = append(flat, x...)
			}
			for _, block := range []uint32{32, 256} {
				out := ktUpload(t, d, make([]byte, 4*len(rows)))
				err := d.Launch(cuda.KernelArgmaxRows, cuda.Dim3{X: uint32(len(rows)), Y: 1, Z: 1}, cuda.Dim3{X: block, Y: 1, Z: 1}, 0,
					cuda.Ptr(out), cuda.Ptr(ktUpload(t, d, f32Bytes(flat))), cuda.I32(int32(vocab)))
				if err != nil {
					t.Fatal(err)
				}
				got := ktReadI32(t, d, out, len(rows))
				for i, x := range rows {
					if want := kernels.Argmax(x); int(got[i]) != want {
						t.Errorf("block %d row %d: argmax_rows %d, kernels.Argmax %d", block, i, got[i], want)
					}
				}
			}
		})
	}
}

// counterUniform is engine/native/sampler.go's counterUniform (unexported
// there), restated as the reference the kernel's RNG must equal.
func counterUniform(seed uint64, pos int) float64 {
	x := seed ^ (uint64(pos)+1)*0x9e3779b97f4a7c15
	for range 2 {
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		x ^= x >> 31
	}
	return float64(x>>11) / (1 << 53)
}

// cpuDraw is engine/native/sampler.go's choose() for top_k off and top_p 1
// (restated: the engine's sampler is unexported), on the CPU's kernels:
// the first maximum when greedy or when it is ±Inf/NaN, else the in-order
// walk over softmax(x·invT) cut by min_p. near reports that u·Σq lies
// within 1e-6·Σq of a boundary of the token drawn, where rounding may
// decide between neighbours.
func cpuDraw(x []float32, temperature, minP float64, u float64) (tok int, near bool) {
	best := kernels.Argmax(x)
	if temperature < 1e-5 {
		return best, false
	}
	if m := float64(x[best]); math.IsInf(m, 0) || math.IsNaN(m) {
		return best, false
	}
	invT := 1 / temperature
	probs := append([]float32(nil), x...)
	if invT != 1 {
		f := float32(invT)
		for i := range probs {
			probs[i] *= f
		}
	}
	kernels.Softmax(probs)
	kernels.AfterSIMD()
	thr := float32(minP) * probs[best]
	negInf := func(v float32) bool { return math.IsInf(float64(v), -1) }
	var sum float64
	for i, q := range probs {
		if q >= thr && !negInf(x[i]) {
			sum += float64(q)
		}
	}
	target := u * sum
	last := best
	var before float64 // the mass of the ids walked before i
	for i, q := range probs {
		if q < thr || q == 0 || negInf(x[i]) {
			continue
		}
		last = i
		after := before + float64(q)
		if target-after < 0 {
			return i, math.Abs(target-before) < 1e-6*sum || math.Abs(target-after) < 1e-6*sum
		}
		before = after
	}
	return last, true
}

// TestSampleRowsMatchesCPU: sample_rows draws the CPU's token for every
// row of many launches (seeds, positions, temperatures including greedy,
// min_p, masked ids, vocabularies below and above the block size), except
// where u·Σq falls within 1e-6 of a boundary between two ids (counted and
// logged; rounding of the softmax may pick either side there).
func TestSampleRowsMatchesCPU(t *testing.T) {
	d := ktOpen(t)
	temps := []float64{0, 0.3, 0.7, 1, 1.5}
	minPs := []float64{0, 0.02, 0.1, 0.5}
	r := rand.New(rand.NewPCG(7, 70))
	cases, nearOK, nearAll := 0, 0, 0
	for _, c := range []struct {
		vocab, rows, launches int
		block                 uint32
	}{{vocab: 50, rows: 64, launches: 16, block: 32}, {vocab: 3000, rows: 64, launches: 40, block: 256}, {vocab: 32000, rows: 16, launches: 2, block: 1024}, {vocab: 151936, rows: 4, launches: 1, block: 1024}} {
		for range c.launches {
			x := make([]float32, c.rows*c.vocab)
			seeds := make([]uint64, c.rows)
			pos, temp, minP := make([]int32, c.rows), make([]float64, c.rows), make([]float64, c.rows)
			invT, minP32 := make([]float32, c.rows), make([]float32, c.rows)
			for i := range c.rows {
				row := x[i*c.vocab : (i+1)*c.vocab]
				// Logits of a few scales, a few masked ids, sometimes a
				// handful of strong candidates.
				spread := []float32{1, 4, 12}[r.IntN(3)]
				for j := range row {
					row[j] = float32(r.NormFloat64()) * spread
				}
				for range r.IntN(4) {
					row[r.IntN(c.vocab)] = float32(math.Inf(-1))
				}
				if r.IntN(3) == 0 {
					row[r.IntN(c.vocab)] = float32(math.Inf(-1))
					row[r.IntN(c.vocab)] = 3 * spread
				}
				seeds[i], pos[i] = r.Uint64(), int32(r.IntN(5000))
				temp[i], minP[i] = temps[r.IntN(len(temps))], minPs[r.IntN(len(minPs))]
				if temp[i] >= 1e-5 {
					invT[i] = float32(1 / temp[i])
				}
				minP32[i] = float32(minP[i])
			}
			sb := make([]byte, 8*c.rows)
			for i, s := range seeds {
				binary.LittleEndian.PutUint64(sb[8*i:], s)
			}
			out := ktUpload(t, d, make([]byte, 4*c.rows))
			err := d.Launch(cuda.KernelSampleRows, cuda.Dim3{X: uint32(c.rows), Y: 1, Z: 1}, cuda.Dim3{X: c.block, Y: 1, Z: 1}, 0,
				cuda.Ptr(out), cuda.Ptr(ktUpload(t, d, f32Bytes(x))), cuda.I32(int32(c.vocab)), cuda.Ptr(ktUpload(t, d, sb)),
				cuda.Ptr(ktUpload(t, d, i32Bytes(pos))), cuda.Ptr(ktUpload(t, d, f32Bytes(invT))), cuda.Ptr(ktUpload(t, d, f32Bytes(minP32))))
			if err != nil {
				t.Fatal(err)
			}
			got := ktReadI32(t, d, out, c.rows)
			for i := range c.rows {
				want, near := cpuDraw(x[i*c.vocab:(i+1)*c.vocab], temp[i], minP[i], counterUniform(seeds[i], int(pos[i])))
				cases++
				if near {
					nearAll++
				}
				if int(got[i]) == want {
					continue
				}
				if near {
					nearOK++
					continue
				}
				t.Errorf("vocab %d row %d (seed %#x pos %d temperature %g min_p %g): sample_rows %d, the CPU %d",
					c.vocab, i, seeds[i], pos[i], temp[i], minP[i], got[i], want)
			}
		}
	}
	t.Logf("sample_rows: %d draws, %d within 1e-6 of a boundary, %d of them differing", cases, nearAll, nearOK)
}

// TestSampleRowsSpecialRows: greedy (invTemp ≤ 0), a +Inf or NaN maximum,
// a row of one unmasked id, and every id masked but one after min_p.
func TestSampleRowsSpecialRows(t *testing.T) {
	d := ktOpen(t)
	const vocab = 300
	ninf := float32(math.Inf(-1))
	r := rand.New(rand.NewPCG(3, 33))
	type row struct {
		x          []float32
		invT, minP float32
		want       int32
	}
	var rows []row
	base := func() []float32 { return randF32(r, vocab, 2) }
	x := base()
	x[17] = 50
	rows = append(rows, row{x, 0, 0, 17}, row{x, -1, 0, 17})
	x = base()
	x[40], x[41] = float32(math.Inf(1)), float32(math.Inf(1))
	rows = append(rows, row{x, 1, 0, 40})
	x = base()
	x[0] = float32(math.NaN())
	rows = append(rows, row{x, 1, 0, 0})
	x = make([]float32, vocab)
	for i := range x {
		x[i] = ninf
	}
	x[123] = -5
	rows = append(rows, row{x, 2, 0, 123})
	x = base()
	x[200] = 40 // min_p 0.5 leaves only 200
	rows = append(rows, row{x, 1, 0.5, 200})
	flat, invT, minP := []float32{}, []float32{}, []float32{}
	for _, rw := range rows {
		flat, invT, minP = append(flat, rw.x...), append(invT, rw.invT), append(minP, rw.minP)
	}
	n := len(rows)
	out := ktUpload(t, d, make([]byte, 4*n))
	err := d.Launch(cuda.KernelSampleRows, cuda.Dim3{X: uint32(n), Y: 1, Z: 1}, cuda.Dim3{X: 64, Y: 1, Z: 1}, 0,
		cuda.Ptr(out), cuda.Ptr(ktUpload(t, d, f32Bytes(flat))), cuda.I32(vocab), cuda.Ptr(ktUpload(t, d, make([]byte, 8*n))),
		cuda.Ptr(ktUpload(t, d, make([]byte, 4*n))), cuda.Ptr(ktUpload(t, d, f32Bytes(invT))), cuda.Ptr(ktUpload(t, d, f32Bytes(minP))))
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range ktReadI32(t, d, out, n) {
		if g != rows[i].want {
			t.Errorf("row %d: sample_rows %d, want %d", i, g, rows[i].want)
		}
	}
}
