package chat

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/ardanlabs/jinja"
)

// filterStr is Python's str(), used for {{ ... }} output and the string
// filter: floats print as repr (1.0, 1e-05), None as "None", lists and
// dicts as Python reprs.
func filterStr(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("string: missing value")
	}
	v := args[0]
	if v.IsString() {
		return v, nil
	}
	var b strings.Builder
	pyStr(&b, v, false, 0)
	return jinja.NewString(b.String()), nil
}

// pyStr writes str(v), or repr(v) when repr is set (elements of lists and
// dicts are written with repr).
func pyStr(b *strings.Builder, v jinja.Value, repr bool, depth int) {
	if depth > tojsonMaxDepth {
		b.WriteString("[...]")
		return
	}
	switch {
	case v.IsUndefined():
		if repr {
			b.WriteString("Undefined")
		}
	case v.IsNone():
		b.WriteString("None")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(pyFloatStr(v.AsFloat()))
	case v.IsString():
		if repr {
			pyReprString(b, v.AsString())
		} else {
			b.WriteString(v.AsString())
		}
	case v.IsList():
		b.WriteByte('[')
		for i, item := range v.AsList().Items {
			if i > 0 {
				b.WriteString(", ")
			}
			pyStr(b, item, true, depth+1)
		}
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		b.WriteByte('{')
		for i, k := range d.Keys {
			if i > 0 {
				b.WriteString(", ")
			}
			pyReprString(b, k)
			b.WriteString(": ")
			val, _ := d.Get(k)
			pyStr(b, val, true, depth+1)
		}
		b.WriteByte('}')
	default:
		b.WriteString(v.String())
	}
}

// pyFloatStr is Python's str(float).
func pyFloatStr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return pyFloatRepr(f)
}

// pyReprString writes Python's repr of a string: single quotes unless the
// string contains a single quote and no double quote; backslash, the quote,
// \n, \r, \t escaped; other non-printable characters as \xNN, \uNNNN or
// \UNNNNNNNN.
func pyReprString(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(q):
			b.WriteByte('\\')
			b.WriteByte(q)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == ' ' || unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			b.WriteString(`\x`)
			b.WriteString(leftPad(strconv.FormatInt(int64(r), 16), 2))
		case r < 0x10000:
			b.WriteString(`\u`)
			b.WriteString(leftPad(strconv.FormatInt(int64(r), 16), 4))
		default:
			b.WriteString(`\U`)
			b.WriteString(leftPad(strconv.FormatInt(int64(r), 16), 8))
		}
	}
	b.WriteByte(q)
}

func leftPad(s string, n int) string {
	return strings.Repeat("0", max(0, n-len(s))) + s
}
