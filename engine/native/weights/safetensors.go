package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"unsafe"

	"github.com/batchd/batchd/kernels"
)

// The safetensors format: an 8-byte little-endian header length N, N bytes
// of JSON mapping each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end]} (offsets relative to the byte after the header) plus an
// optional "__metadata__" string map, then the data.

// maxSafetensorsHeader bounds the JSON header, as the reference
// implementation does, so a hostile length cannot force a huge parse.
const maxSafetensorsHeader = 100 << 20

// maxSafetensorsRank bounds a tensor's number of dimensions.
const maxSafetensorsRank = 8

// safeDTypeSizes are the safetensors dtypes with a whole number of bytes per
// element. Only F32, F16 and BF16 load as weights.
var safeDTypeSizes = map[string]uint64{
	"F64": 8, "F32": 4, "F16": 2, "BF16": 2,
	"I64": 8, "I32": 4, "I16": 2, "I8": 1,
	"U64": 8, "U32": 4, "U16": 2, "U8": 1,
	"BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
}

var safeDTypes = map[string]kernels.DType{"F32": kernels.F32, "F16": kernels.F16, "BF16": kernels.BF16}

// SafeTensor is one tensor for WriteSafetensors.
type SafeTensor struct {
	DType string // "F32", "F16", "BF16" (or another safetensors dtype)
	Shape []int  // outermost first, as PyTorch
	Data  []byte // little-endian, exactly the size Shape and DType call for
}

// WriteSafetensors writes tensors to path as a safetensors file (names
// sorted, data contiguous, header padded with spaces to 8 bytes so the data
// is aligned). For tests and tools.
func WriteSafetensors(path string, tensors map[string]SafeTensor) error {
	return WriteSafetensorsMeta(path, tensors, map[string]string{"format": "pt"})
}

// WriteSafetensorsMeta is WriteSafetensors with the header's __metadata__
// given (nil: none).
func WriteSafetensorsMeta(path string, tensors map[string]SafeTensor, meta map[string]string) error {
	names := make([]string, 0, len(tensors))
	for name := range tensors {
		names = append(names, name)
	}
	sort.Strings(names)
	type entry struct {
		DType   string   `json:"dtype"`
		Shape   []int    `json:"shape"`
		Offsets []uint64 `json:"data_offsets"`
	}
	header := map[string]any{}
	if meta != nil {
		header["__metadata__"] = meta
	}
	var off uint64
	for _, name := range names {
		t := tensors[name]
		if name == "" || name == "__metadata__" {
			return fmt.Errorf("weights: write safetensors: bad tensor name %q", name)
		}
		size, ok := safeDTypeSizes[t.DType]
		if !ok {
			return fmt.Errorf("weights: write safetensors: tensor %q: unknown dtype %q", name, t.DType)
		}
		n := uint64(1)
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("weights: write safetensors: tensor %q: negative dimension in %v", name, t.Shape)
			}
			n *= uint64(d)
		}
		if uint64(len(t.Data)) != n*size {
			return fmt.Errorf("weights: write safetensors: tensor %q: %d bytes, want %d for %s %v", name, len(t.Data), n*size, t.DType, t.Shape)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		header[name] = entry{DType: t.DType, Shape: shape, Offsets: []uint64{off, off + uint64(len(t.Data))}}
		off += uint64(len(t.Data))
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("weights: write safetensors: %w", err)
	}
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	var buf bytes.Buffer
	buf.Grow(8 + len(hj) + int(off))
	binary.Write(&buf, binary.LittleEndian, uint64(len(hj)))
	buf.Write(hj)
	for _, name := range names {
		buf.Write(tensors[name].Data)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("weights: write safetensors: %w", err)
	}
	return nil
}

// safeEntry is one parsed tensor.
type safeEntry struct {
	DType string
	Shape []uint64
	Data  []byte // slice of the mapping
}

// safetensorsFile is an open, memory-mapped safetensors file.
type safetensorsFile struct {
	path    string
	mapping []byte
	tensors map[string]safeEntry
	meta    map[string]string // the header's __metadata__ (nil if none)
}

func openSafetensors(path string) (*safetensorsFile, error) {
	b, err := mmapFile(path)
	if err != nil {
		return nil, err
	}
	tensors, meta, err := parseSafetensorsMeta(b)
	if err != nil {
		munmap(b)
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	return &safetensorsFile{path: path, mapping: b, tensors: tensors, meta: meta}, nil
}

func (s *safetensorsFile) Close() error {
	if s.mapping == nil {
		return nil
	}
	b := s.mapping
	s.mapping = nil
	if err := munmap(b); err != nil {
		return fmt.Errorf("safetensors %s: munmap: %w", s.path, err)
	}
	return nil
}

func (s *safetensorsFile) Contains(b []byte) bool { return contains(s.mapping, b) }

type safeHeaderEntry struct {
	DType   string   `json:"dtype"`
	Shape   []uint64 `json:"shape"`
	Offsets []uint64 `json:"data_offsets"`
}

// parseSafetensorsMeta parses a whole safetensors file held in b: its
// tensors, whose Data are slices of b, and the header's __metadata__ map
// (nil when there is none).
func parseSafetensorsMeta(b []byte) (map[string]safeEntry, map[string]string, error) {
	bad := func(format string, args ...any) error {
		return invalid("%s", fmt.Sprintf(format, args...))
	}
	if len(b) < 8 {
		return nil, nil, bad("file is %d bytes, shorter than the 8-byte header length", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxSafetensorsHeader {
		return nil, nil, bad("header length %d exceeds the %d-byte limit", n, maxSafetensorsHeader)
	}
	if n > uint64(len(b)-8) {
		return nil, nil, bad("header length %d exceeds the %d bytes after it", n, len(b)-8)
	}
	header := bytes.TrimLeft(b[8:8+n], " \t\r\n")
	if len(header) == 0 || header[0] != '{' {
		return nil, nil, bad("header is not a JSON object")
	}
	var meta map[string]string
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(header, &raw); err != nil {
		return nil, nil, bad("header JSON: %v", err)
	}
	data := b[8+n:]
	dataLen := uint64(len(data))
	out := make(map[string]safeEntry, len(raw))
	type span struct {
		name       string
		begin, end uint64
	}
	spans := make([]span, 0, len(raw))
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &meta); err != nil {
				return nil, nil, bad("__metadata__: want an object of strings: %v", err)
			}
			continue
		}
		if name == "" {
			return nil, nil, bad("tensor with an empty name")
		}
		var e safeHeaderEntry
		dec := json.NewDecoder(bytes.NewReader(msg))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, nil, bad("tensor %q: %v", name, err)
		}
		size, ok := safeDTypeSizes[e.DType]
		if !ok {
			return nil, nil, unsupported("tensor %q: unknown dtype %q", name, e.DType)
		}
		if e.Shape == nil {
			return nil, nil, bad("tensor %q: no shape", name)
		}
		if len(e.Shape) > maxSafetensorsRank {
			return nil, nil, bad("tensor %q: %d dimensions, at most %d", name, len(e.Shape), maxSafetensorsRank)
		}
		if len(e.Offsets) != 2 {
			return nil, nil, bad("tensor %q: data_offsets %v, want [begin, end]", name, e.Offsets)
		}
		want := size
		for _, d := range e.Shape {
			hi, lo := bits.Mul64(want, d)
			if hi != 0 || lo > math.MaxInt64 {
				return nil, nil, bad("tensor %q: shape %v overflows", name, e.Shape)
			}
			want = lo
		}
		begin, end := e.Offsets[0], e.Offsets[1]
		if begin > end || end > dataLen {
			return nil, nil, bad("tensor %q: data_offsets [%d, %d] outside the %d-byte data section", name, begin, end, dataLen)
		}
		if end-begin != want {
			return nil, nil, bad("tensor %q: data_offsets [%d, %d] hold %d bytes, want %d for %s %v", name, begin, end, end-begin, want, e.DType, e.Shape)
		}
		out[name] = safeEntry{DType: e.DType, Shape: e.Shape, Data: data[begin:end:end]}
		if end > begin {
			spans = append(spans, span{name, begin, end})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].begin < spans[j].begin })
	for i := 1; i < len(spans); i++ {
		if spans[i].begin < spans[i-1].end {
			return nil, nil, bad("tensor %q (bytes %d-%d) overlaps tensor %q (bytes %d-%d)",
				spans[i].name, spans[i].begin, spans[i].end, spans[i-1].name, spans[i-1].begin, spans[i-1].end)
		}
	}
	return out, meta, nil
}

// mmapFile maps a whole regular file read-only.
func mmapFile(path string) ([]byte, error) {
	fh, st, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	size := st.Size()
	if size == 0 {
		return nil, invalid("%s: empty file", path)
	}
	if uint64(size) > math.MaxInt {
		return nil, fmt.Errorf("%s: %d bytes is too large to map", path, size)
	}
	b, err := syscall.Mmap(int(fh.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return b, nil
}

func munmap(b []byte) error { return syscall.Munmap(b) }

// openRegular opens path for reading and refuses anything but a regular
// file (symlinks are followed: a Hugging Face cache links its snapshots'
// files to blobs). O_NONBLOCK keeps a FIFO put in a weight's place from
// blocking the open for ever, waiting for a writer; for a regular file the
// flag changes nothing.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		fh.Close()
		return nil, nil, invalid("%s: not a regular file (%s)", path, st.Mode().Type())
	}
	return fh, st, nil
}

// contains reports whether b lies wholly inside mapping.
func contains(mapping, b []byte) bool {
	if len(mapping) == 0 || len(b) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(mapping)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(mapping))
}

// isSafetensorsName reports whether a shard name from an index is a plain
// file name in the model directory (no path tricks).
func isSafetensorsName(name string) bool {
	return name != "" && filepath.Base(name) == name && name != "." && name != ".." &&
		filepath.Ext(name) == ".safetensors"
}
