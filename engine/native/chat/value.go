package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// maxDepth bounds the nesting of decoded JSON so that hostile input cannot
// exhaust the stack here or in the engine's recursive walks (tojson, ==).
const maxDepth = 256

// decodeJSON decodes one JSON document into a jinja value, keeping object
// keys in document order (duplicate keys: the last value wins, at the first
// key's position, like Python's json.loads). Integers become ints when they
// fit in int64, other numbers floats.
func decodeJSON(data []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("unexpected data after the JSON value")
		}
		return jinja.Undefined(), err
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxDepth {
		return jinja.Undefined(), fmt.Errorf("JSON nested deeper than %d levels", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(t), nil
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		return numberValue(t), nil
	case json.Delim:
		switch t {
		case '[':
			items := []jinja.Value{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return jinja.Undefined(), err
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				key, ok := kt.(string)
				if !ok {
					return jinja.Undefined(), fmt.Errorf("object key is %T, not a string", kt)
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(key, v)
			}
			if _, err := dec.Token(); err != nil { // '}'
				return jinja.Undefined(), err
			}
			return d, nil
		}
	}
	return jinja.Undefined(), fmt.Errorf("unexpected JSON token %v", tok)
}

func numberValue(n json.Number) jinja.Value {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := n.Int64(); err == nil {
			return jinja.NewInt(i)
		}
	}
	// Out of range values become ±Inf (or 0), as in Python's json.loads;
	// json.Number has already validated the syntax.
	f, _ := strconv.ParseFloat(s, 64)
	return jinja.NewFloat(f)
}

// toValue converts an Options.Extra value.
func toValue(v any) (jinja.Value, error) {
	switch x := v.(type) {
	case json.RawMessage:
		return decodeJSON(x)
	case jinja.Value:
		return x, nil
	case float32:
		return jinja.NewFloat(float64(x)), nil
	case int8:
		return jinja.NewInt(int64(x)), nil
	case int16:
		return jinja.NewInt(int64(x)), nil
	case int32:
		return jinja.NewInt(int64(x)), nil
	case uint8:
		return jinja.NewInt(int64(x)), nil
	case uint16:
		return jinja.NewInt(int64(x)), nil
	case uint32:
		return jinja.NewInt(int64(x)), nil
	}
	val := jinja.FromGoValue(v)
	if val.IsUndefined() {
		return val, fmt.Errorf("unsupported type %T", v)
	}
	return val, nil
}

// decodeMessages decodes and normalises the messages array (see doc.go).
func decodeMessages(raw json.RawMessage, keepParts bool) (jinja.Value, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return jinja.Undefined(), errors.New("messages: missing")
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("messages: %w", err)
	}
	if !v.IsList() {
		return jinja.Undefined(), errors.New("messages: not a JSON array")
	}
	for i, m := range v.AsList().Items {
		if err := normaliseMessage(m, keepParts); err != nil {
			return jinja.Undefined(), fmt.Errorf("messages[%d]: %w", i, err)
		}
	}
	return v, nil
}

func normaliseMessage(m jinja.Value, keepParts bool) error {
	if !m.IsDict() {
		return errors.New("not a JSON object")
	}
	d := m.AsDict()
	role, ok := d.Get("role")
	if !ok || !role.IsString() {
		return errors.New("role: missing or not a string")
	}

	content, ok := d.Get("content")
	switch {
	case !ok || content.IsNone():
		d.Set("content", jinja.NewString(""))
	case content.IsString():
	case content.IsList():
		text, err := joinParts(content)
		if err != nil {
			return fmt.Errorf("content: %w", err)
		}
		if !keepParts {
			d.Set("content", jinja.NewString(text))
		}
	default:
		return errors.New("content: must be a string, null or an array of content parts")
	}

	if calls, ok := d.Get("tool_calls"); ok && calls.IsList() {
		for i, c := range calls.AsList().Items {
			if err := decodeArguments(c); err != nil {
				return fmt.Errorf("tool_calls[%d]: %w", i, err)
			}
		}
	}
	return nil
}

// joinParts validates a content parts array and returns its text parts
// joined with "\n".
func joinParts(parts jinja.Value) (string, error) {
	var b strings.Builder
	for i, p := range parts.AsList().Items {
		if !p.IsDict() {
			return "", fmt.Errorf("part %d: not a JSON object", i)
		}
		pd := p.AsDict()
		typ, _ := pd.Get("type")
		if !typ.IsString() {
			return "", fmt.Errorf("part %d: type: missing or not a string", i)
		}
		if typ.AsString() != "text" {
			return "", fmt.Errorf("part %d: content part type %q is not supported (text only)", i, typ.AsString())
		}
		text, _ := pd.Get("text")
		if !text.IsString() {
			return "", fmt.Errorf("part %d: text: missing or not a string", i)
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(text.AsString())
	}
	return b.String(), nil
}

// decodeArguments turns function.arguments given as a JSON string holding an
// object into that object.
func decodeArguments(call jinja.Value) error {
	if !call.IsDict() {
		return errors.New("not a JSON object")
	}
	fn, ok := call.AsDict().Get("function")
	if !ok || !fn.IsDict() {
		return nil
	}
	args, ok := fn.AsDict().Get("arguments")
	if !ok || !args.IsString() {
		return nil
	}
	s := strings.TrimSpace(args.AsString())
	if !strings.HasPrefix(s, "{") {
		return nil
	}
	obj, err := decodeJSON([]byte(s))
	if err != nil || !obj.IsDict() {
		return nil // not JSON: leave the string for the template
	}
	fn.AsDict().Set("arguments", obj)
	return nil
}

// decodeTools decodes the tools array; absent, null and empty become none.
func decodeTools(raw json.RawMessage) (jinja.Value, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return jinja.None(), nil
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("tools: %w", err)
	}
	switch {
	case v.IsNone():
		return jinja.None(), nil
	case !v.IsList():
		return jinja.Undefined(), errors.New("tools: not a JSON array")
	case v.AsList().Len() == 0:
		return jinja.None(), nil
	}
	for i, tool := range v.AsList().Items {
		if !tool.IsDict() {
			return jinja.Undefined(), fmt.Errorf("tools[%d]: not a JSON object", i)
		}
	}
	return v, nil
}
