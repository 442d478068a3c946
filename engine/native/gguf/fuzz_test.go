package gguf

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzOpen: whatever the bytes, Open returns a File or an error; it never
// panics, and every tensor it hands out lies inside the mapping with the size
// its type and dims call for.
func FuzzOpen(f *testing.F) {
	valid := encode(f, allMeta(), allTensors())
	f.Add(valid)
	for _, n := range []int{0, 4, 8, 23, 24, 40, 100, 300, len(valid) / 2, len(valid) - 40, len(valid) - 1} {
		if n >= 0 && n <= len(valid) {
			f.Add(valid[:n])
		}
	}
	small := encode(f, []KV{{"k", MustValue([]string{"a", "b"})}, {KeyAlignment, MustValue(uint32(8))}},
		[]TensorData{{Name: "w", Type: Q8_0, Dims: []uint64{32, 1}, Data: make([]byte, 34)}})
	f.Add(small)
	var b builder
	b.header(2, 2, 0).tensorInfo("a", F32, 0, 4).tensorInfo("b", F16, 32, 2, 2)
	f.Add(b.withData(64))

	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "fuzz.gguf")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		file, err := Open(p)
		if err != nil {
			if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v is neither ErrFormat nor ErrUnsupported", err)
			}
			return
		}
		defer file.Close()
		for _, kv := range file.KVs() {
			_ = kv.Value.String()
		}
		for _, ti := range file.Tensors() {
			if !file.Contains(ti.Data) {
				t.Fatalf("tensor %s outside the mapping", ti.Name)
			}
			size, ok := tensorSize(ti.Type, ti.Dims)
			if !ok || uint64(len(ti.Data)) != size {
				t.Fatalf("tensor %s: %d bytes for %s %v", ti.Name, len(ti.Data), ti.Type, ti.Dims)
			}
			_ = bytes.Count(ti.Data, []byte{0}) // touch every byte
		}
	})
}
