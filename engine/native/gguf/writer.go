package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// TensorData is one tensor to write.
type TensorData struct {
	Name string
	Type GGMLType
	// Dims are ggml's ne, fastest-varying first (a matrix of R rows and C
	// columns is {C, R}).
	Dims []uint64
	// Data is the encoded tensor: exactly its byte size for Type and Dims.
	Data []byte
}

// Write writes a GGUF version 3 file: meta in the order given, then the
// tensor directory and the data, each tensor at an offset that is a multiple
// of the alignment (general.alignment from meta, 32 when absent) and the data
// section padded to it.
func Write(w io.Writer, meta []KV, tensors []TensorData) error {
	alignment := uint64(DefaultAlignment)
	seen := make(map[string]bool, len(meta))
	for _, kv := range meta {
		if kv.Key == "" {
			return fmt.Errorf("gguf: write: empty metadata key")
		}
		if seen[kv.Key] {
			return fmt.Errorf("gguf: write: metadata key %q given twice", kv.Key)
		}
		seen[kv.Key] = true
		if kv.Key == KeyAlignment {
			a, err := kv.Value.AsUint()
			if err != nil || kv.Value.Type() != TypeUint32 {
				return fmt.Errorf("gguf: write: %s must be a uint32, got %s", KeyAlignment, kv.Value.typeName())
			}
			if a == 0 || a&(a-1) != 0 || a > maxAlignment {
				return fmt.Errorf("gguf: write: %s = %d: want a power of two no larger than %d", KeyAlignment, a, maxAlignment)
			}
			alignment = a
		}
	}
	offsets := make([]uint64, len(tensors))
	names := make(map[string]bool, len(tensors))
	var next uint64
	for i, t := range tensors {
		if t.Name == "" {
			return fmt.Errorf("gguf: write: tensor %d has no name", i)
		}
		if names[t.Name] {
			return fmt.Errorf("gguf: write: tensor %q given twice", t.Name)
		}
		names[t.Name] = true
		if !t.Type.Known() {
			return fmt.Errorf("gguf: write: tensor %q: unknown ggml type %d", t.Name, uint32(t.Type))
		}
		if len(t.Dims) == 0 || len(t.Dims) > maxDims {
			return fmt.Errorf("gguf: write: tensor %q: %d dimensions, want 1 to %d", t.Name, len(t.Dims), maxDims)
		}
		for j, d := range t.Dims {
			if d == 0 {
				return fmt.Errorf("gguf: write: tensor %q: dimension %d is zero", t.Name, j)
			}
		}
		if t.Dims[0]%t.Type.BlockSize() != 0 {
			return fmt.Errorf("gguf: write: tensor %q: type %s needs dimension 0 (%d) to be a multiple of %d",
				t.Name, t.Type, t.Dims[0], t.Type.BlockSize())
		}
		size, ok := tensorSize(t.Type, t.Dims)
		if !ok {
			return fmt.Errorf("gguf: write: tensor %q: size overflows", t.Name)
		}
		if uint64(len(t.Data)) != size {
			return fmt.Errorf("gguf: write: tensor %q: %d bytes of data, want %d for %s %v", t.Name, len(t.Data), size, t.Type, t.Dims)
		}
		offsets[i] = next
		next = alignUp(next+size, alignment)
	}

	bw := bufio.NewWriterSize(w, 1<<20)
	e := &encoder{w: bw}
	e.raw([]byte(Magic))
	e.u32(3)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(meta)))
	for _, kv := range meta {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.Type()))
		if err := e.value(kv.Value); err != nil {
			return fmt.Errorf("gguf: write: metadata %q: %w", kv.Key, err)
		}
	}
	for i, t := range tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(offsets[i])
	}
	e.pad(alignment)
	for _, t := range tensors {
		e.raw(t.Data)
		e.pad(alignment)
	}
	if e.err != nil {
		return fmt.Errorf("gguf: write: %w", e.err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("gguf: write: %w", err)
	}
	return nil
}

// encoder writes little-endian fields and remembers the first error and the
// byte count (for padding).
type encoder struct {
	w   *bufio.Writer
	n   uint64
	err error
	buf [8]byte
}

func (e *encoder) raw(b []byte) {
	if e.err != nil {
		return
	}
	n, err := e.w.Write(b)
	e.n += uint64(n)
	e.err = err
}

func (e *encoder) u8(v uint8)   { e.buf[0] = v; e.raw(e.buf[:1]) }
func (e *encoder) u16(v uint16) { binary.LittleEndian.PutUint16(e.buf[:], v); e.raw(e.buf[:2]) }
func (e *encoder) u32(v uint32) { binary.LittleEndian.PutUint32(e.buf[:], v); e.raw(e.buf[:4]) }
func (e *encoder) u64(v uint64) { binary.LittleEndian.PutUint64(e.buf[:], v); e.raw(e.buf[:8]) }

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	if e.err == nil {
		n, err := e.w.WriteString(s)
		e.n += uint64(n)
		e.err = err
	}
}

func (e *encoder) pad(alignment uint64) {
	var zero [64]byte
	for k := alignUp(e.n, alignment) - e.n; k > 0; {
		c := min(k, uint64(len(zero)))
		e.raw(zero[:c])
		k -= c
	}
}

func (e *encoder) bool(b bool) {
	if b {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

func (e *encoder) value(v Value) error {
	if v.typ == TypeArray {
		return e.array(v)
	}
	switch x := v.x.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		e.bool(x)
	case string:
		e.str(x)
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	default:
		return fmt.Errorf("invalid value (type %s holding %T); build values with ValueOf", v.typ, v.x)
	}
	return nil
}

func (e *encoder) array(v Value) error {
	e.u32(uint32(v.elem))
	e.u64(uint64(v.Len()))
	switch a := v.x.(type) {
	case []uint8:
		e.raw(a)
	case []int8:
		for _, x := range a {
			e.u8(uint8(x))
		}
	case []uint16:
		for _, x := range a {
			e.u16(x)
		}
	case []int16:
		for _, x := range a {
			e.u16(uint16(x))
		}
	case []uint32:
		for _, x := range a {
			e.u32(x)
		}
	case []int32:
		for _, x := range a {
			e.u32(uint32(x))
		}
	case []float32:
		for _, x := range a {
			e.u32(math.Float32bits(x))
		}
	case []bool:
		for _, x := range a {
			e.bool(x)
		}
	case []string:
		for _, x := range a {
			e.str(x)
		}
	case []uint64:
		for _, x := range a {
			e.u64(x)
		}
	case []int64:
		for _, x := range a {
			e.u64(uint64(x))
		}
	case []float64:
		for _, x := range a {
			e.u64(math.Float64bits(x))
		}
	case []Value:
		for i, x := range a {
			if x.typ != TypeArray {
				return fmt.Errorf("element %d of an array of arrays is %s", i, x.typ)
			}
			if err := e.array(x); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("invalid array value holding %T; build values with ValueOf", v.x)
	}
	return nil
}
