package chat

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Names under which this package's filters are passed to templates (the
// library looks unknown filter names up among the render variables). The
// leading underscores keep them out of the way of template variables.
const (
	tojsonFilter = "__batchd_tojson"
	strFilter    = "__batchd_str"
)

// normalise rewrites a chat template into an equivalent one that
// github.com/ardanlabs/jinja renders the way Python Jinja2 (as configured by
// transformers: trim_blocks, lstrip_blocks, keep_trailing_newline off)
// renders the original.
//
// The library applies whitespace control (the "-" markers, trim_blocks and
// lstrip_blocks) to the nearest text segment before or after a tag even when
// other tags sit in between, so "{% for m in messages %}{{ m }}\n{% endfor %}"
// loses its newlines and "Effort: {{ x }}{%- endif %}" its space. normalise
// therefore lexes the template the way Jinja2's lexer does, applies
// Jinja2's whitespace rules itself, and emits a template with no whitespace
// markers in which no text segment begins or ends with whitespace (such
// whitespace is emitted as string-literal output instead), leaving the
// library's trimming nothing to act on. Comments are dropped and raw blocks
// become string literals; newlines removed along the way are kept in empty
// comments so that error messages keep their line numbers.
//
// It also makes output and the string filter use Python's str() (floats as
// "1.0", None as "None", Python reprs inside lists and dicts), and tojson
// transformers' json.dumps-based filter.
func normalise(src string) (string, error) {
	// Jinja2 normalises newlines and drops one trailing newline.
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n")

	var out strings.Builder
	n := &normaliser{src: src, out: &out, lineStarting: true}
	if err := n.run(); err != nil {
		return "", err
	}
	return out.String(), nil
}

type normaliser struct {
	src string
	pos int
	out *strings.Builder
	// lineStarting is Jinja2's line_starting: whether the text that
	// follows the previous tag starts at the beginning of a line.
	lineStarting bool
	// lostNewlines counts newlines removed by whitespace control that
	// have not yet been re-emitted in a comment.
	lostNewlines int
}

var rawBeginRE = regexp.MustCompile(`^\{%[-+]?\s*raw\s*(-%\}\s*|%\})`)
var endRawRE = regexp.MustCompile(`\{%([-+]?)\s*endraw\s*(\+%\}|-%\}\s*|%\}\n?)`)

func (n *normaliser) line() int { return strings.Count(n.src[:n.pos], "\n") + 1 }

func (n *normaliser) run() error {
	for n.pos < len(n.src) {
		open := n.nextOpener(n.pos)
		if open < 0 {
			n.text(n.src[n.pos:])
			n.pos = len(n.src)
			break
		}
		text := n.src[n.pos:open]
		kind := n.src[open+1] // '{', '%' or '#'
		var sign byte
		if open+2 < len(n.src) && (n.src[open+2] == '-' || n.src[open+2] == '+') {
			sign = n.src[open+2]
		}
		// Whitespace control of the text before the tag.
		text = n.leftStrip(text, sign, kind != '{')
		n.text(text)
		n.pos = open

		if kind == '%' {
			if m := rawBeginRE.FindStringSubmatch(n.src[n.pos:]); m != nil {
				if err := n.raw(m[0]); err != nil {
					return err
				}
				continue
			}
		}
		if err := n.tag(kind, sign); err != nil {
			return err
		}
	}
	n.flushNewlines()
	return nil
}

// nextOpener returns the index of the next "{{", "{%" or "{#" at or after
// from, or -1.
func (n *normaliser) nextOpener(from int) int {
	for i := from; i+1 < len(n.src); i++ {
		if n.src[i] == '{' {
			switch n.src[i+1] {
			case '{', '%', '#':
				return i
			}
		}
	}
	return -1
}

// leftStrip applies the whitespace control of a tag to the text before it:
// "-" strips all trailing whitespace; otherwise, for block and comment tags
// without "+", lstrip_blocks strips the spaces between the last line start
// and the tag.
func (n *normaliser) leftStrip(text string, sign byte, block bool) string {
	switch {
	case sign == '-':
		stripped := strings.TrimRightFunc(text, isPySpace)
		n.lostNewlines += strings.Count(text[len(stripped):], "\n")
		return stripped
	case sign != '+' && block:
		l := strings.LastIndexByte(text, '\n') + 1
		if (l > 0 || n.lineStarting) && l < len(text) && strings.TrimLeftFunc(text[l:], isPySpace) == "" {
			return text[:l]
		}
	}
	return text
}

// tag copies one {{ }}, {% %} or {# #} tag starting at n.pos, minus its
// whitespace markers, and consumes the whitespace its end strips.
func (n *normaliser) tag(kind, sign byte) error {
	start := n.pos
	i := start + 2
	if sign != 0 {
		i++
	}
	closer := map[byte]string{'{': "}}", '%': "%}", '#': "#}"}[kind]
	contentStart := i
	var contentEnd, end int
	var rsign byte
	found := false
	for i < len(n.src) {
		c := n.src[i]
		if kind != '#' && (c == '\'' || c == '"') {
			i = skipString(n.src, i)
			continue
		}
		if strings.HasPrefix(n.src[i:], closer) {
			contentEnd, end = i, i+2
			if i > contentStart {
				switch p := n.src[i-1]; {
				case p == '-':
					rsign, contentEnd = '-', i-1
				case p == '+' && kind != '{':
					rsign, contentEnd = '+', i-1
				}
			}
			found = true
			break
		}
		i++
	}
	if !found {
		what := map[byte]string{'{': "expression", '%': "statement", '#': "comment"}[kind]
		n.pos = start
		return fmt.Errorf("line %d: unclosed %s tag", n.line(), what)
	}
	content := n.src[contentStart:contentEnd]

	// Whitespace the tag's end strips: "-" takes all of it; trim_blocks
	// takes one newline after block and comment tags.
	consumedTo := end
	switch {
	case rsign == '-':
		rest := n.src[end:]
		consumedTo = end + len(rest) - len(strings.TrimLeftFunc(rest, isPySpace))
	case rsign == 0 && kind != '{' && strings.HasPrefix(n.src[end:], "\n"):
		consumedTo = end + 1
	}
	n.lineStarting = strings.HasSuffix(n.src[start:consumedTo], "\n")
	n.pos = consumedTo

	n.flushNewlines()
	switch kind {
	case '#':
		n.lostNewlines += strings.Count(content, "\n")
	case '%':
		n.out.WriteString("{%")
		n.out.WriteString(rewriteFilters(content))
		n.out.WriteString("%}")
	case '{':
		n.out.WriteString("{{")
		if strings.TrimSpace(content) == "" {
			n.out.WriteString(content)
		} else {
			// Print with Python's str().
			n.out.WriteString(" (")
			n.out.WriteString(rewriteFilters(content))
			n.out.WriteString(")|" + strFilter + " ")
		}
		n.out.WriteString("}}")
	}
	n.lostNewlines += strings.Count(n.src[end:consumedTo], "\n")
	return nil
}

// raw handles {% raw %}...{% endraw %} starting at n.pos, whose begin tag is
// begin: the content is emitted as a string literal.
func (n *normaliser) raw(begin string) error {
	start := n.pos
	n.pos += len(begin)
	n.lostNewlines += strings.Count(begin, "\n")
	n.lineStarting = strings.HasSuffix(begin, "\n")
	loc := endRawRE.FindStringSubmatchIndex(n.src[n.pos:])
	if loc == nil {
		n.pos = start
		return fmt.Errorf("line %d: raw block without endraw", n.line())
	}
	content := n.src[n.pos : n.pos+loc[0]]
	var sign byte
	if loc[3] > loc[2] {
		sign = n.src[n.pos+loc[2]]
	}
	content = n.leftStrip(content, sign, true)
	endTag := n.src[n.pos+loc[0] : n.pos+loc[1]]
	n.lostNewlines += strings.Count(endTag, "\n")
	n.lineStarting = strings.HasSuffix(endTag, "\n")
	n.pos += loc[1]
	n.literal(content)
	return nil
}

// skipString returns the index after the string literal starting at i.
func skipString(s string, i int) int {
	q := s[i]
	i++
	for i < len(s) && s[i] != q {
		if s[i] == '\\' {
			i++
		}
		i++
	}
	return min(i+1, len(s))
}

// text emits template text so that it starts and ends with no whitespace
// the library could trim: edge whitespace becomes string-literal output.
func (n *normaliser) text(s string) {
	if s == "" {
		return
	}
	isWS := func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }
	body := strings.TrimLeftFunc(s, isWS)
	lead := s[:len(s)-len(body)]
	mid := strings.TrimRightFunc(body, isWS)
	trail := body[len(mid):]
	if strings.HasSuffix(mid, "{") {
		// "{" followed by an emitted tag would open a tag.
		n.literal(s)
		return
	}
	n.literal(lead)
	n.flushNewlines()
	n.out.WriteString(mid)
	n.literal(trail)
}

// literal emits s as a string-literal output tag. Newlines stay raw inside
// the literal, so line numbers are preserved.
func (n *normaliser) literal(s string) {
	if s == "" {
		return
	}
	n.flushNewlines()
	n.out.WriteString(`{{ "`)
	for _, r := range s {
		switch r {
		case '\\':
			n.out.WriteString(`\\`)
		case '"':
			n.out.WriteString(`\"`)
		case '\t':
			n.out.WriteString(`\t`)
		default:
			n.out.WriteRune(r)
		}
	}
	n.out.WriteString(`" }}`)
}

// flushNewlines emits the newlines removed so far in an empty comment.
func (n *normaliser) flushNewlines() {
	if n.lostNewlines > 0 {
		n.out.WriteString("{#")
		n.out.WriteString(strings.Repeat("\n", n.lostNewlines))
		n.out.WriteString("#}")
		n.lostNewlines = 0
	}
}

// isPySpace is Python's str.isspace for one character (also what \s matches
// in Jinja2's lexer).
func isPySpace(r rune) bool {
	return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f
}

// filterRE matches a use of the tojson or string filter.
var filterRE = regexp.MustCompile(`\|(\s*)(tojson|string)\b`)

// rewriteFilters points the tojson and string filters in tag content, outside
// string literals, at this package's implementations.
func rewriteFilters(content string) string {
	var b strings.Builder
	rewrite := func(code string) {
		b.WriteString(filterRE.ReplaceAllStringFunc(code, func(m string) string {
			if strings.HasSuffix(m, "tojson") {
				return "|" + tojsonFilter
			}
			return "|" + strFilter
		}))
	}
	last := 0
	for i := 0; i < len(content); {
		if c := content[i]; c == '\'' || c == '"' {
			rewrite(content[last:i])
			j := skipString(content, i)
			b.WriteString(content[i:j])
			i, last = j, j
			continue
		}
		_, size := utf8.DecodeRuneInString(content[i:])
		i += size
	}
	rewrite(content[last:])
	return b.String()
}
