//go:build arm64

package kernels

import (
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"
)

// neonDotsRef is neonDots in plain Go.
func neonDotsRef(w []byte, wstride int, a []byte, astride, nblocks, ngb, nv int) []int32 {
	var out []int32
	for b := range nblocks {
		for g := range ngb {
			var s int32
			for i := g * nv * 16; i < (g+1)*nv*16; i++ {
				s += int32(int8(w[b*wstride+i])) * int32(int8(a[b*astride+i]))
			}
			out = append(out, s)
		}
	}
	return out
}

// TestNEONDots checks both assembly paths against plain Go on the
// geometries the backend uses, with the extreme int8 values included: the
// plain NEON path always, SDOT where the CPU has asimddp (CI runs this
// under QEMU with and without it).
func TestNEONDots(t *testing.T) {
	paths := map[string]func(w *byte, wstride int, a *byte, astride int, nblocks, ngb, nv int, out *int32){"neon": neonDotsNEON}
	if HasFeature("asimddp") {
		paths["sdot"] = neonDotsSDOT
	} else {
		t.Logf("SDOT not tested: the CPU lacks asimddp (features: %v)", Features())
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, g := range []struct{ wstride, astride, ngb, nv int }{
		{34, 32, 1, 2},    // Q8_0 weights in place
		{32, 40, 1, 2},    // 32-value formats, actQ8x32
		{256, 292, 16, 1}, // K formats, scales per 16
		{256, 292, 8, 2},  // K formats, scales per 32
	} {
		for _, nblocks := range []int{1, 3, 7} {
			w := make([]byte, nblocks*g.wstride)
			a := make([]byte, nblocks*g.astride)
			for i := range w {
				w[i] = byte(r.IntN(256))
			}
			for i := range a {
				a[i] = byte(r.IntN(256))
			}
			// All -128 in the first block: the largest products.
			for i := range g.ngb * g.nv * 16 {
				w[i], a[i] = 0x80, 0x80
			}
			want := neonDotsRef(w, g.wstride, a, g.astride, nblocks, g.ngb, g.nv)
			for name, f := range paths {
				got := make([]int32, len(want)+1)
				got[len(want)] = 12345
				f(&w[0], g.wstride, &a[0], g.astride, nblocks, g.ngb, g.nv, &got[0])
				if got[len(want)] != 12345 {
					t.Fatalf("%s %+v: wrote past its %d sums", name, g, len(want))
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("%s %+v nblocks %d: sum %d = %d, want %d", name, g, nblocks, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestNEONPicksByFeature: SDOT runs only where the CPU has asimddp.
func TestNEONPicksByFeature(t *testing.T) {
	want := "neonDotsNEON"
	if HasFeature("asimddp") {
		want = "neonDotsSDOT"
	}
	if got := funcName(neonDots); got != "github.com/batchd/batchd/kernels."+want {
		t.Errorf("neonDots is %s, want %s (features: %v)", got, want, Features())
	}
}

func funcName(f any) string { return runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name() }

// neonDots4Paths are the four-row kernels this CPU can run.
func neonDots4Paths(t *testing.T) map[string]func(w, a *byte, astride, tstride, nblocks, ngb, nv, ntok int, out *int32) {
	paths := map[string]func(w, a *byte, astride, tstride, nblocks, ngb, nv, ntok int, out *int32){"neon": neonDots4NEON}
	if HasFeature("asimddp") {
		paths["sdot"] = neonDots4SDOT
	} else {
		t.Logf("SDOT not tested: the CPU lacks asimddp (features: %v)", Features())
	}
	return paths
}

// TestNEONDots4 checks both four-row kernels against neonDotsRef, row by
// row and token by token, for one and two tokens, with the extreme int8
// values in the first block and a guard after the last sum.
func TestNEONDots4(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	paths := neonDots4Paths(t)
	for _, g := range []struct{ bvals, astride, ngb, nv int }{
		{32, 40, 1, 2},    // 32-value formats, actQ8x32
		{256, 292, 16, 1}, // K formats, scales per 16
		{256, 292, 8, 2},  // K formats, scales per 32
	} {
		for _, nblocks := range []int{1, 3, neonChunk / g.bvals} {
			for _, ntok := range []int{1, 2} {
				w := make([]byte, 4*neonChunk)
				tstride := nblocks*g.astride + 24
				a := make([]byte, 2*tstride)
				for i := range w {
					w[i] = byte(r.IntN(256))
				}
				for i := range a {
					a[i] = byte(r.IntN(256))
				}
				for i := range g.bvals {
					w[i], a[i] = 0x80, 0x80
				}
				nsums := nblocks * g.ngb * 8
				for name, f := range paths {
					got := make([]int32, nsums+1)
					for i := range got {
						got[i] = 12345
					}
					f(&w[0], &a[0], g.astride, tstride, nblocks, g.ngb, g.nv, ntok, &got[0])
					if got[nsums] != 12345 {
						t.Fatalf("%s %+v: wrote past its sums", name, g)
					}
					for j := range 2 {
						for i := range 4 {
							want := neonDotsRef(w[i*neonChunk:], g.bvals, a[j*tstride:], g.astride, nblocks, g.ngb, g.nv)
							for k, s := range want {
								v := got[k*8+j*4+i]
								if j >= ntok {
									s = 12345
								}
								if v != s {
									t.Fatalf("%s %+v nblocks %d ntok %d: token %d row %d sum %d = %d, want %d", name, g, nblocks, ntok, j, i, k, v, s)
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestNEONNibbles checks the NEON nibble decoders against plain Go.
func TestNEONNibbles(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	src := make([]byte, 7*18)
	for i := range src {
		src[i] = byte(r.IntN(256))
	}
	kv := neonKvIQ4
	got := make([]int8, 7*32+1)
	got[7*32] = 99
	neonNib16(i8ptr(got), &src[2], 18, 7, &kv)
	for p := range 7 {
		for l := range 16 {
			b := src[p*18+2+l]
			if got[p*32+l] != kv[b&15] || got[p*32+16+l] != kv[b>>4] {
				t.Fatalf("nib16 piece %d byte %d: %d %d, want %d %d", p, l, got[p*32+l], got[p*32+16+l], kv[b&15], kv[b>>4])
			}
		}
	}
	if got[7*32] != 99 {
		t.Fatal("nib16 wrote past its pieces")
	}
	got = make([]int8, 3*64+1)
	got[3*64] = 99
	neonNib32(i8ptr(got), &src[0], 3)
	for p := range 3 {
		for l := range 32 {
			b := src[p*32+l]
			if got[p*64+l] != int8(b&15) || got[p*64+32+l] != int8(b>>4) {
				t.Fatalf("nib32 piece %d byte %d", p, l)
			}
		}
	}
	if got[3*64] != 99 {
		t.Fatal("nib32 wrote past its pieces")
	}
}

// TestNEONQuantChunks runs the neon quant paths over rows longer than one
// decode chunk (1280 values: two chunks, the second partial) for every
// format: qrows against the portable blockDot within rounding, against the
// tiles bit for bit, and each token alone against the batch.
func TestNEONQuantChunks(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	rows, cols, T := 6, 1280, 5
	for _, dt := range quantTypesWanted {
		f := quantFormatOf(dt)
		m := encodeMatrix(t, dt, rows, cols, randF32(r, rows*cols, 0.3))
		x := randF32(r, T*cols, 1)
		c := newCPU(1, neon)
		defer c.Close()
		out := make([]float32, T*rows)
		c.MatMul(out, x, T, m)
		tilesOnly := *neon
		tilesOnly.qrows = [numDTypes]qRowsFn{}
		ct := newCPU(1, &tilesOnly)
		defer ct.Close()
		tiled := make([]float32, T*rows)
		ct.MatMul(tiled, x, T, m)
		if i := bitsEqual(tiled, out); i >= 0 {
			t.Fatalf("%v element %d: %v by qrows, %v by qtiles", dt, i, out[i], tiled[i])
		}
		a := make([]byte, actRowBytes(f.act, cols))
		one := make([]float32, rows)
		for tok := range T {
			quantizeActRow(f.act, a, x[tok*cols:(tok+1)*cols])
			for row := range rows {
				want := f.blockDot(m.Data[row*m.rowBytes():], a, cols/f.block)
				got := out[tok*rows+row]
				if d := float64(got - want); d*d > 1e-8*float64(want*want)+1e-10 {
					t.Fatalf("%v token %d row %d: %v, portable %v", dt, tok, row, got, want)
				}
			}
			c.MatMul(one, x[tok*cols:(tok+1)*cols], 1, m)
			if i := bitsEqual(one, out[tok*rows:(tok+1)*rows]); i >= 0 {
				t.Fatalf("%v token %d row %d: %v alone, %v batched", dt, tok, i, one[i], out[tok*rows+i])
			}
		}
	}
}
