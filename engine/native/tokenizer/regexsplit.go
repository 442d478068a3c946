package tokenizer

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// Known tokenizer.json Split patterns, served by the hand-written scanners.
const (
	patternQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// knownPatternMatcher returns the hand-written scanner for a pattern, if any.
func knownPatternMatcher(pattern string) matcher {
	switch pattern {
	case patternQwen2:
		return llama3Matcher(1)
	case patternLlama3:
		return llama3Matcher(3)
	case patternGPT2, strings.TrimSuffix(patternGPT2, `|\s+`):
		return gpt2Match
	}
	return nil
}

// compilePattern turns an arbitrary tokenizer.json Split regex into a
// matcher. Go's regexp (RE2) has no lookaround, so the one lookaround these
// patterns use, a top-level alternative \s+(?!\S), is done by hand and every
// other alternative is compiled on its own, anchored; trying them in order at
// a position is what a backtracking engine does with a top-level alternation.
// \s and \S are rewritten to Unicode White_Space (RE2's \s is ASCII only).
func compilePattern(pattern string) (matcher, error) {
	if m := knownPatternMatcher(pattern); m != nil {
		return m, nil
	}
	return compileGeneric(pattern)
}

// compileGeneric is compilePattern without the hand-written fast paths.
func compileGeneric(pattern string) (matcher, error) {
	var alts []matcher
	for _, alt := range topLevelAlternatives(pattern) {
		if alt == `\s+(?!\S)` {
			alts = append(alts, wsNotBeforeNonSpace)
			continue
		}
		if strings.Contains(alt, "(?=") || strings.Contains(alt, "(?!") || strings.Contains(alt, "(?<") {
			return nil, fmt.Errorf("%w: lookaround in pre-tokenizer regex %q", ErrUnsupported, pattern)
		}
		tr, err := translateSpaceClasses(alt)
		if err != nil {
			return nil, fmt.Errorf("%w: pre-tokenizer regex %q: %v", ErrUnsupported, pattern, err)
		}
		re, err := regexp.Compile(`^(?:` + tr + `)`)
		if err != nil {
			return nil, fmt.Errorf("%w: pre-tokenizer regex %q: %v", ErrUnsupported, pattern, err)
		}
		alts = append(alts, func(s string, i int) int {
			if loc := re.FindStringIndex(s[i:]); loc != nil {
				return loc[1] // an empty match counts as none
			}
			return 0
		})
	}
	return func(s string, i int) int {
		for _, a := range alts {
			if n := a(s, i); n > 0 {
				return n
			}
		}
		return 0
	}, nil
}

// wsNotBeforeNonSpace is \s+(?!\S): the whitespace run, less its last
// character when a non-space follows.
func wsNotBeforeNonSpace(s string, i int) int {
	if r, _ := decodeAt(s, i); !isSpace(r) {
		return 0
	}
	end, lastStart := i, i
	for end < len(s) {
		r, w := decodeAt(s, end)
		if !isSpace(r) {
			break
		}
		lastStart = end
		end += w
	}
	if end == len(s) {
		return end - i
	}
	return lastStart - i // 0 for a one-character run: no match
}

// topLevelAlternatives splits a regex at the | outside groups and classes.
func topLevelAlternatives(p string) []string {
	var alts []string
	depth, start, inClass := 0, 0, false
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '\\':
			i++
		case inClass:
			if c == ']' {
				inClass = false
			}
		case c == '[':
			inClass = true
			if i+1 < len(p) && p[i+1] == '^' {
				i++
			}
			if i+1 < len(p) && p[i+1] == ']' {
				i++ // a leading ] is literal
			}
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == '|' && depth == 0:
			alts = append(alts, p[start:i])
			start = i + 1
		}
	}
	return append(alts, p[start:])
}

// whiteSpaceClass is Unicode White_Space as the body of an RE2 class.
var whiteSpaceClass = func() string {
	var b strings.Builder
	for _, rg := range unicode.White_Space.R16 {
		for r := rune(rg.Lo); r <= rune(rg.Hi); r += rune(rg.Stride) {
			fmt.Fprintf(&b, `\x{%x}`, r)
		}
	}
	for _, rg := range unicode.White_Space.R32 {
		for r := rune(rg.Lo); r <= rune(rg.Hi); r += rune(rg.Stride) {
			fmt.Fprintf(&b, `\x{%x}`, r)
		}
	}
	return b.String()
}()

// translateSpaceClasses rewrites \s and \S for RE2.
func translateSpaceClasses(p string) (string, error) {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			next := p[i+1]
			i++
			switch {
			case next == 's' && inClass:
				b.WriteString(whiteSpaceClass)
			case next == 's':
				b.WriteString("[" + whiteSpaceClass + "]")
			case next == 'S' && inClass:
				return "", fmt.Errorf(`\S inside a character class`)
			case next == 'S':
				b.WriteString("[^" + whiteSpaceClass + "]")
			default:
				b.WriteByte('\\')
				b.WriteByte(next)
			}
		case inClass:
			b.WriteByte(c)
			if c == ']' {
				inClass = false
			}
		case c == '[':
			b.WriteByte(c)
			inClass = true
			if i+1 < len(p) && p[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(p) && p[i+1] == ']' {
				b.WriteByte(']')
				i++
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
