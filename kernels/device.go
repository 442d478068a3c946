package kernels

import (
	"errors"
	"fmt"
)

// Device runs the decoder's operations on memory it owns: this machine's
// cores (CPUDevice), the plain-Go reference (package kernels/refdev), later
// a GPU. Activations, norm vectors and the KV cache are float32 buffers
// (Buf) in the device's memory, weights are uploaded once in their own type
// (Weight), and only the caller's small int32 metadata (token ids,
// positions, block tables, row indices) and the RoPE frequencies travel as
// host slices: an off-host device copies those itself. The host sees data
// only through Upload and Download.
//
// Contracts shared by every method:
//   - Shapes are row-major; "[T][n]" is T rows of n floats. A Buf must be at
//     least as long as the shape a method reads or writes in it; a method
//     panics on a buffer from another device, a short buffer or a bad shape
//     (programming errors, as for CPU's kernels).
//   - Outputs must not overlap inputs unless the method says it may alias.
//   - Calls on one Device run in call order, as if one at a time; Download
//     returns once everything before it is done. A Device may be shared by
//     goroutines, but a buffer must not be used by two calls at once.
//   - Numerics are CPU's (see the package doc): each output element is
//     reduced in an order fixed by the shapes alone, never by how many
//     tokens or sequences share a call, so a token's results are
//     bit-identical alone or batched on any one device. Two devices agree
//     within float32 rounding (and Q8_0's activation quantization), not bit
//     for bit.
//   - Steady-state calls do not allocate host memory.
type Device interface {
	// Name describes the device, e.g. "cpu avx512 x16" or "reference".
	Name() string

	// Alloc returns a zeroed buffer of n float32s; Free releases it (and
	// invalidates every view of it). Alloc fails when the device is out of
	// memory.
	Alloc(n int) (Buf, error)
	Free(b Buf)
	// Upload copies src into dst[:len(src)]; Download copies src[:len(dst)]
	// into dst.
	Upload(dst Buf, src []float32)
	Download(dst []float32, src Buf)

	// UploadMatrix copies a weight matrix to the device, in its own type
	// or one the device converts it to exactly enough for its numerics
	// (the CUDA device keeps block quantizations as BF16); the Matrix may
	// be released afterwards only if the device copied it (CPUDevice
	// keeps a reference, zero-copy).
	UploadMatrix(m *Matrix) (Weight, error)
	// Embed writes row ids[t] of w, dequantized, to out[t*Cols:(t+1)*Cols]:
	// out is [len(ids)][Cols]. Exact (no rounding beyond the weight type's
	// own conversion to float32).
	Embed(out Buf, w Weight, ids []int32)
	// CopyRows gathers rows of width floats: out row i = x row rows[i].
	// Exact; out must not overlap x.
	CopyRows(out, x Buf, width int, rows []int32)

	// MatMul computes out[t][r] = Σ_c x[t][c]·W[r][c] for t in [0,T): x is
	// [T][Cols], out [T][Rows]. F32, F16 and BF16 multiply the exact
	// float32 weights; the block quantizations quantize each x row to
	// int8 blocks first (Q8_0 to Q8_0, the others to their activation
	// kind), as CPU.MatMul does; a device may instead multiply the
	// dequantized weights with unquantized activations (refdev, CUDA).
	MatMul(out, x Buf, T int, w Weight)
	// RMSNorm normalizes each row of dim floats of x (len rows·dim):
	// out = x/sqrt(mean(x²)+eps)·weight[:dim]. With dim the head size it is
	// the per-head norm of qk-norm models. out may alias x.
	RMSNorm(out, x, weight Buf, rows, dim int, eps float32)
	// RoPE rotates x, [T][heads][headDim], in place, as CPU.RoPE does:
	// token t at position pos[t], pair i by pos[t]·invFreq[i].
	RoPE(x Buf, T, heads, headDim int, pos []int32, invFreq []float32, neox bool)
	// AddBias adds bias[:n] to each of the rows of x, [rows][n]. Exact
	// float32 sums.
	AddBias(x, bias Buf, rows, n int)
	// Add sets dst[i] += src[i] for i < dst.Len(). Exact float32 sums.
	Add(dst, src Buf)
	// SiLUMul sets gate[i] = silu(gate[i])·up[i] for i < gate.Len().
	SiLUMul(gate, up Buf)

	// AllocKV returns one layer's paged K and V pools of blocks blocks of
	// blockSize positions of width floats (kvHeads·headDim), zeroed.
	AllocKV(blocks, blockSize, width int) (KVPool, error)
	// FreeKV releases a pool.
	FreeKV(p KVPool)
	// WriteKV stores the n rows of k and v ([n][width]) at positions
	// start..start+n-1 of the sequence whose block table is blocks:
	// position p goes to block blocks[p/blockSize], row p%blockSize. Exact.
	WriteKV(p KVPool, k, v Buf, blocks []int32, start, n int)
	// PagedAttention is CPU.PagedAttention over pool p: causal
	// grouped-query attention of one sequence's nTok queries q
	// ([nTok][nHeads][headDim], positions start..start+nTok-1) over its
	// cached positions 0..start+nTok-1; out gets [nTok][nHeads][headDim].
	// A token's result depends only on its query and the rows it attends
	// to, reduced in position order, so chunking a prompt does not change
	// it.
	PagedAttention(out, q Buf, p KVPool, blocks []int32, nTok, start, nHeads, nKVHeads, headDim int, scale float32)

	// Close releases what the device holds; buffers must not be used after.
	Close()
}

// Buf is a range of float32s in a Device's memory: a handle (the
// allocation and an offset), cheap to copy, valid until the allocation is
// freed. Slice views part of it without copying, so per-segment or per-row
// work needs no copies. The zero Buf is empty.
type Buf struct {
	mem    any // the device's allocation
	off, n int
}

// NewBuf is for Device implementations: the buffer of n floats at the
// start of allocation mem.
func NewBuf(mem any, n int) Buf { return Buf{mem: mem, n: n} }

// Mem is the allocation b views (for Device implementations).
func (b Buf) Mem() any { return b.mem }

// Off is b's offset in its allocation, in floats (for Device
// implementations).
func (b Buf) Off() int { return b.off }

// Len is b's length in floats.
func (b Buf) Len() int { return b.n }

// Slice views b[off:off+n].
func (b Buf) Slice(off, n int) Buf {
	if off < 0 || n < 0 || off+n > b.n {
		panic(fmt.Sprintf("kernels: Buf.Slice(%d, %d) of %d floats", off, n, b.n))
	}
	return Buf{mem: b.mem, off: b.off + off, n: n}
}

// WeightPacker is a Device that can lay an uploaded weight out for its own
// kernels (the CPU device: CPU.Pack); PackWeight returns the bytes the
// packed copy takes, 0 when it made none. Call it before the weight is in
// use.
type WeightPacker interface {
	PackWeight(w Weight) int
}

// Weight is a matrix uploaded by Device.UploadMatrix.
type Weight interface {
	Shape() (t DType, rows, cols int)
}

// KVPool is one layer's paged K/V storage: K and V each hold Blocks blocks
// of BlockSize positions of Width floats, laid out
// [block][BlockSize][Width] as kernels.PagedAttention reads them.
type KVPool struct {
	K, V                     Buf
	Blocks, BlockSize, Width int
}

// ErrDeviceMemory is what Alloc and AllocKV wrap when the device has no room.
var ErrDeviceMemory = errors.New("device out of memory")

// Segment is one sequence's part of a forward pass, for FusedDevice: the
// pass's tokens First..First+N-1, at positions Start..Start+N-1 of the
// sequence whose block table is Blocks.
type Segment struct {
	First, N, Start int
	Blocks          []int32
}

// FamilyDevice is implemented by devices that run the operations of the
// model families beyond Llama's (Gemma's GeGLU, embedding scale and soft
// caps; sliding-window attention). The native engine refuses a model that
// needs them on a device without them.
type FamilyDevice interface {
	Device
	// PagedAttentionOpts is PagedAttention with the variants o asks for
	// (CPU.PagedAttentionOpts).
	PagedAttentionOpts(out, q Buf, p KVPool, blocks []int32, nTok, start, nHeads, nKVHeads, headDim int, scale float32, o AttnOpts)
	// GELUMul sets gate[i] = gelu(gate[i])·up[i] for i < gate.Len(), GELU
	// in its tanh approximation (CPU.GELUMul).
	GELUMul(gate, up Buf)
	// Scale sets x[i] *= s for i < x.Len().
	Scale(x Buf, s float32)
	// SoftCap sets x[i] = c·tanh(x[i]/c) for i < x.Len(), c > 0.
	SoftCap(x Buf, c float32)
	// SwiGLUOAI is gpt-oss's clamped SwiGLU: with g = min(gate[i], limit)
	// and u = clamp(up[i], -limit, limit), gate[i] = g·σ(alpha·g)·(u+1)
	// for i < gate.Len() (SwiGLUOAI).
	SwiGLUOAI(gate, up Buf, alpha, limit float32)
}

// FusedDevice is implemented by devices that take all of a forward pass's
// sequences in one call per layer instead of WriteKV and PagedAttention
// once per sequence (a GPU, where a launch and a copy per sequence would
// leave it idle), and that have fused kernels for the decoder's chains of
// small operations. Each method's result is that of the calls it replaces.
type FusedDevice interface {
	Device
	// SetSegments describes the pass's sequences, over KV pools of
	// blockSize positions; the calls below use them until the next
	// SetSegments. segs may be reused once it returns.
	SetSegments(segs []Segment, blockSize int)
	// WriteKVSegments is WriteKV of every segment's rows of k and v
	// ([tokens][p.Width]).
	WriteKVSegments(p KVPool, k, v Buf)
	// PagedAttentionSegments is PagedAttention of every segment: q and out
	// are [tokens][nHeads][headDim].
	PagedAttentionSegments(out, q Buf, p KVPool, nHeads, nKVHeads, headDim int, scale float32)
	// AddRMSNorm is Add(resid, delta) then RMSNorm(out, resid, w, rows,
	// dim, eps): the residual add and the next norm in one pass.
	AddRMSNorm(out, resid, delta, w Buf, rows, dim int, eps float32)
	// QKVPost finishes the T tokens' projections q ([T][heads][headDim]),
	// k and v ([T][kvHeads][headDim]) of a layer whose pool is p: adds the
	// biases (when bq is not empty), normalizes each head of q and k (when
	// qNorm is not empty), rotates q and k by RoPE at pos, then writes k
	// and v to p at the positions SetSegments gave. v itself may keep its
	// value: only its rows in p are v plus bv.
	QKVPost(q, k, v Buf, T int, bq, bk, bv, qNorm, kNorm Buf, eps float32,
		pos []int32, invFreq []float32, neox bool, heads, kvHeads, headDim int, p KVPool)
}

// PassDevice is implemented by devices that gather a forward pass's calls
// and run them together (the CUDA device replays a pass that repeats an
// earlier one as a single graph): BeginPass starts a pass; the next
// Download ends it, after running everything before it.
type PassDevice interface {
	Device
	BeginPass()
}
