package chat

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// tojsonMaxDepth stops runaway recursion on self-referencing lists or dicts
// a template may build with append/update.
const tojsonMaxDepth = 512

// filterToJSON is transformers' tojson filter:
//
//	def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
//	    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
//	                      separators=separators, sort_keys=sort_keys)
//
// reproduced byte-for-byte, including Python's float repr and string
// escaping.
func filterToJSON(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("tojson: missing value")
	}
	param := func(pos int, name string) (jinja.Value, bool) {
		if v, ok := kwargs[name]; ok {
			return v, true
		}
		if pos < len(args) {
			return args[pos], true
		}
		return jinja.Undefined(), false
	}

	var enc jsonEncoder
	if v, ok := param(1, "ensure_ascii"); ok {
		enc.ensureASCII = v.IsTruthy()
	}
	if v, ok := param(2, "indent"); ok && !v.IsNone() && !v.IsUndefined() {
		enc.indented = true
		switch {
		case v.IsString():
			enc.indent = v.AsString()
		case v.IsInt(), v.IsBool():
			n := int64(0)
			if v.IsBool() && v.AsBool() {
				n = 1
			} else if v.IsInt() {
				n = v.AsInt()
			}
			if n > 64 {
				return jinja.Undefined(), fmt.Errorf("tojson: indent %d is too large", n)
			}
			if n > 0 {
				enc.indent = strings.Repeat(" ", int(n))
			}
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: indent must be an integer or a string, not %s", v.String())
		}
	}
	enc.itemSep, enc.keySep = ", ", ": "
	if enc.indented {
		enc.itemSep = ","
	}
	if v, ok := param(3, "separators"); ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Items[0].IsString() || !v.AsList().Items[1].IsString() {
			return jinja.Undefined(), errors.New("tojson: separators must be a pair of strings")
		}
		enc.itemSep = v.AsList().Items[0].AsString()
		enc.keySep = v.AsList().Items[1].AsString()
	}
	if v, ok := param(4, "sort_keys"); ok {
		enc.sortKeys = v.IsTruthy()
	}

	if err := enc.value(args[0], 0); err != nil {
		return jinja.Undefined(), fmt.Errorf("tojson: %w", err)
	}
	return jinja.NewString(enc.b.String()), nil
}

type jsonEncoder struct {
	b           strings.Builder
	ensureASCII bool
	indented    bool
	indent      string
	itemSep     string
	keySep      string
	sortKeys    bool
}

func (e *jsonEncoder) newline(depth int) {
	if !e.indented {
		return
	}
	e.b.WriteByte('\n')
	for range depth {
		e.b.WriteString(e.indent)
	}
}

func (e *jsonEncoder) value(v jinja.Value, depth int) error {
	if depth > tojsonMaxDepth {
		return fmt.Errorf("value nested deeper than %d levels (circular?)", tojsonMaxDepth)
	}
	switch {
	case v.IsNone(), v.IsUndefined():
		e.b.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			e.b.WriteString("true")
		} else {
			e.b.WriteString("false")
		}
	case v.IsInt():
		e.b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		e.b.WriteString(pyFloatRepr(v.AsFloat()))
	case v.IsString():
		e.str(v.AsString())
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			e.b.WriteString("[]")
			return nil
		}
		e.b.WriteByte('[')
		for i, item := range items {
			if i > 0 {
				e.b.WriteString(e.itemSep)
			}
			e.newline(depth + 1)
			if err := e.value(item, depth+1); err != nil {
				return err
			}
		}
		e.newline(depth)
		e.b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		keys := d.Keys
		if len(keys) == 0 {
			e.b.WriteString("{}")
			return nil
		}
		if e.sortKeys {
			keys = append([]string(nil), keys...)
			sort.Strings(keys) // UTF-8 byte order is code point order, as in Python
		}
		e.b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				e.b.WriteString(e.itemSep)
			}
			e.newline(depth + 1)
			e.str(k)
			e.b.WriteString(e.keySep)
			val, _ := d.Get(k)
			if err := e.value(val, depth+1); err != nil {
				return err
			}
		}
		e.newline(depth)
		e.b.WriteByte('}')
	default:
		return fmt.Errorf("object of type %s is not JSON serializable", v.String())
	}
	return nil
}

const hexDigits = "0123456789abcdef"

func (e *jsonEncoder) u4(r rune) {
	e.b.WriteString(`\u`)
	e.b.WriteByte(hexDigits[r>>12&0xf])
	e.b.WriteByte(hexDigits[r>>8&0xf])
	e.b.WriteByte(hexDigits[r>>4&0xf])
	e.b.WriteByte(hexDigits[r&0xf])
}

// str writes s as Python's json.dumps does: only '"', '\\' and control
// characters are escaped (short forms \n \r \t \b \f, else \u00XX), and with
// ensure_ascii everything outside ' '..'~' as \uXXXX (surrogate pairs above
// U+FFFF). Invalid UTF-8 is written as U+FFFD.
func (e *jsonEncoder) str(s string) {
	e.b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch r {
		case '"':
			e.b.WriteString(`\"`)
		case '\\':
			e.b.WriteString(`\\`)
		case '\n':
			e.b.WriteString(`\n`)
		case '\r':
			e.b.WriteString(`\r`)
		case '\t':
			e.b.WriteString(`\t`)
		case '\b':
			e.b.WriteString(`\b`)
		case '\f':
			e.b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				e.u4(r)
			case !e.ensureASCII || r <= '~':
				e.b.WriteRune(r)
			case r > 0xffff:
				r -= 0x10000
				e.u4(0xd800 + r>>10)
				e.u4(0xdc00 + r&0x3ff)
			default:
				e.u4(r)
			}
		}
	}
	e.b.WriteByte('"')
}

// pyFloatRepr formats f as Python's repr(float) (which json.dumps uses):
// the shortest digits that round-trip, in fixed notation with at least one
// fractional digit when the decimal exponent is in [-4, 16), else in
// scientific notation with a signed exponent of at least two digits.
func pyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64) // e.g. "-1.25e-07"
	exp, err := strconv.Atoi(sci[strings.IndexByte(sci, 'e')+1:])
	if err == nil && (exp < -4 || exp >= 16) {
		return sci
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}
