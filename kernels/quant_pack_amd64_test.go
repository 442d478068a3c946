//go:build goexperiment.simd && amd64

package kernels

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPackedMatMul: a packed matrix multiplies bit for bit as its raw
// layout does on every backend that packs (groups of 8 rows on avx2, 16 on
// avx512 and amx), for one token (decode), a few, and enough for the AMX
// tiles, over a partial row group, unpacked chunks
// and a partial chunk; Pack leaves Data as it was, refuses to pack twice,
// and a backend without a layout packs nothing.
func TestPackedMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	rows, cols := 37, 11*256 // 88 blocks of 32, 11 of 256: a partial last chunk on every path
	for _, be := range backendsUnderTest(t) {
		for dt := range packedFormats {
			m := encodeMatrix(t, dt, rows, cols, randF32(r, rows*cols, 0.3))
			raw := slices.Clone(m.Data)
			c := newCPU(2, be)
			packed := *m
			n := c.Pack(&packed)
			if be.qpack[dt] == nil {
				if n != 0 || packed.pk != nil {
					t.Fatalf("%s/%v: no layout, yet Pack took %d bytes", be.name, dt, n)
				}
				c.Close()
				continue
			}
			g := packed.pk.group
			if want := map[string]int{"avx2": 8}[be.name]; g != cmp.Or(want, 16) {
				t.Fatalf("%s/%v: groups of %d rows", be.name, dt, g)
			}
			bb := len(m.Data) / rows / (cols / dt.BlockSize())
			if dt.BlockSize() == 256 {
				bb = (bb + 3) &^ 3 // K formats: whole dwords (Q6_K's 210 bytes as 212)
			}
			if want := (rows + g - 1) / g * g * (cols / dt.BlockSize()) * bb; n != want {
				t.Fatalf("%s/%v: Pack took %d bytes, want %d", be.name, dt, n, want)
			}
			if again := c.Pack(&packed); again != 0 {
				t.Fatalf("%s/%v: a second Pack took %d bytes", be.name, dt, again)
			}
			if !slices.Equal(raw, packed.Data) {
				t.Fatalf("%s/%v: Pack changed Data", be.name, dt)
			}
			const T = 53
			x := randF32(r, T*cols, 1)
			for _, n := range []int{1, 5, 16, 21, T} {
				want, got := make([]float32, n*rows), make([]float32, n*rows)
				c.MatMul(want, x[:n*cols], n, m)
				c.MatMul(got, x[:n*cols], n, &packed)
				if i := bitsEqual(got, want); i >= 0 {
					t.Fatalf("%s/%v/T=%d: token %d row %d: packed %v, raw %v", be.name, dt, n, i/rows, i%rows, got[i], want[i])
				}
			}
			c.Close()
		}
	}
}

// BenchmarkPackedMatMul: raw and packed layouts at one token and a batch.
func BenchmarkPackedMatMul(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, dt := range []DType{Q4_0, Q8_0} {
		rows, cols := 896, 4864 // a 0.5B model's FFN
		base := encodeMatrix(b, dt, rows, cols, randF32(r, rows*cols, 0.3))
		data := base.Data
		for _, be := range backendsUnderTest(b) {
			if be.qpack[dt] == nil {
				continue
			}
			for _, packed := range []bool{false, true} {
				m := new(Matrix)
				*m = *base // Pack sets the copy's layout only
				c := newCPU(1, be)
				if packed {
					c.Pack(m)
				}
				for _, T := range []int{1, 8, 32} {
					b.Run(fmt.Sprintf("%v/%s/packed=%v/T%d", dt, be.name, packed, T), func(b *testing.B) {
						x := randF32(r, T*cols, 1)
						out := make([]float32, T*rows)
						b.SetBytes(int64(len(data)))
						for b.Loop() {
							c.MatMul(out, x, T, m)
						}
					})
				}
				c.Close()
			}
		}
	}
}
