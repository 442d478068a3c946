//go:build goexperiment.simd && amd64

package kernels

import (
	"encoding/binary"
	"runtime"
	"sync"
	"unsafe"
)

// The packed 16-row layout (CPU.Pack): a block-quantized matrix's rows in
// groups of 16, each group's blocks side by side, each block as the
// 16-row kernels' unpackers would leave their registers:
//
//	quants  nq·16 bytes: the quant bytes 4k..4k+3 of row P(p) at 64k + 4p
//	fields  each header field (scale, minimum, fifth bits) of the 16 rows
//	        in lane order, in the order the raw block holds them
//
// (P(p) = 4·(p mod 4) + p/4, r16Row). A packed block is as many bytes as
// its 16 raw blocks, and a partial last group is padded with zero rows.
// Unpacking it (quant_pack_avx512_amd64.s) is a nibble split and one scale
// conversion into the same scratch the raw unpackers fill, so results are
// bit for bit those of the raw layout; what it saves is the gathering of
// 16 rows' blocks from 16 places (16 memory streams, 4×4 transposes and
// scalar moves of the scales), which cost more than the sums at one token.

//go:noescape
func r16PUnpQ4_0(dst *byte, w unsafe.Pointer, n int)

//go:noescape
func r16PUnpQ4_1(dst *byte, w unsafe.Pointer, n int)

//go:noescape
func r16PUnpQ5_0(dst *byte, w unsafe.Pointer, n int)

//go:noescape
func r16PUnpQ5_1(dst *byte, w unsafe.Pointer, n int)

//go:noescape
func r16PUnpIQ4NL(dst *byte, w unsafe.Pointer, n int)

//go:noescape
func r16PUnpQ8_0(dst *byte, w unsafe.Pointer, n int)

//go:noescape
func r16PUnpMXFP4(dst *byte, w unsafe.Pointer, n int)

// packLayout is where a 32-value format's parts lie in its raw block.
type packLayout struct {
	qs, nq int      // the quant bytes' offset and count (a multiple of 4)
	fields [][2]int // header fields: offset and size, in block order
}

// r16Packed are the formats with a packed layout: its unpacker and the
// raw block's parts.
var r16Packed = map[DType]struct {
	unpack func(dst *byte, w unsafe.Pointer, n int)
	layout packLayout
}{
	Q4_0:   {r16PUnpQ4_0, packLayout{2, 16, [][2]int{{0, 2}}}},
	IQ4_NL: {r16PUnpIQ4NL, packLayout{2, 16, [][2]int{{0, 2}}}},
	Q4_1:   {r16PUnpQ4_1, packLayout{4, 16, [][2]int{{0, 2}, {2, 2}}}},
	Q5_0:   {r16PUnpQ5_0, packLayout{6, 16, [][2]int{{0, 2}, {2, 4}}}},
	Q5_1:   {r16PUnpQ5_1, packLayout{8, 16, [][2]int{{0, 2}, {2, 2}, {4, 4}}}},
	Q8_0:   {r16PUnpQ8_0, packLayout{2, 32, [][2]int{{0, 2}}}},
	MXFP4:  {r16PUnpMXFP4, packLayout{1, 16, [][2]int{{0, 1}}}},
}

// pack16 returns m's rows in the packed 16-row layout of k's format,
// packing groups on up to GOMAXPROCS goroutines.
func (k *groupFmt) pack16(m *Matrix) *packedMatrix {
	l := r16Packed[k.t].layout
	rb := len(m.Data) / max(m.Rows, 1)
	nb := m.Cols / ActQ8x32Block
	groups := (m.Rows + r16Rows - 1) / r16Rows
	gb := nb * r16Rows * k.bb // bytes per packed group
	out := make([]byte, groups*gb)
	adviseHuge(out)
	var wg sync.WaitGroup
	workers := min(runtime.GOMAXPROCS(0), groups)
	for w := range workers {
		wg.Go(func() {
			for g := w; g < groups; g += workers {
				packGroup16(out[g*gb:(g+1)*gb], m.Data, rb, min(r16Rows, m.Rows-g*r16Rows), g*r16Rows, nb, k.bb, l)
			}
		})
	}
	wg.Wait()
	return &packedMatrix{group: r16Rows, data: out}
}

// packGroup16 packs rows r0..r0+nr-1 (rb bytes apart in src, nb blocks of
// bb bytes each) into dst, one group; the rows past nr stay zero.
func packGroup16(dst, src []byte, rb, nr, r0, nb, bb int, l packLayout) {
	for b := range nb {
		d := dst[b*r16Rows*bb : (b+1)*r16Rows*bb]
		for p, r := range r16Row {
			if r >= nr {
				continue
			}
			blk := src[(r0+r)*rb+b*bb:][:bb]
			for k := 0; k < l.nq/4; k++ {
				binary.LittleEndian.PutUint32(d[64*k+4*p:], binary.LittleEndian.Uint32(blk[l.qs+4*k:]))
			}
			off := l.nq * r16Rows
			for _, f := range l.fields {
				copy(d[off+f[1]*p:][:f[1]], blk[f[0]:])
				off += r16Rows * f[1]
			}
		}
	}
}
