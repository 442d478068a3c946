//go:build goexperiment.simd && amd64

package kernels

import (
	"encoding/binary"
	"runtime"
	"sync"
	"unsafe"
)

// The packed layouts (CPU.Pack): a block-quantized matrix's rows in groups
// of the row-group kernels' size (16 on avx512 and amx, 8 on avx2), each
// group's blocks side by side, each block as the group kernels' unpackers
// would leave their registers:
//
//	quants  nq·g bytes: the quant bytes 4k..4k+3 of row P(p) at 4gk + 4p
//	fields  each header field (scale, minimum, fifth bits) of the g rows
//	        in lane order, in the order the raw block holds them
//
// (P is the group's lane order: r16Row, r8Row). A packed block is as many
// bytes as its g raw blocks, and a partial last group is padded with zero
// rows. Unpacking it (quant_pack_avx512_amd64.s, quant_r8_avx2_amd64.s) is
// a nibble split and one scale conversion into the same scratch the raw
// unpackers fill, so results are bit for bit those of the raw layout; what
// it saves is the gathering of g rows' blocks from g places (g memory
// streams, 4×4 transposes and scalar moves of the scales), which cost more
// than the sums at one token.

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

//go:noescape
func r8PUnpQ4_0(dst *byte, w unsafe.Pointer, n int)

//go:noescape
func r8PUnpQ4_1(dst *byte, w unsafe.Pointer, n int)

//go:noescape
func r8PUnpQ5_0(dst *byte, w unsafe.Pointer, n int)

//go:noescape
func r8PUnpQ5_1(dst *byte, w unsafe.Pointer, n int)

//go:noescape
func r8PUnpQ8_0(dst *byte, w unsafe.Pointer, n int)

//go:noescape
func r8PUnpMXFP4(dst *byte, w unsafe.Pointer, n int)

//go:noescape
func kr8PUnpQ4K(dst *byte, w unsafe.Pointer, n int)

//go:noescape
func kr8PUnpQ5K(dst *byte, w unsafe.Pointer, n int)

//go:noescape
func kr8PUnpQ6K(dst *byte, w unsafe.Pointer, n int)

// packLayout is where a format's parts lie in its raw block: the quant
// bytes, transposed a dword at a time, and the header fields, each in lane
// order. The K formats are transposed whole (nq: the block's bytes rounded
// up to whole dwords, the last padded with zeros).
type packLayout struct {
	qs, nq int      // the quant bytes' offset and count (a multiple of 4)
	fields [][2]int // header fields: offset and size, in block order
}

// bytes is the packed size of one row's block.
func (l packLayout) bytes() int {
	n := l.nq
	for _, f := range l.fields {
		n += f[1]
	}
	return n
}

// packedFormats are the formats with a packed layout: its unpackers for
// 16-row groups (avx512, amx) and 8-row ones (avx2; nil: the format keeps
// another path there) and the raw block's parts.
var packedFormats = map[DType]struct {
	unpack16, unpack8 func(dst *byte, w unsafe.Pointer, n int)
	layout            packLayout
}{
	Q4_0:   {r16PUnpQ4_0, r8PUnpQ4_0, packLayout{2, 16, [][2]int{{0, 2}}}},
	IQ4_NL: {r16PUnpIQ4NL, nil, packLayout{2, 16, [][2]int{{0, 2}}}},
	Q4_1:   {r16PUnpQ4_1, r8PUnpQ4_1, packLayout{4, 16, [][2]int{{0, 2}, {2, 2}}}},
	Q5_0:   {r16PUnpQ5_0, r8PUnpQ5_0, packLayout{6, 16, [][2]int{{0, 2}, {2, 4}}}},
	Q5_1:   {r16PUnpQ5_1, r8PUnpQ5_1, packLayout{8, 16, [][2]int{{0, 2}, {2, 2}, {4, 4}}}},
	Q8_0:   {r16PUnpQ8_0, r8PUnpQ8_0, packLayout{2, 32, [][2]int{{0, 2}}}},
	MXFP4:  {r16PUnpMXFP4, r8PUnpMXFP4, packLayout{1, 16, [][2]int{{0, 1}}}},
	Q4_K:   {nil, kr8PUnpQ4K, packLayout{0, q4KBytes, nil}},
	Q5_K:   {nil, kr8PUnpQ5K, packLayout{0, q5KBytes, nil}},
	Q6_K:   {nil, kr8PUnpQ6K, packLayout{0, (q6KBytes + 3) &^ 3, nil}},
}

// setPacked gives k its packed layout on b, where the format has one for
// k's group size.
func (k *groupFmt) setPacked(b *backend) {
	p, ok := packedFormats[k.t]
	unpack := p.unpack16
	if k.r8 {
		unpack = p.unpack8
	}
	if ok && unpack != nil {
		k.punpack, k.pbb = unpack, p.layout.bytes()
		b.qpack[k.t] = k.pack
	}
}

// pack returns m's rows in the packed layout of k's format and group size,
// packing groups on up to GOMAXPROCS goroutines.
func (k *groupFmt) pack(m *Matrix) *packedMatrix {
	l := packedFormats[k.t].layout
	g, lanes, _ := k.group()
	block, _, _, _ := k.geometry()
	rb := len(m.Data) / max(m.Rows, 1)
	nb := m.Cols / block
	groups := (m.Rows + g - 1) / g
	gb := nb * g * k.pbb // bytes per packed group
	out := make([]byte, groups*gb)
	adviseHuge(out)
	var wg sync.WaitGroup
	workers := min(runtime.GOMAXPROCS(0), groups)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < groups; i += workers {
				packGroup(out[i*gb:(i+1)*gb], m.Data, rb, min(g, m.Rows-i*g), i*g, nb, k.bb, k.pbb, l, lanes)
			}
		})
	}
	wg.Wait()
	return &packedMatrix{group: g, data: out}
}

// packGroup packs rows r0..r0+nr-1 (rb bytes apart in src, nb blocks of
// bb bytes each) into dst, one group of len(lanes) rows, lane p holding
// row lanes[p], pbb bytes per row's block; the rows past nr stay zero.
func packGroup(dst, src []byte, rb, nr, r0, nb, bb, pbb int, l packLayout, lanes []int) {
	g := len(lanes)
	for b := range nb {
		d := dst[b*g*pbb : (b+1)*g*pbb]
		for p, r := range lanes {
			if r >= nr {
				continue
			}
			blk := src[(r0+r)*rb+b*bb:][:bb]
			for k := 0; k < l.nq/4; k++ {
				if q := l.qs + 4*k; q+4 <= bb {
					binary.LittleEndian.PutUint32(d[4*g*k+4*p:], binary.LittleEndian.Uint32(blk[q:]))
				} else {
					copy(d[4*g*k+4*p:][:4], blk[q:]) // the last dword of a block of 4n+2 bytes
				}
			}
			off := l.nq * g
			for _, f := range l.fields {
				copy(d[off+f[1]*p:][:f[1]], blk[f[0]:])
				off += g * f[1]
			}
		}
	}
}
