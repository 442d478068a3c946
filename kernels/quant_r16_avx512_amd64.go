//go:build goexperiment.simd && amd64

package kernels

import "unsafe"

// The AVX-512 path of the 32-value block formats (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, IQ4_NL, MXFP4): sixteen weight rows at a time, each block's quants
// transposed so that one 512-bit lane holds one row (layout in
// quant_r16_avx512_amd64.s). A token's activation dword is broadcast to
// all 16 rows and VPDPBUSD (or VPMADDUBSW+VPMADDWD without VNNI) sums the
// block for all of them at once, so the float work per block is one
// conversion and two multiplies for 16 rows, not per row; the unpacking is
// paid once per item for all its tokens.
//
// Every (row, token) product is, in block order, acc += float(Σ)·(d·dx)
// (then + m·s for the types with a minimum), Σ the block's exact integer
// sum Σ(u-o)·y: the same operations whether the token runs alone or among
// 64, and whichever rows share the call. One token (decode) takes the same
// kernels as many: there is no separate one-token path to keep in step.

//go:noescape
func r16UnpQ4_0(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r16UnpQ4_1(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r16UnpQ5_0(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r16UnpQ5_1(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r16UnpIQ4NL(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r16UnpQ8_0(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func r16UnpMXFP4(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

// r16Store writes nt tokens' 16 accumulators (lane order) to out in row
// order, token j's at out[j*outStride:][:16].
//
//go:noescape
func r16Store(out *float32, outStride int, acc *float32, nt int)

//go:noescape
func kr16UnpQ4K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr16UnpQ5K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr16UnpQ6K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr16UnpIQ4XS(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr16UnpQ2K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr16UnpQ3K(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)

//go:noescape
func kr16Dot32(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

//go:noescape
func kr16Dot16(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

//go:noescape
func r16DotV(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

//go:noescape
func r16DotMV(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

//go:noescape
func r16DotB(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

//go:noescape
func r16DotMB(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)

const (
	r16Rows   = 16
	r16Block  = 640  // scratch bytes per unpacked 32-value block of 16 rows
	r16KBlock = 5760 // the same per 256-value super-block (the K formats)
	r16Stage  = 64   // float16 staging bytes per block
	r16Chunk  = 16   // 32-value blocks unpacked per call: 11 KiB, in L1
	r16KChunk = 2    // super-blocks unpacked per call: 11.4 KiB
)

// r16Row is the weight row of each lane: P(p) = 4·(p mod 4) + p/4.
var r16Row = [r16Rows]int{0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15}

// groupFmt is one format's path over groups of rows side by side: 16 on
// avx512, 8 on avx2 (r8, quant_r8_avx2_amd64.go).
type groupFmt struct {
	t      DType
	bb     int   // block bytes
	o      int32 // 32-value formats: the value is u - o (0: with a minimum)
	min    bool
	k      bool // a K format: 256-value blocks, actQ8K activations
	r8     bool // avx2's 8-row kernels
	unpack func(dst *byte, w unsafe.Pointer, rb, n int, pf uintptr)
	dot    func(acc *float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int)
}

// geometry: values per block, activation bytes per block, scratch bytes
// per unpacked block (its staging included) and blocks per unpack.
func (k *groupFmt) geometry() (block, actBytes, scratch, chunk int) {
	switch {
	case k.k && k.r8:
		return ActQ8KBlock, ActQ8KBytes, r8KBlock + r8KStage, r8KChunk
	case k.k:
		return ActQ8KBlock, ActQ8KBytes, r16KBlock + r16Stage, r16KChunk
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

// installR16 sets b's 16-row paths; vnni says the CPU has AVX512-VNNI.
// Without it VPMADDUBSW's pair sums could saturate for IQ4_NL (u up to
// 241) and Q8_0 (255): those keep their other paths.
func installR16(b *backend, vnni bool) {
	for _, k := range []*groupFmt{
		{t: Q4_0, bb: q4_0Bytes, o: 8, unpack: r16UnpQ4_0},
		{t: Q5_0, bb: q5_0Bytes, o: 16, unpack: r16UnpQ5_0},
		{t: Q4_1, bb: q4_1Bytes, min: true, unpack: r16UnpQ4_1},
		{t: Q5_1, bb: q5_1Bytes, min: true, unpack: r16UnpQ5_1},
		{t: MXFP4, bb: mxfp4Bytes, o: 12, unpack: r16UnpMXFP4},
		{t: IQ4_NL, bb: iq4nlBytes, o: 128, unpack: r16UnpIQ4NL},
		{t: Q8_0, bb: Q8BlockBytes, o: 128, unpack: r16UnpQ8_0},
	} {
		if k.o == 128 && !vnni {
			continue
		}
		switch {
		case k.min && vnni:
			k.dot = r16DotMV
		case k.min:
			k.dot = r16DotMB
		case vnni:
			k.dot = r16DotV
		default:
			k.dot = r16DotB
		}
		b.qitems[k.t], b.qoff[k.t] = k.items, k.o
		b.qtiles[k.t], b.qrows[k.t] = k.tile, nil
	}
	if !vnni {
		// The K formats keep their AVX-512BW tiles (quant_avx512_amd64.go).
		return
	}
	for _, k := range []*groupFmt{
		{t: Q4_K, bb: q4KBytes, k: true, unpack: kr16UnpQ4K, dot: kr16Dot32},
		{t: Q5_K, bb: q5KBytes, k: true, unpack: kr16UnpQ5K, dot: kr16Dot32},
		{t: Q6_K, bb: q6KBytes, k: true, unpack: kr16UnpQ6K, dot: kr16Dot16},
		{t: IQ4_XS, bb: iq4XSBytes, k: true, unpack: kr16UnpIQ4XS, dot: kr16Dot32},
		{t: Q2_K, bb: q2KBytes, k: true, unpack: kr16UnpQ2K, dot: kr16Dot16},
		{t: Q3_K, bb: q3KBytes, k: true, unpack: kr16UnpQ3K, dot: kr16Dot16},
	} {
		b.qitems[k.t], b.qoff[k.t] = k.items, 0
		b.qtiles[k.t], b.qrows[k.t] = k.tile, nil
	}
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
	for r := r0; r < r1; r += g {
		k.rows(wk, a.out[t0*m.Rows+r:], m.Rows, m.Data[r*a.rb:], a.rb, min(g, r1-r), act, a.qactStride, sums, t1-t0, nb)
	}
}

// rows computes nr ≤ one group of rows (w, rb bytes apart) × nt tokens (act,
// actStride bytes apart; sums: their -o·Σy, nb per token) into out (token
// j, row i at out[j*outStride+i]).
func (k *groupFmt) rows(wk *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride int, sums []int32, nt, nb int) {
	_, actBytes, blockScratch, chunk := k.geometry()
	g, lanes, store := k.group()
	rowBytes := nb * k.bb
	if nr < g {
		// The kernels read whole groups: copy the nr rows into zeroed ones.
		wk.r16pad = growBytes(wk.r16pad, g*rowBytes)
		clear(wk.r16pad)
		for i := range nr {
			copy(wk.r16pad[i*rowBytes:(i+1)*rowBytes], w[i*rb:i*rb+rowBytes])
		}
		w, rb = wk.r16pad, rowBytes
	}
	_ = w[(g-1)*rb+rowBytes-1]
	_ = act[(nt-1)*actStride+nb*actBytes-1]
	_ = out[(nt-1)*outStride+nr-1]
	var c unsafe.Pointer
	if k.o != 0 {
		_ = sums[nt*nb-1]
		c = unsafe.Pointer(&sums[0])
	} else {
		c = bptr(act) // unread
	}
	wk.qbuf = growBytes(wk.qbuf, chunk*blockScratch+64)
	s := (*byte)(alignUp64(unsafe.Pointer(&wk.qbuf[0])))
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
		k.unpack(s, unsafe.Add(bptr(w), b*k.bb), rb, n, uintptr(bptr(w))+uintptr(g*rb+b*g*k.bb))
		k.dot(&acc[0], s, unsafe.Add(bptr(act), b*actBytes), actStride, unsafe.Add(c, 4*b), 4*nb, nt, n)
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
