//go:build goexperiment.simd && amd64

package kernels

import "unsafe"

// The driver of the row-group kernels: avx512's 16 rows
// (quant_r16_avx512_amd64.go) and avx2's 8 (quant_r8_avx2_amd64.go). A
// format's unpacker lays a group of rows side by side in the worker's
// scratch, a chunk of blocks at a time, and its dot kernel runs every token
// of the work item over them; the accumulators come back in lane order and
// are stored in row order.

// groupFmt is one format's path over groups of rows side by side: 16 on
// avx512, 8 on avx2 (r8, quant_r8_avx2_amd64.go).
type groupFmt struct {
	t      DType
	bb     int   // block bytes
	o      int32 // 32-value formats: the value is u - o (0: with a minimum, or avx2's signed Q8_0)
	min    bool
	k      bool // a K format: 256-value blocks, actQ8K activations
	r8     bool // avx2's 8-row kernels
	q8     bool // r8 Q8_0: r8QBlock scratch bytes per block, r8QChunk blocks
	unpack func(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
	dot    func(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)
	// punpack, where set, unpacks the packed layout (quant_pack_amd64.go),
	// pbb bytes per row's block there.
	punpack func(dst *byte, w unsafe.Pointer, n int)
	pbb     int
	// amx, where set, is the AMX kernel for 16 tokens at a time
	// (quant_amx_amd64.go).
	amx func(acc *float32, s *byte, x unsafe.Pointer, xs int, nt, n int, buf *byte)
}

// geometry: values per block, activation bytes per block, scratch bytes
// per unpacked block (its staging included) and blocks per unpack.
func (k *groupFmt) geometry() (block, actBytes, scratch, chunk int) {
	switch {
	case k.k && k.r8:
		return ActQ8KBlock, ActQ8KBytes, r8KBlock + r8KStage, r8KChunk
	case k.k:
		return ActQ8KBlock, ActQ8KBytes, r16KBlock + r16Stage, r16KChunk
	case k.q8:
		return ActQ8x32Block, ActQ8x32Bytes, r8QBlock + r16Stage, r8QChunk
	case k.r8:
		return ActQ8x32Block, ActQ8x32Bytes, r8Block + r16Stage, r8Chunk
	}
	return ActQ8x32Block, ActQ8x32Bytes, r16Block + r16Stage, r16Chunk
}

// group: rows per group, the row of each lane, and the kernel that stores
// a whole group's accumulators in row order.
func (k *groupFmt) group() (int, []int, func(out *float32, outStride int, acc *float32, nt int)) {
	if k.r8 {
		return r8Rows, r8Row[:], r8Store
	}
	return r16Rows, r16Row[:], r16Store
}

// items is the qItemsFn: rows r0..r1 (a group at a time) × tokens t0..t1.
func (k *groupFmt) items(a *mmArgs, wk *worker, r0, r1, t0, t1 int) {
	m := a.w
	block, _, _, _ := k.geometry()
	nb := m.Cols / block
	act := a.qact[t0*a.qactStride:]
	var sums []int32
	if k.o != 0 {
		sums = a.qsum[t0*nb:]
	}
	g, _, _ := k.group()
	if pk := m.pk; pk != nil && pk.group == g && k.punpack != nil {
		gb := nb * g * k.pbb // bytes per packed group
		for r := r0; r < r1; r += g {
			k.rows(wk, a.out[t0*m.Rows+r:], m.Rows, pk.data[r/g*gb:(r/g+1)*gb], -1, min(g, r1-r), act, a.qactStride, sums, t1-t0, nb)
		}
		return
	}
	for r := r0; r < r1; r += g {
		k.rows(wk, a.out[t0*m.Rows+r:], m.Rows, m.Data[r*a.rb:], a.rb, min(g, r1-r), act, a.qactStride, sums, t1-t0, nb)
	}
}

// rows computes nr ≤ one group of rows (w, rb bytes apart; rb < 0: w is
// the group packed, quant_pack_amd64.go) × nt tokens (act, actStride bytes
// apart; sums: their -o·Σy, nb per token) into out (token j, row i at
// out[j*outStride+i]).
func (k *groupFmt) rows(wk *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride int, sums []int32, nt, nb int) {
	_, actBytes, blockScratch, chunk := k.geometry()
	g, lanes, store := k.group()
	rowBytes := nb * k.bb
	packed := rb < 0
	if packed {
		_ = w[g*nb*k.pbb-1]
	} else if nr < g {
		// The kernels read whole groups: copy the nr rows into zeroed ones.
		wk.r16pad = growBytes(wk.r16pad, g*rowBytes)
		clear(wk.r16pad)
		for i := range nr {
			copy(wk.r16pad[i*rowBytes:(i+1)*rowBytes], w[i*rb:i*rb+rowBytes])
		}
		w, rb = wk.r16pad, rowBytes
	}
	if !packed {
		_ = w[(g-1)*rb+rowBytes-1]
	}
	_ = act[(nt-1)*actStride+nb*actBytes-1]
	_ = out[(nt-1)*outStride+nr-1]
	var c unsafe.Pointer
	if k.o != 0 {
		_ = sums[nt*nb-1]
		c = unsafe.Pointer(&sums[0])
	} else {
		c = bptr(act) // unread
	}
	wk.qbuf = growBytes(wk.qbuf, chunk*blockScratch+amxBuf+64)
	s := (*byte)(alignUp64(unsafe.Pointer(&wk.qbuf[0])))
	tiles := (*byte)(unsafe.Add(unsafe.Pointer(s), chunk*blockScratch)) // AMX's C tiles
	wk.r16acc = growF32(wk.r16acc, nt*g)
	acc := wk.r16acc
	clear(acc)
	for b := 0; b < nb; b += chunk {
		n := min(chunk, nb-b)
		// Prefetch the next group of rows (the next call's, when the item
		// has one) at the pace this one is read: decode streams the
		// weights from memory, and a group's rows are more streams than
		// the hardware prefetchers follow.
		// (An address, not a pointer: it may lie past w's end, where a
		// prefetch is harmless but Go pointers may not point.)
		if packed {
			k.punpack(s, unsafe.Add(bptr(w), b*g*k.pbb), n)
		} else {
			k.unpack(s, unsafe.Add(bptr(w), b*k.bb), rb, n, uintptr(bptr(w))+uintptr(g*rb+b*g*k.bb))
		}
		x, cb := unsafe.Add(bptr(act), b*actBytes), unsafe.Add(c, 4*b)
		if k.amx != nil && nt >= amxTokens {
			k.amxDot(acc, s, x, actStride, cb, 4*nb, nt, n, tiles)
			continue
		}
		k.dot(&acc[0], s, x, actStride, cb, 4*nb, nt, n)
	}
	if nr == g {
		store(&out[0], outStride, &acc[0], nt)
		return
	}
	for j := range nt {
		o := out[j*outStride:][:nr]
		a := acc[j*g:][:g]
		for p, row := range lanes {
			if row < nr {
				o[row] = a[p]
			}
		}
	}
}

// tile is the format's qTileFn: the same kernels on at most 4 × 4.
func (k *groupFmt) tile(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
	var sums []int32
	if k.o != 0 {
		sums = make([]int32, nt*nb)
		for j := range nt {
			actBlockSums(sums[j*nb:(j+1)*nb], act[j*actStride:], k.o)
		}
	}
	var wk worker
	k.rows(&wk, res[:], 4, w, rb, nr, act, actStride, sums, nt, nb)
}
