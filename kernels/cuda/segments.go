package cuda

import (
	"fmt"

	"github.com/batchd/batchd/kernels"
)

var _ kernels.FusedDevice = (*Device)(nil)

// pass is a forward pass's sequences as SetSegments uploaded them: per
// token its pool row (slot), sequence index and position; per sequence its
// block table padded to maxBlocks.
type pass struct {
	tokens, maxBlocks, blockSize int
	slots, seq, pos, tables      devInts
	// host staging
	hostSlots, hostSeq, hostPos, hostTables []int32
}

// SetSegments uploads the pass's per-token metadata once; the layers'
// KV writes and attention launches read it from device memory.
func (d *Device) SetSegments(segs []kernels.Segment, blockSize int) {
	if blockSize <= 0 {
		panic(fmt.Sprintf("cuda: SetSegments block size %d", blockSize))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ps := &d.pass
	ps.blockSize = blockSize
	ps.tokens, ps.maxBlocks = 0, 1
	for _, sg := range segs {
		ps.tokens = max(ps.tokens, sg.First+sg.N)
		ps.maxBlocks = max(ps.maxBlocks, len(sg.Blocks))
		if sg.N > 0 && (sg.Start+sg.N-1)/blockSize >= len(sg.Blocks) {
			panic(fmt.Sprintf("cuda: segment at positions %d..%d beyond its %d blocks", sg.Start, sg.Start+sg.N-1, len(sg.Blocks)))
		}
	}
	n := ps.tokens
	slots := grow32(&ps.hostSlots, n)
	seq := grow32(&ps.hostSeq, n)
	pos := grow32(&ps.hostPos, n)
	tables := grow32(&ps.hostTables, len(segs)*ps.maxBlocks)
	clear(tables)
	for si, sg := range segs {
		for i := range sg.N {
			p := sg.Start + i
			slots[sg.First+i] = sg.Blocks[p/blockSize]*int32(blockSize) + int32(p%blockSize)
			seq[sg.First+i] = int32(si)
			pos[sg.First+i] = int32(p)
		}
		copy(tables[si*ps.maxBlocks:], sg.Blocks)
	}
	d.put(&ps.slots, slots)
	d.put(&ps.seq, seq)
	d.put(&ps.pos, pos)
	d.put(&ps.tables, tables)
}

// grow32 is *b resized to n int32s, reusing its memory.
func grow32(b *[]int32, n int) []int32 {
	if cap(*b) < n {
		*b = make([]int32, n, max(n, 2*cap(*b)))
	}
	*b = (*b)[:n]
	return *b
}

// put uploads x into m, growing it, and returns its address; the caller
// holds d.mu.
func (d *Device) put(m *devInts, x []int32) DevPtr {
	d.flush()
	if len(x) > m.cap {
		if m.p != 0 {
			d.fail("sync", d.drv.Sync())
			d.drv.Free(m.p)
			*m = devInts{}
		}
		c := max(len(x), 2*m.cap, 1024)
		p, err := d.drv.Alloc(int64(c) * 4)
		d.fail("alloc metadata", err)
		*m = devInts{p: p, cap: c}
	}
	if len(x) > 0 {
		d.fail("upload metadata", d.drv.CopyIn(m.p, i32Bytes(x)))
	}
	return m.p
}

func (d *Device) checkPass(p kernels.KVPool, what string) {
	if d.pass.blockSize != p.BlockSize {
		panic(fmt.Sprintf("cuda: %s on a pool of %d-position blocks after SetSegments(%d)", what, p.BlockSize, d.pass.blockSize))
	}
}

func (d *Device) WriteKVSegments(p kernels.KVPool, k, v kernels.Buf) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.checkPass(p, "WriteKVSegments")
	n := d.pass.tokens
	need(k, n*p.Width, "WriteKVSegments k")
	need(v, n*p.Width, "WriteKVSegments v")
	d.with(Ptr(addr(p.K)), Ptr(addr(p.V)), Ptr(addr(k)), Ptr(addr(v)), Ptr(d.pass.slots.p), I32(int32(n)), I32(int32(p.Width)))
	d.launch("write_kv", rows(n), rowBlock(p.Width), 0)
}

func (d *Device) PagedAttentionSegments(out, q kernels.Buf, p kernels.KVPool, nHeads, nKVHeads, headDim int, scale float32) {
	if nHeads <= 0 || nKVHeads <= 0 || nHeads%nKVHeads != 0 || headDim <= 0 || headDim > maxHeadDim || nKVHeads*headDim != p.Width {
		panic(fmt.Sprintf("cuda: PagedAttentionSegments heads=%d kvHeads=%d headDim=%d width=%d", nHeads, nKVHeads, headDim, p.Width))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.checkPass(p, "PagedAttentionSegments")
	ps := &d.pass
	need(q, ps.tokens*nHeads*headDim, "PagedAttentionSegments q")
	need(out, ps.tokens*nHeads*headDim, "PagedAttentionSegments out")
	if ps.tokens == 0 {
		return
	}
	d.attention(out, q, p, ps.seq.p, ps.pos.p, ps.tables.p, ps.maxBlocks, ps.tokens, nHeads, nKVHeads, headDim, scale)
}

func (d *Device) AddRMSNorm(out, resid, delta, w kernels.Buf, nrows, dim int, eps float32) {
	need(resid, nrows*dim, "AddRMSNorm resid")
	need(delta, nrows*dim, "AddRMSNorm delta")
	need(out, nrows*dim, "AddRMSNorm out")
	need(w, dim, "AddRMSNorm weight")
	if nrows == 0 || dim == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.with(Ptr(addr(out)), Ptr(addr(resid)), Ptr(addr(delta)), Ptr(addr(w)), I32(int32(dim)), F32(eps))
	d.launch("add_rmsnorm", rows(nrows), rowBlock(dim), 0)
}

// optPtr is b's address, or 0 (a null pointer: "absent") when b is empty.
func optPtr(b kernels.Buf) Arg {
	if b.Len() == 0 {
		return Ptr(0)
	}
	return Ptr(addr(b))
}

func (d *Device) QKVPost(q, k, v kernels.Buf, T int, bq, bk, bv, qNorm, kNorm kernels.Buf, eps float32,
	pos []int32, invFreq []float32, neox bool, heads, kvHeads, headDim int, p kernels.KVPool) {
	qDim, kvDim := heads*headDim, kvHeads*headDim
	need(q, T*qDim, "QKVPost q")
	need(k, T*kvDim, "QKVPost k")
	need(v, T*kvDim, "QKVPost v")
	if bq.Len() > 0 {
		need(bq, qDim, "QKVPost q bias")
		need(bk, kvDim, "QKVPost k bias")
		need(bv, kvDim, "QKVPost v bias")
	}
	if qNorm.Len() > 0 {
		need(qNorm, headDim, "QKVPost q norm")
		need(kNorm, headDim, "QKVPost k norm")
	}
	if 2*len(invFreq) > headDim || len(pos) < T || kvDim != p.Width {
		panic(fmt.Sprintf("cuda: QKVPost T=%d headDim=%d len(invFreq)=%d len(pos)=%d width=%d", T, headDim, len(invFreq), len(pos), p.Width))
	}
	if T == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.checkPass(p, "QKVPost")
	if d.pass.tokens != T {
		panic(fmt.Sprintf("cuda: QKVPost of %d tokens after SetSegments of %d", T, d.pass.tokens))
	}
	cs, sn := d.ropeRows(pos[:T], invFreq, neox)
	neoxArg := int32(0)
	if neox {
		neoxArg = 1
	}
	d.with(Ptr(addr(q)), Ptr(addr(k)), Ptr(addr(v)), optPtr(bq), optPtr(bk), optPtr(bv), optPtr(qNorm), optPtr(kNorm), F32(eps),
		Ptr(cs), Ptr(sn), I32(int32(len(invFreq))), I32(neoxArg), I32(int32(heads)), I32(int32(kvHeads)), I32(int32(headDim)),
		Ptr(addr(p.K)), Ptr(addr(p.V)), Ptr(d.pass.slots.p))
	d.launch("qkv_post", rows(T), rowBlock((heads+kvHeads)*headDim), 0)
}
