//go:build goexperiment.simd && amd64

package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// amxTypes are the formats amx runs on the tile unit.
var amxTypes = []DType{Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS, Q2_K, Q3_K}

// TestAMXMatchesAVX512: the amx backend computes bit for bit what avx512
// does, for token counts on the tiles (whole 16s), past them (the rest on
// VNNI) and under them, over row groups, unpacked chunks and four-block
// batches that end part-way; and a token alone gives what it gives among
// 53.
func TestAMXMatchesAVX512(t *testing.T) {
	if !slices.Contains(simdBackends, amxBE) {
		t.Skipf("AMX not usable here: %v", amxErr)
	}
	r := rand.New(rand.NewPCG(21, 22))
	// 37 rows: two 16-row groups and a partial one; 75 blocks: four
	// unpacked chunks and 11 blocks (two four-block batches and 3 alone);
	// 9 super-blocks of the K formats: four chunks and a partial one.
	rows := 37
	for _, dt := range amxTypes {
		cols := 75 * 32
		if f := quantFormatOf(dt); f != nil && f.block == 256 {
			cols = 9 * 256
		}
		m := encodeMatrix(t, dt, rows, cols, randF32(r, rows*cols, 0.3))
		const T = 53
		x := randF32(r, T*cols, 1)
		for _, threads := range []int{1, 2} {
			a, v := newCPU(threads, amxBE), newCPU(threads, avx512)
			for _, n := range []int{T, 48, 16, 17, 15, 1} {
				name := fmt.Sprintf("%v/%d threads/T=%d", dt, threads, n)
				got, want := make([]float32, n*rows), make([]float32, n*rows)
				a.MatMul(got, x[:n*cols], n, m)
				v.MatMul(want, x[:n*cols], n, m)
				if i := bitsEqual(got, want); i >= 0 {
					t.Fatalf("%s: token %d row %d: amx %v, avx512 %v", name, i/rows, i%rows, got[i], want[i])
				}
				if n != T {
					continue
				}
				one := make([]float32, rows)
				for tok := range n {
					a.MatMul(one, x[tok*cols:(tok+1)*cols], 1, m)
					if i := bitsEqual(one, got[tok*rows:(tok+1)*rows]); i >= 0 {
						t.Fatalf("%s: token %d row %d: %v alone, %v among %d", name, tok, i, one[i], got[tok*rows+i], n)
					}
				}
			}
			a.Close()
			v.Close()
		}
	}
}

// TestAMXKernel runs the tile kernels directly against the VNNI ones on the
// same unpacked blocks: the driver could otherwise route every token past
// them and still pass the test above.
func TestAMXKernel(t *testing.T) {
	if !slices.Contains(simdBackends, amxBE) {
		t.Skipf("AMX not usable here: %v", amxErr)
	}
	r := rand.New(rand.NewPCG(23, 24))
	for _, k := range []groupFmt{
		{t: Q4_0, bb: q4_0Bytes, o: 8, unpack: r16UnpQ4_0, dot: r16DotV, amx: amxDotS},
		{t: Q4_1, bb: q4_1Bytes, min: true, unpack: r16UnpQ4_1, dot: r16DotMV, amx: amxDotM},
		{t: Q8_0, bb: Q8BlockBytes, o: 128, unpack: r16UnpQ8_0, dot: r16DotV, amx: amxDotS},
		{t: Q4_K, bb: q4KBytes, k: true, unpack: kr16UnpQ4K, dot: kr16Dot32, amx: kamxDot32},
		{t: Q6_K, bb: q6KBytes, k: true, unpack: kr16UnpQ6K, dot: kr16Dot16, amx: kamxDot16},
	} {
		rows, nb, nt := 16, 23, 32
		block, kind := 32, actQ8x32
		if k.k {
			nb, block, kind = 5, 256, actQ8K
		}
		cols := nb * block
		m := encodeMatrix(t, k.t, rows, cols, randF32(r, rows*cols, 0.3))
		stride := actRowBytes(kind, cols)
		act := make([]byte, nt*stride)
		sums := make([]int32, nt*nb)
		for j := range nt {
			quantizeActRow(kind, act[j*stride:(j+1)*stride], randF32(r, cols, 1))
			if k.o != 0 {
				actBlockSums(sums[j*nb:(j+1)*nb], act[j*stride:], k.o)
			}
		}
		var wt, wv worker
		got, want := make([]float32, nt*rows), make([]float32, nt*rows)
		k.rows(&wt, got, rows, m.Data, len(m.Data)/rows, rows, act, stride, sums, nt, nb)
		vnni := k
		vnni.amx = nil
		vnni.rows(&wv, want, rows, m.Data, len(m.Data)/rows, rows, act, stride, sums, nt, nb)
		if i := bitsEqual(got, want); i >= 0 {
			t.Fatalf("%v: token %d row %d: tiles %v, VNNI %v", k.t, i/rows, i%rows, got[i], want[i])
		}
		if slices.Max(want) == 0 && slices.Min(want) == 0 {
			t.Fatalf("%v: all products zero: the test proves nothing", k.t)
		}
	}
}
