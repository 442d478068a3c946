package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"sort"
	"strconv"
	"syscall"
	"unsafe"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// KeyAlignment is the metadata key that sets the data alignment.
const KeyAlignment = "general.alignment"

const (
	maxDims       = 4 // GGML_MAX_DIMS
	maxArrayDepth = 4 // arrays of arrays deeper than this are rejected
	headerSize    = 4 + 4 + 8 + 8
	// maxAlignment keeps a hostile alignment from pushing the data section
	// start past any sane file; real files use 32 (or up to a page).
	maxAlignment = 1 << 30
	// preallocCap caps capacity reserved from a count before the entries
	// are read (see parse).
	preallocCap = 1 << 12
)

// TensorInfo describes one tensor of the directory.
type TensorInfo struct {
	Name string
	Type GGMLType
	// Dims are ggml's ne: Dims[0] is the fastest-varying (contiguous)
	// dimension, so a matrix of R rows and C columns is {C, R}.
	Dims []uint64
	// Offset is the byte offset of the data within the data section.
	Offset uint64
	// Data is the tensor's bytes: a slice of the read-only mapping, valid
	// until File.Close. Writing to it faults.
	Data []byte
}

// Elements is the product of Dims.
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// File is an open GGUF file. Its methods may be called concurrently; Close
// must not race with them.
type File struct {
	// Path is the path given to Open.
	Path string
	// Version is the GGUF version (2 or 3).
	Version uint32
	// Alignment is the data alignment in bytes.
	Alignment uint64
	// DataOffset is the file offset of the data section.
	DataOffset uint64

	kvs       []KV
	kvIndex   map[string]int
	tensors   []TensorInfo
	tensorIdx map[string]int
	mapping   []byte // the whole file, mapped read-only; nil once closed
}

// Open maps path read-only and parses its header, metadata and tensor
// directory. The returned File must be closed, which unmaps the file; tensor
// Data slices must not be used after that.
//
// The mapping is MAP_SHARED over a file the caller must not truncate while it
// is open: reading a page past a shortened file faults the process.
func Open(path string) (*File, error) {
	// O_NONBLOCK: a FIFO in the file's place is refused below, not waited
	// on for ever; a regular file reads the same.
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("gguf: open: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gguf: %s: not a regular file", path)
	}
	size := st.Size()
	if size < headerSize {
		return nil, fmt.Errorf("gguf: %s: %w", path, &FormatError{Offset: size,
			Msg: fmt.Sprintf("file is %d bytes, shorter than the %d-byte GGUF header", size, headerSize)})
	}
	if uint64(size) > math.MaxInt {
		return nil, fmt.Errorf("gguf: %s: file of %d bytes is too large to map", path, size)
	}
	mapping, err := syscall.Mmap(int(fh.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("gguf: mmap %s: %w", path, err)
	}
	f, err := parse(mapping)
	if err != nil {
		_ = syscall.Munmap(mapping)
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	f.Path = path
	return f, nil
}

// Close unmaps the file. It is safe to call more than once.
func (f *File) Close() error {
	if f.mapping == nil {
		return nil
	}
	m := f.mapping
	f.mapping = nil
	for i := range f.tensors {
		f.tensors[i].Data = nil
	}
	if err := syscall.Munmap(m); err != nil {
		return fmt.Errorf("gguf: munmap %s: %w", f.Path, err)
	}
	return nil
}

// Contains reports whether b lies wholly inside the file's mapping: true for
// every tensor's Data, which is how callers and tests can tell that a weight
// was not copied.
func (f *File) Contains(b []byte) bool {
	if f.mapping == nil || len(b) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(f.mapping)))
	hi := lo + uintptr(len(f.mapping))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= lo && p+uintptr(len(b)) <= hi
}

// KVs returns the metadata in file order. The slice is a copy; the values
// are shared and must not be modified.
func (f *File) KVs() []KV { return append([]KV(nil), f.kvs...) }

// Meta returns the value of key.
func (f *File) Meta(key string) (Value, bool) {
	i, ok := f.kvIndex[key]
	if !ok {
		return Value{}, false
	}
	return f.kvs[i].Value, true
}

// Tensors returns the tensor directory in file order (a copy of the list).
func (f *File) Tensors() []TensorInfo { return append([]TensorInfo(nil), f.tensors...) }

// Tensor returns the tensor called name.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.tensorIdx[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.tensors[i], true
}

// The typed accessors return ok=false (and a nil error) when key is absent,
// and a *TypeError or range error when it holds a value of another type.

func typed[T any](f *File, key string, conv func(Value) (T, error)) (T, bool, error) {
	var zero T
	v, ok := f.Meta(key)
	if !ok {
		return zero, false, nil
	}
	x, err := conv(v)
	if err != nil {
		var te *TypeError
		if errors.As(err, &te) {
			te.Key = key
			return zero, true, te
		}
		return zero, true, fmt.Errorf("gguf: metadata %q: %w", key, err)
	}
	return x, true, nil
}

// String returns a string value.
func (f *File) String(key string) (string, bool, error) { return typed(f, key, Value.AsString) }

// Uint returns a value of any integer type that is not negative.
func (f *File) Uint(key string) (uint64, bool, error) { return typed(f, key, Value.AsUint) }

// Int returns a value of any integer type that fits in an int64.
func (f *File) Int(key string) (int64, bool, error) { return typed(f, key, Value.AsInt) }

// Float returns a float (or integer) value.
func (f *File) Float(key string) (float64, bool, error) { return typed(f, key, Value.AsFloat) }

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, bool, error) { return typed(f, key, Value.AsBool) }

// Strings returns an array of strings (shared: do not modify).
func (f *File) Strings(key string) ([]string, bool, error) { return typed(f, key, Value.AsStrings) }

// Float32s returns an array of float32 (shared: do not modify).
func (f *File) Float32s(key string) ([]float32, bool, error) { return typed(f, key, Value.AsFloat32s) }

// Int32s returns an array of integers that fit in int32 (shared when stored
// as int32: do not modify).
func (f *File) Int32s(key string) ([]int32, bool, error) { return typed(f, key, Value.AsInt32s) }

// decoder reads little-endian GGUF fields from b, checking every length
// against what is left.
type decoder struct {
	b   []byte
	off int
}

func (d *decoder) errf(format string, args ...any) error {
	return &FormatError{Offset: int64(d.off), Msg: fmt.Sprintf(format, args...)}
}

func (d *decoder) left() uint64 { return uint64(len(d.b) - d.off) }

func (d *decoder) take(n uint64, what string) ([]byte, error) {
	if n > d.left() {
		return nil, d.errf("%s: need %d bytes, %d left in file", what, n, d.left())
	}
	s := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return s, nil
}

func (d *decoder) u8(what string) (uint8, error) {
	s, err := d.take(1, what)
	if err != nil {
		return 0, err
	}
	return s[0], nil
}

func (d *decoder) u16(what string) (uint16, error) {
	s, err := d.take(2, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(s), nil
}

func (d *decoder) u32(what string) (uint32, error) {
	s, err := d.take(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(s), nil
}

func (d *decoder) u64(what string) (uint64, error) {
	s, err := d.take(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(s), nil
}

// str reads a length-prefixed string and copies it out of the mapping (the
// mapping goes away on Close; metadata must outlive it).
func (d *decoder) str(what string) (string, error) {
	n, err := d.u64(what + " length")
	if err != nil {
		return "", err
	}
	if n > d.left() {
		d.off -= 8
		return "", d.errf("%s: length %d exceeds the %d bytes left in file", what, n, d.left()-8)
	}
	s, _ := d.take(n, what)
	return string(s), nil
}

// count reads an element count and checks that count elements of at least
// minSize bytes each fit in what is left, so that allocating count elements
// is bounded by the file size.
func (d *decoder) count(what string, minSize uint64) (int, error) {
	n, err := d.u64(what)
	if err != nil {
		return 0, err
	}
	if minSize == 0 {
		minSize = 1
	}
	if hi, lo := bits.Mul64(n, minSize); hi != 0 || lo > d.left() {
		d.off -= 8
		return 0, d.errf("%s %d cannot fit in the %d bytes left in file", what, n, d.left()-8)
	}
	return int(n), nil
}

func parse(b []byte) (*File, error) {
	d := &decoder{b: b}
	magic, err := d.take(4, "magic")
	if err != nil {
		return nil, err
	}
	if string(magic) != Magic {
		d.off = 0
		return nil, d.errf("bad magic %q, want %q", magic, Magic)
	}
	version, err := d.u32("version")
	if err != nil {
		return nil, err
	}
	switch {
	case version == 2 || version == 3:
	case version == 1:
		return nil, fmt.Errorf("GGUF version 1 (32-bit counts) is not supported: %w", ErrUnsupported)
	case bits.ReverseBytes32(version) == 2 || bits.ReverseBytes32(version) == 3:
		return nil, fmt.Errorf("big-endian GGUF is not supported: %w", ErrUnsupported)
	default:
		d.off -= 4
		return nil, d.errf("unknown GGUF version %d", version)
	}
	// Smallest tensor info: empty-name length (8) + n_dims (4) + one dim (8)
	// + type (4) + offset (8). Smallest KV: key length (8) + type (4) + 1 byte.
	nTensors, err := d.count("tensor count", 8+4+8+4+8)
	if err != nil {
		return nil, err
	}
	nKV, err := d.count("metadata count", 8+4+1)
	if err != nil {
		return nil, err
	}
	f := &File{
		Version:   version,
		Alignment: DefaultAlignment,
		// Capacities are capped: a hostile count in a large file would
		// otherwise reserve memory for entries that are not there. Slices
		// grow with what actually parses.
		kvs:     make([]KV, 0, min(nKV, preallocCap)),
		kvIndex: make(map[string]int, min(nKV, preallocCap)),
	}
	for i := 0; i < nKV; i++ {
		start := d.off
		key, err := d.str(fmt.Sprintf("metadata %d key", i))
		if err != nil {
			return nil, err
		}
		if key == "" {
			d.off = start
			return nil, d.errf("metadata %d: empty key", i)
		}
		if _, dup := f.kvIndex[key]; dup {
			d.off = start
			return nil, d.errf("metadata key %q appears twice", key)
		}
		t, err := d.u32(fmt.Sprintf("metadata %q type", key))
		if err != nil {
			return nil, err
		}
		v, err := d.value(ValueType(t), key, 0)
		if err != nil {
			return nil, err
		}
		f.kvIndex[key] = len(f.kvs)
		f.kvs = append(f.kvs, KV{Key: key, Value: v})
	}
	if v, ok := f.Meta(KeyAlignment); ok {
		a, err := v.AsUint()
		if err != nil {
			return nil, d.errf("%s is %s, want an unsigned integer", KeyAlignment, v.typeName())
		}
		if a == 0 || a&(a-1) != 0 || a > maxAlignment {
			return nil, d.errf("%s = %d: want a power of two no larger than %d", KeyAlignment, a, maxAlignment)
		}
		f.Alignment = a
	}

	f.tensors = make([]TensorInfo, 0, min(nTensors, preallocCap))
	f.tensorIdx = make(map[string]int, min(nTensors, preallocCap))
	sizes := make([]uint64, 0, min(nTensors, preallocCap))
	for i := 0; i < nTensors; i++ {
		start := d.off
		ti, size, err := d.tensorInfo(i, f.Alignment)
		if err != nil {
			return nil, err
		}
		if _, dup := f.tensorIdx[ti.Name]; dup {
			d.off = start
			return nil, d.errf("tensor %q appears twice", ti.Name)
		}
		f.tensorIdx[ti.Name] = len(f.tensors)
		f.tensors = append(f.tensors, ti)
		sizes = append(sizes, size)
	}

	dataStart := alignUp(uint64(d.off), f.Alignment)
	f.DataOffset = dataStart
	if nTensors == 0 {
		f.mapping = b
		return f, nil
	}
	if dataStart > uint64(len(b)) {
		return nil, d.errf("data section would start at %d, past the end of the %d-byte file", dataStart, len(b))
	}
	dataLen := uint64(len(b)) - dataStart
	order := make([]int, nTensors)
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, c int) bool { return f.tensors[order[a]].Offset < f.tensors[order[c]].Offset })
	var prevEnd uint64
	prev := -1
	for _, i := range order {
		t := &f.tensors[i]
		if t.Offset > dataLen || sizes[i] > dataLen-t.Offset {
			return nil, &FormatError{Offset: int64(dataStart), Msg: fmt.Sprintf(
				"tensor %q: data [%d, %d+%d) lies outside the %d-byte data section",
				t.Name, t.Offset, t.Offset, sizes[i], dataLen)}
		}
		if prev >= 0 && t.Offset < prevEnd {
			return nil, &FormatError{Offset: int64(dataStart), Msg: fmt.Sprintf(
				"tensor %q (offset %d) overlaps tensor %q (ends at %d)",
				t.Name, t.Offset, f.tensors[prev].Name, prevEnd)}
		}
		lo := dataStart + t.Offset
		hi := lo + sizes[i]
		t.Data = b[lo:hi:hi]
		prev, prevEnd = i, t.Offset+sizes[i]
	}
	f.mapping = b
	return f, nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) &^ (a - 1) }

func (d *decoder) tensorInfo(i int, alignment uint64) (TensorInfo, uint64, error) {
	var ti TensorInfo
	start := d.off
	name, err := d.str(fmt.Sprintf("tensor %d name", i))
	if err != nil {
		return ti, 0, err
	}
	if name == "" {
		d.off = start
		return ti, 0, d.errf("tensor %d: empty name", i)
	}
	ti.Name = name
	nDims, err := d.u32(fmt.Sprintf("tensor %q dims count", name))
	if err != nil {
		return ti, 0, err
	}
	if nDims == 0 || nDims > maxDims {
		d.off -= 4
		return ti, 0, d.errf("tensor %q: %d dimensions, want 1 to %d", name, nDims, maxDims)
	}
	ti.Dims = make([]uint64, nDims)
	elems := uint64(1)
	for j := range ti.Dims {
		n, err := d.u64(fmt.Sprintf("tensor %q dim %d", name, j))
		if err != nil {
			return ti, 0, err
		}
		if n == 0 {
			d.off -= 8
			return ti, 0, d.errf("tensor %q: dimension %d is zero", name, j)
		}
		ti.Dims[j] = n
		hi, lo := bits.Mul64(elems, n)
		if hi != 0 || lo > math.MaxInt64 {
			d.off -= 8
			return ti, 0, d.errf("tensor %q: dimensions %v overflow", name, ti.Dims[:j+1])
		}
		elems = lo
	}
	typ, err := d.u32(fmt.Sprintf("tensor %q type", name))
	if err != nil {
		return ti, 0, err
	}
	ti.Type = GGMLType(typ)
	if !ti.Type.Known() {
		d.off -= 4
		return ti, 0, d.errf("tensor %q: unknown ggml type %d", name, typ)
	}
	blk := ti.Type.BlockSize()
	if ti.Dims[0]%blk != 0 {
		d.off -= 4
		return ti, 0, d.errf("tensor %q: type %s needs dimension 0 (%d) to be a multiple of %d", name, ti.Type, ti.Dims[0], blk)
	}
	size, ok := tensorSize(ti.Type, ti.Dims)
	if !ok {
		return ti, 0, d.errf("tensor %q: byte size of %v × %s overflows", name, ti.Dims, ti.Type)
	}
	off, err := d.u64(fmt.Sprintf("tensor %q offset", name))
	if err != nil {
		return ti, 0, err
	}
	if off%alignment != 0 {
		d.off -= 8
		return ti, 0, d.errf("tensor %q: offset %d is not a multiple of the alignment %d", name, off, alignment)
	}
	ti.Offset = off
	return ti, size, nil
}

func (d *decoder) value(t ValueType, key string, depth int) (Value, error) {
	what := "metadata " + strconv.Quote(key)
	switch t {
	case TypeUint8:
		x, err := d.u8(what)
		return Value{typ: t, x: x}, err
	case TypeInt8:
		x, err := d.u8(what)
		return Value{typ: t, x: int8(x)}, err
	case TypeUint16:
		x, err := d.u16(what)
		return Value{typ: t, x: x}, err
	case TypeInt16:
		x, err := d.u16(what)
		return Value{typ: t, x: int16(x)}, err
	case TypeUint32:
		x, err := d.u32(what)
		return Value{typ: t, x: x}, err
	case TypeInt32:
		x, err := d.u32(what)
		return Value{typ: t, x: int32(x)}, err
	case TypeFloat32:
		x, err := d.u32(what)
		return Value{typ: t, x: math.Float32frombits(x)}, err
	case TypeUint64:
		x, err := d.u64(what)
		return Value{typ: t, x: x}, err
	case TypeInt64:
		x, err := d.u64(what)
		return Value{typ: t, x: int64(x)}, err
	case TypeFloat64:
		x, err := d.u64(what)
		return Value{typ: t, x: math.Float64frombits(x)}, err
	case TypeBool:
		x, err := d.u8(what)
		if err != nil {
			return Value{}, err
		}
		if x > 1 {
			d.off--
			return Value{}, d.errf("metadata %q: bool byte %d, want 0 or 1", key, x)
		}
		return Value{typ: t, x: x == 1}, nil
	case TypeString:
		s, err := d.str(what)
		return Value{typ: t, x: s}, err
	case TypeArray:
		return d.array(key, depth)
	}
	d.off -= 4
	return Value{}, d.errf("metadata %q: unknown value type %d", key, uint32(t))
}

func (d *decoder) array(key string, depth int) (Value, error) {
	if depth >= maxArrayDepth {
		return Value{}, d.errf("metadata %q: arrays nested deeper than %d", key, maxArrayDepth)
	}
	et, err := d.u32(fmt.Sprintf("metadata %q element type", key))
	if err != nil {
		return Value{}, err
	}
	elem := ValueType(et)
	if !elem.valid() {
		d.off -= 4
		return Value{}, d.errf("metadata %q: unknown array element type %d", key, et)
	}
	n, err := d.count(fmt.Sprintf("metadata %q array length", key), elem.minEncodedSize())
	if err != nil {
		return Value{}, err
	}
	out := Value{typ: TypeArray, elem: elem}
	if sz := elem.fixedSize(); sz != 0 {
		raw, _ := d.take(uint64(n)*sz, key) // fits: checked by count
		out.x, err = decodeFixed(elem, raw, n)
		if err != nil {
			d.off -= len(raw)
			return Value{}, d.errf("metadata %q: %v", key, err)
		}
		return out, nil
	}
	switch elem {
	case TypeString:
		a := make([]string, 0, min(n, preallocCap))
		for i := 0; i < n; i++ {
			// Inline rather than d.str: vocabularies hold 10^5 strings and
			// the error text is only built on failure.
			if d.left() < 8 {
				return Value{}, d.errf("metadata %q element %d length: need 8 bytes, %d left in file", key, i, d.left())
			}
			sl := binary.LittleEndian.Uint64(d.b[d.off:])
			if sl > d.left()-8 {
				return Value{}, d.errf("metadata %q element %d: length %d exceeds the %d bytes left in file", key, i, sl, d.left()-8)
			}
			d.off += 8
			a = append(a, string(d.b[d.off:d.off+int(sl)]))
			d.off += int(sl)
		}
		out.x = a
	case TypeArray:
		a := make([]Value, 0, min(n, preallocCap))
		for i := 0; i < n; i++ {
			v, err := d.array(key, depth+1)
			if err != nil {
				return Value{}, err
			}
			a = append(a, v)
		}
		out.x = a
	}
	return out, nil
}

func decodeFixed(t ValueType, raw []byte, n int) (any, error) {
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return append([]uint8(nil), raw...), nil
	case TypeInt8:
		a := make([]int8, n)
		for i := range a {
			a[i] = int8(raw[i])
		}
		return a, nil
	case TypeBool:
		a := make([]bool, n)
		for i := range a {
			if raw[i] > 1 {
				return nil, fmt.Errorf("element %d: bool byte %d, want 0 or 1", i, raw[i])
			}
			a[i] = raw[i] == 1
		}
		return a, nil
	case TypeUint16:
		a := make([]uint16, n)
		for i := range a {
			a[i] = le.Uint16(raw[2*i:])
		}
		return a, nil
	case TypeInt16:
		a := make([]int16, n)
		for i := range a {
			a[i] = int16(le.Uint16(raw[2*i:]))
		}
		return a, nil
	case TypeUint32:
		a := make([]uint32, n)
		for i := range a {
			a[i] = le.Uint32(raw[4*i:])
		}
		return a, nil
	case TypeInt32:
		a := make([]int32, n)
		for i := range a {
			a[i] = int32(le.Uint32(raw[4*i:]))
		}
		return a, nil
	case TypeFloat32:
		a := make([]float32, n)
		for i := range a {
			a[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
		return a, nil
	case TypeUint64:
		a := make([]uint64, n)
		for i := range a {
			a[i] = le.Uint64(raw[8*i:])
		}
		return a, nil
	case TypeInt64:
		a := make([]int64, n)
		for i := range a {
			a[i] = int64(le.Uint64(raw[8*i:]))
		}
		return a, nil
	case TypeFloat64:
		a := make([]float64, n)
		for i := range a {
			a[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
		return a, nil
	}
	return nil, fmt.Errorf("not a fixed-size type: %s", t)
}

// tensorSize is the byte size of a tensor of type t and dims (dims[0] a
// multiple of t's block size); ok is false on overflow past int64.
func tensorSize(t GGMLType, dims []uint64) (uint64, bool) {
	blocks := dims[0] / t.BlockSize()
	hi, size := bits.Mul64(blocks, t.TypeSize())
	if hi != 0 {
		return 0, false
	}
	for _, d := range dims[1:] {
		if hi, size = bits.Mul64(size, d); hi != 0 {
			return 0, false
		}
	}
	return size, size <= math.MaxInt64
}
