package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
)

// A quantFormat is one of ggml's block quantizations other than Q8_0 (which
// keeps its own path): its block geometry, the exact dequantization, a
// reference quantizer, and the portable integer dot product of a weight row
// with an activation row quantized to the format's activation type (actKind).
//
// Each family registers its formats from its own file (quant_legacy.go,
// quant_k.go); nothing here runs vector code.
type quantFormat struct {
	block, blockBytes int // values and bytes per block
	act               actKind
	// dequant decodes whole blocks: len(dst) is a multiple of block and
	// src holds len(dst)/block blocks. Exact: each value is what ggml's
	// dequantize_row_* computes, in float32.
	dequant func(dst []float32, src []byte)
	// quantize encodes whole blocks of src into dst (len(src)/block
	// blocks). Not necessarily ggml's choice of scales, but a faithful one
	// of the same format: for tests, demo models and benchmarks.
	quantize func(dst []byte, src []float32)
	// blockDot is one weight row of nb blocks against one activation row of
	// act blocks covering the same columns: the portable path's product,
	// integer sums per block as in ggml's vec_dot, scaled in float32.
	blockDot func(w, act []byte, nb int) float32
	// tile is the portable qTileFn over blockDot, made once at registration
	// (a closure per MatMul would allocate).
	tile qTileFn
}

// actKind is the quantized form a format's activations take.
type actKind uint8

const (
	// actQ8x32 is per 32 values a 40-byte block: float32 d, float32 s =
	// d·Σq, then 32 int8 q (x ≈ d·q). ggml's Q8_0 and Q8_1 with float32
	// scales.
	actQ8x32 actKind = iota + 1
	// actQ8K is per 256 values a 292-byte block as ggml's block_q8_K:
	// float32 d, 256 int8 q, then 16 int16 sums of q over each 16 values.
	actQ8K
)

// Activation block geometry.
const (
	ActQ8x32Block = 32
	ActQ8x32Bytes = 40
	ActQ8KBlock   = 256
	ActQ8KBytes   = 292
)

// quantFormats holds the registered formats, by DType.
var quantFormats [numDTypes]*quantFormat

func registerQuant(t DType, f *quantFormat) {
	if quantFormats[t] != nil {
		panic(fmt.Sprintf("kernels: %v registered twice", t))
	}
	f.tile = genericQTile(f)
	quantFormats[t] = f
}

// q8x32Format describes Q8_0 for the backends that run it as a quant
// format (a qitems path) rather than with its own Q8_0 kernels: only its
// block and activation kind are read.
var q8x32Format = quantFormat{block: legacyBlock, blockBytes: Q8BlockBytes, act: actQ8x32}

// quantFormatOf is t's format, nil for F32, F16, BF16, Q8_0 and unknown types.
func quantFormatOf(t DType) *quantFormat {
	if int(t) >= len(quantFormats) {
		return nil
	}
	return quantFormats[t]
}

// QuantTypes lists the block-quantized weight types, Q8_0 first.
func QuantTypes() []DType {
	out := []DType{Q8_0}
	for t := range numDTypes {
		if quantFormats[t] != nil {
			out = append(out, t)
		}
	}
	return out
}

// ParseDType reads a weight type by its ggml name, in any case ("q4_k",
// "F16", "IQ4_XS").
func ParseDType(s string) (DType, error) {
	for t := F32; t < numDTypes; t++ {
		if equalFoldASCII(t.String(), s) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("%w: %q", ErrDType, s)
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// BlockSize is the number of values per block of t (1 for F32, F16, BF16;
// 0 for an unknown type).
func (t DType) BlockSize() int {
	switch t {
	case F32, F16, BF16:
		return 1
	case Q8_0:
		return Q8BlockSize
	}
	if f := quantFormatOf(t); f != nil {
		return f.block
	}
	return 0
}

// Quantize encodes src (a multiple of t.BlockSize() values) as t into dst,
// which must hold len(src)/BlockSize blocks. For the block types the scales
// are chosen by batchd's reference quantizers (faithful to each format, not
// byte-identical to llama.cpp's quantize tool).
func Quantize(t DType, dst []byte, src []float32) error {
	bs := t.BlockSize()
	if bs == 0 {
		return fmt.Errorf("%w: %d", ErrDType, uint8(t))
	}
	rb, err := t.RowBytes(len(src))
	if err != nil {
		return err
	}
	if len(dst) < rb {
		return fmt.Errorf("%w: %d %v values need %d bytes, have %d", ErrShape, len(src), t, rb, len(dst))
	}
	switch t {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(v))
		}
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(v))
		}
	case Q8_0:
		return QuantizeQ8_0(dst, src)
	default:
		quantFormatOf(t).quantize(dst[:rb], src)
	}
	return nil
}

// Dequantize decodes len(dst) values (a multiple of t.BlockSize()) of type t
// from src, exactly.
func Dequantize(t DType, dst []float32, src []byte) error {
	rb, err := t.RowBytes(len(dst))
	if err != nil {
		return err
	}
	if len(src) < rb {
		return fmt.Errorf("%w: %d %v values need %d bytes, have %d", ErrShape, len(dst), t, rb, len(src))
	}
	m := Matrix{Type: t, Rows: 1, Cols: len(dst), Data: src[:rb]}
	m.Row(0, dst)
	return nil
}

// actRowBytes is the size of one activation row of cols values in kind k.
func actRowBytes(k actKind, cols int) int {
	if k == actQ8K {
		return cols / ActQ8KBlock * ActQ8KBytes
	}
	return cols / ActQ8x32Block * ActQ8x32Bytes
}

// quantizeActQ8x32 encodes x (a multiple of 32 values) as actQ8x32 blocks:
// per block d = max|x|/127 in float32, q = x·(1/d) rounded to nearest even
// (0 for an all-zero block), s = d·Σq.
func quantizeActQ8x32(dst []byte, x []float32) {
	for b := range len(x) / ActQ8x32Block {
		blk := x[b*ActQ8x32Block : (b+1)*ActQ8x32Block]
		out := dst[b*ActQ8x32Bytes : (b+1)*ActQ8x32Bytes]
		var amax float32
		for _, v := range blk {
			amax = max(amax, abs32(v))
		}
		d, id := q8Scale(amax)
		var sum int32
		for i, v := range blk {
			q := int8(math.RoundToEven(float64(v * id)))
			out[8+i] = byte(q)
			sum += int32(q)
		}
		binary.LittleEndian.PutUint32(out, math.Float32bits(d))
		binary.LittleEndian.PutUint32(out[4:], math.Float32bits(d*float32(sum)))
	}
}

// quantizeActQ8K encodes x (a multiple of 256 values) as actQ8K blocks: per
// block d = max|x|/127 in float32, q = x·(1/d) rounded to nearest even, and
// the sums of q over each 16 values.
func quantizeActQ8K(dst []byte, x []float32) {
	for b := range len(x) / ActQ8KBlock {
		blk := x[b*ActQ8KBlock : (b+1)*ActQ8KBlock]
		out := dst[b*ActQ8KBytes : (b+1)*ActQ8KBytes]
		var amax float32
		for _, v := range blk {
			amax = max(amax, abs32(v))
		}
		d, id := q8Scale(amax)
		binary.LittleEndian.PutUint32(out, math.Float32bits(d))
		for g := range 16 {
			var sum int16
			for i := g * 16; i < (g+1)*16; i++ {
				q := int8(math.RoundToEven(float64(blk[i] * id)))
				out[4+i] = byte(q)
				sum += int16(q)
			}
			binary.LittleEndian.PutUint16(out[260+2*g:], uint16(sum))
		}
	}
}

// quantizeActRow encodes one activation row in kind k.
func quantizeActRow(k actKind, dst []byte, x []float32) {
	if k == actQ8K {
		quantizeActQ8K(dst, x)
		return
	}
	quantizeActQ8x32(dst, x)
}

// qTileFn computes one tile of a quantized MatMul: weight rows r..r+nr-1
// (nr ≤ 4; row i at w[i*rb:]) against activation rows t..t+nt-1 (nt ≤ 4;
// token j at act[j*actStride:]), nb blocks each: res[j*4+i] = row i ·
// token j. A backend's tiles must compute each product in an order fixed by
// nb alone, never by nr, nt or the tile's place in the call (batch
// invariance).
type qTileFn func(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int)

// genericQTile is the portable tile: the format's blockDot, product by product.
func genericQTile(f *quantFormat) qTileFn {
	return func(res *[16]float32, w []byte, rb, nr int, act []byte, actStride, nt, nb int) {
		for j := range nt {
			a := act[j*actStride:]
			for i := range nr {
				res[j*4+i] = f.blockDot(w[i*rb:], a, nb)
			}
		}
	}
}

// qRowsFn computes a block of a quantized MatMul at once: weight rows
// r..r+nr-1 (nr ≤ 4; row i at w[i*rb:]) against every token of a work item,
// nt ≥ 1 of them (token j at act[j*actStride:]): out[j*outStride+i] = row
// i · token j. Its point is to unpack the rows' blocks once for all nt
// tokens. As for qTileFn, each product's arithmetic must be fixed by nb
// alone: a token's results are bit-identical whatever nt is, and equal to
// those of the backend's qTileFn for the same type. wk is the calling
// worker, whose scratch (qbuf, qacc) may hold the unpacked rows.
type qRowsFn func(wk *worker, out []float32, outStride int, w []byte, rb, nr int, act []byte, actStride, nt, nb int)

// qItemsFn computes rows [r0,r1) × tokens [t0,t1) of a quantized MatMul
// at once, in whatever grouping of rows the backend's layout wants (r0 and
// r1 are multiples of qItemRows but for the matrix's last rows). The same
// rule holds: each product's arithmetic fixed by the number of blocks
// alone.
type qItemsFn func(a *mmArgs, wk *worker, r0, r1, t0, t1 int)

// qItemRows is the row granularity of the work items for a backend with a
// qItemsFn: its 16-row groups (quant_r16_avx512_amd64.go).
const qItemRows = 16

// quantMatMul runs rows [r0,r1) × tokens [t0,t1) of a MatMul over a
// registered quant format, with the backend's qItemsFn or qRowsFn for it
// when it has one, else with tile.
func quantMatMul(a *mmArgs, wk *worker, tile qTileFn, rowsFn qRowsFn, items qItemsFn, r0, r1, t0, t1 int) {
	if items != nil {
		items(a, wk, r0, r1, t0, t1)
		return
	}
	m := a.w
	f := quantFormats[m.Type]
	nb := m.Cols / f.block
	stride := a.qactStride
	if rowsFn != nil {
		act := a.qact[t0*stride:]
		out := a.out[t0*m.Rows:]
		for r := r0; r < r1; r += 4 {
			rowsFn(wk, out[r:], m.Rows, m.Data[r*a.rb:], a.rb, min(4, r1-r), act, stride, t1-t0, nb)
		}
		return
	}
	res := &wk.res
	for t := t0; t < t1; t += 4 {
		nt := min(4, t1-t)
		act := a.qact[t*stride:]
		for r := r0; r < r1; r += 4 {
			nr := min(4, r1-r)
			tile(res, m.Data[r*a.rb:], a.rb, nr, act, stride, nt, nb)
			for j := range nt {
				o := a.out[(t+j)*m.Rows+r:][:nr]
				for i := range o {
					o[i] = res[j*4+i]
				}
			}
		}
	}
}

// actBlockSums sets sums[b] = -o·Σy over activation block b of row act
// (actQ8x32), for len(sums) blocks.
func actBlockSums(sums []int32, act []byte, o int32) {
	for b := range sums {
		sums[b] = -o * int8Sum(act[b*ActQ8x32Bytes+8:][:32])
	}
}

// int8Sum is the sum of y's bytes as int8, len(y) a multiple of 8: eight
// bytes at a time, as y+128 (unsigned) in four 16-bit lanes, which hold up
// to 256 bytes' worth.
func int8Sum(y []byte) int32 {
	const lo = 0x00ff00ff00ff00ff
	var acc uint64
	for i := 0; i+8 <= len(y); i += 8 {
		v := binary.LittleEndian.Uint64(y[i:]) ^ 0x8080808080808080
		acc += v&lo + v>>8&lo
	}
	return int32((acc*0x0001000100010001)>>48) - int32(len(y))*128
}
