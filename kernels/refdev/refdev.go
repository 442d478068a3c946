// Package refdev is a deliberately simple kernels.Device: plain Go, one
// thread, one straightforward loop per operation, no SIMD and no assembly.
// It exists to prove the Device interface with a second implementation
// (the native engine's whole test suite runs on it with
// BATCHD_DEVICE=reference) and to be the obvious-by-reading reference an
// off-host device is checked against. It is far slower than
// kernels.CPUDevice and not meant for production.
//
// Its buffers are its own type (mem), never handed out as host slices, so
// code that works on it cannot be reading device memory behind the
// interface's back.
//
// Numerics follow the kernels package doc: every sum runs in float32 in an
// order fixed by the shapes (dot products in eight interleaved partial
// sums, everything else in index order), so each output element is the same
// whatever else shares the call (batch-invariant by construction); Q8_0 products quantize each
// activation row to Q8_0 (scale max|x|/127 in float32, values rounded to
// nearest even) and sum int8·int8 products per block in int32, as the CPU
// does. The other block quantizations (Q4_0 … MXFP4) multiply the exactly
// dequantized weights with the float32 activations: the reference of what
// the CPU's integer products approximate. It agrees with CPUDevice within
// float32 rounding (and those types' activation quantization), not bit for
// bit.
//
// It imports only kernels and the standard library.
package refdev

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/batchd/batchd/kernels"
)

// Device is the reference device. Its methods are serialized by a mutex.
type Device struct {
	mu sync.Mutex
	q  []int8    // one activation row quantized to Q8_0
	qd []float32 // its block scales
	w  []float32 // one dequantized weight row
	s  []float32 // attention scores of one head

	pass segments // SetSegments's
}

var _ kernels.Device = (*Device)(nil)

// New returns a reference device.
func New() *Device { return &Device{} }

// mem is a reference-device allocation.
type mem struct{ f []float32 }

// weight is a reference-device weight: its own copy of the matrix.
type weight struct{ m kernels.Matrix }

func (w *weight) Shape() (kernels.DType, int, int) { return w.m.Type, w.m.Rows, w.m.Cols }

// Name is "reference".
func (d *Device) Name() string { return "reference" }

// Close does nothing; allocations are garbage-collected.
func (d *Device) Close() {}

func (d *Device) f(b kernels.Buf) []float32 {
	if b.Len() == 0 {
		return nil
	}
	m, ok := b.Mem().(*mem)
	if !ok {
		panic(fmt.Sprintf("refdev: a %T buffer on the reference device", b.Mem()))
	}
	return m.f[b.Off() : b.Off()+b.Len() : b.Off()+b.Len()]
}

func (d *Device) weight(w kernels.Weight) *kernels.Matrix {
	rw, ok := w.(*weight)
	if !ok {
		panic(fmt.Sprintf("refdev: a %T weight on the reference device", w))
	}
	return &rw.m
}

func need(op string, have, want int) {
	if have < want {
		panic(fmt.Sprintf("refdev: %s needs %d floats, has %d", op, want, have))
	}
}

// Alloc implements kernels.Device.
func (d *Device) Alloc(n int) (kernels.Buf, error) {
	if n < 0 {
		return kernels.Buf{}, fmt.Errorf("alloc %d floats: negative size", n)
	}
	return kernels.NewBuf(&mem{f: make([]float32, n)}, n), nil
}

// Free implements kernels.Device.
func (d *Device) Free(b kernels.Buf) {
	if m, ok := b.Mem().(*mem); ok && b.Off() == 0 {
		m.f = nil // later use of any view panics
	}
}

// Upload implements kernels.Device.
func (d *Device) Upload(dst kernels.Buf, src []float32) {
	need("Upload", dst.Len(), len(src))
	copy(d.f(dst), src)
}

// Download implements kernels.Device.
func (d *Device) Download(dst []float32, src kernels.Buf) {
	need("Download", src.Len(), len(dst))
	copy(dst, d.f(src))
}

// UploadMatrix implements kernels.Device: it copies the matrix.
func (d *Device) UploadMatrix(m *kernels.Matrix) (kernels.Weight, error) {
	data := append([]byte(nil), m.Data...)
	c, err := kernels.NewMatrix(m.Type, m.Rows, m.Cols, data)
	if err != nil {
		return nil, err
	}
	return &weight{m: *c}, nil
}

// row dequantizes row r of m into dst[:m.Cols].
func row(m *kernels.Matrix, r int, dst []float32) {
	if r < 0 || r >= m.Rows {
		panic(fmt.Sprintf("refdev: row %d of a %d-row matrix", r, m.Rows))
	}
	rb, _ := m.Type.RowBytes(m.Cols)
	src := m.Data[r*rb : (r+1)*rb]
	for c := range m.Cols {
		switch m.Type {
		case kernels.F32:
			dst[c] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*c:]))
		case kernels.F16:
			dst[c] = kernels.F16ToF32(binary.LittleEndian.Uint16(src[2*c:]))
		case kernels.BF16:
			dst[c] = kernels.BF16ToF32(binary.LittleEndian.Uint16(src[2*c:]))
		case kernels.Q8_0:
			blk := src[c/kernels.Q8BlockSize*kernels.Q8BlockBytes:]
			dst[c] = kernels.F16ToF32(binary.LittleEndian.Uint16(blk)) * float32(int8(blk[2+c%kernels.Q8BlockSize]))
		default:
			// The other block quantizations: the package's exact
			// dequantization, whose bit layouts its tests pin.
			if err := kernels.Dequantize(m.Type, dst[:m.Cols], src); err != nil {
				panic(fmt.Sprintf("refdev: %v weights: %v", m.Type, err))
			}
			return
		}
	}
}

// Embed implements kernels.Device.
func (d *Device) Embed(out kernels.Buf, w kernels.Weight, ids []int32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.weight(w)
	o := d.f(out)
	need("Embed", len(o), len(ids)*m.Cols)
	for t, id := range ids {
		row(m, int(id), o[t*m.Cols:])
	}
}

// CopyRows implements kernels.Device.
func (d *Device) CopyRows(out, x kernels.Buf, width int, rows []int32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	o, in := d.f(out), d.f(x)
	need("CopyRows", len(o), len(rows)*width)
	for i, r := range rows {
		for c := range width {
			o[i*width+c] = in[int(r)*width+c]
		}
	}
}

// MatMul implements kernels.Device.
func (d *Device) MatMul(out, x kernels.Buf, T int, w kernels.Weight) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.weight(w)
	o, xs := d.f(out), d.f(x)
	need("MatMul x", len(xs), T*m.Cols)
	need("MatMul out", len(o), T*m.Rows)
	if m.Type == kernels.Q8_0 {
		d.matmulQ8(o, xs, T, m)
		return
	}
	if cap(d.w) < m.Cols {
		d.w = make([]float32, m.Cols)
	}
	wr := d.w[:m.Cols]
	for r := range m.Rows {
		row(m, r, wr)
		for t := range T {
			o[t*m.Rows+r] = dot(xs[t*m.Cols:(t+1)*m.Cols], wr)
		}
	}
}

// dot is Σ a[i]·b[i] in float32, in eight partial sums (sum j takes the
// indices i ≡ j mod 8) added pairwise at the end: the portable CPU path's
// order, which keeps the rounding error of long rows low (a single running
// sum drifts measurably further from the exact value over a 768-float row).
func dot(a, b []float32) float32 {
	var s [8]float32
	for i, v := range a {
		s[i%8] += v * b[i]
	}
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}

// matmulQ8 quantizes each activation row to Q8_0 and sums, per block, the
// exact int32 dot product of the int8 values times the two scales.
func (d *Device) matmulQ8(o, xs []float32, T int, m *kernels.Matrix) {
	const bs = kernels.Q8BlockSize
	nb := m.Cols / bs
	rb := nb * kernels.Q8BlockBytes
	if cap(d.q) < m.Cols {
		d.q, d.qd = make([]int8, m.Cols), make([]float32, nb)
	}
	q, qd := d.q[:m.Cols], d.qd[:nb]
	for t := range T {
		x := xs[t*m.Cols : (t+1)*m.Cols]
		for b := range nb {
			var amax float32
			for _, v := range x[b*bs : (b+1)*bs] {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			dx := amax / 127
			var inv float32
			if dx != 0 {
				inv = 1 / dx
			}
			qd[b] = dx
			for i := range bs {
				q[b*bs+i] = int8(math.RoundToEven(float64(x[b*bs+i] * inv)))
			}
		}
		for r := range m.Rows {
			wrow := m.Data[r*rb : (r+1)*rb]
			var acc float32
			for b := range nb {
				blk := wrow[b*kernels.Q8BlockBytes:]
				dw := kernels.F16ToF32(binary.LittleEndian.Uint16(blk))
				var s int32
				for i := range bs {
					s += int32(int8(blk[2+i])) * int32(q[b*bs+i])
				}
				acc += float32(s) * (dw * qd[b])
			}
			o[t*m.Rows+r] = acc
		}
	}
}

// RMSNorm implements kernels.Device.
func (d *Device) RMSNorm(out, x, weight kernels.Buf, rows, dim int, eps float32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	o, xs, w := d.f(out), d.f(x), d.f(weight)
	need("RMSNorm x", len(xs), rows*dim)
	need("RMSNorm out", len(o), rows*dim)
	need("RMSNorm weight", len(w), dim)
	for r := range rows {
		v := xs[r*dim : (r+1)*dim]
		var ss float32
		for _, e := range v {
			ss += e * e
		}
		// The mean and epsilon in float32, the square root in float64,
		// as Hugging Face and the CPU kernels compute it.
		scale := float32(1 / math.Sqrt(float64(ss/float32(dim)+eps)))
		for i, e := range v {
			o[r*dim+i] = float32(e*scale) * w[i]
		}
	}
}

// RoPE implements kernels.Device.
func (d *Device) RoPE(x kernels.Buf, T, heads, headDim int, pos []int32, invFreq []float32, neox bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	xs := d.f(x)
	need("RoPE", len(xs), T*heads*headDim)
	n := len(invFreq)
	for t := range T {
		for i, f := range invFreq {
			s64, c64 := math.Sincos(float64(float32(pos[t]) * f))
			c, s := float32(c64), float32(s64)
			for h := range heads {
				v := xs[(t*heads+h)*headDim:]
				a, b := 2*i, 2*i+1
				if neox {
					a, b = i, i+n
				}
				x0, x1 := v[a], v[b]
				v[a] = float32(x0*c) - float32(x1*s)
				v[b] = float32(x0*s) + float32(x1*c)
			}
		}
	}
}

// AddBias implements kernels.Device.
func (d *Device) AddBias(x, bias kernels.Buf, rows, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	xs, b := d.f(x), d.f(bias)
	need("AddBias x", len(xs), rows*n)
	need("AddBias bias", len(b), n)
	for r := range rows {
		for i := range n {
			xs[r*n+i] += b[i]
		}
	}
}

// Add implements kernels.Device.
func (d *Device) Add(dst, src kernels.Buf) {
	d.mu.Lock()
	defer d.mu.Unlock()
	o, s := d.f(dst), d.f(src)
	need("Add", len(s), len(o))
	for i := range o {
		o[i] += s[i]
	}
}

// SiLUMul implements kernels.Device.
func (d *Device) SiLUMul(gate, up kernels.Buf) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g, u := d.f(gate), d.f(up)
	need("SiLUMul", len(u), len(g))
	for i, v := range g {
		g[i] = v / (1 + float32(math.Exp(float64(-v)))) * u[i]
	}
}

// GELUMul implements kernels.FamilyDevice: GELU's tanh approximation in
// float64, rounded to float32, times up.
func (d *Device) GELUMul(gate, up kernels.Buf) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g, u := d.f(gate), d.f(up)
	need("GELUMul", len(u), len(g))
	for i, v := range g {
		x := float64(v)
		g[i] = float32(0.5*x*(1+math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))) * u[i]
	}
}

// SwiGLUOAI implements kernels.FamilyDevice: min(gate, limit)·σ(alpha·
// min(gate, limit))·(clamp(up, ±limit)+1), written out here.
func (d *Device) SwiGLUOAI(gate, up kernels.Buf, alpha, limit float32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g, u := d.f(gate), d.f(up)
	need("SwiGLUOAI", len(u), len(g))
	for i, v := range g {
		if v > limit {
			v = limit
		}
		w := u[i]
		if w > limit {
			w = limit
		} else if w < -limit {
			w = -limit
		}
		g[i] = v / (1 + float32(math.Exp(float64(-alpha*v)))) * (w + 1)
	}
}

// Scale implements kernels.FamilyDevice.
func (d *Device) Scale(x kernels.Buf, s float32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	xs := d.f(x)
	for i := range xs {
		xs[i] *= s
	}
}

// SoftCap implements kernels.FamilyDevice.
func (d *Device) SoftCap(x kernels.Buf, c float32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	xs := d.f(x)
	for i, v := range xs {
		xs[i] = c * float32(math.Tanh(float64(v/c)))
	}
}

// AllocKV implements kernels.Device.
func (d *Device) AllocKV(blocks, blockSize, width int) (kernels.KVPool, error) {
	if blocks < 0 || blockSize < 1 || width < 1 {
		return kernels.KVPool{}, fmt.Errorf("kv pool of %d blocks of %d×%d: bad shape", blocks, blockSize, width)
	}
	n := blocks * blockSize * width
	k, _ := d.Alloc(n)
	v, _ := d.Alloc(n)
	return kernels.KVPool{K: k, V: v, Blocks: blocks, BlockSize: blockSize, Width: width}, nil
}

// FreeKV implements kernels.Device.
func (d *Device) FreeKV(p kernels.KVPool) { d.Free(p.K); d.Free(p.V) }

// rowOff is the offset of position p's row in pool p.
func rowOff(p kernels.KVPool, blocks []int32, pos int) int {
	b := int(blocks[pos/p.BlockSize])
	if b < 0 || b >= p.Blocks {
		panic(fmt.Sprintf("refdev: block %d outside the pool of %d", b, p.Blocks))
	}
	return (b*p.BlockSize + pos%p.BlockSize) * p.Width
}

// WriteKV implements kernels.Device.
func (d *Device) WriteKV(p kernels.KVPool, k, v kernels.Buf, blocks []int32, start, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	kp, vp, ks, vs := d.f(p.K), d.f(p.V), d.f(k), d.f(v)
	need("WriteKV", min(len(ks), len(vs)), n*p.Width)
	for i := range n {
		off := rowOff(p, blocks, start+i)
		for c := range p.Width {
			kp[off+c] = ks[i*p.Width+c]
			vp[off+c] = vs[i*p.Width+c]
		}
	}
}

// PagedAttention implements kernels.Device: for each token and head, the
// scores scale·q·k in position order, softmax with the max subtracted, and
// the position-ordered sum of the weighted values divided by their sum.
func (d *Device) PagedAttention(out, q kernels.Buf, p kernels.KVPool, blocks []int32, nTok, start, nHeads, nKVHeads, headDim int, scale float32) {
	d.PagedAttentionOpts(out, q, p, blocks, nTok, start, nHeads, nKVHeads, headDim, scale, kernels.AttnOpts{})
}

var _ kernels.FamilyDevice = (*Device)(nil)

// PagedAttentionOpts implements kernels.FamilyDevice: PagedAttention over
// each query's window only, each score soft-capped before the softmax, a
// head's sink one more score in its softmax.
func (d *Device) PagedAttentionOpts(out, q kernels.Buf, p kernels.KVPool, blocks []int32, nTok, start, nHeads, nKVHeads, headDim int, scale float32, opt kernels.AttnOpts) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if nHeads <= 0 || nKVHeads <= 0 || nHeads%nKVHeads != 0 || p.Width != nKVHeads*headDim || (opt.Sinks != nil && len(opt.Sinks) != nHeads) {
		panic(fmt.Sprintf("refdev: PagedAttention heads=%d kvHeads=%d headDim=%d over a pool of width %d", nHeads, nKVHeads, headDim, p.Width))
	}
	o, qs, kp, vp := d.f(out), d.f(q), d.f(p.K), d.f(p.V)
	need("PagedAttention q", len(qs), nTok*nHeads*headDim)
	need("PagedAttention out", len(o), nTok*nHeads*headDim)
	if cap(d.s) < start+nTok {
		d.s = make([]float32, start+nTok)
	}
	group := nHeads / nKVHeads
	for i := range nTok {
		n := start + i + 1
		lo := 0
		if opt.Window > 0 && n > opt.Window {
			lo = n - opt.Window
		}
		sc := d.s[lo:n]
		for h := range nHeads {
			g := h / group
			qh := qs[(i*nHeads+h)*headDim:][:headDim]
			for j := range sc {
				kr := kp[rowOff(p, blocks, lo+j)+g*headDim:][:headDim]
				sc[j] = dot(qh, kr) * scale
				if c := opt.SoftCap; c > 0 {
					sc[j] = c * float32(math.Tanh(float64(sc[j]/c)))
				}
			}
			m := sc[0]
			for _, s := range sc {
				m = max(m, s)
			}
			if opt.Sinks != nil {
				m = max(m, opt.Sinks[h])
			}
			var sum float32
			for pos, s := range sc {
				sc[pos] = float32(math.Exp(float64(s - m)))
				sum += sc[pos]
			}
			if opt.Sinks != nil { // a score in the softmax that adds no value
				sum += float32(math.Exp(float64(opt.Sinks[h] - m)))
			}
			oh := o[(i*nHeads+h)*headDim:][:headDim]
			clear(oh)
			for j, e := range sc {
				vr := vp[rowOff(p, blocks, lo+j)+g*headDim:][:headDim]
				for c := range oh {
					oh[c] += e * vr[c]
				}
			}
			inv := 1 / sum
			for c := range oh {
				oh[c] *= inv
			}
		}
	}
}
