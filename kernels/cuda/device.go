package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"
	"unsafe"

	"github.com/batchd/batchd/kernels"
)

// Device is the kernels.Device of a GPU: buffers are device memory, every
// operation is a kernel of csrc/ (or a cuBLASLt GEMM) queued on the
// Driver's one stream, so calls run in call order and Download waits for
// what came before it.
//
// Weights keep their type on the device, except the block quantizations,
// which are dequantized to BF16 at upload: Q8_0 by a kernel from the
// uploaded blocks, the others (Q4_0 … Q6_K, IQ4_NL, IQ4_XS, MXFP4) on the
// host, exactly, a few MiB of rows at a time (uploadDequantized): F32 matrices
// multiply in float32 (no TF32), F16 and BF16 ones in their type with
// float32 accumulation, the activations rounded to the weight's type first.
// So a Q8_0 or 16-bit model agrees with the CPU within bf16/f16 rounding of
// the activations rather than the CPU's Q8_0 activation quantization; an F32
// model within float32 reduction order (tiny models' greedy tokens match).
//
// The host metadata of a call (token ids, rows, positions, block tables)
// travels through small device buffers reused from call to call: stream
// order makes that safe. A driver error (a launch that fails, a GPU fault)
// panics with an *Error: the native engine recovers a panicking step and
// fails its requests (engine/native/fault.go); a faulted CUDA context stays
// faulted, so every later step fails too until the daemon restarts.
type Device struct {
	mu   sync.Mutex
	drv  Driver
	name string

	q     *queue
	arena arena
	args  []Arg    // launch argument scratch
	ints  []int32  // host staging for metadata
	act   devBytes // activations converted for 16-bit GEMMs
	rope  ropeTables
	pass  pass // SetSegments's
}

var _ kernels.Device = (*Device)(nil)

// Error is what Device panics with when the driver fails.
type Error struct {
	Op  string
	Err error
}

func (e *Error) Error() string { return fmt.Sprintf("cuda: %s: %v", e.Op, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// NewDevice returns the Device over drv; Close closes drv. With graphs,
// a forward pass (BeginPass ... Download) whose launches repeat an earlier
// pass's exactly replays as one CUDA graph.
func NewDevice(drv Driver, graphs bool) *Device {
	d := &Device{drv: drv, name: "cuda " + drv.Name()}
	d.q = newQueue(drv, graphs)
	d.q.before = d.send
	return d
}

// BeginPass starts recording a forward pass: launches are queued when its
// results are downloaded, as a graph when the same pass ran before.
func (d *Device) BeginPass() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.q.graphs {
		return
	}
	d.fail("flush", d.q.flush(false))
	a := &d.arena
	a.off, a.sent = 0, 0
	a.epoch++
	d.q.recording = true
}

// GraphStats says what the passes so far became.
func (d *Device) GraphStats() GraphStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.q.stats
	for _, e := range d.q.cache {
		if e.graph != nil {
			st.Graphs++
		}
	}
	return st
}

// endPass runs the recorded pass and releases what it outgrew.
func (d *Device) endPass() {
	d.fail("run pass", d.q.flush(true))
	a := &d.arena
	a.off, a.sent = 0, 0
	a.epoch++
	if len(a.retired) > 0 {
		d.fail("sync", d.drv.Sync())
		for _, p := range a.retired {
			d.drv.Free(p)
		}
		a.retired = a.retired[:0]
	}
}

// flush runs what was recorded (before a driver call that must see it).
func (d *Device) flush() { d.fail("flush", d.q.flush(false)) }

// Driver is the driver d runs on.
func (d *Device) Driver() Driver { return d.drv }

// Name is "cuda " and the driver's description of the GPU.
func (d *Device) Name() string { return d.name }

// devMem is an allocation of n float32s.
type devMem struct {
	p DevPtr
	n int
}

// devInts is a reusable device buffer of int32s.
type devInts struct {
	p   DevPtr
	cap int
}

// devBytes is a reusable device buffer of bytes.
type devBytes struct {
	p   DevPtr
	cap int64
}

// weight is a matrix in device memory.
type weight struct {
	src        kernels.DType // the type it was uploaded from
	elem       ElemType      // the type it is stored in
	p          DevPtr
	rows, cols int
}

func (w *weight) Shape() (kernels.DType, int, int) { return w.src, w.rows, w.cols }

func (d *Device) fail(op string, err error) {
	if err != nil {
		panic(&Error{Op: op, Err: err})
	}
}

// addr is the device address of b's first float.
func addr(b kernels.Buf) DevPtr {
	if b.Len() == 0 && b.Mem() == nil {
		return 0
	}
	m, ok := b.Mem().(*devMem)
	if !ok {
		panic(fmt.Sprintf("cuda: a %T buffer on the CUDA device", b.Mem()))
	}
	return m.p + DevPtr(4*b.Off())
}

func need(b kernels.Buf, n int, what string) {
	if b.Len() < n {
		panic(fmt.Sprintf("cuda: %s needs %d floats, buffer has %d", what, n, b.Len()))
	}
}

func (d *Device) Alloc(n int) (kernels.Buf, error) {
	if n < 0 {
		return kernels.Buf{}, fmt.Errorf("alloc %d floats: negative size", n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p, err := d.allocZeroed(int64(n) * 4)
	if err != nil {
		return kernels.Buf{}, err
	}
	return kernels.NewBuf(&devMem{p: p, n: n}, n), nil
}

// allocZeroed allocates n zeroed bytes (at least one, so every buffer has
// an address).
func (d *Device) allocZeroed(n int64) (DevPtr, error) {
	p, err := d.drv.Alloc(max(n, 4))
	if err != nil {
		return 0, fmt.Errorf("alloc %d bytes on %s: %w", n, d.name, err)
	}
	if err := d.drv.Memset(p, max(n, 4)); err != nil {
		d.drv.Free(p)
		return 0, fmt.Errorf("zero %d bytes on %s: %w", n, d.name, err)
	}
	return p, nil
}

func (d *Device) Free(b kernels.Buf) {
	m, ok := b.Mem().(*devMem)
	if !ok || m.p == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.flush()
	d.drv.Free(m.p)
	m.p = 0
}

func f32Bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

func i32Bytes(x []int32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

func (d *Device) Upload(dst kernels.Buf, src []float32) {
	need(dst, len(src), "Upload")
	if len(src) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.flush()
	d.fail("upload", d.drv.CopyIn(addr(dst), f32Bytes(src)))
}

func (d *Device) Download(dst []float32, src kernels.Buf) {
	need(src, len(dst), "Download")
	if len(dst) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.endPass()
	d.fail("download", d.drv.CopyOut(f32Bytes(dst), addr(src)))
}

// UploadMatrix copies m to the device: F32, F16 and BF16 as they are, the
// block quantizations dequantized to BF16 (Q8_0 there, the others here).
func (d *Device) UploadMatrix(m *kernels.Matrix) (kernels.Weight, error) {
	if _, err := kernels.NewMatrix(m.Type, m.Rows, m.Cols, m.Data); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.flush()
	w := &weight{src: m.Type, rows: m.Rows, cols: m.Cols}
	n := int64(m.Rows) * int64(m.Cols)
	switch m.Type {
	case kernels.F32:
		w.elem = ElemF32
	case kernels.F16:
		w.elem = ElemF16
	case kernels.BF16, kernels.Q8_0:
		w.elem = ElemBF16
	default:
		if m.Type.BlockSize() <= 1 {
			return nil, fmt.Errorf("upload %v matrix: %w", m.Type, kernels.ErrDType)
		}
		w.elem = ElemBF16
	}
	p, err := d.drv.Alloc(max(n*int64(w.elem.Size()), 4))
	if err != nil {
		return nil, fmt.Errorf("upload %dx%d %v matrix to %s: %w", m.Rows, m.Cols, m.Type, d.name, err)
	}
	w.p = p
	if m.Type.BlockSize() > 1 && m.Type != kernels.Q8_0 {
		if err := d.uploadDequantized(p, m); err != nil {
			d.drv.Free(p)
			return nil, fmt.Errorf("upload %dx%d %v matrix as BF16: %w", m.Rows, m.Cols, m.Type, err)
		}
		return w, nil
	}
	if m.Type != kernels.Q8_0 {
		if err := d.drv.CopyIn(p, m.Data); err != nil {
			d.drv.Free(p)
			return nil, fmt.Errorf("upload %dx%d %v matrix: %w", m.Rows, m.Cols, m.Type, err)
		}
		return w, nil
	}
	// Q8_0: the blocks go up as they are and a kernel dequantizes them.
	q, err := d.drv.Alloc(int64(len(m.Data)))
	if err != nil {
		d.drv.Free(p)
		return nil, fmt.Errorf("upload %dx%d Q8_0 matrix to %s: %w", m.Rows, m.Cols, d.name, err)
	}
	defer d.drv.Free(q)
	nb := n / kernels.Q8BlockSize
	err = d.drv.CopyIn(q, m.Data)
	if err == nil {
		err = d.drv.Launch("dequant_q8_0_bf16", grid1D(nb*kernels.Q8BlockSize), Dim3{256, 1, 1}, 0,
			Ptr(p), Ptr(q), I64(nb))
	}
	if err == nil {
		err = d.drv.Sync() // q is freed on return
	}
	if err != nil {
		d.drv.Free(p)
		return nil, fmt.Errorf("dequantize %dx%d Q8_0 matrix: %w", m.Rows, m.Cols, err)
	}
	return w, nil
}

// uploadDequantized writes m's rows, dequantized exactly and rounded to
// BF16, to p: at most dequantChunk bytes of BF16 are staged at a time, so a
// model's upload never holds a dequantized copy of a whole matrix.
func (d *Device) uploadDequantized(p DevPtr, m *kernels.Matrix) error {
	const dequantChunk = 4 << 20
	rows := max(1, dequantChunk/(2*max(m.Cols, 1)))
	f := make([]float32, m.Cols)
	buf := make([]byte, 0, 2*m.Cols*min(rows, m.Rows))
	for r0 := 0; r0 < m.Rows; r0 += rows {
		r1 := min(r0+rows, m.Rows)
		buf = buf[:0]
		for r := r0; r < r1; r++ {
			m.Row(r, f)
			for _, v := range f {
				buf = binary.LittleEndian.AppendUint16(buf, kernels.F32ToBF16(v))
			}
		}
		if err := d.drv.CopyIn(p+DevPtr(2*r0*m.Cols), buf); err != nil { // buf is free again on return
			return err
		}
	}
	return nil
}

func (d *Device) weight(w kernels.Weight) *weight {
	dw, ok := w.(*weight)
	if !ok {
		panic(fmt.Sprintf("cuda: a %T weight on the CUDA device", w))
	}
	return dw
}

// grid1D is the grid of a grid-stride kernel over n elements in blocks of
// 256: enough blocks to fill a large GPU, the stride covering the rest.
func grid1D(n int64) Dim3 {
	b := (n + 255) / 256
	return Dim3{uint32(min(max(b, 1), 16384)), 1, 1}
}

// rowBlock is the block size of a one-block-per-row kernel over rows of n
// elements: a warp per 32, at most 256 threads (kernels loop over the rest).
func rowBlock(n int) Dim3 {
	b := (n + 31) / 32 * 32
	return Dim3{uint32(min(max(b, 32), 256)), 1, 1}
}

func rows(n int) Dim3 { return Dim3{uint32(n), 1, 1} }

// launch queues kernel name with d.args; the caller holds d.mu.
func (d *Device) launch(name string, grid, block Dim3, shared uint32) {
	if grid.X == 0 || grid.Y == 0 || grid.Z == 0 {
		return
	}
	d.fail(name, d.q.launch(name, grid, block, shared, d.args))
}

// with starts a launch's argument list.
func (d *Device) with(a ...Arg) { d.args = append(d.args[:0], a...) }

// upInts stages x for the launch that follows and returns its device
// address; the caller holds d.mu.
func (d *Device) upInts(x []int32) DevPtr { return d.stage(i32Bytes(x)) }

func wtype(e ElemType) int32 {
	switch e {
	case ElemF32:
		return 1
	case ElemF16:
		return 2
	}
	return 3
}

func (d *Device) Embed(out kernels.Buf, w kernels.Weight, ids []int32) {
	dw := d.weight(w)
	need(out, len(ids)*dw.cols, "Embed")
	for _, id := range ids {
		if id < 0 || int(id) >= dw.rows {
			panic(fmt.Sprintf("cuda: Embed id %d of %d rows", id, dw.rows))
		}
	}
	if len(ids) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.upInts(ids)
	d.with(Ptr(addr(out)), Ptr(dw.p), I32(wtype(dw.elem)), Ptr(p), I32(int32(dw.cols)))
	d.launch("embed_rows", rows(len(ids)), rowBlock(dw.cols), 0)
}

func (d *Device) CopyRows(out, x kernels.Buf, width int, rs []int32) {
	need(out, len(rs)*width, "CopyRows")
	for _, r := range rs {
		if r < 0 || (int(r)+1)*width > x.Len() {
			panic(fmt.Sprintf("cuda: CopyRows row %d of width %d in %d floats", r, width, x.Len()))
		}
	}
	if len(rs) == 0 || width == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.upInts(rs)
	d.with(Ptr(addr(out)), Ptr(addr(x)), Ptr(p), I32(int32(width)))
	d.launch("copy_rows", rows(len(rs)), rowBlock(width), 0)
}

func (d *Device) MatMul(out, x kernels.Buf, T int, w kernels.Weight) {
	dw := d.weight(w)
	need(x, T*dw.cols, "MatMul x")
	need(out, T*dw.rows, "MatMul out")
	if T == 0 || dw.rows == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	g := Gemm{M: T, N: dw.rows, K: dw.cols, W: dw.p, X: addr(x), Out: addr(out), Type: dw.elem}
	if dw.cols == 0 {
		d.flush()
		d.fail("zero matmul output", d.drv.Memset(g.Out, int64(T*dw.rows)*4))
		return
	}
	if dw.elem != ElemF32 {
		// Activations in the weight's type.
		n := int64(T) * int64(dw.cols)
		if need := n * 2; need > d.act.cap {
			if d.act.p != 0 {
				d.flush()
				d.fail("sync", d.drv.Sync())
				d.drv.Free(d.act.p)
				d.act = devBytes{}
			}
			c := max(need, 2*d.act.cap, 1<<16)
			p, err := d.drv.Alloc(c)
			d.fail("alloc activations", err)
			d.act = devBytes{p: p, cap: c}
		}
		conv := "convert_f32_bf16"
		if dw.elem == ElemF16 {
			conv = "convert_f32_f16"
		}
		d.with(Ptr(d.act.p), Ptr(g.X), I64(n))
		d.launch(conv, grid1D(n), Dim3{256, 1, 1}, 0)
		g.X = d.act.p
	}
	d.fail("gemm", d.q.gemm(g))
}

func (d *Device) RMSNorm(out, x, w kernels.Buf, nrows, dim int, eps float32) {
	need(x, nrows*dim, "RMSNorm x")
	need(out, nrows*dim, "RMSNorm out")
	need(w, dim, "RMSNorm weight")
	if nrows == 0 || dim == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.with(Ptr(addr(out)), Ptr(addr(x)), Ptr(addr(w)), I32(int32(dim)), F32(eps))
	d.launch("rmsnorm", rows(nrows), rowBlock(dim), 0)
}

// ropeTables caches the cos/sin rows of the last RoPE call's positions
// (the q and k of a layer, and every layer of a pass, share them), on the
// host and, while the arena's epoch lasts, on the device.
type ropeTables struct {
	pos     []int32
	invFreq []float32
	neox    bool
	cs, sn  []float32 // [T][nPairs]
	epoch   int64     // of the arena holding them
	dcs     DevPtr
	dsn     DevPtr
}

// ropeRows returns the device cos and sin tables of pos and invFreq,
// computed as kernels.CPU.RoPE computes them: the angle pos·invFreq
// rounded to float32, its cosine and sine in float64.
func (d *Device) ropeRows(pos []int32, invFreq []float32, neox bool) (cs, sn DevPtr) {
	r := &d.rope
	if slices.Equal(r.pos, pos) && slices.Equal(r.invFreq, invFreq) && r.neox == neox && r.epoch == d.arena.epoch && r.dcs != 0 {
		return r.dcs, r.dsn
	}
	n := len(invFreq)
	T := len(pos)
	r.pos = append(r.pos[:0], pos...)
	r.invFreq = append(r.invFreq[:0], invFreq...)
	r.neox = neox
	r.cs = slices.Grow(r.cs[:0], T*n)[:T*n]
	r.sn = slices.Grow(r.sn[:0], T*n)[:T*n]
	for t, p := range pos {
		for i, f := range invFreq {
			s, c := math.Sincos(float64(float32(p) * f))
			r.cs[t*n+i], r.sn[t*n+i] = float32(c), float32(s)
		}
	}
	// Both in one reservation, so that they share an epoch.
	d.reserve(int64(2*len(r.cs)*4 + 2*arenaAlign))
	r.dcs = d.stage(f32Bytes(r.cs))
	r.dsn = d.stage(f32Bytes(r.sn))
	r.epoch = d.arena.epoch
	return r.dcs, r.dsn
}

func (d *Device) RoPE(x kernels.Buf, T, heads, headDim int, pos []int32, invFreq []float32, neox bool) {
	if T < 0 || heads < 0 || headDim < 0 || 2*len(invFreq) > headDim || len(pos) < T {
		panic(fmt.Sprintf("cuda: RoPE T=%d heads=%d headDim=%d len(invFreq)=%d len(pos)=%d",
			T, heads, headDim, len(invFreq), len(pos)))
	}
	need(x, T*heads*headDim, "RoPE")
	if T == 0 || heads == 0 || len(invFreq) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cs, sn := d.ropeRows(pos[:T], invFreq, neox)
	neoxArg := int32(0)
	if neox {
		neoxArg = 1
	}
	d.with(Ptr(addr(x)), Ptr(cs), Ptr(sn), I32(int32(heads)), I32(int32(headDim)), I32(int32(len(invFreq))), I32(neoxArg))
	d.launch("rope", rows(T), rowBlock(heads*len(invFreq)), 0)
}

func (d *Device) AddBias(x, bias kernels.Buf, nrows, n int) {
	need(x, nrows*n, "AddBias x")
	need(bias, n, "AddBias bias")
	if nrows == 0 || n == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.with(Ptr(addr(x)), Ptr(addr(bias)), I32(int32(n)))
	d.launch("add_bias", rows(nrows), rowBlock(n), 0)
}

func (d *Device) Add(dst, src kernels.Buf) {
	need(src, dst.Len(), "Add")
	d.elementwise("add", dst, src)
}

func (d *Device) SiLUMul(gate, up kernels.Buf) {
	need(up, gate.Len(), "SiLUMul")
	d.elementwise("silu_mul", gate, up)
}

func (d *Device) elementwise(name string, a, b kernels.Buf) {
	n := int64(a.Len())
	if n == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.with(Ptr(addr(a)), Ptr(addr(b)), I64(n))
	d.launch(name, grid1D(n), Dim3{256, 1, 1}, 0)
}

func (d *Device) AllocKV(blocks, blockSize, width int) (kernels.KVPool, error) {
	if blocks < 0 || blockSize <= 0 || width <= 0 {
		return kernels.KVPool{}, fmt.Errorf("alloc KV: %d blocks of %d positions of %d floats", blocks, blockSize, width)
	}
	n := blocks * blockSize * width
	k, err := d.Alloc(n)
	if err != nil {
		return kernels.KVPool{}, fmt.Errorf("alloc KV keys: %w", err)
	}
	v, err := d.Alloc(n)
	if err != nil {
		d.Free(k)
		return kernels.KVPool{}, fmt.Errorf("alloc KV values: %w", err)
	}
	return kernels.KVPool{K: k, V: v, Blocks: blocks, BlockSize: blockSize, Width: width}, nil
}

func (d *Device) FreeKV(p kernels.KVPool) {
	d.Free(p.K)
	d.Free(p.V)
}

// slots fills d.ints with the pool rows of positions start..start+n-1 of
// the sequence whose block table is blocks.
func (d *Device) slots(p kernels.KVPool, blocks []int32, start, n int) []int32 {
	d.ints = d.ints[:0]
	for pos := start; pos < start+n; pos++ {
		bi := pos / p.BlockSize
		if bi >= len(blocks) || blocks[bi] < 0 || int(blocks[bi]) >= p.Blocks {
			panic(fmt.Sprintf("cuda: position %d: block table of %d blocks in a pool of %d", pos, len(blocks), p.Blocks))
		}
		d.ints = append(d.ints, blocks[bi]*int32(p.BlockSize)+int32(pos%p.BlockSize))
	}
	return d.ints
}

func (d *Device) WriteKV(p kernels.KVPool, k, v kernels.Buf, blocks []int32, start, n int) {
	need(k, n*p.Width, "WriteKV k")
	need(v, n*p.Width, "WriteKV v")
	if n == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	sl := d.upInts(d.slots(p, blocks, start, n))
	d.with(Ptr(addr(p.K)), Ptr(addr(p.V)), Ptr(addr(k)), Ptr(addr(v)), Ptr(sl), I32(int32(n)), I32(int32(p.Width)))
	d.launch("write_kv", rows(n), rowBlock(p.Width), 0)
}

func (d *Device) PagedAttention(out, q kernels.Buf, p kernels.KVPool, blocks []int32, nTok, start, nHeads, nKVHeads, headDim int, scale float32) {
	if nHeads <= 0 || nKVHeads <= 0 || nHeads%nKVHeads != 0 || headDim <= 0 || headDim > maxHeadDim || nKVHeads*headDim != p.Width {
		panic(fmt.Sprintf("cuda: PagedAttention heads=%d kvHeads=%d headDim=%d width=%d", nHeads, nKVHeads, headDim, p.Width))
	}
	need(q, nTok*nHeads*headDim, "PagedAttention q")
	need(out, nTok*nHeads*headDim, "PagedAttention out")
	if nTok == 0 {
		return
	}
	if last := (start + nTok - 1) / p.BlockSize; last >= len(blocks) {
		panic(fmt.Sprintf("cuda: PagedAttention position %d beyond a block table of %d blocks", start+nTok-1, len(blocks)))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ints = d.ints[:0]
	for i := range nTok {
		d.ints = append(d.ints, int32(start+i))
	}
	pos := d.upInts(d.ints)
	for i := range d.ints {
		d.ints[i] = 0
	}
	seq := d.upInts(d.ints)
	tables := d.upInts(blocks)
	d.attention(out, q, p, seq, pos, tables, len(blocks), nTok, nHeads, nKVHeads, headDim, scale)
}

// attention launches paged_attention over nTok tokens whose sequence
// indexes, positions and block tables (maxBlocks per sequence) are in
// device memory already.
func (d *Device) attention(out, q kernels.Buf, p kernels.KVPool, seq, pos, tables DevPtr, maxBlocks, nTok, nHeads, nKVHeads, headDim int, scale float32) {
	block, shared := attentionLaunch(headDim, nHeads/nKVHeads)
	d.with(Ptr(addr(out)), Ptr(addr(q)), Ptr(addr(p.K)), Ptr(addr(p.V)), Ptr(seq), Ptr(pos), Ptr(tables),
		I32(int32(maxBlocks)), I32(int32(nHeads)), I32(int32(nKVHeads)), I32(int32(headDim)), I32(int32(p.BlockSize)), F32(scale))
	d.launch("paged_attention", Dim3{uint32(nTok), uint32(nKVHeads), 1}, block, shared)
}

// Close frees the device's scratch and closes the driver; buffers and
// weights must not be used after.
func (d *Device) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.drv == nil {
		return
	}
	_ = d.q.flush(false)
	_ = d.drv.Sync()
	d.q.close()
	for _, m := range []devInts{d.pass.slots, d.pass.seq, d.pass.pos, d.pass.tables} {
		if m.p != 0 {
			d.drv.Free(m.p)
		}
	}
	for _, p := range append(d.arena.retired, d.arena.dev, d.act.p) {
		if p != 0 {
			d.drv.Free(p)
		}
	}
	d.drv.Close()
	d.drv = nil
}

// MemInfo is the GPU's free and total memory in bytes (the native engine
// sizes its KV cache from it).
func (d *Device) MemInfo() (free, total int64, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.drv.MemInfo()
}
