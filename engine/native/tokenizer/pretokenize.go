package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Pre-tokenization cuts text into words before BPE. Each stage is a regex
// split with Hugging Face's "Isolated" behaviour: matches and the gaps between
// them both become words, and every stage re-splits the words of the one
// before (as llama.cpp's unicode_regex_split does with several regexes). A
// regex only sees its own word, so a lookahead at a word's end sees the end
// of text.

// matcher returns the length in bytes of the regex match starting exactly
// at s[i:], or 0 for none.
type matcher func(s string, i int) int

// splitStage appends the words of s to dst.
type splitStage func(s string, dst []string) []string

type pipeline []splitStage

// split runs the stages over text; a and b are reusable buffers, returned
// (words first) for the next call.
func (p pipeline) split(text string, a, b []string) (words, spare []string) {
	cur := append(a[:0], text)
	for _, st := range p {
		nxt := b[:0]
		for _, s := range cur {
			nxt = st(s, nxt)
		}
		cur, b = nxt, cur
	}
	return cur, b
}

// isolated makes a stage from a matcher: the leftmost match wins, and the
// text between matches is kept as its own word.
func isolated(m matcher) splitStage {
	return func(s string, dst []string) []string {
		gap := 0
		for i := 0; i < len(s); {
			if n := m(s, i); n > 0 {
				if gap < i {
					dst = append(dst, s[gap:i])
				}
				dst = append(dst, s[i:i+n])
				i += n
				gap = i
				continue
			}
			_, w := utf8.DecodeRuneInString(s[i:])
			i += w
		}
		if gap < len(s) {
			dst = append(dst, s[gap:])
		}
		return dst
	}
}

// Character classes. \s is Unicode White_Space, \p{L} letters, \p{N}
// numbers. An invalid UTF-8 byte decodes as U+FFFD, a symbol: "other".

func decodeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || (r >= '\t' && r <= '\r')
	}
	return unicode.IsSpace(r)
}

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return (r|0x20) >= 'a' && (r|0x20) <= 'z'
	}
	return unicode.IsLetter(r)
}

func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= '0' && r <= '9'
	}
	return unicode.IsNumber(r)
}

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isSpace(r) && !isLetter(r) && !isNumber(r) }

// runLen is the byte length of the run of characters in class starting at s[i:].
func runLen(s string, i int, class func(rune) bool) int {
	j := i
	for j < len(s) {
		r, w := decodeAt(s, j)
		if !class(r) {
			break
		}
		j += w
	}
	return j - i
}

// contraction matches what follows an apostrophe in 's|'t|'re|'ve|'m|'ll|'d.
// With fold (the (?i:…) of Qwen2 and Llama 3) it matches case-insensitively
// under Unicode simple folding, where "ſ" (U+017F) is an "s".
func contraction(s string, fold bool) int {
	lower := func(c byte) byte {
		if fold && c >= 'A' && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	if len(s) == 0 {
		return 0
	}
	if fold && strings.HasPrefix(s, "ſ") {
		return len("ſ")
	}
	switch lower(s[0]) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if len(s) > 1 && lower(s[1]) == 'e' {
			return 2
		}
	case 'l':
		if len(s) > 1 && lower(s[1]) == 'l' {
			return 2
		}
	}
	return 0
}

// whitespaceTail matches, at a whitespace character, the last three
// alternatives shared by the GPT-2 family of regexes: \s+(?!\S)|\s+ — the
// whole run if it reaches the end or is one character long, else the run
// less its last character (which then leads the next word, e.g. " world").
func whitespaceTail(s string, i int) int {
	end, lastStart := i, i
	for end < len(s) {
		r, w := decodeAt(s, end)
		if !isSpace(r) {
			break
		}
		lastStart = end
		end += w
	}
	if end == len(s) || lastStart == i {
		return end - i
	}
	return lastStart - i
}

// llama3Matcher is the Llama 3 / Qwen2 pre-tokenizer regex
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxDigits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// with maxDigits 3 for Llama 3 and 1 for Qwen2. The alternatives are tried in
// order, each with the regex engine's greedy-then-backtrack choice.
func llama3Matcher(maxDigits int) matcher {
	return func(s string, i int) int {
		r, w := decodeAt(s, i)
		if r == '\'' {
			if n := contraction(s[i+1:], true); n > 0 {
				return 1 + n
			}
		}
		// [^\r\n\p{L}\p{N}]?\p{L}+
		if isLetter(r) {
			return w + runLen(s, i+w, isLetter)
		}
		if r != '\r' && r != '\n' && !isNumber(r) && i+w < len(s) {
			if r2, w2 := decodeAt(s, i+w); isLetter(r2) {
				return w + w2 + runLen(s, i+w+w2, isLetter)
			}
		}
		// \p{N}{1,maxDigits}
		if isNumber(r) {
			n, k := w, 1
			for k < maxDigits && i+n < len(s) {
				r2, w2 := decodeAt(s, i+n)
				if !isNumber(r2) {
					break
				}
				n += w2
				k++
			}
			return n
		}
		// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
		j := i
		if r == ' ' {
			j += w
		}
		if j < len(s) {
			if r2, w2 := decodeAt(s, j); isOther(r2) {
				j += w2 + runLen(s, j+w2, isOther)
				for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
					j++
				}
				return j - i
			}
		}
		if !isSpace(r) {
			return 0 // unreachable: every character is a letter, number, other or space
		}
		// \s*[\r\n]+ : the whitespace run up to and including its last CR/LF.
		lastNL := -1
		for k := i; k < len(s); {
			r2, w2 := decodeAt(s, k)
			if !isSpace(r2) {
				break
			}
			k += w2
			if r2 == '\r' || r2 == '\n' {
				lastNL = k
			}
		}
		if lastNL > 0 {
			return lastNL - i
		}
		return whitespaceTail(s, i)
	}
}

// gpt2Match is GPT-2's regex (also the ByteLevel pre-tokenizer's):
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func gpt2Match(s string, i int) int {
	r, w := decodeAt(s, i)
	if r == '\'' {
		if n := contraction(s[i+1:], false); n > 0 {
			return 1 + n
		}
	}
	j, c := i, r
	cw := w
	if r == ' ' && i+w < len(s) {
		j = i + w
		c, cw = decodeAt(s, j)
	}
	switch {
	case isLetter(c):
		return j + cw + runLen(s, j+cw, isLetter) - i
	case isNumber(c):
		return j + cw + runLen(s, j+cw, isNumber) - i
	case isOther(c):
		return j + cw + runLen(s, j+cw, isOther) - i
	}
	if isSpace(r) {
		return whitespaceTail(s, i)
	}
	return 0
}

// Simple single-class regexes used by some pre-tokenizer sequences.

// defaultPunct is [\p{P}\$\+<=>\^~\|]+.
func defaultPunct(s string, i int) int {
	return runLen(s, i, func(r rune) bool { return unicode.IsPunct(r) || strings.ContainsRune("$+<=>^~|", r) })
}

// numberRun is \p{N}+.
func numberRun(s string, i int) int { return runLen(s, i, isNumber) }

// oneNumber is \p{N}.
func oneNumber(s string, i int) int {
	if r, w := decodeAt(s, i); isNumber(r) {
		return w
	}
	return 0
}

// threeASCIIDigits is [0-9][0-9][0-9].
func threeASCIIDigits(s string, i int) int {
	if i+3 <= len(s) && isASCIIDigit(s[i]) && isASCIIDigit(s[i+1]) && isASCIIDigit(s[i+2]) {
		return 3
	}
	return 0
}

func isASCIIDigit(c byte) bool { return c >= '0' && c <= '9' }

var (
	stageQwen2  = isolated(llama3Matcher(1))
	stageLlama3 = isolated(llama3Matcher(3))
	stageGPT2   = isolated(gpt2Match)
)

// preForName maps GGUF tokenizer.ggml.pre to llama.cpp's pre-tokenizer
// regexes, and says whether the vocabulary ignores merges for words that are
// whole tokens (Llama 3).
func preForName(name string) (pipeline, bool, error) {
	switch name {
	case "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2":
		return pipeline{stageLlama3}, true, nil
	case "dbrx", "smaug-bpe", "glm4", "chatglm-bpe": // GLM-4's is Llama 3's regex, its merges always applied
		return pipeline{stageLlama3}, false, nil
	case "qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan", "kormo":
		return pipeline{stageQwen2}, false, nil
	case "gpt-2", "phi-2", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de", "mpt", "olmo", "jais", "trillion", "granite-docling":
		return pipeline{stageGPT2}, false, nil
	case "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b":
		return pipeline{isolated(oneNumber), stageGPT2}, false, nil
	case "default", "":
		return pipeline{isolated(defaultPunct), stageGPT2, isolated(numberRun), isolated(threeASCIIDigits)}, false, nil
	}
	return nil, false, fmt.Errorf("%w: pre-tokenizer %q", ErrUnsupported, name)
}
