package wire

import "bytes"

// A scanner over JSON held in a byte slice: it slices raw values out in
// place, with no reflection and no allocation, for the paths every request
// takes (the validator's, the remote engine's key check, the pipeline's
// usage). Every function stays in bounds on any input, but only gives
// meaningful answers on valid JSON; callers check validity first, or
// confirm what the scanner finds another way.

// SkipSpace returns the index of the first non-whitespace byte at or after i.
func SkipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// StringEnd returns the index just past the closing quote of the string
// that opens at b[i].
func StringEnd(b []byte, i int) int {
	i++
	for i < len(b) {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		i += j
		// The quote is escaped when an odd run of backslashes precedes it.
		bs := 0
		for k := i - 1; k >= 0 && b[k] == '\\'; k-- {
			bs++
		}
		i++
		if bs%2 == 0 {
			return i
		}
	}
	return len(b)
}

// ValueEnd returns the index just past the value that starts at b[i].
func ValueEnd(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = StringEnd(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	default:
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return i
			}
			i++
		}
		return i
	}
}

// Members iterates over the members of a JSON object.
type Members struct {
	b  []byte
	i  int
	ks int // where the last key returned starts
}

// NewMembers starts iterating the object obj (leading whitespace allowed);
// a value that is not an object has no members.
func NewMembers(obj []byte) Members { return Members{b: obj, i: pastOpening(obj, '{')} }

// pastOpening returns the index just past b's opening delimiter open
// (leading whitespace allowed), or len(b) when b does not open with it.
func pastOpening(b []byte, open byte) int {
	i := SkipSpace(b, 0)
	if i < len(b) && b[i] == open {
		return i + 1
	}
	return len(b)
}

// Next returns the next member: its key with quotes, and the offsets of its
// raw value in the object.
func (m *Members) Next() (key []byte, vs, ve int, ok bool) {
	b := m.b
	i := SkipSpace(b, m.i)
	if i < len(b) && b[i] == ',' {
		i = SkipSpace(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		m.i = len(b)
		return nil, 0, 0, false
	}
	ke := StringEnd(b, i)
	m.ks = i
	key = b[i:ke]
	i = SkipSpace(b, ke)
	if i >= len(b) || b[i] != ':' {
		m.i = len(b)
		return nil, 0, 0, false
	}
	vs = SkipSpace(b, i+1)
	ve = ValueEnd(b, vs)
	m.i = ve
	return key, vs, ve, vs < ve
}

// KeyStart is the offset in the object of the key Next returned last.
func (m *Members) KeyStart() int { return m.ks }

// Elements iterates over the elements of a JSON array.
type Elements struct {
	b []byte
	i int
}

// NewElements starts iterating the array arr (leading whitespace allowed);
// a value that is not an array has no elements.
func NewElements(arr []byte) Elements { return Elements{b: arr, i: pastOpening(arr, '[')} }

// Next returns the next element's raw value.
func (e *Elements) Next() ([]byte, bool) {
	b := e.b
	i := SkipSpace(b, e.i)
	if i < len(b) && b[i] == ',' {
		i = SkipSpace(b, i+1)
	}
	if i >= len(b) || b[i] == ']' {
		e.i = len(b)
		return nil, false
	}
	end := ValueEnd(b, i)
	e.i = end
	return b[i:end], i < end
}
