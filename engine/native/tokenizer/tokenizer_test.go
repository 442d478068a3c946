package tokenizer

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

type namedTokenizer struct {
	name string
	get  func(testing.TB) *Tokenizer
	spm  bool
}

var allTokenizers = []namedTokenizer{
	{"synthetic-spm", func(testing.TB) *Tokenizer { return syntheticSPMOnce() }, true},
	{"synthetic-bpe", func(testing.TB) *Tokenizer { return syntheticBPEOnce() }, false},
	{"stories260K", storiesTokenizer, true},
	{"qwen3", qwen3Tokenizer, false},
	{"qwen3-gguf", qwen3GGUFTokenizer, false},
}

// Encode→Decode gives the text back, for random text of many scripts. (A
// SentencePiece vocabulary cannot tell "▁" from a space, so that character is
// left out for it.)
func TestRoundTrip(t *testing.T) {
	for _, nt := range allTokenizers {
		t.Run(nt.name, func(t *testing.T) {
			tok := nt.get(t)
			rng := rand.New(rand.NewPCG(3, 4))
			for i := 0; i < 2000; i++ {
				s := randomText(rng, 60)
				for _, parse := range []bool{false, true} {
					ids := tok.Encode(s, false, parse)
					if got := tok.DecodeWith(ids, DecodeOpts{Special: true}); got != s {
						t.Fatalf("parseSpecial=%v: Decode(Encode(%q)) = %q (ids %v)", parse, s, got, ids)
					}
				}
				ids := tok.Encode(s, true, false)
				if got := tok.Decode(ids); got != s {
					t.Fatalf("with BOS: Decode(Encode(%q)) = %q", s, got)
				}
			}
		})
	}
}

// Characters outside a SentencePiece vocabulary fall back to byte tokens.
func TestSPMByteFallback(t *testing.T) {
	tok := syntheticSPMOnce()
	ids := tok.Encode("ꙮ", false, false) // U+A66E, not in the vocabulary: 3 byte tokens after "▁"
	want := []int32{tok.textID["▁"], tok.byteTok[0xEA], tok.byteTok[0x99], tok.byteTok[0xAE]}
	if !reflect.DeepEqual(ids, want) {
		t.Fatalf("Encode(ꙮ) = %v, want %v", ids, want)
	}
	if got := tok.Decode(ids); got != "ꙮ" {
		t.Fatalf("Decode = %q", got)
	}
}

// The stream decoder never returns invalid UTF-8, and what it returns, put
// together, is Decode of the same ids, for texts whose emoji/CJK characters
// are split over byte tokens, and for random id sequences.
func TestDecoderMatchesDecode(t *testing.T) {
	texts := []string{
		"🦙 llama 🚀 rocket 😀 日本語 👍🏽 ❤️ 🇩🇪 ꙮ ok",
		"a日b本c語d🦙e",
		"", " ", "  leading spaces", "\n\nnewlines\n",
	}
	for _, nt := range allTokenizers {
		t.Run(nt.name, func(t *testing.T) {
			tok := nt.get(t)
			rng := rand.New(rand.NewPCG(5, 6))
			check := func(ids []int32, opts DecodeOpts) {
				t.Helper()
				d := tok.NewDecoderWith(opts)
				var sb strings.Builder
				for _, id := range ids {
					s := d.Next(id)
					if !utf8.ValidString(s) {
						t.Fatalf("Next(%d) = %q: invalid UTF-8 (ids %v)", id, s, ids)
					}
					sb.WriteString(s)
				}
				f := d.Flush()
				if !utf8.ValidString(f) {
					t.Fatalf("Flush = %q: invalid UTF-8", f)
				}
				sb.WriteString(f)
				if want := tok.DecodeWith(ids, opts); sb.String() != want {
					t.Fatalf("ids %v: Decoder gave %q, Decode %q", ids, sb.String(), want)
				}
			}
			splitBytes := 0
			for _, s := range texts {
				ids := tok.Encode(s, true, false)
				for _, id := range ids {
					if p := tok.TokenBytes(id); len(p) > 0 && !utf8.Valid(p) {
						splitBytes++
					}
				}
				check(ids, DecodeOpts{})
				check(ids, DecodeOpts{Special: true})
			}
			if splitBytes == 0 {
				t.Errorf("no token of the test texts holds a partial character: the test proves nothing")
			}
			for i := 0; i < 3000; i++ {
				ids := make([]int32, rng.IntN(12))
				for k := range ids {
					ids[k] = rng.Int32N(int32(tok.VocabSize()) + 2) // a few out of range too
				}
				check(ids, DecodeOpts{Special: i%2 == 0})
			}
		})
	}
}

// A character whose bytes arrive in separate tokens comes out whole, once.
func TestDecoderHoldsPartialCharacter(t *testing.T) {
	tok := syntheticSPMOnce()
	d := tok.NewDecoder()
	var got []string
	for _, b := range []byte("🦙") {
		got = append(got, d.Next(tok.byteTok[b]))
	}
	if want := []string{"", "", "", "🦙"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("pieces %q, want %q", got, want)
	}
	// A truncated character is flushed as one U+FFFD per byte.
	d.Next(tok.byteTok[0xF0])
	d.Next(tok.byteTok[0x9F])
	if f := d.Flush(); f != "\uFFFD\uFFFD" {
		t.Fatalf("Flush = %q", f)
	}
	// A byte that cannot continue the held ones releases them as U+FFFD.
	d.Next(tok.byteTok[0xE6])
	if s := d.Next(tok.byteTok['A']); s != "\uFFFDA" {
		t.Fatalf("Next = %q", s)
	}
}

// After Prime(prompt), a generated "▁word" keeps its space; without it the
// SentencePiece leading space is stripped as at the start of any text.
func TestDecoderPrime(t *testing.T) {
	tok := syntheticSPMOnce()
	prompt := tok.Encode("Once upon", true, false)
	gen := tok.Encode("a time", false, false) // "▁a ▁time", as a model would generate it
	d := tok.NewDecoder()
	d.Prime(prompt)
	var sb strings.Builder
	for _, id := range gen {
		sb.WriteString(d.Next(id))
	}
	if sb.String() != " a time" {
		t.Errorf("primed decoder = %q, want %q", sb.String(), " a time")
	}
	if full, p := tok.Decode(append(prompt, gen...)), tok.Decode(prompt); full != p+sb.String() {
		t.Errorf("Decode(prompt+gen) = %q, Decode(prompt) + stream = %q", full, p+sb.String())
	}
	// Unprimed, the first piece loses its leading space, as Decode does.
	d = tok.NewDecoder()
	if s := d.Next(gen[0]); s != "a" {
		t.Errorf("unprimed first piece %q, want %q", s, "a")
	}
	// Priming keeps an incomplete character to finish it.
	d = tok.NewDecoder()
	d.Prime([]int32{tok.byteTok[0xE6], tok.byteTok[0x97]})
	if s := d.Next(tok.byteTok[0xA5]); s != "日" {
		t.Errorf("after priming half of 日: %q", s)
	}
}

func TestParseSpecial(t *testing.T) {
	for _, nt := range []namedTokenizer{allTokenizers[1], allTokenizers[3], allTokenizers[4]} {
		t.Run(nt.name, func(t *testing.T) {
			tok := nt.get(t)
			start, _ := tok.TokenID("<|im_start|>")
			end, _ := tok.TokenID("<|im_end|>")
			think, ok := tok.TokenID("<think>")
			if !ok {
				t.Fatal("no <think>")
			}
			text := "<|im_start|>user\nhi<think><|im_end|>x"
			on := tok.Encode(text, false, true)
			if on[0] != start || !contains(on, end) || !contains(on, think) {
				t.Errorf("parseSpecial: %v lacks <|im_start|>/<|im_end|>/<think>", on)
			}
			off := tok.Encode(text, false, false)
			if contains(off, start) || contains(off, end) {
				t.Errorf("no parseSpecial: %v holds control tokens", off)
			}
			if !contains(off, think) {
				t.Errorf("no parseSpecial: %v lacks the user-defined <think>", off)
			}
			if got := tok.Decode(off); got != text {
				t.Errorf("Decode(plain) = %q", got)
			}
			if got, want := tok.Decode(on), "user\nhi<think>x"; got != want {
				t.Errorf("Decode skips control tokens: %q, want %q", got, want)
			}
			if got := tok.DecodeWith(on, DecodeOpts{Special: true}); got != text {
				t.Errorf("DecodeWith(Special) = %q", got)
			}
			if got := string(tok.TokenBytes(end)); got != "<|im_end|>" {
				t.Errorf("TokenBytes(<|im_end|>) = %q", got)
			}
			// Longest match: "<|im_start|>" is not read as a shorter token.
			if got := tok.Encode("<|im_start|><|im_start|>", false, true); !reflect.DeepEqual(got, []int32{start, start}) {
				t.Errorf("two specials: %v", got)
			}
		})
	}
}

func contains(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func TestSpecialTokensSPM(t *testing.T) {
	for _, nt := range []namedTokenizer{allTokenizers[0], allTokenizers[2]} {
		t.Run(nt.name, func(t *testing.T) {
			tok := nt.get(t)
			// llama.cpp: "▁" again after a special token.
			on := tok.Encode("hi</s>hi", true, true)
			plain := tok.Encode("hi", false, false)
			want := append(append(append([]int32{1}, plain...), 2), plain...)
			if !reflect.DeepEqual(on, want) {
				t.Errorf("parseSpecial: %v, want %v", on, want)
			}
			if off := tok.Encode("hi</s>hi", true, false); contains(off[1:], 1) || contains(off, 2) {
				t.Errorf("no parseSpecial: %v holds control tokens", off)
			}
			if !tok.IsEOG(2) || tok.IsEOG(1) || tok.IsEOG(0) || tok.IsEOG(-1) || tok.IsEOG(1<<20) {
				t.Error("IsEOG")
			}
			if tok.BOS() != 1 || tok.EOS() != 2 {
				t.Errorf("BOS/EOS %d/%d", tok.BOS(), tok.EOS())
			}
			if got := string(tok.TokenBytes(1)); got != "<s>" {
				t.Errorf("TokenBytes(BOS) = %q", got)
			}
			if got := tok.TokenBytes(tok.byteTok[0x0A]); string(got) != "\n" {
				t.Errorf("TokenBytes(<0x0A>) = %q", got)
			}
		})
	}
}

func TestQwen3Config(t *testing.T) {
	tok := qwen3Tokenizer(t)
	id := func(s string) int32 {
		v, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return v
	}
	if tok.VocabSize() != 151669 {
		t.Errorf("VocabSize = %d, want 151669", tok.VocabSize())
	}
	if tok.BOS() != -1 || tok.EOS() != id("<|im_end|>") || tok.EOS() != 151645 {
		t.Errorf("BOS/EOS = %d/%d", tok.BOS(), tok.EOS())
	}
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		if !tok.IsEOG(id(s)) {
			t.Errorf("IsEOG(%s) false", s)
		}
	}
	for _, s := range []string{"<|im_start|>", "<think>", "Ġthe"} {
		if tok.IsEOG(id(s)) {
			t.Errorf("IsEOG(%s) true", s)
		}
	}
	if got := tok.Encode("Hello", true, false); !reflect.DeepEqual(got, []int32{9707}) {
		t.Errorf("addSpecial adds nothing for Qwen: %v", got)
	}
	if got := string(tok.TokenBytes(id("Ġthe"))); got != " the" {
		t.Errorf("TokenBytes(Ġthe) = %q", got)
	}
	// Without a config there is no EOS, but end-of-turn tokens still end generation.
	tj, _, err := readQwen3Files(envDir(t, envQwen3, "Qwen3's tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	bare, err := FromHF(tj, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bare.EOS() != -1 || !bare.IsEOG(151645) || !bare.IsEOG(151643) {
		t.Errorf("without config: EOS %d, IsEOG %v %v", bare.EOS(), bare.IsEOG(151645), bare.IsEOG(151643))
	}
}

// A small tokenizer.json exercising what Qwen's does not: a Llama 3 style
// TemplateProcessing BOS, ignore_merges, array merges, lstrip/rstrip.
func TestFromHFSmall(t *testing.T) {
	var vocab []string
	for b := 0; b < 256; b++ {
		vocab = append(vocab, byteRuneStr[b])
	}
	vocab = append(vocab, "ab", "abc", "Ġab")
	var sb strings.Builder
	sb.WriteString(`{"model":{"type":"BPE","ignore_merges":true,"vocab":{`)
	for i, v := range vocab {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(strconvQuote(v) + ":" + itoa(i))
	}
	sb.WriteString(`},"merges":[["a","b"],["Ġ","ab"]]},
	"added_tokens":[{"id":300,"content":"<|begin_of_text|>","special":true},{"id":301,"content":"<mask>","special":true,"lstrip":true}],
	"normalizer":null,
	"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"` + jsonEscape(patternLlama3) + `"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]},
	"post_processor":{"type":"Sequence","processors":[{"type":"ByteLevel"},{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<|begin_of_text|>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}]}]},
	"decoder":{"type":"ByteLevel"}}`)
	tok, err := FromHF([]byte(sb.String()), nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok.BOS() != 300 || tok.VocabSize() != 302 {
		t.Fatalf("BOS %d, VocabSize %d", tok.BOS(), tok.VocabSize())
	}
	abc, ab, gab := int32(257), int32(256), int32(258)
	for _, tc := range []struct {
		in   string
		want []int32
	}{
		{"abc", []int32{300, abc}},     // ignore_merges: the word is a token
		{"abd", []int32{300, ab, 'd'}}, // merges
		{" ab", []int32{300, gab}},
		{"x  <mask>", []int32{300, 'x', 301}}, // lstrip eats the spaces before <mask>
	} {
		if got := tok.Encode(tc.in, true, true); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	// The config can turn the BOS off.
	tok2, err := FromHF([]byte(sb.String()), []byte(`{"add_bos_token":false,"eos_token":{"content":"<mask>","__type":"AddedToken"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok2.Encode("abc", true, false); !reflect.DeepEqual(got, []int32{abc}) || tok2.EOS() != 301 || !tok2.IsEOG(301) {
		t.Errorf("config: %v, EOS %d", got, tok2.EOS())
	}
}

func strconvQuote(s string) string { return `"` + jsonEscape(s) + `"` }

func jsonEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[r>>4])
			b.WriteByte("0123456789abcdef"[r&15])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var d []byte
	for ; i > 0; i /= 10 {
		d = append([]byte{byte('0' + i%10)}, d...)
	}
	return string(d)
}

func TestErrors(t *testing.T) {
	good := syntheticBPESpec(20)
	for _, tc := range []struct {
		name string
		mut  func(*Spec)
		want error
	}{
		{"no tokens", func(s *Spec) { s.Tokens = nil }, ErrInvalidSpec},
		{"bad model", func(s *Spec) { s.Model = "wordpiece" }, ErrUnsupported},
		{"bad pre", func(s *Spec) { s.Pre = "klingon" }, ErrUnsupported},
		{"types length", func(s *Spec) { s.Types = s.Types[1:] }, ErrInvalidSpec},
		{"scores length", func(s *Spec) { s.Scores = []float32{1} }, ErrInvalidSpec},
		{"bos range", func(s *Spec) { s.BOS = len(s.Tokens) }, ErrInvalidSpec},
		{"merge without space", func(s *Spec) { s.Merges = append([]string{"ab"}, s.Merges...) }, ErrInvalidSpec},
	} {
		s := good
		s.Tokens = append([]string(nil), good.Tokens...)
		tc.mut(&s)
		if _, err := New(s); !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct{ name, json string }{
		{"wordpiece", `{"model":{"type":"WordPiece","vocab":{}}}`},
		{"metaspace", `{"model":{"type":"BPE","vocab":{"a":0}},"pre_tokenizer":{"type":"Metaspace"}}`},
		{"no byte level", `{"model":{"type":"BPE","vocab":{"a":0}}}`},
		{"nfkc", `{"model":{"type":"BPE","vocab":{"a":0}},"normalizer":{"type":"NFKC"},"pre_tokenizer":{"type":"ByteLevel"}}`},
		{"byte fallback", `{"model":{"type":"BPE","byte_fallback":true,"vocab":{"a":0}}}`},
		{"lookbehind", `{"model":{"type":"BPE","vocab":{"a":0}},"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(?<=a)b"},"behavior":"Isolated"}}`},
	} {
		if _, err := FromHF([]byte(tc.json), nil); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: err %v, want ErrUnsupported", tc.name, err)
		}
	}
	if _, err := FromHF([]byte(`{`), nil); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("bad json: %v", err)
	}
}

// Encoding is safe from many goroutines (the word cache is shared).
func TestConcurrentEncode(t *testing.T) {
	tok := syntheticBPEOnce()
	want := tok.Encode(syntheticCorpus, false, false)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if got := tok.Encode(syntheticCorpus, false, false); !reflect.DeepEqual(got, want) {
					t.Error("concurrent Encode differs")
					return
				}
			}
		}()
	}
	wg.Wait()
}

// New (GGUF layout) and FromHF (tokenizer.json) agree on the same vocabulary.
func TestQwen3NewMatchesFromHF(t *testing.T) {
	a, b := qwen3Tokenizer(t), qwen3GGUFTokenizer(t)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 2000; i++ {
		s := randomText(rng, 80)
		if x, y := a.Encode(s, false, true), b.Encode(s, false, true); !reflect.DeepEqual(x, y) {
			t.Fatalf("%q: FromHF %v, New %v", s, x, y)
		}
	}
}

// TestHarmonyEOG: a vocabulary with gpt-oss's <|return|> and <|call|> ends
// generation on those and not on <|end|>, which closes the analysis
// message before the final answer (llama.cpp does the same); without them
// <|end|> (Phi-3's end of turn) still ends it.
func TestHarmonyEOG(t *testing.T) {
	build := func(extra ...string) *Tokenizer {
		tokens := []string{"<unk>", "<s>", "</s>", "a", "b"}
		types := []int32{TypeUnknown, TypeControl, TypeControl, TypeNormal, TypeNormal}
		for _, s := range extra {
			tokens, types = append(tokens, s), append(types, TypeControl)
		}
		scores := make([]float32, len(tokens))
		tok, err := New(Spec{Model: "llama", Tokens: tokens, Scores: scores, Types: types, BOS: 1, EOS: 2, UNK: 0, PAD: -1})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	harmony := build("<|start|>", "<|end|>", "<|return|>", "<|call|>")
	if harmony.IsEOG(6) || !harmony.IsEOG(7) || !harmony.IsEOG(8) || harmony.IsEOG(5) {
		t.Errorf("harmony: <|end|> %v, <|return|> %v, <|call|> %v, <|start|> %v", harmony.IsEOG(6), harmony.IsEOG(7), harmony.IsEOG(8), harmony.IsEOG(5))
	}
	if phi := build("<|end|>"); !phi.IsEOG(5) {
		t.Error("without harmony's tokens <|end|> does not end generation")
	}
}
