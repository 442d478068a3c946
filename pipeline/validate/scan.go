package validate

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"github.com/batchd/batchd/wire"
)

// This file walks JSON that json.Valid has already accepted, slicing raw
// values out of it in place: no reflection, no allocation on the common path.
// Every function stays in bounds on any input (the fuzz targets feed it
// garbage through DocReader), but only gives meaningful answers on valid JSON.
// The scanner itself is wire's (wire/scan.go), shared with the engines.

// skipSpace returns the index of the first non-whitespace byte at or after i.
func skipSpace(b []byte, i int) int { return wire.SkipSpace(b, i) }

// members iterates over the members of a JSON object.
type members struct{ wire.Members }

// newMembers starts iterating the object obj (leading whitespace allowed).
func newMembers(obj []byte) members { return members{wire.NewMembers(obj)} }

// next returns the next member: its key with quotes, and the offsets of its
// raw value in the object.
func (m *members) next() (key []byte, vs, ve int, ok bool) { return m.Next() }

// elements iterates over the elements of a JSON array.
type elements struct{ wire.Elements }

func newElements(arr []byte) elements { return elements{wire.NewElements(arr)} }

// next returns the next element's raw value.
func (e *elements) next() ([]byte, bool) { return e.Next() }

// unquote returns the contents of the JSON string s (with its quotes). Strings
// without escapes come back as a subslice of s; others are decoded into a new
// slice.
func unquote(s []byte) ([]byte, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return nil, false
	}
	in := s[1 : len(s)-1]
	if bytes.IndexByte(in, '\\') < 0 {
		return in, true
	}
	var str string
	if err := json.Unmarshal(s, &str); err != nil {
		return nil, false
	}
	return []byte(str), true
}

// loneSurrogate reports whether s, a raw JSON string token, escapes half a
// UTF-16 surrogate pair without the other half ("\ud800", "\udfff"). JSON
// decoders replace such a half with U+FFFD, so two different strings decode
// to one: where identity matters (custom_id), that is refused, not decoded.
// The scan runs only over a string holding a backslash.
func loneSurrogate(s []byte) bool {
	if bytes.IndexByte(s, '\\') < 0 {
		return false
	}
	high := false // the escape before was a high surrogate
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			if high {
				return true
			}
			continue
		}
		if i+1 >= len(s) || s[i+1] != 'u' {
			if high {
				return true
			}
			i++ // a two-byte escape (\\, \", \n, ...)
			continue
		}
		r, ok := hex4(s[i+2:])
		if !ok {
			return false // not valid JSON: the parser reports it
		}
		i += 5
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if high {
				return true
			}
			high = true
		case r >= 0xDC00 && r < 0xE000:
			if !high {
				return true
			}
			high = false
		default:
			if high {
				return true
			}
		}
	}
	return high
}

// hex4 decodes the four hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// typeName names the JSON type of a raw value for messages.
func typeName(v []byte) string { return wire.TypeName(v) }

func isNull(v []byte) bool   { return len(v) == 4 && v[0] == 'n' }
func isString(v []byte) bool { return len(v) > 0 && v[0] == '"' }
func isObject(v []byte) bool { return len(v) > 0 && v[0] == '{' }
func isArray(v []byte) bool  { return len(v) > 0 && v[0] == '[' }
func isBool(v []byte) bool   { return len(v) > 0 && (v[0] == 't' || v[0] == 'f') }
func isTrue(v []byte) bool   { return len(v) == 4 && v[0] == 't' }
func isNumber(v []byte) bool { return len(v) > 0 && (v[0] == '-' || (v[0] >= '0' && v[0] <= '9')) }

// given reports whether a body value counts as set: present and not null.
func given(v []byte) bool { return len(v) > 0 && !isNull(v) }

// parseFloat parses a JSON number; ok is false for non-numbers and for
// numbers too large for a float64.
func parseFloat(v []byte) (float64, bool) {
	if !isNumber(v) {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

type intStatus int

const (
	intOK intStatus = iota
	intNotNumber
	intNotInteger
	intOverflow
)

// parseInt parses a JSON number that must be an integer. Integral numbers in
// any notation count (2.0 and 2e0 are 2), as JSON does not tell them apart.
func parseInt(v []byte) (int64, intStatus) {
	if !isNumber(v) {
		return 0, intNotNumber
	}
	if !bytes.ContainsAny(v, ".eE") {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return 0, intOverflow
		}
		return n, intOK
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, intOverflow
	}
	if f != math.Trunc(f) {
		return 0, intNotInteger
	}
	if f < -(1<<63) || f >= 1<<63 {
		return 0, intOverflow
	}
	return int64(f), intOK
}
