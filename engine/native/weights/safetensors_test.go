package weights

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// rawSafetensors builds a file from a literal header and data.
func rawSafetensors(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func TestSafetensorsRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.safetensors")
	in := map[string]SafeTensor{
		"a":     {DType: "F32", Shape: []int{2, 3}, Data: encF32(values(6, 1))},
		"b.c":   {DType: "BF16", Shape: []int{5}, Data: encBF16(values(5, 2))},
		"empty": {DType: "F16", Shape: []int{0, 4}, Data: nil},
		"s":     {DType: "I64", Shape: []int{}, Data: make([]byte, 8)},
	}
	if err := WriteSafetensors(p, in); err != nil {
		t.Fatal(err)
	}
	sf, err := openSafetensors(p)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	if n := binary.LittleEndian.Uint64(sf.mapping); n%8 != 0 {
		t.Errorf("header length %d is not padded to 8", n)
	}
	if len(sf.tensors) != len(in) {
		t.Fatalf("%d tensors", len(sf.tensors))
	}
	for name, want := range in {
		got := sf.tensors[name]
		shape := make([]int, len(got.Shape))
		for i, d := range got.Shape {
			shape[i] = int(d)
		}
		if got.DType != want.DType || !slices.Equal(shape, want.Shape) || !bytes.Equal(got.Data, want.Data) {
			t.Errorf("%s: %s %v %d bytes", name, got.DType, got.Shape, len(got.Data))
		}
		if len(got.Data) > 0 && !sf.Contains(got.Data) {
			t.Errorf("%s not in the mapping", name)
		}
	}
	if err := sf.Close(); err != nil || sf.Close() != nil {
		t.Fatal("Close", err)
	}

	for _, bad := range []struct {
		ts   map[string]SafeTensor
		want string
	}{
		{map[string]SafeTensor{"x": {DType: "F32", Shape: []int{2}, Data: make([]byte, 4)}}, "4 bytes, want 8"},
		{map[string]SafeTensor{"x": {DType: "Q4", Shape: []int{2}}}, `unknown dtype "Q4"`},
		{map[string]SafeTensor{"x": {DType: "F32", Shape: []int{-1}}}, "negative dimension"},
		{map[string]SafeTensor{"__metadata__": {DType: "F32", Shape: []int{0}}}, "bad tensor name"},
	} {
		wantErr(t, WriteSafetensors(p, bad.ts), bad.want)
	}
}

func TestSafetensorsRejects(t *testing.T) {
	f32x2 := make([]byte, 8)
	cases := []struct {
		name string
		data []byte
		is   error
		want string
	}{
		{"short", []byte{1, 2, 3}, ErrInvalid, "shorter than the 8-byte header length"},
		{"header limit", binary.LittleEndian.AppendUint64(nil, 1<<40), ErrInvalid, "header length 1099511627776 exceeds the 104857600-byte limit"},
		{"header past end", append(binary.LittleEndian.AppendUint64(nil, 100), "{}"...), ErrInvalid, "header length 100 exceeds the 2 bytes after it"},
		{"not json", rawSafetensors("{nope", nil), ErrInvalid, "header JSON"},
		{"not object", rawSafetensors("[1,2]", nil), ErrInvalid, "not a JSON object"},
		{"empty name", rawSafetensors(`{"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, f32x2), ErrInvalid, "empty name"},
		{"metadata", rawSafetensors(`{"__metadata__":{"a":1}}`, nil), ErrInvalid, "__metadata__: want an object of strings"},
		{"unknown field", rawSafetensors(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}`, f32x2), ErrInvalid, `tensor "w": json: unknown field "x"`},
		{"dtype", rawSafetensors(`{"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}}`, f32x2), ErrUnsupported, `tensor "w": unknown dtype "Q4"`},
		{"no shape", rawSafetensors(`{"w":{"dtype":"F32","data_offsets":[0,8]}}`, f32x2), ErrInvalid, `tensor "w": no shape`},
		{"negative dim", rawSafetensors(`{"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, f32x2), ErrInvalid, `tensor "w": json: cannot unmarshal`},
		{"rank", rawSafetensors(`{"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}}`, f32x2), ErrInvalid, "9 dimensions, at most 8"},
		{"overflow", rawSafetensors(`{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, f32x2), ErrInvalid, "shape [4294967296 4294967296] overflows"},
		{"offsets count", rawSafetensors(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}}`, f32x2), ErrInvalid, "data_offsets [0 8 9], want [begin, end]"},
		{"offsets reversed", rawSafetensors(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}`, f32x2), ErrInvalid, "data_offsets [8, 0] outside"},
		{"offsets past end", rawSafetensors(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, f32x2), ErrInvalid, "data_offsets [8, 16] outside the 8-byte data section"},
		{"offsets huge", rawSafetensors(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,18446744073709551615]}}`, f32x2), ErrInvalid, "outside the 8-byte data section"},
		{"size", rawSafetensors(`{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, f32x2), ErrInvalid, "hold 8 bytes, want 12 for F32 [3]"},
		{"overlap", rawSafetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, f32x2), ErrInvalid, `tensor "b" (bytes 4-8) overlaps tensor "a" (bytes 0-8)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "m.safetensors")
			if err := os.WriteFile(p, c.data, 0o644); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			sf, err := openSafetensors(p)
			runtime.ReadMemStats(&after)
			if err == nil {
				sf.Close()
			}
			wantErr(t, err, c.want, "m.safetensors")
			if !errors.Is(err, c.is) {
				t.Errorf("%v is not %v", err, c.is)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
				t.Errorf("allocated %d bytes", grew)
			}
		})
	}
	_, err := openSafetensors(filepath.Join(t.TempDir(), "none.safetensors"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "e.safetensors")
	os.WriteFile(empty, nil, 0o644)
	_, err = openSafetensors(empty)
	wantErr(t, err, "empty file")
}

// Unaligned data (a header length that is not a multiple of 8, which the
// format allows) is copied so that kernels can view F32 as []float32.
func TestSafetensorsUnaligned(t *testing.T) {
	c := tiny{arch: "llama", vocab: 8, dim: 8, layers: 1, heads: 2, kvHeads: 2, headDim: 4, ffn: 8}
	dir := writeHF(t, c, nil, hfTensors(c, "F32", "F32"))
	p := filepath.Join(dir, "model.safetensors")
	b, _ := os.ReadFile(p)
	n := binary.LittleEndian.Uint64(b)
	header := strings.TrimRight(string(b[8:8+n]), " ") + " " // one trailing space: data now at an odd offset
	if (8+len(header))%4 == 0 {
		header += " "
	}
	os.WriteFile(p, rawSafetensors(header, b[8+n:]), 0o644)
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for name, x := range m.Matrices {
		if m.IsMapped(name) {
			t.Errorf("%s: unaligned data used in place", name)
		}
		if !slices.Equal(x.Data, encF32(values(x.Rows*x.Cols, seedOf(name)))) {
			t.Errorf("%s: data differs", name)
		}
	}
}

func TestCanonicalNames(t *testing.T) {
	c := tiny{arch: "qwen2", vocab: 8, dim: 8, layers: 12, heads: 2, kvHeads: 2, headDim: 4, ffn: 8}
	for canon := range c.tensorShapes() {
		hf := hfNameOf(canon)
		if got, ok := CanonicalName(hf); !ok || got != canon {
			t.Errorf("%s -> %s -> %s", canon, hf, got)
		}
	}
	for _, name := range []string{"model.layers.01.input_layernorm.weight", "model.layers.x.input_layernorm.weight", "model.layers.1.mlp.other.weight", "lm_head.bias"} {
		if got, ok := CanonicalName(name); ok {
			t.Errorf("%s mapped to %s", name, got)
		}
	}
}

// FuzzSafetensors: any bytes give a parse or an error, never a panic, and a
// parse only hands out in-bounds, correctly sized, non-overlapping slices.
func FuzzSafetensors(f *testing.F) {
	dir := f.TempDir()
	p := filepath.Join(dir, "seed.safetensors")
	if err := WriteSafetensors(p, map[string]SafeTensor{
		"a": {DType: "F32", Shape: []int{2, 2}, Data: encF32(values(4, 1))},
		"b": {DType: "BF16", Shape: []int{3}, Data: encBF16(values(3, 1))},
	}); err != nil {
		f.Fatal(err)
	}
	seed, _ := os.ReadFile(p)
	f.Add(seed)
	for _, n := range []int{0, 7, 8, 9, 20, len(seed) - 1} {
		f.Add(seed[:n])
	}
	f.Add(rawSafetensors(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"k":"v"}}`, make([]byte, 8)))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "fuzz.safetensors")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		sf, err := openSafetensors(path)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v is neither ErrInvalid nor ErrUnsupported", err)
			}
			return
		}
		defer sf.Close()
		type span struct{ lo, hi uintptr }
		var spans []span
		for name, e := range sf.tensors {
			n := safeDTypeSizes[e.DType]
			for _, d := range e.Shape {
				n *= d
			}
			if uint64(len(e.Data)) != n {
				t.Fatalf("%s: %d bytes for %s %v", name, len(e.Data), e.DType, e.Shape)
			}
			if len(e.Data) == 0 {
				continue
			}
			if !sf.Contains(e.Data) {
				t.Fatalf("%s outside the mapping", name)
			}
			lo := uintptr(unsafe.Pointer(unsafe.SliceData(e.Data)))
			spans = append(spans, span{lo, lo + uintptr(len(e.Data))})
		}
		slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
		for i := 1; i < len(spans); i++ {
			if spans[i].lo < spans[i-1].hi {
				t.Fatal("overlapping tensors accepted")
			}
		}
	})
}
