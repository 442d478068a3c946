package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// writeFile writes b to a temp file and returns its path.
func writeFile(t testing.TB, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func encode(t testing.TB, meta []KV, tensors []TensorData) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, meta, tensors); err != nil {
		t.Fatalf("Write: %v", err)
	}
	return buf.Bytes()
}

func openBytes(t testing.TB, b []byte) (*File, error) {
	t.Helper()
	f, err := Open(writeFile(t, b))
	if err == nil {
		t.Cleanup(func() { f.Close() })
	}
	return f, err
}

func f32Bytes(xs ...float32) []byte {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func seqBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)*7 + seed
	}
	return b
}

// allMeta holds one key of every scalar type and arrays of every element
// type, including an array of arrays.
func allMeta() []KV {
	return []KV{
		{"general.architecture", MustValue("llama")},
		{"t.u8", MustValue(uint8(200))},
		{"t.i8", MustValue(int8(-100))},
		{"t.u16", MustValue(uint16(60000))},
		{"t.i16", MustValue(int16(-30000))},
		{"t.u32", MustValue(uint32(4000000000))},
		{"t.i32", MustValue(int32(-2000000000))},
		{"t.f32", MustValue(float32(1e-5))},
		{"t.bool", MustValue(true)},
		{"t.str", MustValue("héllo\x00world")},
		{"t.u64", MustValue(uint64(1) << 60)},
		{"t.i64", MustValue(int64(-1) << 60)},
		{"t.f64", MustValue(math.Pi)},
		{"t.empty_str", MustValue("")},
		{"a.u8", MustValue([]uint8{1, 2, 255})},
		{"a.i8", MustValue([]int8{-1, 0, 127})},
		{"a.u16", MustValue([]uint16{1, 65535})},
		{"a.i16", MustValue([]int16{-32768, 5})},
		{"a.u32", MustValue([]uint32{7, 1 << 31})},
		{"a.i32", MustValue([]int32{-5, 6, 1 << 30})},
		{"a.f32", MustValue([]float32{-1.5, 0, 3.25})},
		{"a.bool", MustValue([]bool{true, false, true})},
		{"a.str", MustValue([]string{"<unk>", "<s>", "", "▁the"})},
		{"a.u64", MustValue([]uint64{0, math.MaxUint64})},
		{"a.i64", MustValue([]int64{math.MinInt64, 9})},
		{"a.f64", MustValue([]float64{1e300, -2})},
		{"a.empty", MustValue([]int32{})},
		{"a.nested", MustValue([]Value{MustValue([]string{"a", "b"}), MustValue([]uint8{9})})},
	}
}

func allTensors() []TensorData {
	q80 := seqBytes(34*2*3, 1) // 2 blocks per row, 3 rows
	return []TensorData{
		{Name: "f32", Type: F32, Dims: []uint64{3, 2}, Data: f32Bytes(1, 2, 3, 4, 5, 6)},
		{Name: "f16", Type: F16, Dims: []uint64{5}, Data: seqBytes(10, 2)},
		{Name: "bf16", Type: BF16, Dims: []uint64{4, 3, 2}, Data: seqBytes(48, 3)},
		{Name: "q8_0", Type: Q8_0, Dims: []uint64{64, 3}, Data: q80},
		{Name: "q4_k", Type: Q4_K, Dims: []uint64{256, 2}, Data: seqBytes(288, 4)},
		{Name: "i32.4d", Type: I32, Dims: []uint64{1, 2, 1, 3}, Data: seqBytes(24, 5)},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, align := range []uint32{0, 1, 8, 64, 4096} {
		meta := allMeta()
		want := uint64(DefaultAlignment)
		if align != 0 {
			meta = append(meta, KV{KeyAlignment, MustValue(align)})
			want = uint64(align)
		}
		b := encode(t, meta, allTensors())
		f, err := openBytes(t, b)
		if err != nil {
			t.Fatalf("align %d: Open: %v", align, err)
		}
		if f.Version != 3 || f.Alignment != want || f.DataOffset%want != 0 {
			t.Fatalf("align %d: version %d alignment %d data offset %d", align, f.Version, f.Alignment, f.DataOffset)
		}
		got := f.KVs()
		if len(got) != len(meta) {
			t.Fatalf("align %d: %d KVs, want %d", align, len(got), len(meta))
		}
		for i, kv := range meta {
			if got[i].Key != kv.Key || got[i].Value.Type() != kv.Value.Type() || got[i].Value.ElemType() != kv.Value.ElemType() ||
				!reflect.DeepEqual(got[i].Value.Interface(), kv.Value.Interface()) {
				t.Errorf("align %d: KV %d = %s %#v, want %s %#v", align, i, got[i].Key, got[i].Value.Interface(), kv.Key, kv.Value.Interface())
			}
		}
		tensors := f.Tensors()
		for i, td := range allTensors() {
			ti := tensors[i]
			if ti.Name != td.Name || ti.Type != td.Type || !reflect.DeepEqual(ti.Dims, td.Dims) || !bytes.Equal(ti.Data, td.Data) {
				t.Errorf("align %d: tensor %d = %s %s %v (%d bytes), want %s %s %v", align, i, ti.Name, ti.Type, ti.Dims, len(ti.Data), td.Name, td.Type, td.Dims)
			}
			if ti.Offset%want != 0 || (f.DataOffset+ti.Offset)%want != 0 {
				t.Errorf("align %d: tensor %s at offset %d, not aligned", align, ti.Name, ti.Offset)
			}
			if !f.Contains(ti.Data) {
				t.Errorf("align %d: tensor %s data is not a slice of the mapping", align, ti.Name)
			}
			if cap(ti.Data) != len(ti.Data) {
				t.Errorf("align %d: tensor %s data has spare capacity %d", align, ti.Name, cap(ti.Data))
			}
		}
		if got, ok := f.Tensor("q8_0"); !ok || got.Elements() != 192 {
			t.Errorf("Tensor(q8_0) = %v, %v", got.Elements(), ok)
		}
		if int(f.DataOffset)+int(tensors[len(tensors)-1].Offset) > len(b) || uint64(len(b))%want != 0 {
			t.Errorf("align %d: file length %d not padded", align, len(b))
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if f.Contains(tensors[0].Data) {
			t.Error("Contains after Close")
		}
		if err := f.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
}

func TestNoTensors(t *testing.T) {
	f, err := openBytes(t, encode(t, []KV{{"general.name", MustValue("x")}}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tensors()) != 0 {
		t.Fatal("tensors")
	}
	// A header-only file may also end right after the directory, unpadded.
	var b builder
	b.header(3, 0, 0)
	if _, err := openBytes(t, b.Bytes()); err != nil {
		t.Fatalf("bare header: %v", err)
	}
}

func TestVersion2(t *testing.T) {
	b := encode(t, allMeta(), allTensors())
	binary.LittleEndian.PutUint32(b[4:], 2)
	f, err := openBytes(t, b)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 2 || len(f.Tensors()) != len(allTensors()) {
		t.Fatalf("version %d, %d tensors", f.Version, len(f.Tensors()))
	}
}

func TestTypedAccessors(t *testing.T) {
	meta := append(allMeta(), KV{"neg", MustValue(int32(-3))}, KV{"big", MustValue([]uint32{1 << 31})})
	f, err := openBytes(t, encode(t, meta, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"t.u8", "t.u16", "t.u32", "t.u64", "t.i64"} {
		if _, ok, err := f.Uint(key); !ok || (err != nil) != (key == "t.i64") {
			t.Errorf("Uint(%s): ok %v err %v", key, ok, err)
		}
	}
	if v, _, err := f.Uint("t.u32"); err != nil || v != 4000000000 {
		t.Errorf("Uint(t.u32) = %d, %v", v, err)
	}
	if _, _, err := f.Uint("neg"); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("Uint(neg) err = %v", err)
	}
	if v, _, err := f.Int("t.i8"); err != nil || v != -100 {
		t.Errorf("Int(t.i8) = %d, %v", v, err)
	}
	if v, ok, err := f.Float("t.f32"); !ok || err != nil || float32(v) != 1e-5 {
		t.Errorf("Float(t.f32) = %v %v %v", v, ok, err)
	}
	if v, _, err := f.Float("t.u16"); err != nil || v != 60000 {
		t.Errorf("Float(t.u16) = %v %v", v, err)
	}
	if v, _, err := f.Bool("t.bool"); err != nil || !v {
		t.Errorf("Bool = %v %v", v, err)
	}
	if v, _, err := f.String("t.str"); err != nil || v != "héllo\x00world" {
		t.Errorf("String = %q %v", v, err)
	}
	if v, _, err := f.Strings("a.str"); err != nil || len(v) != 4 || v[3] != "▁the" {
		t.Errorf("Strings = %q %v", v, err)
	}
	if v, _, err := f.Float32s("a.f32"); err != nil || !reflect.DeepEqual(v, []float32{-1.5, 0, 3.25}) {
		t.Errorf("Float32s = %v %v", v, err)
	}
	if v, _, err := f.Float32s("a.f64"); err != nil || v[1] != -2 {
		t.Errorf("Float32s(f64) = %v %v", v, err)
	}
	if v, _, err := f.Int32s("a.i32"); err != nil || !reflect.DeepEqual(v, []int32{-5, 6, 1 << 30}) {
		t.Errorf("Int32s = %v %v", v, err)
	}
	if v, _, err := f.Int32s("a.u8"); err != nil || !reflect.DeepEqual(v, []int32{1, 2, 255}) {
		t.Errorf("Int32s(u8) = %v %v", v, err)
	}
	if _, _, err := f.Int32s("big"); err == nil {
		t.Error("Int32s(big) accepted 1<<31")
	}
	// Missing keys: ok false, no error.
	if _, ok, err := f.String("nope"); ok || err != nil {
		t.Errorf("missing: ok %v err %v", ok, err)
	}
	// Mismatches: a *TypeError naming the key and both types.
	for _, c := range []struct {
		call func() error
		want string
	}{
		{func() error { _, _, err := f.String("t.u32"); return err }, `"t.u32" is uint32, want string`},
		{func() error { _, _, err := f.Uint("t.str"); return err }, `"t.str" is string, want integer`},
		{func() error { _, _, err := f.Bool("t.u8"); return err }, `is uint8, want bool`},
		{func() error { _, _, err := f.Float("a.f32"); return err }, `is array of float32, want float`},
		{func() error { _, _, err := f.Strings("a.i32"); return err }, `is array of int32, want array of string`},
		{func() error { _, _, err := f.Float32s("a.str"); return err }, `want array of float32`},
		{func() error { _, _, err := f.Int32s("a.f32"); return err }, `want array of int32`},
	} {
		err := c.call()
		var te *TypeError
		if !errors.As(err, &te) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want TypeError containing %q", err, c.want)
		}
	}
}

func TestWriteRejects(t *testing.T) {
	ok := TensorData{Name: "x", Type: F32, Dims: []uint64{2}, Data: f32Bytes(1, 2)}
	for _, c := range []struct {
		name    string
		meta    []KV
		tensors []TensorData
		want    string
	}{
		{"dup key", []KV{{"a", MustValue(1.0)}, {"a", MustValue(2.0)}}, nil, "given twice"},
		{"empty key", []KV{{"", MustValue(1.0)}}, nil, "empty metadata key"},
		{"zero value", []KV{{"a", Value{}}}, nil, "invalid value"},
		{"alignment type", []KV{{KeyAlignment, MustValue(uint64(32))}}, nil, "must be a uint32"},
		{"alignment 3", []KV{{KeyAlignment, MustValue(uint32(3))}}, nil, "power of two"},
		{"dup tensor", nil, []TensorData{ok, ok}, "given twice"},
		{"short data", nil, []TensorData{{Name: "x", Type: F32, Dims: []uint64{3}, Data: f32Bytes(1)}}, "4 bytes of data, want 12"},
		{"no dims", nil, []TensorData{{Name: "x", Type: F32, Data: nil}}, "0 dimensions"},
		{"5 dims", nil, []TensorData{{Name: "x", Type: F32, Dims: []uint64{1, 1, 1, 1, 1}, Data: f32Bytes(1)}}, "5 dimensions"},
		{"block", nil, []TensorData{{Name: "x", Type: Q8_0, Dims: []uint64{16}, Data: make([]byte, 17)}}, "multiple of 32"},
		{"unknown type", nil, []TensorData{{Name: "x", Type: 31, Dims: []uint64{1}, Data: make([]byte, 1)}}, "unknown ggml type 31"},
	} {
		err := Write(&bytes.Buffer{}, c.meta, c.tensors)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := ValueOf(struct{}{}); err == nil {
		t.Error("ValueOf(struct{}) accepted")
	}
}

// builder crafts raw GGUF bytes, valid or not.
type builder struct{ bytes.Buffer }

func (b *builder) u32(v uint32) *builder { binary.Write(&b.Buffer, binary.LittleEndian, v); return b }
func (b *builder) u64(v uint64) *builder { binary.Write(&b.Buffer, binary.LittleEndian, v); return b }
func (b *builder) str(s string) *builder { b.u64(uint64(len(s))); b.WriteString(s); return b }
func (b *builder) header(version uint32, nTensors, nKV uint64) *builder {
	b.WriteString(Magic)
	return b.u32(version).u64(nTensors).u64(nKV)
}

// tensorInfo appends a directory entry.
func (b *builder) tensorInfo(name string, typ GGMLType, offset uint64, dims ...uint64) *builder {
	b.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		b.u64(d)
	}
	return b.u32(uint32(typ)).u64(offset)
}

// withData pads to 32 and appends n zero bytes of data.
func (b *builder) withData(n int) []byte {
	for b.Len()%32 != 0 {
		b.WriteByte(0)
	}
	b.Write(make([]byte, n))
	return b.Bytes()
}

func TestRejects(t *testing.T) {
	valid := encode(t, allMeta(), allTensors())
	kvs := func(build func(b *builder)) []byte {
		var b builder
		b.header(3, 0, 1)
		build(&b)
		return b.Bytes()
	}
	tensors := func(n uint64, build func(b *builder), data int) []byte {
		var b builder
		b.header(3, n, 0)
		build(&b)
		return b.withData(data)
	}
	be := append([]byte(nil), valid...)
	binary.BigEndian.PutUint32(be[4:], 3)
	v1 := append([]byte(nil), valid...)
	binary.LittleEndian.PutUint32(v1[4:], 1)
	v9 := append([]byte(nil), valid...)
	binary.LittleEndian.PutUint32(v9[4:], 9)

	cases := []struct {
		name string
		data []byte
		want string
		is   error
	}{
		{"empty", nil, "shorter than the 24-byte GGUF header", ErrFormat},
		{"short", valid[:20], "shorter than the 24-byte GGUF header", ErrFormat},
		{"magic", append([]byte("GGML"), valid[4:]...), `bad magic "GGML"`, ErrFormat},
		{"version 1", v1, "version 1", ErrUnsupported},
		{"big endian", be, "big-endian", ErrUnsupported},
		{"version 9", v9, "unknown GGUF version 9", ErrFormat},
		{"tensor count", (&builder{}).header(3, 1<<62, 0).Bytes(), "tensor count 4611686018427387904 cannot fit", ErrFormat},
		{"tensor count wraps", (&builder{}).header(3, math.MaxUint64, 0).Bytes(), "tensor count", ErrFormat},
		{"kv count", (&builder{}).header(3, 0, 1<<40).Bytes(), "metadata count 1099511627776 cannot fit", ErrFormat},
		{"key length", kvs(func(b *builder) { b.u64(1 << 50).u64(0) }), "metadata 0 key: length 1125899906842624 exceeds", ErrFormat},
		{"key truncated", kvs(func(b *builder) { b.u64(30).WriteString("ab"); b.u64(0) }), "length 30 exceeds the 10 bytes left", ErrFormat},
		{"empty key", kvs(func(b *builder) { b.str("").u32(uint32(TypeUint8)).WriteByte(1) }), "empty key", ErrFormat},
		{"value type", kvs(func(b *builder) { b.str("k").u32(13).u32(0) }), `metadata "k": unknown value type 13`, ErrFormat},
		{"value truncated", kvs(func(b *builder) { b.str("k").u32(uint32(TypeUint64)).u32(0) }), `"k": need 8 bytes, 4 left`, ErrFormat},
		{"string length", kvs(func(b *builder) { b.str("k").u32(uint32(TypeString)).u64(math.MaxUint64) }), `metadata "k": length 18446744073709551615 exceeds`, ErrFormat},
		{"bool", kvs(func(b *builder) { b.str("k").u32(uint32(TypeBool)).WriteByte(2) }), "bool byte 2", ErrFormat},
		{"array length", kvs(func(b *builder) { b.str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint32)).u64(1 << 61) }), `"k" array length 2305843009213693952 cannot fit`, ErrFormat},
		{"array length wraps", kvs(func(b *builder) { b.str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint64)).u64(1 << 61) }), `array length`, ErrFormat},
		{"string array length", kvs(func(b *builder) {
			b.str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(1000).u64(1)
		}), `"k" array length 1000 cannot fit`, ErrFormat},
		{"string array element", kvs(func(b *builder) {
			b.str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(2).str("a").u64(1 << 40).u64(0)
		}), `"k" element 1: length 1099511627776 exceeds`, ErrFormat},
		{"array elem type", kvs(func(b *builder) { b.str("k").u32(uint32(TypeArray)).u32(99).u64(0) }), "unknown array element type 99", ErrFormat},
		{"bool array", kvs(func(b *builder) { b.str("k").u32(uint32(TypeArray)).u32(uint32(TypeBool)).u64(2).u32(0x0301) }), "element 1: bool byte 3", ErrFormat},
		{"deep arrays", kvs(func(b *builder) {
			b.str("k").u32(uint32(TypeArray))
			for i := 0; i < 6; i++ {
				b.u32(uint32(TypeArray)).u64(1)
			}
			b.u32(uint32(TypeUint8)).u64(0)
		}), "nested deeper than 4", ErrFormat},
		{"dup key", func() []byte {
			var b builder
			b.header(3, 0, 2).str("k").u32(uint32(TypeUint8)).WriteByte(1)
			b.str("k").u32(uint32(TypeUint8)).WriteByte(1)
			return b.Bytes()
		}(), `metadata key "k" appears twice`, ErrFormat},
		{"alignment 0", kvs(func(b *builder) { b.str(KeyAlignment).u32(uint32(TypeUint32)).u32(0) }), "general.alignment = 0: want a power of two", ErrFormat},
		{"alignment 48", kvs(func(b *builder) { b.str(KeyAlignment).u32(uint32(TypeUint32)).u32(48) }), "general.alignment = 48", ErrFormat},
		{"alignment huge", kvs(func(b *builder) { b.str(KeyAlignment).u32(uint32(TypeUint64)).u64(1 << 40) }), "no larger than", ErrFormat},
		{"alignment string", kvs(func(b *builder) { b.str(KeyAlignment).u32(uint32(TypeString)).str("32") }), "general.alignment is string, want an unsigned integer", ErrFormat},
		{"no dims", tensors(1, func(b *builder) { b.tensorInfo("w", F32, 0) }, 4), `tensor "w": 0 dimensions, want 1 to 4`, ErrFormat},
		{"5 dims", tensors(1, func(b *builder) { b.tensorInfo("w", F32, 0, 1, 1, 1, 1, 1) }, 4), `tensor "w": 5 dimensions`, ErrFormat},
		{"dims count huge", tensors(1, func(b *builder) { b.str("w").u32(math.MaxUint32) }, 4), "4294967295 dimensions", ErrFormat},
		{"zero dim", tensors(1, func(b *builder) { b.tensorInfo("w", F32, 0, 4, 0) }, 16), `tensor "w": dimension 1 is zero`, ErrFormat},
		{"dims overflow", tensors(1, func(b *builder) { b.tensorInfo("w", F32, 0, 1<<32, 1<<32) }, 16), `tensor "w": dimensions [4294967296 4294967296] overflow`, ErrFormat},
		{"bytes overflow", tensors(1, func(b *builder) { b.tensorInfo("w", F64, 0, 1<<31, 1<<31) }, 16), `tensor "w": byte size of [2147483648 2147483648] × F64 overflows`, ErrFormat},
		{"unknown type", tensors(1, func(b *builder) { b.tensorInfo("w", 33, 0, 4) }, 16), `tensor "w": unknown ggml type 33`, ErrFormat},
		{"block multiple", tensors(1, func(b *builder) { b.tensorInfo("w", Q8_0, 0, 33) }, 64), `type Q8_0 needs dimension 0 (33) to be a multiple of 32`, ErrFormat},
		{"empty name", tensors(1, func(b *builder) { b.tensorInfo("", F32, 0, 1) }, 4), "tensor 0: empty name", ErrFormat},
		{"unaligned offset", tensors(1, func(b *builder) { b.tensorInfo("w", F32, 4, 1) }, 64), `offset 4 is not a multiple of the alignment 32`, ErrFormat},
		{"offset past end", tensors(1, func(b *builder) { b.tensorInfo("w", F32, 64, 4) }, 32), `tensor "w": data [64, 64+16) lies outside the 32-byte data section`, ErrFormat},
		{"offset huge", tensors(1, func(b *builder) { b.tensorInfo("w", F32, math.MaxUint64&^31, 4) }, 32), "lies outside", ErrFormat},
		{"size past end", tensors(1, func(b *builder) { b.tensorInfo("w", F32, 0, 16) }, 32), "data [0, 0+64) lies outside the 32-byte", ErrFormat},
		{"no data section", func() []byte {
			var b builder
			b.header(3, 1, 0).tensorInfo("w", F32, 0, 1)
			return b.Bytes()
		}(), "data section would start at 64, past the end", ErrFormat},
		{"overlap", tensors(2, func(b *builder) {
			b.tensorInfo("a", F32, 0, 16)
			b.tensorInfo("b", F32, 32, 8)
		}, 128), `tensor "b" (offset 32) overlaps tensor "a" (ends at 64)`, ErrFormat},
		{"dup tensor", tensors(2, func(b *builder) {
			b.tensorInfo("a", F32, 0, 4)
			b.tensorInfo("a", F32, 32, 4)
		}, 64), `tensor "a" appears twice`, ErrFormat},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			f, err := Open(writeFile(t, c.data))
			runtime.ReadMemStats(&after)
			if err == nil {
				f.Close()
				t.Fatalf("Open succeeded, want error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) || !errors.Is(err, c.is) {
				t.Fatalf("err = %v\nwant %q (is %v)", err, c.want, c.is)
			}
			if !strings.Contains(err.Error(), "m.gguf") {
				t.Errorf("err %q does not name the file", err)
			}
			// Hostile counts must not turn into big allocations.
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
				t.Errorf("allocated %d bytes on a %d-byte file", grew, len(c.data))
			}
		})
	}
}

// TestTruncations: every prefix of a valid file is rejected cleanly (a prefix
// that ends inside the data section must still fail: the last tensor's data
// is missing). Prefixes are parsed in memory; a sample goes through Open.
func TestTruncations(t *testing.T) {
	valid := encode(t, allMeta(), allTensors())
	last := allTensors()[len(allTensors())-1]
	p := filepath.Join(t.TempDir(), "m.gguf")
	for n := 0; n < len(valid); n++ {
		f, err := parse(valid[:n:n])
		if n%97 == 0 {
			if err := os.WriteFile(p, valid[:n], 0o644); err != nil {
				t.Fatal(err)
			}
			ff, ferr := Open(p)
			if (ferr == nil) != (err == nil) && n >= headerSize {
				t.Fatalf("prefix %d: Open err %v, parse err %v", n, ferr, err)
			}
			if ferr == nil {
				ff.Close()
			}
		}
		if err == nil {
			// Only the trailing padding after the last tensor may be cut.
			ti, _ := f.Tensor(last.Name)
			if int(f.DataOffset+ti.Offset)+len(last.Data) > n {
				t.Fatalf("prefix %d: opened with data missing", n)
			}
			continue
		}
		if !errors.Is(err, ErrFormat) {
			t.Fatalf("prefix %d: err %v is not ErrFormat", n, err)
		}
	}
}

// TestLargeFileHostileCounts: counts that the file size would allow but the
// content does not back must not reserve memory up front.
func TestLargeFileHostileCounts(t *testing.T) {
	const size = 16 << 20
	pad := func(b []byte) []byte { return append(b, make([]byte, size-len(b))...) }
	cases := map[string][]byte{
		"kv count":     pad((&builder{}).header(3, 0, size/13-10).Bytes()),
		"tensor count": pad((&builder{}).header(3, size/32-10, 0).Bytes()),
		"string array": pad(func() []byte {
			var b builder
			b.header(3, 0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(size/8 - 100)
			b.u64(1 << 62) // first element's length is absurd
			return b.Bytes()
		}()),
		"nested array": pad(func() []byte {
			var b builder
			b.header(3, 0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(size/12 - 100)
			b.u32(99) // first element's type is bad
			return b.Bytes()
		}()),
	}
	for name, data := range cases {
		p := writeFile(t, data)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f, err := Open(p)
		runtime.ReadMemStats(&after)
		if err == nil {
			f.Close()
			t.Fatalf("%s: opened", name)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 2<<20 {
			t.Errorf("%s: allocated %d bytes before failing (%v)", name, grew, err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open(filepath.Join(t.TempDir(), "missing.gguf")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Open(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
}

func TestGGMLTypeNames(t *testing.T) {
	for typ, want := range map[GGMLType]string{F32: "F32", F16: "F16", BF16: "BF16", Q8_0: "Q8_0", Q4_K: "Q4_K", Q6_K: "Q6_K", 31: "type(31)"} {
		if typ.String() != want {
			t.Errorf("%d: %s, want %s", uint32(typ), typ, want)
		}
	}
}
