package kernels

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// DType is the element type of a weight matrix.
type DType uint8

// The weight types. Q8_0 is ggml's: blocks of 32 int8 values, each block led
// by its float16 scale (34 bytes per block), value = scale·q. The types after
// it are ggml's other block quantizations, laid out byte for byte as
// llama.cpp writes them (quant.go): the legacy 32-value blocks, the K-quants
// and IQ4_XS of 256-value super-blocks, IQ4_NL and gpt-oss's MXFP4.
const (
	F32 DType = iota + 1
	F16
	BF16
	Q8_0
	Q4_0
	Q4_1
	Q5_0
	Q5_1
	Q2_K
	Q3_K
	Q4_K
	Q5_K
	Q6_K
	IQ4_NL
	IQ4_XS
	MXFP4
	numDTypes
)

// quantNames are ggml's names of the types after Q8_0, in order.
var quantNames = [...]string{"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4"}

// Q8_0 block geometry.
const (
	Q8BlockSize  = 32 // values per block
	Q8BlockBytes = 34 // 2-byte float16 scale + 32 int8
)

// Errors callers can branch on.
var (
	// ErrDType reports a DType this package does not know.
	ErrDType = errors.New("kernels: unknown dtype")
	// ErrShape reports dimensions or buffer sizes that do not fit together.
	ErrShape = errors.New("kernels: bad shape")
)

func (t DType) String() string {
	switch t {
	case F32:
		return "F32"
	case F16:
		return "F16"
	case BF16:
		return "BF16"
	case Q8_0:
		return "Q8_0"
	}
	if t > Q8_0 && t < numDTypes {
		return quantNames[t-Q8_0-1]
	}
	return fmt.Sprintf("DType(%d)", uint8(t))
}

// RowBytes returns the size in bytes of one row of cols values. It fails for
// an unknown type, a negative or overflowing size and, for Q8_0, when cols is
// not a multiple of 32.
func (t DType) RowBytes(cols int) (int, error) {
	if cols < 0 {
		return 0, fmt.Errorf("%w: %d columns", ErrShape, cols)
	}
	var n, per int
	switch t {
	case F32:
		n, per = cols, 4
	case F16, BF16:
		n, per = cols, 2
	case Q8_0:
		if cols%Q8BlockSize != 0 {
			return 0, fmt.Errorf("%w: Q8_0 row of %d columns is not a multiple of %d", ErrShape, cols, Q8BlockSize)
		}
		n, per = cols/Q8BlockSize, Q8BlockBytes
	default:
		f := quantFormatOf(t)
		if f == nil {
			return 0, fmt.Errorf("%w: %d", ErrDType, uint8(t))
		}
		if cols%f.block != 0 {
			return 0, fmt.Errorf("%w: %v row of %d columns is not a multiple of %d", ErrShape, t, cols, f.block)
		}
		n, per = cols/f.block, f.blockBytes
	}
	hi, lo := bits.Mul64(uint64(n), uint64(per))
	if hi != 0 || lo > math.MaxInt {
		return 0, fmt.Errorf("%w: row of %d %v columns overflows", ErrShape, cols, t)
	}
	return int(lo), nil
}

// Matrix is a row-major weight matrix: row r is
// Data[r*RowBytes(Cols) : (r+1)*RowBytes(Cols)], little-endian. Data may be a
// read-only memory map; kernels never write it. Build it with NewMatrix, which
// checks the sizes; kernels panic on a Matrix whose Data is too short.
type Matrix struct {
	Type       DType
	Rows, Cols int
	Data       []byte

	// pk, when set (CPU.Pack), is a copy of Data laid out for one family
	// of kernels, which read it instead of Data.
	pk *packedMatrix
}

// packedMatrix is a matrix's rows rearranged for a family of kernels:
// groups of rows (16 for the avx512 and amx kernels, 8 for avx2) with their blocks
// side by side (quant_pack_amd64.go).
type packedMatrix struct {
	group int
	data  []byte
}

// NewMatrix wraps data as a rows×cols matrix of type t. len(data) must be
// exactly rows·RowBytes(cols).
func NewMatrix(t DType, rows, cols int, data []byte) (*Matrix, error) {
	if rows < 0 {
		return nil, fmt.Errorf("%w: %d rows", ErrShape, rows)
	}
	rb, err := t.RowBytes(cols)
	if err != nil {
		return nil, err
	}
	hi, lo := bits.Mul64(uint64(rows), uint64(rb))
	if hi != 0 || lo > math.MaxInt {
		return nil, fmt.Errorf("%w: %dx%d %v matrix overflows", ErrShape, rows, cols, t)
	}
	if uint64(len(data)) != lo {
		return nil, fmt.Errorf("%w: %dx%d %v matrix needs %d bytes, have %d", ErrShape, rows, cols, t, lo, len(data))
	}
	return &Matrix{Type: t, Rows: rows, Cols: cols, Data: data}, nil
}

// rowBytes is RowBytes for a matrix already known to be valid.
func (m *Matrix) rowBytes() int {
	rb, err := m.Type.RowBytes(m.Cols)
	if err != nil {
		panic(err)
	}
	return rb
}

// check panics unless m's fields describe a matrix its Data can hold.
func (m *Matrix) check() int {
	rb := m.rowBytes()
	if m.Rows < 0 || (rb != 0 && m.Rows > len(m.Data)/rb) {
		panic(fmt.Sprintf("kernels: %dx%d %v matrix with only %d bytes", m.Rows, m.Cols, m.Type, len(m.Data)))
	}
	return rb
}

// Row dequantizes row r into dst[:Cols].
func (m *Matrix) Row(r int, dst []float32) {
	rb := m.rowBytes()
	if r < 0 || r >= m.Rows {
		panic(fmt.Sprintf("kernels: row %d of a %d-row matrix", r, m.Rows))
	}
	src := m.Data[r*rb : (r+1)*rb]
	dst = dst[:m.Cols]
	switch m.Type {
	case F32:
		src = src[:4*len(dst)]
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = f16Table[binary.LittleEndian.Uint16(src[2*i:])]
		}
	case BF16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case Q8_0:
		dequantizeQ8(dst, src)
	default:
		quantFormatOf(m.Type).dequant(dst, src)
	}
}

// QuantizeQ8_0 encodes src as ggml Q8_0 blocks into dst: per block of 32
// values, scale d = max|x|/127 stored as float16, then q = round(x/d) (half
// away from zero, computed as x·(1/d) like ggml's reference quantizer).
// len(src) must be a multiple of 32 and dst must hold len(src)/32·34 bytes.
func QuantizeQ8_0(dst []byte, src []float32) error {
	if len(src)%Q8BlockSize != 0 {
		return fmt.Errorf("%w: Q8_0 needs a multiple of %d values, have %d", ErrShape, Q8BlockSize, len(src))
	}
	nb := len(src) / Q8BlockSize
	if len(dst) < nb*Q8BlockBytes {
		return fmt.Errorf("%w: %d Q8_0 blocks need %d bytes, have %d", ErrShape, nb, nb*Q8BlockBytes, len(dst))
	}
	for b := range nb {
		x := src[b*Q8BlockSize : (b+1)*Q8BlockSize]
		out := dst[b*Q8BlockBytes : (b+1)*Q8BlockBytes]
		var amax float32
		for _, v := range x {
			amax = max(amax, abs32(v))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		binary.LittleEndian.PutUint16(out, F32ToF16(d))
		for i, v := range x {
			out[2+i] = byte(int8(math.Round(float64(v * id))))
		}
	}
	return nil
}

// DequantizeQ8_0 decodes len(dst) values (a multiple of 32) from Q8_0 blocks.
func DequantizeQ8_0(dst []float32, src []byte) error {
	if len(dst)%Q8BlockSize != 0 {
		return fmt.Errorf("%w: Q8_0 needs a multiple of %d values, have %d", ErrShape, Q8BlockSize, len(dst))
	}
	if nb := len(dst) / Q8BlockSize; len(src) < nb*Q8BlockBytes {
		return fmt.Errorf("%w: %d Q8_0 blocks need %d bytes, have %d", ErrShape, nb, nb*Q8BlockBytes, len(src))
	}
	dequantizeQ8(dst, src)
	return nil
}

func dequantizeQ8(dst []float32, src []byte) {
	for b := 0; b < len(dst)/Q8BlockSize; b++ {
		blk := src[b*Q8BlockBytes : (b+1)*Q8BlockBytes]
		d := f16Table[binary.LittleEndian.Uint16(blk)]
		out := dst[b*Q8BlockSize : (b+1)*Q8BlockSize]
		for i := range out {
			out[i] = float32(int8(blk[2+i])) * d
		}
	}
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// F32ToF16 converts to IEEE half precision, rounding to nearest even;
// overflow gives ±Inf, NaN stays NaN (quieted).
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 31 {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign // below half the smallest subnormal: rounds to zero
		}
		m := mant | 0x800000
		shift := uint(14 - e)
		return sign | uint16(roundShift(m, shift))
	}
	// A carry out of the mantissa correctly bumps the exponent (to Inf at the top).
	return sign | uint16(uint32(e)<<10+roundShift(mant, 13))
}

// roundShift returns m>>shift rounded to nearest, ties to even.
func roundShift(m uint32, shift uint) uint32 {
	q := m >> shift
	rem := m & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || (rem == half && q&1 == 1) {
		q++
	}
	return q
}

// F16ToF32 converts an IEEE half to float32 exactly (NaNs are quieted, as
// the F16C instructions do).
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0:
		// Zero or subnormal: mant·2^-24, exact in float32.
		v := float32(mant) * (1.0 / (1 << 24))
		return math.Float32frombits(math.Float32bits(v) | sign)
	case exp == 31:
		if mant != 0 {
			return math.Float32frombits(sign | 0x7fc00000 | mant<<13)
		}
		return math.Float32frombits(sign | 0x7f800000)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// F32ToBF16 converts to bfloat16, rounding to nearest even; NaN stays NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// BF16ToF32 converts bfloat16 to float32 exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f16Table maps every half to its float32 value (256 KiB); the kernels use it
// for Q8_0 block scales and the portable F16 path.
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = F16ToF32(uint16(i))
	}
	return &t
}()
