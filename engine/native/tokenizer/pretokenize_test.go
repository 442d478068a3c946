package tokenizer

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestPreTokenizers(t *testing.T) {
	for _, tc := range []struct {
		pre  string
		in   string
		want []string
	}{
		{"qwen2", "Hello world", []string{"Hello", " world"}},
		{"qwen2", "   Hello", []string{"  ", " Hello"}},
		{"qwen2", "    Hello\n    Hello", []string{"   ", " Hello", "\n", "   ", " Hello"}},
		{"qwen2", "\n =", []string{"\n", " ="}},
		{"qwen2", "ied 4 ½ months", []string{"ied", " ", "4", " ", "½", " months"}},
		{"qwen2", "333", []string{"3", "3", "3"}},
		{"qwen2", "I'LL don't 'sup", []string{"I", "'LL", " don", "'t", " '", "sup"}},
		{"qwen2", "!!\n\nx(y", []string{"!!\n\n", "x", "(y"}},
		{"qwen2", "\tword \t\n\n  end  ", []string{"\tword", " \t\n\n", " ", " end", "  "}},
		{"qwen2", "a\r\nb", []string{"a", "\r\n", "b"}},
		{"qwen2", "'ſ", []string{"'ſ"}},
		{"llama-bpe", "1234567 x", []string{"123", "456", "7", " x"}},
		{"llama3", "Hello, y'all!", []string{"Hello", ",", " y", "'all", "!"}},
		{"glm4", "GLM 45678 y'all", []string{"GLM", " ", "456", "78", " y", "'all"}},
		{"gpt-2", "Hello, y'all! 123  x\t\ty", []string{"Hello", ",", " y", "'", "all", "!", " 123", " ", " x", "\t", "\t", "y"}},
		{"gpt-2", "I'LL", []string{"I", "'", "LL"}},
		{"gpt-2", "  ", []string{"  "}},
		{"smollm", "abc 123", []string{"abc", " ", "1", "2", "3"}},
		{"default", "Hello, world 12345!", []string{"Hello", ",", " world", " ", "123", "45", "!"}},
	} {
		p, _, err := preForName(tc.pre)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := p.split(tc.in, nil, nil)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %q:\n got %q\nwant %q", tc.pre, tc.in, got, tc.want)
		}
	}
	if _, _, err := preForName("no-such-pre"); err == nil {
		t.Error("unknown pre-tokenizer accepted")
	}
}

// The hand-written scanners must split exactly as the regex they stand for.
// The reference is the generic splitter (RE2 per alternative, the lookahead
// done by hand), run on random text.
func TestScannersMatchRegex(t *testing.T) {
	for _, tc := range []struct {
		name, pattern string
		fast          matcher
	}{
		{"qwen2", patternQwen2, llama3Matcher(1)},
		{"llama3", patternLlama3, llama3Matcher(3)},
		{"gpt2", patternGPT2, gpt2Match},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref, err := compileGeneric(tc.pattern)
			if err != nil {
				t.Fatal(err)
			}
			fast, slow := isolated(tc.fast), isolated(ref)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := 0; i < 5000; i++ {
				s := randomText(rng, 40)
				if i%10 == 0 {
					s += "\xff\xfe" + s // invalid UTF-8 too
				}
				a, b := fast(s, nil), slow(s, nil)
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("%q:\nscanner %q\n  regex %q", s, a, b)
				}
				if strings.Join(a, "") != s {
					t.Fatalf("%q: words %q do not cover the text", s, a)
				}
			}
		})
	}
}

func TestCompilePattern(t *testing.T) {
	// An unknown pattern goes through RE2; \s is Unicode White_Space.
	m, err := compilePattern(`\p{Lu}\p{Ll}*|\s+(?!\S)|\s+|\p{N}{1,2}`)
	if err != nil {
		t.Fatal(err)
	}
	got := isolated(m)("HelloWorld  42\u3000x", nil)
	want := []string{"Hello", "World", " ", " ", "42", "\u3000", "x"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, bad := range []string{`(?<=a)b`, `a(?=b)`, `[\S]`, `(`} {
		if _, err := compilePattern(bad); err == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
}
