package refdev

import "github.com/batchd/batchd/kernels"

// The fused and per-pass methods are the chains they stand for, call by
// call: the reference for a device whose kernels fuse them, and the way the
// native engine's fused path is tested on the CPU.

var _ kernels.FusedDevice = (*Device)(nil)

// segments is the pass SetSegments described: the segments, their block
// tables flattened into one reused slice.
type segments struct {
	segs   []kernels.Segment
	tables []int32
}

// SetSegments copies segs for the calls that follow.
func (d *Device) SetSegments(segs []kernels.Segment, blockSize int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := &d.pass
	s.segs = append(s.segs[:0], segs...)
	s.tables = s.tables[:0]
	for _, sg := range segs {
		s.tables = append(s.tables, sg.Blocks...)
	}
	off := 0
	for i := range s.segs {
		n := len(s.segs[i].Blocks)
		s.segs[i].Blocks = s.tables[off : off+n : off+n]
		off += n
	}
}

// WriteKVSegments is WriteKV of each segment.
func (d *Device) WriteKVSegments(p kernels.KVPool, k, v kernels.Buf) {
	for _, sg := range d.pass.segs {
		d.WriteKV(p, k.Slice(sg.First*p.Width, sg.N*p.Width), v.Slice(sg.First*p.Width, sg.N*p.Width), sg.Blocks, sg.Start, sg.N)
	}
}

// PagedAttentionSegments is PagedAttention of each segment.
func (d *Device) PagedAttentionSegments(out, q kernels.Buf, p kernels.KVPool, nHeads, nKVHeads, headDim int, scale float32) {
	w := nHeads * headDim
	for _, sg := range d.pass.segs {
		d.PagedAttention(out.Slice(sg.First*w, sg.N*w), q.Slice(sg.First*w, sg.N*w), p, sg.Blocks, sg.N, sg.Start,
			nHeads, nKVHeads, headDim, scale)
	}
}

// AddRMSNorm is Add then RMSNorm.
func (d *Device) AddRMSNorm(out, resid, delta, w kernels.Buf, rows, dim int, eps float32) {
	d.Add(resid.Slice(0, rows*dim), delta)
	d.RMSNorm(out, resid, w, rows, dim, eps)
}

// QKVPost is AddBias, the per-head RMSNorm, RoPE and WriteKVSegments.
func (d *Device) QKVPost(q, k, v kernels.Buf, T int, bq, bk, bv, qNorm, kNorm kernels.Buf, eps float32,
	pos []int32, invFreq []float32, neox bool, heads, kvHeads, headDim int, p kernels.KVPool) {
	qDim, kvDim := heads*headDim, kvHeads*headDim
	if bq.Len() > 0 {
		d.AddBias(q, bq, T, qDim)
		d.AddBias(k, bk, T, kvDim)
		d.AddBias(v, bv, T, kvDim)
	}
	if qNorm.Len() > 0 {
		d.RMSNorm(q, q, qNorm, T*heads, headDim, eps)
		d.RMSNorm(k, k, kNorm, T*kvHeads, headDim, eps)
	}
	d.RoPE(q, T, heads, headDim, pos, invFreq, neox)
	d.RoPE(k, T, kvHeads, headDim, pos, invFreq, neox)
	d.WriteKVSegments(p, k, v)
}
