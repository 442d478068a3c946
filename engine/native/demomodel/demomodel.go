// Package demomodel writes the demo model: a small GGUF of any family the
// engine runs, with deterministic random weights and a real byte-level BPE
// tokenizer, so that batchd runs, and its tests run, on a machine that can
// download nothing; and the same weights as a Hugging Face directory
// (WriteHF).
//
// It imports kernels and the native engine's gguf, chat and weights
// packages; never the engine itself.
package demomodel

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"unicode"

	"github.com/batchd/batchd/engine/native/chat"
	"github.com/batchd/batchd/engine/native/gguf"
	"github.com/batchd/batchd/kernels"
)

// The demo model is what `batchd demo-model` writes so that batchd runs out
// of the box on a machine that can download nothing: a Llama-family
// decoder with deterministic random weights (its text is noise) and a real
// byte-level BPE tokenizer trained here on Corpus.

// Corpus is the text the demo tokenizer's merges are learned from.
const Corpus = `Once upon a time, there was a little girl named Lily. She loved to play outside in the park.
One day, she saw a big red ball under a tree. She ran to the ball and kicked it as far as she could.
The sun was warm and the sky was blue. Her friend Tom came to play with her, and they laughed together.
batchd is a self-hosted batch inference daemon. Drop a file of requests in the inbox and get a file of
results in the outbox. Every request appears exactly once in the output or the errors, even after a crash.
The quick brown fox jumps over the lazy dog. A batch of text, another one, and one more for good measure.
Hello, world! How are you today? I am fine, thank you. What is the weather like? It is sunny and warm.
You are a helpful assistant. Answer the question in one short sentence. Say hello. Name three colours:
red, green and blue. Write a story about a cat, a dog, a boat and a tree. Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 2026.
`

// byteToRune is GPT-2's reversible mapping of bytes to printable runes, which
// byte-level BPE vocabularies are written in.
func byteToRune() [256]rune {
	var m [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}

// pretokenize splits text GPT-2 style: an optional leading space followed by
// a run of letters, or of digits, or of other non-space characters; spaces
// otherwise stand alone.
func pretokenize(text string) []string {
	var out []string
	rs := []rune(text)
	class := func(r rune) int {
		switch {
		case unicode.IsLetter(r):
			return 1
		case unicode.IsDigit(r):
			return 2
		case unicode.IsSpace(r):
			return 3
		}
		return 4
	}
	for i := 0; i < len(rs); {
		j := i
		if rs[j] == ' ' && j+1 < len(rs) && class(rs[j+1]) != 3 {
			j++
		}
		c := class(rs[j])
		k := j + 1
		for k < len(rs) && class(rs[k]) == c {
			k++
		}
		out = append(out, string(rs[i:k]))
		i = k
	}
	return out
}

// demoVocab trains a byte-level BPE vocabulary with up to merges merges on
// Corpus, deterministically, and adds ChatML's special tokens.
func demoVocab(merges int) (tokens []string, mergeList []string, types []int32) {
	b2r := byteToRune()
	for b := 0; b < 256; b++ {
		tokens = append(tokens, string(b2r[b]))
	}
	have := map[string]bool{}
	for _, t := range tokens {
		have[t] = true
	}
	// Each distinct pre-token as a list of symbols, with its count.
	counts := map[string]int{}
	for _, w := range pretokenize(Corpus) {
		counts[w]++
	}
	type word struct {
		syms  []string
		count int
	}
	var words []word
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var syms []string
		for _, b := range []byte(k) {
			syms = append(syms, string(b2r[b]))
		}
		words = append(words, word{syms, counts[k]})
	}
	for len(mergeList) < merges {
		pairs := map[[2]string]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				pairs[[2]string{w.syms[i], w.syms[i+1]}] += w.count
			}
		}
		var best [2]string
		bestN := 0
		for p, n := range pairs {
			if n > bestN || n == bestN && (p[0]+" "+p[1]) < (best[0]+" "+best[1]) {
				best, bestN = p, n
			}
		}
		if bestN < 2 {
			break
		}
		merged := best[0] + best[1]
		mergeList = append(mergeList, best[0]+" "+best[1])
		if !have[merged] {
			have[merged] = true
			tokens = append(tokens, merged)
		}
		for wi := range words {
			s := words[wi].syms
			var ns []string
			for i := 0; i < len(s); i++ {
				if i+1 < len(s) && s[i] == best[0] && s[i+1] == best[1] {
					ns = append(ns, merged)
					i++
				} else {
					ns = append(ns, s[i])
				}
			}
			words[wi].syms = ns
		}
	}
	types = make([]int32, len(tokens))
	for i := range types {
		types[i] = 1
	}
	for _, sp := range []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"} {
		tokens = append(tokens, sp)
		types = append(types, 3)
	}
	return tokens, mergeList, types
}

// Shape is the architecture of a demo model.
type Shape struct {
	Name string
	// Arch is the architecture written: qwen2 (the default: q/k/v biases,
	// tied embeddings), qwen3 (q/k RMSNorm, tied) or llama (adjacent-pair
	// RoPE, separate output weight).
	Arch                                         string
	Dim, Layers, Heads, KVHeads, FFNDim, Context int
	// Vocab pads the trained vocabulary with unused tokens up to this size
	// (0: the trained size), to match a real model's output layer.
	Vocab int
	// Experts, ExpertsUsed and ExpertFFN shape the qwen3moe arch's
	// mixture of experts (FFNDim is then unused).
	Experts, ExpertsUsed, ExpertFFN int
	// Window is the gemma2/gemma3 sliding window; AttnSoftCap and
	// FinalSoftCap gemma2's soft caps (0: the file says none, and llama.cpp
	// takes its defaults, 50 and 30).
	Window                    int
	AttnSoftCap, FinalSoftCap float32
	// HeadDim is the attention head size; 0: Dim/Heads.
	HeadDim int
	// Tied ties a llama's output layer to its token embeddings (Llama
	// 3.2's 1B and 3B); qwen2, qwen3 and Gemma are always tied.
	Tied bool
	// RopeTheta is the RoPE base; 0: 1e6.
	RopeTheta float32
	// Llama3Rope is Llama 3's RoPE scaling (factor, low_freq_factor,
	// high_freq_factor, original context), written as llama.cpp's
	// converter writes it: the rope_freqs.weight divisors. Zero: none.
	Llama3Rope [4]float64
	// YarnFactor and YarnContext are YaRN RoPE scaling (gpt-oss's: 32
	// over 4096 positions). Zero: none.
	YarnFactor  float32
	YarnContext int
	// LongRopeContext > 0 is Phi-3's LongRoPE original context: the file
	// gets rope_factors_long and rope_factors_short and the attention
	// factor √(1+ln(Context/LongRopeContext)/ln LongRopeContext), as
	// llama.cpp's converter writes them.
	LongRopeContext int
	// glm4moe (GLM-4.5's kind): SharedExperts shared experts of ExpertFFN
	// each; the first DenseLayers layers dense (FFNDim); ExpertScale the
	// routed weights' scale; NextN multi-token-prediction layers after the
	// decoder's, which decoding skips; RopeDim < head dim rotates only that
	// many dimensions of each head (partial RoPE).
	SharedExperts, DenseLayers, NextN, RopeDim int
	ExpertScale                                float32
	// QKNorm gives a glm4moe shape per-head q and k norms (GLM-4.5's; the
	// -Air model has none).
	QKNorm bool
}

// LongRopeFactors are the LongRoPE divisors per rotated pair a shape with
// LongRopeContext writes, long (growing to 8 over the pairs) or short (to
// 1.5).
func (d Shape) LongRopeFactors(long bool) []float32 {
	n := d.headDim() / 2
	top := 1.5
	if long {
		top = 8
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(1 + (top-1)*float64(i)/float64(n-1))
	}
	return out
}

// ropeFactors are the rope_freqs.weight divisors of d.Llama3Rope, as
// llama.cpp's convert_hf_to_gguf.py computes them.
func (d Shape) ropeFactors() []float32 {
	factor, low, high, orig := d.Llama3Rope[0], d.Llama3Rope[1], d.Llama3Rope[2], d.Llama3Rope[3]
	hd := d.headDim()
	out := make([]float32, hd/2)
	for i := range out {
		freq := 1 / math.Pow(float64(cmp.Or(d.RopeTheta, 1e6)), float64(2*i)/float64(hd))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < orig/high:
			out[i] = 1
		case wavelen > orig/low:
			out[i] = float32(factor)
		default:
			smooth := (orig/wavelen - low) / (high - low)
			out[i] = float32(1 / ((1-smooth)/factor + smooth))
		}
	}
	return out
}

func (d Shape) headDim() int {
	if d.HeadDim > 0 {
		return d.HeadDim
	}
	return d.Dim / d.Heads
}

// Shapes are the shapes `batchd demo-model --shape` knows.
var Shapes = map[string]Shape{
	// tiny: small enough to answer in milliseconds; the default.
	"tiny": {Name: "tiny", Dim: 128, Layers: 4, Heads: 4, KVHeads: 2, FFNDim: 352, Context: 2048},
	// tiny-qwen3 and tiny-llama exercise the other architectures' paths.
	"tiny-qwen3": {Name: "tiny-qwen3", Arch: "qwen3", Dim: 128, Layers: 3, Heads: 4, KVHeads: 2, FFNDim: 352, Context: 2048},
	"tiny-llama": {Name: "tiny-llama", Arch: "llama", Dim: 128, Layers: 3, Heads: 4, KVHeads: 1, FFNDim: 352, Context: 2048},
	// tiny-k: rows of whole 256-value blocks, so K-quants and IQ4_XS apply
	// without llama.cpp's fallbacks (tiny's 128-value rows take them all).
	"tiny-k": {Name: "tiny-k", Dim: 256, Layers: 4, Heads: 4, KVHeads: 2, FFNDim: 768, Context: 2048},
	// qwen2.5-0.5b: Qwen2.5-0.5B's shape, for benchmarks.
	"qwen2.5-0.5b": {Name: "qwen2.5-0.5b", Dim: 896, Layers: 24, Heads: 14, KVHeads: 2, FFNDim: 4864, Context: 32768, Vocab: 151936},
	// qwen2.5-1.5b: Qwen2.5-1.5B's shape (tied embeddings like the real
	// one's), for benchmarks: its rows are whole 256-value blocks, so a
	// K mixture runs K-quants where the 0.5B shape falls back to Q5_0.
	"qwen2.5-1.5b": {Name: "qwen2.5-1.5b", Dim: 1536, Layers: 28, Heads: 12, KVHeads: 2, FFNDim: 8960, Context: 32768, Vocab: 151936},
	// qwen2.5-3b: Qwen2.5-3B's shape (tied), for benchmarks: the dense
	// model whose active parameters per token (≈3.1B) match
	// Qwen3-30B-A3B's (≈3.3B).
	"qwen2.5-3b": {Name: "qwen2.5-3b", Dim: 2048, Layers: 36, Heads: 16, KVHeads: 2, FFNDim: 11008, Context: 32768, Vocab: 151936},
	// tiny-moe: a qwen3moe mixture of experts, 8 experts, 2 per token.
	"tiny-moe": {Name: "tiny-moe", Arch: "qwen3moe", Dim: 128, Layers: 3, Heads: 4, KVHeads: 2, Context: 2048, Experts: 8, ExpertsUsed: 2, ExpertFFN: 96},
	// tiny-mixtral: a Mixtral-style mixture of experts (GGUF llama with
	// experts), 8 experts, 2 per token.
	"tiny-mixtral": {Name: "tiny-mixtral", Arch: "llama", Dim: 128, Layers: 3, Heads: 4, KVHeads: 1, Context: 2048, Experts: 8, ExpertsUsed: 2, ExpertFFN: 96},
	// tiny-llama3: Llama 3.2's kind (tied embeddings, base 500000, llama3
	// RoPE scaling from an original context of 32 positions, so that short
	// prompts reach every band of it).
	"tiny-llama3": {Name: "tiny-llama3", Arch: "llama", Dim: 128, Layers: 3, Heads: 4, KVHeads: 1, FFNDim: 352, Context: 2048, Tied: true, RopeTheta: 500000, Llama3Rope: [4]float64{8, 1, 4, 32}},
	// tiny-gpt-oss: gpt-oss's kind (8 experts, 2 per token, with biases
	// and the clamped SwiGLU; sinks; q/k/v/o biases; a window of 6 on
	// the even layers; YaRN 32 over 256 positions, so that short prompts
	// reach its scaled bands; base 150000).
	"tiny-gpt-oss": {Name: "tiny-gpt-oss", Arch: "gpt-oss", Dim: 128, Layers: 4, Heads: 4, KVHeads: 2, Context: 131072, Experts: 8, ExpertsUsed: 2, ExpertFFN: 96,
		Window: 6, RopeTheta: 150000, YarnFactor: 32, YarnContext: 256},
	// gpt-oss-20b: gpt-oss-20b's shape (24 layers, 32 experts of which 4
	// per token, head 64, window 128), for benchmarks.
	"gpt-oss-20b": {Name: "gpt-oss-20b", Arch: "gpt-oss", Dim: 2880, Layers: 24, Heads: 64, KVHeads: 8, HeadDim: 64, Context: 131072, Vocab: 201088,
		Experts: 32, ExpertsUsed: 4, ExpertFFN: 2880, Window: 128, RopeTheta: 150000, YarnFactor: 32, YarnContext: 4096},
	// tiny-qwen2moe: Qwen1.5-MoE's kind (q/k/v biases; 8 experts, 2 per
	// token, not renormalized; a shared expert twice an expert's size,
	// gated per token).
	"tiny-qwen2moe": {Name: "tiny-qwen2moe", Arch: "qwen2moe", Dim: 128, Layers: 3, Heads: 4, KVHeads: 2, Context: 2048,
		Experts: 8, ExpertsUsed: 2, ExpertFFN: 96, SharedExperts: 2},
	// tiny-glm4moe: GLM-4.5-Air's kind (q/k/v biases, half the head
	// rotated; one dense layer, then 8 experts routed by sigmoid and a
	// selection bias, 2 per token renormalized and scaled by 2.5, beside a
	// shared expert; one multi-token-prediction layer at the end).
	"tiny-glm4moe": {Name: "tiny-glm4moe", Arch: "glm4moe", Dim: 128, Layers: 3, Heads: 4, KVHeads: 2, FFNDim: 352, Context: 2048,
		Experts: 8, ExpertsUsed: 2, ExpertFFN: 96, SharedExperts: 1, DenseLayers: 1, ExpertScale: 2.5, NextN: 1, RopeDim: 16},
	// tiny-glm4.5: tiny-glm4moe with GLM-4.5's q and k norms.
	"tiny-glm4.5": {Name: "tiny-glm4.5", Arch: "glm4moe", Dim: 128, Layers: 3, Heads: 4, KVHeads: 2, FFNDim: 352, Context: 2048,
		Experts: 8, ExpertsUsed: 2, ExpertFFN: 96, SharedExperts: 1, DenseLayers: 1, ExpertScale: 2.5, NextN: 1, RopeDim: 16, QKNorm: true},
	// tiny-phi: Phi-3's kind (fused qkv and gate/up, LongRoPE's long
	// factors: its original context of 16 positions is shorter than any
	// test's, llama.cpp's included; not named phi3, which llama.cpp takes as
	// a cue to look for Phi-3's SentencePiece specials in the vocabulary).
	"tiny-phi": {Name: "tiny-phi", Arch: "phi3", Dim: 128, Layers: 3, Heads: 4, KVHeads: 2, FFNDim: 352, Context: 2048, RopeTheta: 10000, LongRopeContext: 16},
	// tiny-gemma2 and tiny-gemma3: Gemma 2 (GeGLU, post-norms, scores
	// and logits soft-capped, a sliding window on every other layer) and
	// Gemma 3 (q/k norms, five local layers of window and base 10000 to
	// one global); windows and caps small enough that the tests' prompts
	// pass them.
	"tiny-gemma2": {Name: "tiny-gemma2", Arch: "gemma2", Dim: 128, Layers: 4, Heads: 4, KVHeads: 2, FFNDim: 352, Context: 2048, Window: 6, AttnSoftCap: 0.02, FinalSoftCap: 1.5},
	"tiny-gemma3": {Name: "tiny-gemma3", Arch: "gemma3", Dim: 128, Layers: 7, Heads: 4, KVHeads: 2, FFNDim: 352, Context: 2048, Window: 6},
	// gemma-3-1b: Gemma 3 1B's shape (head 256, window 512), for benchmarks.
	"gemma-3-1b": {Name: "gemma-3-1b", Arch: "gemma3", Dim: 1152, Layers: 26, Heads: 4, KVHeads: 1, FFNDim: 6912, Context: 32768, Vocab: 262144, Window: 512, HeadDim: 256},
	// qwen3-30b-a3b: Qwen3-30B-A3B's shape (48 layers, 128 experts of
	// which 8 per token, 3.3B parameters active of 30.5B), for benchmarks.
	"qwen3-30b-a3b": {Name: "qwen3-30b-a3b", Arch: "qwen3moe", Dim: 2048, Layers: 48, Heads: 32, KVHeads: 4, Context: 40960, Vocab: 151936, Experts: 128, ExpertsUsed: 8, ExpertFFN: 768},
	// llama-3.1-8b: Llama-3.1-8B's shape (16 GB in bf16), for GPU benchmarks.
	"llama-3.1-8b": {Name: "llama-3.1-8b", Arch: "llama", Dim: 4096, Layers: 32, Heads: 32, KVHeads: 8, FFNDim: 14336, Context: 131072, Vocab: 128256},
}

// Rand is a small deterministic generator (splitmix64) for demo weights
// and tests.
type Rand uint64

func (s *Rand) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Normal returns a standard normal draw (Box–Muller).
func (s *Rand) Normal() float32 {
	u1 := (float64(s.next()>>11) + 0.5) / (1 << 53)
	u2 := float64(s.next()>>11) / (1 << 53)
	return float32(math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2))
}

// NormalF32 returns k draws of scale·Normal() as little-endian float32
// bytes: the data of an F32 tensor (random LoRA adapters for benchmarks).
func (s *Rand) NormalF32(k int, scale float32) []byte {
	b := make([]byte, 4*k)
	for i := range k {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(scale*s.Normal()))
	}
	return b
}

func (d Shape) String() string {
	if d.Experts > 0 {
		return fmt.Sprintf("%s (dim %d, %d layers, %d/%d heads, %d experts of ffn %d, %d per token)", d.Name, d.Dim, d.Layers, d.Heads, d.KVHeads, d.Experts, d.ExpertFFN, d.ExpertsUsed)
	}
	return fmt.Sprintf("%s (dim %d, %d layers, %d/%d heads, ffn %d)", d.Name, d.Dim, d.Layers, d.Heads, d.KVHeads, d.FFNDim)
}

// WriteFile writes Write's model to a new file at path; the file is removed
// when it cannot be written whole.
func WriteFile(path string, shape Shape, dtype kernels.DType, seed uint64) error {
	return WriteQuantFile(path, shape, Single(dtype), seed)
}

// WriteQuantFile is WriteFile with the weights stored as q says.
func WriteQuantFile(path string, shape Shape, q Quant, seed uint64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = WriteQuant(f, shape, q, seed)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write demo model %s: %w", path, err)
	}
	return nil
}

// Write writes a demo model of the given shape and weight type to
// w as GGUF: architecture shape.Arch (default qwen2), weights drawn from N(0, 0.02²) by a generator seeded with
// seed, norms 1, a byte-level BPE tokenizer trained on Corpus and the
// ChatML template. The same arguments always give the same bytes.
func Write(w io.Writer, shape Shape, dtype kernels.DType, seed uint64) error {
	return WriteQuant(w, shape, Single(dtype), seed)
}

// WriteQuant is Write with each matrix stored as q chooses. The weights
// drawn depend on shape and seed alone, so one seed's models in two Quants
// are the same model quantized two ways.
func WriteQuant(w io.Writer, shape Shape, q Quant, seed uint64) error {
	tokens, merges, types := demoVocab(2000)
	eos := int32(len(tokens) - 1) // <|im_end|>
	endoftext := int32(len(tokens) - 3)
	for i := 0; len(tokens) < shape.Vocab; i++ {
		tokens = append(tokens, fmt.Sprintf("<|extra_%d|>", i))
		types = append(types, 5)
	}
	plan, err := planTensors(shape, len(tokens), q)
	if err != nil {
		return err
	}
	arch := shape.arch()
	headDim := shape.headDim()
	meta := []gguf.KV{
		{Key: "general.architecture", Value: gguf.MustValue(arch)},
		{Key: "general.name", Value: gguf.MustValue("batchd demo " + shape.Name + " (random weights: its text is noise)")},
		{Key: arch + ".context_length", Value: gguf.MustValue(uint32(shape.Context))},
		{Key: arch + ".embedding_length", Value: gguf.MustValue(uint32(shape.Dim))},
		{Key: arch + ".block_count", Value: gguf.MustValue(uint32(shape.Layers + shape.NextN))},
		{Key: arch + ".feed_forward_length", Value: gguf.MustValue(uint32(cmp.Or(shape.FFNDim, shape.ExpertFFN)))},
		{Key: arch + ".attention.head_count", Value: gguf.MustValue(uint32(shape.Heads))},
		{Key: arch + ".attention.head_count_kv", Value: gguf.MustValue(uint32(shape.KVHeads))},
		{Key: arch + ".attention.layer_norm_rms_epsilon", Value: gguf.MustValue(float32(1e-6))},
		{Key: arch + ".rope.freq_base", Value: gguf.MustValue(cmp.Or(shape.RopeTheta, 1e6))},
		{Key: arch + ".attention.key_length", Value: gguf.MustValue(uint32(headDim))},
		{Key: arch + ".attention.value_length", Value: gguf.MustValue(uint32(headDim))},
	}
	if shape.Window > 0 {
		meta = append(meta, gguf.KV{Key: arch + ".attention.sliding_window", Value: gguf.MustValue(uint32(shape.Window))})
	}
	if o := shape.LongRopeContext; o > 0 {
		meta = append(meta, gguf.KV{Key: arch + ".rope.scaling.original_context_length", Value: gguf.MustValue(uint32(o))},
			gguf.KV{Key: arch + ".rope.scaling.attn_factor", Value: gguf.MustValue(float32(math.Sqrt(1 + math.Log(float64(shape.Context)/float64(o))/math.Log(float64(o)))))})
	}
	if shape.YarnFactor > 0 {
		meta = append(meta, gguf.KV{Key: arch + ".rope.scaling.type", Value: gguf.MustValue("yarn")},
			gguf.KV{Key: arch + ".rope.scaling.factor", Value: gguf.MustValue(shape.YarnFactor)},
			gguf.KV{Key: arch + ".rope.scaling.original_context_length", Value: gguf.MustValue(uint32(shape.YarnContext))})
	}
	if shape.AttnSoftCap > 0 {
		meta = append(meta, gguf.KV{Key: arch + ".attn_logit_softcapping", Value: gguf.MustValue(shape.AttnSoftCap)})
	}
	if shape.FinalSoftCap > 0 {
		meta = append(meta, gguf.KV{Key: arch + ".final_logit_softcapping", Value: gguf.MustValue(shape.FinalSoftCap)})
	}
	if shape.Experts > 0 {
		meta = append(meta,
			gguf.KV{Key: arch + ".expert_count", Value: gguf.MustValue(uint32(shape.Experts))},
			gguf.KV{Key: arch + ".expert_used_count", Value: gguf.MustValue(uint32(shape.ExpertsUsed))},
			gguf.KV{Key: arch + ".expert_feed_forward_length", Value: gguf.MustValue(uint32(shape.ExpertFFN))})
	}
	if arch == "glm4moe" {
		meta = append(meta,
			gguf.KV{Key: arch + ".expert_shared_count", Value: gguf.MustValue(uint32(shape.SharedExperts))},
			gguf.KV{Key: arch + ".leading_dense_block_count", Value: gguf.MustValue(uint32(shape.DenseLayers))},
			gguf.KV{Key: arch + ".expert_weights_scale", Value: gguf.MustValue(shape.ExpertScale)},
			gguf.KV{Key: arch + ".expert_weights_norm", Value: gguf.MustValue(true)},
			gguf.KV{Key: arch + ".expert_gating_func", Value: gguf.MustValue(uint32(2))}, // sigmoid
			gguf.KV{Key: arch + ".nextn_predict_layers", Value: gguf.MustValue(uint32(shape.NextN))})
	}
	if arch == "qwen2moe" {
		meta = append(meta, gguf.KV{Key: arch + ".expert_shared_feed_forward_length", Value: gguf.MustValue(uint32(shape.SharedExperts * shape.ExpertFFN))})
	}
	if shape.RopeDim > 0 {
		meta = append(meta, gguf.KV{Key: arch + ".rope.dimension_count", Value: gguf.MustValue(uint32(shape.RopeDim))})
	}
	meta = append(meta, []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: gguf.MustValue("gpt2")},
		{Key: "tokenizer.ggml.pre", Value: gguf.MustValue("qwen2")},
		{Key: "tokenizer.ggml.tokens", Value: gguf.MustValue(tokens)},
		{Key: "tokenizer.ggml.token_type", Value: gguf.MustValue(types)},
		{Key: "tokenizer.ggml.merges", Value: gguf.MustValue(merges)},
		{Key: "tokenizer.ggml.eos_token_id", Value: gguf.MustValue(uint32(eos))},
		{Key: "tokenizer.ggml.padding_token_id", Value: gguf.MustValue(uint32(endoftext))},
		{Key: "tokenizer.ggml.bos_token_id", Value: gguf.MustValue(uint32(endoftext))},
		{Key: "tokenizer.ggml.add_bos_token", Value: gguf.MustValue(false)},
		{Key: "tokenizer.chat_template", Value: gguf.MustValue(chat.ChatMLTemplate)},
	}...)
	rng := Rand(seed)
	tensors := make([]gguf.TensorData, 0, len(plan))
	for _, p := range plan {
		var (
			data []byte
			typ  gguf.GGMLType
			err  error
		)
		if p.fill != fillWeights {
			data, typ = p.vector(&rng)
		} else {
			data, typ, err = p.matrix(&rng, q.Dequantized)
		}
		if err != nil {
			return fmt.Errorf("demo tensor %s: %w", p.Name, err)
		}
		dims := []uint64{uint64(p.Cols), uint64(p.Rows)}
		if p.fill != fillWeights && p.Rows == 1 {
			dims = dims[:1]
		}
		if p.Experts > 0 {
			dims = []uint64{uint64(p.Cols), uint64(p.Rows / p.Experts), uint64(p.Experts)}
		}
		tensors = append(tensors, gguf.TensorData{Name: p.Name, Type: typ, Dims: dims, Data: data})
	}
	return gguf.Write(w, meta, tensors)
}

func (d Shape) arch() string {
	if d.Arch == "" {
		return "qwen2"
	}
	return d.Arch
}

// fill says how a tensor's values are drawn.
type fill uint8

const (
	fillWeights fill = iota // a matrix: 0.02·N(0,1)
	fillOnes                // a norm: 1
	fillSmall               // a bias: 0.02·N(0,1)
	fillNorm                // a q/k norm: 1 + 0.1·N(0,1)
	fillRope                // rope_freqs: planned.fixed
	fillSink                // attention sinks: N(0,1)
)

// planned is a tensor of the model, in file order, with how it is drawn.
type planned struct {
	Tensor
	fill  fill
	fixed []float32 // fillRope's values
}

// Plan lists the tensors a demo model of shape writes with q, in file
// order, with each one's type: what llama.cpp's quantize would have chosen
// for the mixture, F32 for vectors.
func Plan(shape Shape, q Quant) ([]Tensor, error) {
	tokens, _, _ := demoVocab(2000)
	plan, err := planTensors(shape, max(len(tokens), shape.Vocab), q)
	if err != nil {
		return nil, err
	}
	out := make([]Tensor, len(plan))
	for i, p := range plan {
		out[i] = p.Tensor
	}
	return out, nil
}

// planTensors lays out the tensors of shape with a vocabulary of vocab.
func planTensors(shape Shape, vocab int, q Quant) ([]planned, error) {
	if _, ok := ggmlTypes[q.Base]; !ok {
		return nil, fmt.Errorf("weight type %v is not supported for demo models", q.Base)
	}
	arch := shape.arch()
	tied := shape.Tied || arch == "qwen2" || arch == "qwen3" || arch == "gemma2" || arch == "gemma3" // like the real ones: Qwen3-30B-A3B has its own output layer
	headDim := shape.headDim()
	qDim, kvDim := shape.Heads*headDim, shape.KVHeads*headDim
	var out []planned
	var err error
	matrix := func(name string, r role, layer, rows, cols int) {
		t, e := q.typeOf(r, layer, shape.Layers, cols, tied)
		if e != nil && err == nil {
			err = fmt.Errorf("demo tensor %s: %w", name, e)
		}
		out = append(out, planned{Tensor: Tensor{Name: name, Type: t, Rows: rows, Cols: cols}, fill: fillWeights})
	}
	vector := func(name string, n int, f fill) {
		out = append(out, planned{Tensor: Tensor{Name: name, Type: kernels.F32, Rows: 1, Cols: n}, fill: f})
	}
	matrix("token_embd.weight", roleEmbd, 0, vocab, shape.Dim)
	vector("output_norm.weight", shape.Dim, fillOnes)
	if shape.LongRopeContext > 0 {
		for _, long := range []bool{true, false} {
			name := map[bool]string{true: "rope_factors_long.weight", false: "rope_factors_short.weight"}[long]
			out = append(out, planned{Tensor: Tensor{Name: name, Type: kernels.F32, Rows: 1, Cols: headDim / 2}, fill: fillRope, fixed: shape.LongRopeFactors(long)})
		}
	}
	if shape.Llama3Rope[0] != 0 {
		out = append(out, planned{Tensor: Tensor{Name: "rope_freqs.weight", Type: kernels.F32, Rows: 1, Cols: headDim / 2}, fill: fillRope})
		out[len(out)-1].fixed = shape.ropeFactors()
	}
	if !tied {
		matrix("output.weight", roleOutput, 0, vocab, shape.Dim)
	}
	for l := range shape.Layers + shape.NextN {
		p := fmt.Sprintf("blk.%d.", l)
		vector(p+"attn_norm.weight", shape.Dim, fillOnes)
		if arch == "gpt-oss" || arch == "glm4moe" { // their FFN input norm's name
			vector(p+"post_attention_norm.weight", shape.Dim, fillOnes)
		} else {
			vector(p+"ffn_norm.weight", shape.Dim, fillOnes)
		}
		type mat struct {
			name       string
			r          role
			rows, cols int
		}
		mats := []mat{
			{"attn_q.weight", roleAttnQ, qDim, shape.Dim}, {"attn_k.weight", roleAttnK, kvDim, shape.Dim},
			{"attn_v.weight", roleAttnV, kvDim, shape.Dim}, {"attn_output.weight", roleAttnOut, shape.Dim, qDim},
		}
		if arch == "phi3" { // fused: q, k, v rows in one; gate then up rows in one
			mats = []mat{{"attn_qkv.weight", roleAttnQ, qDim + 2*kvDim, shape.Dim}, {"attn_output.weight", roleAttnOut, shape.Dim, qDim},
				{"ffn_up.weight", roleFFNUp, 2 * shape.FFNDim, shape.Dim}, {"ffn_down.weight", roleFFNDown, shape.Dim, shape.FFNDim}}
		} else if shape.Experts == 0 || l < shape.DenseLayers {
			mats = append(mats, mat{"ffn_gate.weight", roleFFNGate, shape.FFNDim, shape.Dim},
				mat{"ffn_up.weight", roleFFNUp, shape.FFNDim, shape.Dim}, mat{"ffn_down.weight", roleFFNDown, shape.Dim, shape.FFNDim})
		}
		for _, m := range mats {
			matrix(p+m.name, m.r, l, m.rows, m.cols)
		}
		if e := shape.Experts; e > 0 && l >= shape.DenseLayers {
			// The router stays F32, as llama.cpp's quantize leaves it.
			out = append(out, planned{Tensor: Tensor{Name: p + "ffn_gate_inp.weight", Type: kernels.F32, Rows: e, Cols: shape.Dim}, fill: fillWeights})
			for _, m := range []mat{
				{"ffn_gate_exps.weight", roleFFNGate, shape.ExpertFFN, shape.Dim}, {"ffn_up_exps.weight", roleFFNUp, shape.ExpertFFN, shape.Dim},
				{"ffn_down_exps.weight", roleFFNDown, shape.Dim, shape.ExpertFFN},
			} {
				matrix(p+m.name, m.r, l, e*m.rows, m.cols)
				out[len(out)-1].Experts = e
				if q.ExpertType != 0 {
					out[len(out)-1].Type = q.ExpertType
				}
			}
			if arch == "glm4moe" {
				vector(p+"exp_probs_b.bias", e, fillSmall)
			}
			if arch == "glm4moe" || arch == "qwen2moe" {
				sff := shape.SharedExperts * shape.ExpertFFN
				for _, m := range []mat{{"ffn_gate_shexp.weight", roleFFNGate, sff, shape.Dim}, {"ffn_up_shexp.weight", roleFFNUp, sff, shape.Dim},
					{"ffn_down_shexp.weight", roleFFNDown, shape.Dim, sff}} {
					matrix(p+m.name, m.r, l, m.rows, m.cols)
				}
			}
			if arch == "qwen2moe" {
				vector(p+"ffn_gate_inp_shexp.weight", shape.Dim, fillSmall)
			}
		}
		if l >= shape.Layers { // a multi-token-prediction layer's own tensors
			matrix(p+"nextn.eh_proj.weight", roleAttnOut, l, shape.Dim, 2*shape.Dim)
			vector(p+"nextn.enorm.weight", shape.Dim, fillOnes)
			vector(p+"nextn.hnorm.weight", shape.Dim, fillOnes)
		}
		if arch == "gpt-oss" {
			vector(p+"attn_q.bias", qDim, fillSmall)
			vector(p+"attn_k.bias", kvDim, fillSmall)
			vector(p+"attn_v.bias", kvDim, fillSmall)
			vector(p+"attn_output.bias", shape.Dim, fillSmall)
			vector(p+"attn_sinks.weight", shape.Heads, fillSink)
			vector(p+"ffn_gate_inp.bias", shape.Experts, fillSmall)
			for _, b := range []struct {
				name string
				n    int
			}{{"ffn_gate_exps.bias", shape.ExpertFFN}, {"ffn_up_exps.bias", shape.ExpertFFN}, {"ffn_down_exps.bias", shape.Dim}} {
				out = append(out, planned{Tensor: Tensor{Name: p + b.name, Type: kernels.F32, Rows: shape.Experts, Cols: b.n}, fill: fillSmall})
			}
		}
		switch arch {
		case "qwen2", "qwen2moe", "glm4moe":
			vector(p+"attn_q.bias", qDim, fillSmall)
			vector(p+"attn_k.bias", kvDim, fillSmall)
			vector(p+"attn_v.bias", kvDim, fillSmall)
		}
		if arch == "qwen3" || arch == "qwen3moe" || arch == "gemma3" || shape.QKNorm {
			vector(p+"attn_q_norm.weight", headDim, fillNorm)
			vector(p+"attn_k_norm.weight", headDim, fillNorm)
		}
		if arch == "gemma2" || arch == "gemma3" {
			vector(p+"post_attention_norm.weight", shape.Dim, fillNorm)
			vector(p+"post_ffw_norm.weight", shape.Dim, fillNorm)
		}
	}
	return out, err
}

// vector draws a vector tensor (or a rows × cols one of biases) as F32.
func (p planned) vector(rng *Rand) ([]byte, gguf.GGMLType) {
	b := make([]byte, 4*p.Rows*p.Cols)
	for i := range p.Rows * p.Cols {
		var v float32
		switch p.fill {
		case fillOnes:
			v = 1
		case fillSmall:
			v = 0.02 * rng.Normal()
		case fillNorm:
			v = 1 + 0.1*rng.Normal()
		case fillRope:
			v = p.fixed[i]
		case fillSink:
			v = rng.Normal()
		}
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b, gguf.F32
}

// matrix draws a weight matrix and encodes it in its type (decoded back
// to F32 when dequantized).
func (p planned) matrix(rng *Rand, dequantized bool) ([]byte, gguf.GGMLType, error) {
	n := p.Rows * p.Cols
	if n >= bigTensor {
		return randomParallel(n, p.Type, uint64(rng.next()), dequantized)
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = 0.02 * rng.Normal()
	}
	return encode(x, p.Type, dequantized)
}

// bigTensor is the size from which a demo matrix is drawn in parallel
// chunks (randomParallel): the benchmark shapes' matrices, never the test
// shapes', whose weights stay what they were.
const bigTensor = 1 << 20

// randomParallel draws n weights 0.02·N(0,1) and encodes them in type t,
// in chunks of 64Ki values (whole blocks of every type) spread over every
// core: chunk c draws from its own generator seeded by seed and c, so the
// weights do not depend on the number of cores (the Qwen2.5-0.5B shape in
// BF16: 30 s → 18 s on two busy cores; the 8B shape's gain grows with the
// cores).
func randomParallel(n int, t kernels.DType, seed uint64, dequantized bool) ([]byte, gguf.GGMLType, error) {
	const chunk = 1 << 16 // a multiple of every block size (32, 256)
	g, ok := ggmlTypes[t]
	if !ok {
		return nil, 0, fmt.Errorf("weight type %v is not supported for demo models", t)
	}
	if dequantized {
		g = gguf.F32
	}
	block, blockBytes := int(g.BlockSize()), int(g.TypeSize())
	if n%int(ggmlTypes[t].BlockSize()) != 0 {
		return nil, 0, fmt.Errorf("%d values are not whole %v blocks", n, t)
	}
	out := make([]byte, n/block*blockBytes)
	chunks := (n + chunk - 1) / chunk
	var (
		next atomic.Int64
		mu   sync.Mutex
		ferr error
		wg   sync.WaitGroup
	)
	for range runtime.NumCPU() {
		wg.Go(func() {
			x := make([]float32, chunk)
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				lo, hi := c*chunk, min((c+1)*chunk, n)
				r := Rand(seed ^ (uint64(c)+1)*0xd1b54a32d192ed03)
				xs := x[:hi-lo]
				for i := range xs {
					xs[i] = 0.02 * r.Normal()
				}
				b, _, err := encode(xs, t, dequantized)
				if err != nil {
					mu.Lock()
					ferr = cmp.Or(ferr, err)
					mu.Unlock()
					continue
				}
				copy(out[lo/block*blockBytes:], b)
			}
		})
	}
	wg.Wait()
	return out, g, ferr
}

// encode is Encode, decoded back to F32 when dequantized.
func encode(x []float32, t kernels.DType, dequantized bool) ([]byte, gguf.GGMLType, error) {
	b, g, err := Encode(x, t)
	if err != nil || !dequantized || t == kernels.F32 {
		return b, g, err
	}
	y := make([]float32, len(x))
	if err := kernels.Dequantize(t, y, b); err != nil {
		return nil, 0, fmt.Errorf("decode %v: %w", t, err)
	}
	return Encode(y, kernels.F32)
}

// Encode stores weights in type t as the demo model does (tests re-encode
// matrices with it).
func Encode(x []float32, t kernels.DType) ([]byte, gguf.GGMLType, error) {
	g, ok := ggmlTypes[t]
	if !ok {
		return nil, 0, fmt.Errorf("weight type %v is not supported for demo models", t)
	}
	n, err := t.RowBytes(len(x))
	if err != nil {
		return nil, 0, fmt.Errorf("%d values as %v: %w", len(x), t, err)
	}
	b := make([]byte, n)
	if err := kernels.Quantize(t, b, x); err != nil {
		return nil, 0, fmt.Errorf("quantize %v: %w", t, err)
	}
	return b, g, nil
}
