package gguf

import (
	"fmt"
	"testing"
)

// BenchmarkOpenVocab150k opens a header shaped like a Qwen/Llama-3 GGUF's:
// 150k token strings, scores, token types and merges. Metadata parsing is
// the whole cost of Open (tensor data is only mapped).
func BenchmarkOpenVocab150k(b *testing.B) {
	const n = 150_000
	toks := make([]string, n)
	merges := make([]string, n)
	for i := range toks {
		toks[i] = fmt.Sprintf("▁tok%d", i)
		merges[i] = fmt.Sprintf("a%d b%d", i, i)
	}
	meta := []KV{
		{"general.architecture", MustValue("llama")},
		{"tokenizer.ggml.tokens", MustValue(toks)},
		{"tokenizer.ggml.scores", MustValue(make([]float32, n))},
		{"tokenizer.ggml.token_type", MustValue(make([]int32, n))},
		{"tokenizer.ggml.merges", MustValue(merges)},
	}
	p := writeFile(b, encode(b, meta, allTensors()))
	b.ReportAllocs()
	for b.Loop() {
		f, err := Open(p)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
