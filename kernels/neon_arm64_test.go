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
