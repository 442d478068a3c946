package tokenizer

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

var fuzzSeeds = []string{
	"", " ", "Hello world", "  Hello\n\n\tworld  ", "I'LL don't 'sup", "1234567890",
	"🦙🚀 日本語 ½ Ⅻ", "<|im_start|>user\nhi<|im_end|>", "<think>x</think>", "\xff\xfe\xe6\x97",
	"a\u0301\u200d\u3000\u00a0b", strings.Repeat("ab", 300),
}

// byteLevelForFuzz: the Qwen3 tokenizer when its directory is set, and the
// synthetic one always.
func byteLevelForFuzz(f *testing.F) []*Tokenizer {
	toks := []*Tokenizer{syntheticBPEOnce()}
	if os.Getenv(envQwen3) != "" {
		toks = append(toks, qwen3Tokenizer(f))
	}
	return toks
}

// FuzzEncode: Encode never panics; for valid UTF-8 the byte-level tokenizer
// gives the text back exactly; the stream decoder agrees with Decode and
// writes only valid UTF-8.
func FuzzEncode(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	toks := byteLevelForFuzz(f)
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range toks {
			for _, parse := range []bool{false, true} {
				ids := tok.Encode(s, true, parse)
				dec := tok.DecodeWith(ids, DecodeOpts{Special: true})
				if !utf8.ValidString(dec) {
					t.Fatalf("Decode gave invalid UTF-8 %q", dec)
				}
				if utf8.ValidString(s) && dec != s {
					t.Fatalf("parseSpecial=%v: Decode(Encode(%q)) = %q", parse, s, dec)
				}
				d := tok.NewDecoderWith(DecodeOpts{Special: true})
				var sb strings.Builder
				for _, id := range ids {
					sb.WriteString(d.Next(id))
				}
				sb.WriteString(d.Flush())
				if sb.String() != dec {
					t.Fatalf("Decoder %q != Decode %q", sb.String(), dec)
				}
			}
		}
	})
}

// FuzzEncodeSPM: the same for the SentencePiece tokenizer, on text without
// "▁" (which it cannot tell from a space).
func FuzzEncodeSPM(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	toks := []*Tokenizer{syntheticSPMOnce()}
	if os.Getenv(envStories) != "" {
		toks = append(toks, storiesTokenizer(f))
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range toks {
			ids := tok.Encode(s, true, false)
			dec := tok.Decode(ids)
			if !utf8.ValidString(dec) {
				t.Fatalf("Decode gave invalid UTF-8 %q", dec)
			}
			if utf8.ValidString(s) && !strings.Contains(s, "▁") && dec != s {
				t.Fatalf("Decode(Encode(%q)) = %q", s, dec)
			}
		}
	})
}

// FuzzScanners: the hand-written pre-tokenizers split exactly as their regexes.
func FuzzScanners(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	type pair struct{ fast, ref splitStage }
	var pairs []pair
	for _, p := range []struct {
		pattern string
		m       matcher
	}{{patternQwen2, llama3Matcher(1)}, {patternLlama3, llama3Matcher(3)}, {patternGPT2, gpt2Match}} {
		ref, err := compileGeneric(p.pattern)
		if err != nil {
			f.Fatal(err)
		}
		pairs = append(pairs, pair{isolated(p.m), isolated(ref)})
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i, p := range pairs {
			if a, b := p.fast(s, nil), p.ref(s, nil); !reflect.DeepEqual(a, b) {
				t.Fatalf("pattern %d on %q: scanner %q, regex %q", i, s, a, b)
			}
		}
	})
}
