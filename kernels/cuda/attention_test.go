package cuda_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/kernels/cuda"
	"github.com/batchd/batchd/kernels/cuda/emu"
)

// The kernels run on the GPU when BATCHD_CUDA_TEST=gpu (scripts/gpu-check.sh
// on a machine with one), else on emu's host emulation of it (a named
// double for the device CI does not have): the same CUDA C source, launched
// by name with the arguments a GPU gets.

// ktOpen opens the driver for one test: the GPU, failing if it cannot be
// opened, or the emulation, skipping when there is no C++ compiler to build
// it (unless BATCHD_REQUIRE_CLANG=1, as CI sets).
func ktOpen(t *testing.T) cuda.Driver {
	t.Helper()
	if os.Getenv("BATCHD_CUDA_TEST") == "gpu" {
		d, err := cuda.OpenDriver(0, cuda.ModulePTX)
		if err != nil {
			t.Fatalf("BATCHD_CUDA_TEST=gpu: %v", err)
		}
		t.Cleanup(d.Close)
		return d
	}
	d, err := emu.Open()
	if errors.Is(err, emu.ErrNoCompiler) && os.Getenv("BATCHD_REQUIRE_CLANG") != "1" {
		t.Skipf("skipping: the kernels run on the CUDA emulation, which needs a C++ compiler: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// ktUpload copies b to fresh device memory, freed when the test ends.
func ktUpload(t *testing.T, d cuda.Driver, b []byte) cuda.DevPtr {
	t.Helper()
	p, err := d.Alloc(int64(max(len(b), 4)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(p) })
	if len(b) > 0 {
		if err := d.CopyIn(p, b); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func ktReadF32(t *testing.T, d cuda.Driver, p cuda.DevPtr, n int) []float32 {
	t.Helper()
	b := make([]byte, 4*n)
	if err := d.CopyOut(b, p); err != nil {
		t.Fatal(err)
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func ktReadI32(t *testing.T, d cuda.Driver, p cuda.DevPtr, n int) []int32 {
	t.Helper()
	b := make([]byte, 4*n)
	if err := d.CopyOut(b, p); err != nil {
		t.Fatal(err)
	}
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// attnTile is csrc/attention.cu's ATT_TILE.
const attnTile = 64

// attnShared is paged_attention's dynamic shared bytes (attention.cu).
func attnShared(nHeads, nKV, headDim int) uint32 {
	g := nHeads / nKV
	return uint32(4 * (2*g*headDim + g*attnTile + 3*g))
}

// attnSpan is one sequence's tokens in a launch: nTok tokens at positions
// start.. (a prefill chunk, or a decode step when nTok is 1).
type attnSpan struct{ start, nTok int }

// TestPagedAttentionMatchesCPU runs one paged_attention launch over several
// sequences at once (prefill chunks and decode tokens, interleaved, with
// block tables scattered over a shared pool) and compares every output with
// kernels.CPU.PagedAttention over each sequence alone. Tolerance: the
// issue's 1e-2 relative to each head's largest output; the worst error seen
// is logged.
func TestPagedAttentionMatchesCPU(t *testing.T) {
	d := ktOpen(t)
	cpu := kernels.NewCPU(1)
	defer cpu.Close()
	const bs = 16
	// Positions cross tile (64) and block (16) boundaries: a decode at 64
	// has exactly one tile plus one position, at 0 a single position.
	spans := []attnSpan{{start: 129, nTok: 1}, {start: 37, nTok: 30}, {start: 0, nTok: 1}, {start: 0, nTok: 5}, {start: 64, nTok: 1}, {start: 190, nTok: 3}}
	cases := []struct {
		heads, kv, hd int
		qScale        float32
		block         uint32
	}{
		{4, 4, 8, 1, 128},    // GQA 1, stories260K's head size
		{7, 1, 8, 4, 32},     // one warp per block
		{8, 4, 64, 1, 128},   // GQA 2
		{14, 2, 64, 1, 128},  // GQA 7, Qwen2.5-0.5B's shape
		{14, 2, 128, 3, 128}, // GQA 7, peaked softmax
		{6, 3, 128, 1, 256},
		{2, 1, 256, 1, 128}, // the largest head
	}
	r := rand.New(rand.NewPCG(15, 4))
	worst := 0.0
	for _, c := range cases {
		t.Run(fmt.Sprintf("heads%d_kv%d_hd%d_block%d", c.heads, c.kv, c.hd, c.block), func(t *testing.T) {
			stride := c.kv * c.hd
			// Each sequence's blocks come from one shuffled pool, with spare
			// blocks of garbage no table names.
			maxBlocks, used := 0, 0
			for _, s := range spans {
				nb := (s.start + s.nTok + bs - 1) / bs
				maxBlocks, used = max(maxBlocks, nb), used+nb
			}
			nPool := used + 5
			perm := r.Perm(nPool)
			K, V := randF32(r, nPool*bs*stride, 1), randF32(r, nPool*bs*stride, 1)
			tables := make([]int32, len(spans)*maxBlocks)
			for i := range tables {
				tables[i] = -1 // never read
			}
			next := 0
			var tokSeq, tokPos []int32
			for si, s := range spans {
				for b := range (s.start + s.nTok + bs - 1) / bs {
					tables[si*maxBlocks+b] = int32(perm[next])
					next++
				}
			}
			// Interleave: the decode tokens and the chunks' tokens alternate.
			left := make([]int, len(spans))
			for more := true; more; {
				more = false
				for si, s := range spans {
					if left[si] < s.nTok {
						tokSeq, tokPos = append(tokSeq, int32(si)), append(tokPos, int32(s.start+left[si]))
						left[si]++
						more = true
					}
				}
			}
			nTok := len(tokSeq)
			qn := c.heads * c.hd
			q := randF32(r, nTok*qn, c.qScale)
			scale := float32(1 / math.Sqrt(float64(c.hd)))

			out := ktUpload(t, d, make([]byte, 4*nTok*qn))
			err := d.Launch("paged_attention", cuda.Dim3{X: uint32(nTok), Y: uint32(c.kv), Z: 1}, cuda.Dim3{X: c.block, Y: 1, Z: 1},
				attnShared(c.heads, c.kv, c.hd),
				cuda.Ptr(out), cuda.Ptr(ktUpload(t, d, f32Bytes(q))), cuda.Ptr(ktUpload(t, d, f32Bytes(K))), cuda.Ptr(ktUpload(t, d, f32Bytes(V))),
				cuda.Ptr(ktUpload(t, d, i32Bytes(tokSeq))), cuda.Ptr(ktUpload(t, d, i32Bytes(tokPos))), cuda.Ptr(ktUpload(t, d, i32Bytes(tables))),
				cuda.I32(int32(maxBlocks)), cuda.I32(int32(c.heads)), cuda.I32(int32(c.kv)), cuda.I32(int32(c.hd)), cuda.I32(bs), cuda.F32(scale))
			if err != nil {
				t.Fatal(err)
			}
			got := ktReadF32(t, d, out, nTok*qn)

			// The CPU, one sequence at a time, its tokens in order.
			for si, s := range spans {
				var rows []int
				for i := range tokSeq {
					if tokSeq[i] == int32(si) {
						rows = append(rows, i)
					}
				}
				sq := make([]float32, s.nTok*qn)
				for j, i := range rows {
					copy(sq[j*qn:(j+1)*qn], q[i*qn:(i+1)*qn])
				}
				want := make([]float32, len(sq))
				cpu.PagedAttention(want, sq, K, V, tables[si*maxBlocks:(si+1)*maxBlocks], bs, s.nTok, s.start, c.heads, c.kv, c.hd, scale)
				for j, i := range rows {
					for h := range c.heads {
						w := want[j*qn+h*c.hd:][:c.hd]
						g := got[i*qn+h*c.hd:][:c.hd]
						var ref float64
						for _, v := range w {
							ref = max(ref, math.Abs(float64(v)))
						}
						for dd := range w {
							e := math.Abs(float64(g[dd])-float64(w[dd])) / max(ref, 1e-6)
							if !(e <= 1e-2) {
								t.Fatalf("sequence %d position %d head %d dim %d: got %v, want %v (error %.3g of the head's max %.3g)",
									si, int(tokPos[i]), h, dd, g[dd], w[dd], e, ref)
							}
							worst = max(worst, e)
						}
					}
				}
			}
		})
	}
	t.Logf("paged_attention: worst error %.3g relative to the head's largest output", worst)
}

// TestPagedAttentionRefusedShapes: a head larger than 256 or query heads
// that are not a multiple of the KV heads leave out untouched (the host
// refuses such models before they get here).
func TestPagedAttentionRefusedShapes(t *testing.T) {
	d := ktOpen(t)
	for _, c := range []struct{ heads, kv, hd int }{{2, 1, 264}, {3, 2, 64}} {
		n := c.heads * c.hd
		sentinel := make([]float32, n)
		for i := range sentinel {
			sentinel[i] = 42
		}
		out := ktUpload(t, d, f32Bytes(sentinel))
		pool := ktUpload(t, d, make([]byte, 4*16*c.kv*c.hd))
		zero := ktUpload(t, d, make([]byte, 4))
		err := d.Launch("paged_attention", cuda.Dim3{X: 1, Y: uint32(c.kv), Z: 1}, cuda.Dim3{X: 128, Y: 1, Z: 1}, attnShared(c.heads, c.kv, c.hd),
			cuda.Ptr(out), cuda.Ptr(ktUpload(t, d, f32Bytes(randF32(rand.New(rand.NewPCG(1, 2)), n, 1)))), cuda.Ptr(pool), cuda.Ptr(pool),
			cuda.Ptr(zero), cuda.Ptr(zero), cuda.Ptr(zero), cuda.I32(1), cuda.I32(int32(c.heads)), cuda.I32(int32(c.kv)), cuda.I32(int32(c.hd)), cuda.I32(16), cuda.F32(1))
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range ktReadF32(t, d, out, n) {
			if v != 42 {
				t.Fatalf("heads %d kv %d headDim %d: out[%d] = %v, want it untouched", c.heads, c.kv, c.hd, i, v)
			}
		}
	}
}
