package kernels

import (
	"fmt"
	"math"
)

// CPUDevice is the Device over a CPU's kernels: buffers are host slices
// (zero-copy: Upload and Download are copies, views are reslices), weights
// are the Matrix itself, and every operation is the CPU method of the same
// name, so it runs at the CPU's speed and allocates nothing per call.
type CPUDevice struct{ cpu *CPU }

var _ Device = (*CPUDevice)(nil)

// NewCPUDevice returns the Device that runs on cpu. The caller keeps owning
// cpu: the device's Close does not close it.
func NewCPUDevice(cpu *CPU) *CPUDevice { return &CPUDevice{cpu: cpu} }

// cpuMem is a CPUDevice allocation.
type cpuMem []float32

// cpuWeight is a CPUDevice weight: the host Matrix, its data not copied.
type cpuWeight struct{ m *Matrix }

func (w cpuWeight) Shape() (DType, int, int) { return w.m.Type, w.m.Rows, w.m.Cols }

// Name is the CPU's name, e.g. "cpu avx512 x16".
func (d *CPUDevice) Name() string { return d.cpu.Name() }

// CPU is the CPU the device runs on.
func (d *CPUDevice) CPU() *CPU { return d.cpu }

// Close does nothing: buffers are garbage-collected and the CPU belongs to
// the caller.
func (d *CPUDevice) Close() {}

// Host is b's memory, zero-copy.
func (d *CPUDevice) Host(b Buf) []float32 {
	if b.n == 0 {
		return nil
	}
	m, ok := b.mem.(cpuMem)
	if !ok {
		panic(fmt.Sprintf("kernels: a %T buffer on the CPU device", b.mem))
	}
	return m[b.off : b.off+b.n : b.off+b.n]
}

func (d *CPUDevice) Alloc(n int) (Buf, error) {
	if n < 0 {
		return Buf{}, fmt.Errorf("alloc %d floats: negative size", n)
	}
	return NewBuf(cpuMem(make([]float32, n)), n), nil
}

func (d *CPUDevice) Free(Buf) {}

func (d *CPUDevice) Upload(dst Buf, src []float32) {
	if len(src) > dst.n {
		panic(fmt.Sprintf("kernels: Upload of %d floats into %d", len(src), dst.n))
	}
	copy(d.Host(dst), src)
}

func (d *CPUDevice) Download(dst []float32, src Buf) {
	if len(dst) > src.n {
		panic(fmt.Sprintf("kernels: Download of %d floats from %d", len(dst), src.n))
	}
	copy(dst, d.Host(src))
}

func (d *CPUDevice) UploadMatrix(m *Matrix) (Weight, error) {
	if _, err := NewMatrix(m.Type, m.Rows, m.Cols, m.Data); err != nil {
		return nil, err
	}
	mm := *m // the data is shared; PackWeight sets the device's copy only
	return cpuWeight{&mm}, nil
}

// PackWeight lays w out for the CPU's kernels (CPU.Pack) and returns the
// bytes the packed copy takes (0: none made).
func (d *CPUDevice) PackWeight(w Weight) int { return d.cpu.Pack(d.weight(w)) }

func (d *CPUDevice) weight(w Weight) *Matrix {
	cw, ok := w.(cpuWeight)
	if !ok {
		panic(fmt.Sprintf("kernels: a %T weight on the CPU device", w))
	}
	return cw.m
}

func (d *CPUDevice) Embed(out Buf, w Weight, ids []int32) {
	m := d.weight(w)
	o := d.Host(out)
	if len(o) < len(ids)*m.Cols {
		panic(fmt.Sprintf("kernels: Embed of %d rows of %d into %d floats", len(ids), m.Cols, len(o)))
	}
	for t, id := range ids {
		m.Row(int(id), o[t*m.Cols:(t+1)*m.Cols])
	}
}

func (d *CPUDevice) CopyRows(out, x Buf, width int, rows []int32) {
	o, in := d.Host(out), d.Host(x)
	if len(o) < len(rows)*width {
		panic(fmt.Sprintf("kernels: CopyRows of %d rows of %d into %d floats", len(rows), width, len(o)))
	}
	for i, r := range rows {
		copy(o[i*width:(i+1)*width], in[int(r)*width:(int(r)+1)*width])
	}
}

func (d *CPUDevice) MatMul(out, x Buf, T int, w Weight) {
	d.cpu.MatMul(d.Host(out), d.Host(x), T, d.weight(w))
}

func (d *CPUDevice) RMSNorm(out, x, weight Buf, rows, dim int, eps float32) {
	n := rows * dim
	if x.n < n {
		panic(fmt.Sprintf("kernels: RMSNorm of %dx%d over %d floats", rows, dim, x.n))
	}
	d.cpu.RMSNorm(d.Host(out), d.Host(x)[:n], d.Host(weight), dim, eps)
}

func (d *CPUDevice) RoPE(x Buf, T, heads, headDim int, pos []int32, invFreq []float32, neox bool) {
	d.cpu.RoPE(d.Host(x), T, heads, headDim, pos, invFreq, neox)
}

func (d *CPUDevice) AddBias(x, bias Buf, rows, n int) {
	xs, b := d.Host(x), d.Host(bias)
	if len(xs) < rows*n || len(b) < n {
		panic(fmt.Sprintf("kernels: AddBias of %dx%d over %d floats with a bias of %d", rows, n, len(xs), len(b)))
	}
	for r := range rows {
		d.cpu.Add(xs[r*n:(r+1)*n], b)
	}
}

func (d *CPUDevice) Add(dst, src Buf) { d.cpu.Add(d.Host(dst), d.Host(src)) }

func (d *CPUDevice) SiLUMul(gate, up Buf) { d.cpu.SiLUMul(d.Host(gate), d.Host(up)) }

func (d *CPUDevice) AllocKV(blocks, blockSize, width int) (KVPool, error) {
	n := blocks * blockSize * width
	k, err := d.Alloc(n)
	if err != nil {
		return KVPool{}, err
	}
	v, _ := d.Alloc(n)
	return KVPool{K: k, V: v, Blocks: blocks, BlockSize: blockSize, Width: width}, nil
}

func (d *CPUDevice) FreeKV(KVPool) {}

func (d *CPUDevice) WriteKV(p KVPool, k, v Buf, blocks []int32, start, n int) {
	kp, vp, ks, vs := d.Host(p.K), d.Host(p.V), d.Host(k), d.Host(v)
	bs, w := p.BlockSize, p.Width
	for i := range n {
		pos := start + i
		off := (int(blocks[pos/bs])*bs + pos%bs) * w
		copy(kp[off:off+w], ks[i*w:(i+1)*w])
		copy(vp[off:off+w], vs[i*w:(i+1)*w])
	}
}

func (d *CPUDevice) PagedAttention(out, q Buf, p KVPool, blocks []int32, nTok, start, nHeads, nKVHeads, headDim int, scale float32) {
	d.cpu.PagedAttention(d.Host(out), d.Host(q), d.Host(p.K), d.Host(p.V), blocks, p.BlockSize, nTok, start, nHeads, nKVHeads, headDim, scale)
}

var _ FamilyDevice = (*CPUDevice)(nil)

// PagedAttentionOpts implements FamilyDevice.
func (d *CPUDevice) PagedAttentionOpts(out, q Buf, p KVPool, blocks []int32, nTok, start, nHeads, nKVHeads, headDim int, scale float32, o AttnOpts) {
	d.cpu.PagedAttentionOpts(d.Host(out), d.Host(q), d.Host(p.K), d.Host(p.V), blocks, p.BlockSize, nTok, start, nHeads, nKVHeads, headDim, scale, o)
}

// GELUMul implements FamilyDevice.
func (d *CPUDevice) GELUMul(gate, up Buf) { d.cpu.GELUMul(d.Host(gate), d.Host(up)) }

// Scale implements FamilyDevice.
func (d *CPUDevice) Scale(x Buf, s float32) {
	xs := d.Host(x)
	for i, v := range xs {
		xs[i] = v * s
	}
}

// SoftCap implements FamilyDevice.
func (d *CPUDevice) SoftCap(x Buf, c float32) {
	if !(c > 0) {
		panic(fmt.Sprintf("kernels: SoftCap %g", c))
	}
	xs := d.Host(x)
	for i, v := range xs {
		xs[i] = c * float32(math.Tanh(float64(v/c)))
	}
}

// SwiGLUOAI implements FamilyDevice.
func (d *CPUDevice) SwiGLUOAI(gate, up Buf, alpha, limit float32) {
	g, u := d.Host(gate), d.Host(up)
	if len(u) < len(g) {
		panic(fmt.Sprintf("kernels: SwiGLUOAI len(gate)=%d len(up)=%d", len(g), len(u)))
	}
	for i, v := range g {
		g[i] = SwiGLUOAI(v, u[i], alpha, limit)
	}
}
