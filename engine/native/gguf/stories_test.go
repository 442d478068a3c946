package gguf

import (
	"os"
	"path/filepath"
	"testing"
)

// stories260K returns the path of the real test model, skipping when
// BATCHD_STORIES260K (a directory holding stories260K.gguf) is unset.
func stories260K(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("BATCHD_STORIES260K")
	if dir == "" {
		t.Skip("BATCHD_STORIES260K is unset: set it to the directory holding stories260K.gguf to run this test")
	}
	return filepath.Join(dir, "stories260K.gguf")
}

func TestStories260K(t *testing.T) {
	f, err := Open(stories260K(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, kv := range f.KVs() {
		t.Logf("%s = %s", kv.Key, kv.Value)
	}
	if arch, _, err := f.String("general.architecture"); err != nil || arch != "llama" {
		t.Errorf("architecture %q, %v", arch, err)
	}
	if n, _, err := f.Uint("llama.block_count"); err != nil || n != 5 {
		t.Errorf("block_count %d, %v", n, err)
	}
	toks, _, err := f.Strings("tokenizer.ggml.tokens")
	if err != nil || len(toks) != 512 || toks[1] != "<s>" {
		t.Errorf("tokens: %d, %v", len(toks), err)
	}
	ts := f.Tensors()
	if len(ts) != 48 {
		t.Errorf("%d tensors, want 48", len(ts))
	}
	for _, ti := range ts {
		if ti.Type != F32 || !f.Contains(ti.Data) {
			t.Errorf("tensor %s: %s, mapped %v", ti.Name, ti.Type, f.Contains(ti.Data))
		}
		if testing.Verbose() && (ti.Name == "token_embd.weight" || ti.Name == "blk.0.attn_q.weight" || ti.Name == "output.weight") {
			t.Logf("%s %s %v offset %d", ti.Name, ti.Type, ti.Dims, ti.Offset)
		}
	}
}
