package openai

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/batchd/batchd/wire"
)

// replaceModel returns a copy of body, a JSON object, whose top-level
// "model" members all have the value model (one is added first when there
// is none). Every other byte is kept as given, so field order, spacing and
// number spelling reach the server unchanged.
func replaceModel(body []byte, model string) ([]byte, error) {
	value, err := json.Marshal(model)
	if err != nil {
		return nil, fmt.Errorf("encode model: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("read body: not a JSON object")
	}
	open := int(dec.InputOffset()) // just past '{'
	type span struct{ start, end int }
	var spans []span
	members := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("read body: %w", err)
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("read body member %q: %w", key, err)
		}
		members++
		if key == "model" {
			end := int(dec.InputOffset())
			spans = append(spans, span{end - len(raw), end})
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, fmt.Errorf("read body: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("read body: data after the JSON object")
	}

	out := make([]byte, 0, len(body)+len(value)+10)
	if len(spans) == 0 {
		out = append(out, body[:open]...)
		out = append(out, `"model":`...)
		out = append(out, value...)
		if members > 0 {
			out = append(out, ',')
		}
		return append(out, body[open:]...), nil
	}
	prev := 0
	for _, s := range spans {
		out = append(out, body[prev:s.start]...)
		out = append(out, value...)
		prev = s.end
	}
	return append(out, body[prev:]...), nil
}

// errorBody returns body when it is an OpenAI error object {"error":{...}},
// and otherwise an OpenAI error object whose message is the server's text
// (or, for a JSON object with a string "message", as older vLLM sends, that
// message), so a refusal always reaches the error file in one shape.
func errorBody(status int, body []byte) []byte {
	var probe struct {
		Error json.RawMessage `json:"error"`
		// Message and Type: older vLLM answers {"object":"error","message":...}.
		Message *string `json:"message"`
		Type    *string `json:"type"`
	}
	trimmed := bytes.TrimSpace(body)
	isJSON := json.Valid(trimmed)
	if isJSON && json.Unmarshal(trimmed, &probe) == nil && bytes.HasPrefix(bytes.TrimSpace(probe.Error), []byte("{")) {
		return body
	}
	detail := wire.Error{Type: wire.TypeInvalidRequest}
	var text string
	switch {
	case isJSON && json.Unmarshal(probe.Error, &text) == nil && text != "":
		detail.Message = text
	case isJSON && probe.Message != nil:
		detail.Message = *probe.Message
		if probe.Type != nil && *probe.Type != "" {
			detail.Type = *probe.Type
		}
	case len(trimmed) > 0:
		detail.Message = strings.ToValidUTF8(string(trimmed), string(utf8.RuneError))
	default:
		detail.Message = fmt.Sprintf("%d %s", status, http.StatusText(status))
	}
	return wire.ErrorBody{Error: detail}.JSON()
}

// requestID returns the id for a response without an x-request-id: "req_"
// and 24 hex digits derived from the endpoint and custom_id, so a rerun of
// the same request gets the same id.
func requestID(endpoint, customID string) string {
	h := sha256.New()
	h.Write([]byte(endpoint))
	h.Write([]byte{0})
	h.Write([]byte(customID))
	return "req_" + hex.EncodeToString(h.Sum(nil))[:24]
}

// snippet returns the start of a body for an error message.
func snippet(body []byte) string {
	const limit = 256
	// Only the start is converted: an answer may be hundreds of MiB.
	body = bytes.TrimSpace(body)
	if len(body) > limit+utf8.UTFMax {
		body = body[:limit+utf8.UTFMax]
	}
	s := strings.ToValidUTF8(string(body), string(utf8.RuneError))
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
