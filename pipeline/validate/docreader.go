package validate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// DocError is a structural error in a requests document: it is not an
// object, is truncated, has an unknown or misplaced key. Offset is the byte
// offset at which it was found.
type DocError struct {
	Offset int64
	Err    error
}

func (e *DocError) Error() string {
	return "requests document: " + e.Err.Error() + " (at byte " + strconv.FormatInt(e.Offset, 10) + ")"
}

func (e *DocError) Unwrap() error { return e.Err }

// Keys of a requests document.
const (
	docKeyURL          = "url"
	docKeyDefaults     = "defaults"
	docKeySystemPrompt = "system_prompt"
	docKeySaveKV       = "save_system_prompt_kv_cache"
	docKeyRequests     = "requests"
)

// maxDocKeyBytes bounds a top-level key; maxDocHeaderBytes is the least room
// a header value (defaults, system_prompt) gets.
const (
	maxDocKeyBytes    = 1 << 10
	maxDocHeaderBytes = 1 << 20
)

type docState int

const (
	docStart    docState = iota // nothing read yet
	docRequests                 // inside requests[]
	docDone                     // past the end
)

// DocReader is the Source of a requests document (NAME.json):
//
//	{
//	  "url": "/v1/chat/completions",            // optional: the requests' default endpoint
//	  "defaults": {"max_tokens": 256, ...},     // optional: body fields under each request's body
//	  "system_prompt": "You are ...",           // optional: chat only
//	  "save_system_prompt_kv_cache": true,      // optional: for the native engine
//	  "requests": [ ... ]                       // required, and last
//	}
//
// It streams: requests[] is never held whole, only one request (at most
// maxRequestBytes; longer ones are reported tooLong, skipped and the next one
// read). To stay streaming, every other key must come before "requests": a
// key after it is a structural error ("\"defaults\" must come before
// \"requests\""), reported when the reader reaches it, i.e. after the
// requests before it were yielded. Callers that must not act on a document
// that turns out malformed can read it through once first. Unknown keys and
// repeated keys are structural errors too.
//
// Each request is either a full batch line ({"custom_id", "method"?, "url"?,
// "body"}: it has a "body" key) or a shorthand body ({"custom_id",
// "messages"|"prompt"|"input", ...}: every key but custom_id, method and url
// goes to the body). It is turned into a canonical batch line
// {"custom_id","method","url","body"} that a Checker validates like a JSONL
// line:
//   - a missing or null custom_id becomes "request-N", N the request's 1-based
//     index (a clash with an explicit id is then a duplicate_custom_id);
//   - a missing method is "POST"; a missing url is the document's url, or, for
//     a shorthand in a document without one, the endpoint its messages,
//     prompt or input key implies (chat when none);
//   - the document's defaults are merged under the body like batch defaults
//     (see Config); batch-level defaults then apply under both;
//   - for chat, a system_prompt is prepended as {"role":"system"} to a
//     non-empty messages array whose first message is not a system or
//     developer message.
//
// An element that is not a valid JSON object is yielded as it is, so the
// Checker reports invalid_json_line for its index.
type DocReader struct {
	br    *bufio.Reader
	max   int
	off   int64
	state docState
	err   error
	n     int

	ep       endpoint // the document's url; chat when not given
	urlGiven bool
	system   []byte // the system prompt as a JSON string; nil when none
	saveKV   bool
	seen     map[string]bool
	defaults defaultSet

	// Scratch, reused between requests.
	el, out, shorthand, sysBuf, merged []byte
	fields                             [numFields][]byte
	plan                               mergePlan
}

var _ Source = (*DocReader)(nil)

// NewDocReader returns a DocReader over r that accepts requests of at most
// maxRequestBytes bytes (DefaultMaxLineBytes when maxRequestBytes <= 0).
func NewDocReader(r io.Reader, maxRequestBytes int) *DocReader {
	if maxRequestBytes <= 0 {
		maxRequestBytes = DefaultMaxLineBytes
	}
	return &DocReader{
		br:   bufio.NewReaderSize(r, readBufferSize),
		max:  maxRequestBytes,
		ep:   epChat,
		seen: make(map[string]bool),
	}
}

// SaveSystemPromptKVCache reports the document's save_system_prompt_kv_cache;
// it is known once Next has been called.
func (d *DocReader) SaveSystemPromptKVCache() bool { return d.saveKV }

// Next implements Source.
func (d *DocReader) Next() (int, []byte, bool, error) {
	if d.err != nil {
		return 0, nil, false, d.err
	}
	n, raw, tooLong, err := d.next()
	if err != nil {
		d.err = err
		return 0, nil, false, err
	}
	return n, raw, tooLong, nil
}

func (d *DocReader) next() (int, []byte, bool, error) {
	if d.state == docStart {
		if err := d.readHeader(); err != nil {
			return 0, nil, false, err
		}
	}
	if d.state == docDone {
		return 0, nil, false, io.EOF
	}
	c, err := d.skipSpace()
	if err != nil {
		return 0, nil, false, err
	}
	if c == ']' {
		if err := d.readTail(); err != nil {
			return 0, nil, false, err
		}
		d.state = docDone
		return 0, nil, false, io.EOF
	}
	if d.n > 0 {
		if c != ',' {
			return 0, nil, false, d.errorf("expected ',' or ']' after request %d, got %q", d.n, c)
		}
	} else {
		d.unreadByte()
	}
	d.n++
	el, tooLong, err := d.readValue(d.el[:0], d.max)
	if err != nil {
		return 0, nil, false, err
	}
	if tooLong {
		return d.n, nil, true, nil
	}
	d.el = el
	return d.n, d.convert(el), false, nil
}

// readHeader reads up to and including the '[' of requests[].
func (d *DocReader) readHeader() error {
	c, err := d.skipSpace()
	if err != nil {
		return err
	}
	if c != '{' {
		return d.errorf("must be a JSON object, got %q", c)
	}
	for first := true; ; first = false {
		c, err := d.skipSpace()
		if err != nil {
			return err
		}
		if c == '}' {
			return d.errorf(`missing "requests"`)
		}
		if !first {
			if c != ',' {
				return d.errorf("expected ',' or '}' after a value, got %q", c)
			}
		} else {
			d.unreadByte()
		}
		key, err := d.readKey()
		if err != nil {
			return err
		}
		if key == docKeyRequests {
			c, err := d.skipSpace()
			if err != nil {
				return err
			}
			if c != '[' {
				return d.errorf(`"requests" must be an array, got %q`, c)
			}
			d.state = docRequests
			return nil
		}
		if err := d.readOption(key); err != nil {
			return err
		}
	}
}

// readKey reads `"key":` and returns the key.
func (d *DocReader) readKey() (string, error) {
	raw, tooLong, err := d.readValue(nil, maxDocKeyBytes)
	if err != nil {
		return "", err
	}
	if tooLong || !isString(raw) {
		return "", d.errorf("expected a key")
	}
	var key string
	if err := json.Unmarshal(raw, &key); err != nil {
		return "", d.errorf("bad key: %v", err)
	}
	c, err := d.skipSpace()
	if err != nil {
		return "", err
	}
	if c != ':' {
		return "", d.errorf("expected ':' after key %q, got %q", key, c)
	}
	return key, nil
}

// readOption reads the value of a key before requests[].
func (d *DocReader) readOption(key string) error {
	switch key {
	case docKeyURL, docKeyDefaults, docKeySystemPrompt, docKeySaveKV:
	default:
		return d.errorf("unknown key %q", key)
	}
	if d.seen[key] {
		return d.errorf("repeated key %q", key)
	}
	d.seen[key] = true
	v, tooLong, err := d.readValue(nil, max(d.max, maxDocHeaderBytes))
	if err != nil {
		return err
	}
	if tooLong {
		return d.errorf("%q is too long", key)
	}
	if !json.Valid(v) {
		return d.errorf("%q is not valid JSON", key)
	}
	if isNull(v) {
		return nil
	}
	switch key {
	case docKeyURL:
		var u string
		if json.Unmarshal(v, &u) != nil {
			return d.errorf(`"url" must be a string, got %s`, typeName(v))
		}
		ep := endpointOf([]byte(u))
		if ep == 0 {
			return d.errorf(`"url" must be one of /v1/chat/completions, /v1/completions, /v1/embeddings, got %q`, u)
		}
		d.ep, d.urlGiven = ep, true
	case docKeyDefaults:
		var m map[string]json.RawMessage
		if json.Unmarshal(v, &m) != nil {
			return d.errorf(`"defaults" must be an object, got %s`, typeName(v))
		}
		if err := (Config{Defaults: m}).Validate(); err != nil {
			return d.errorf("defaults: %w", err)
		}
		d.defaults = compileDefaults(m)
	case docKeySystemPrompt:
		if !isString(v) {
			return d.errorf(`"system_prompt" must be a string, got %s`, typeName(v))
		}
		if len(v) > 2 {
			d.system = v
		}
	case docKeySaveKV:
		if !isBool(v) {
			return d.errorf(`%q must be a boolean, got %s`, docKeySaveKV, typeName(v))
		}
		d.saveKV = isTrue(v)
	}
	return nil
}

// readTail reads what follows requests[]: the closing brace, then nothing.
func (d *DocReader) readTail() error {
	c, err := d.skipSpace()
	if err != nil {
		return err
	}
	switch c {
	case '}':
		if _, err := d.skipSpace(); !errors.Is(err, io.ErrUnexpectedEOF) {
			if err != nil {
				return err
			}
			return d.errorf("unexpected data after the document")
		}
		return nil
	case ',':
		key, err := d.readKey()
		if err != nil {
			return err
		}
		switch key {
		case docKeyURL, docKeyDefaults, docKeySystemPrompt, docKeySaveKV:
			return d.errorf("%q must come before %q", key, docKeyRequests)
		case docKeyRequests:
			return d.errorf("repeated key %q", key)
		}
		return d.errorf("unknown key %q", key)
	}
	return d.errorf("expected ',' or '}' after requests, got %q", c)
}

func (d *DocReader) errorf(format string, args ...any) error {
	return &DocError{Offset: d.off, Err: fmt.Errorf(format, args...)}
}

func (d *DocReader) readByte() (byte, error) {
	c, err := d.br.ReadByte()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return 0, &DocError{Offset: d.off, Err: io.ErrUnexpectedEOF}
		}
		return 0, fmt.Errorf("read requests document at byte %d: %w", d.off, err)
	}
	d.off++
	return c, nil
}

func (d *DocReader) unreadByte() {
	if d.br.UnreadByte() == nil {
		d.off--
	}
}

// skipSpace returns the next byte that is not whitespace. At the end of the
// input it returns a *DocError wrapping io.ErrUnexpectedEOF.
func (d *DocReader) skipSpace() (byte, error) {
	for {
		c, err := d.readByte()
		if err != nil {
			return 0, err
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c, nil
	}
}

// readValue reads the next value, appending it to dst while it fits limit
// bytes. It finds the value's end only: strings (with escapes) and bracket
// depth; what is inside is for json.Valid to judge. Past limit it reads on,
// discarding, and reports tooLong.
func (d *DocReader) readValue(dst []byte, limit int) (val []byte, tooLong bool, err error) {
	c, err := d.skipSpace()
	if err != nil {
		return nil, false, err
	}
	size := 0
	put := func(b byte) {
		size++
		if size <= limit {
			dst = append(dst, b)
		}
	}
	switch {
	case c == '"':
		put(c)
		if err := d.readString(put); err != nil {
			return nil, false, err
		}
	case c == '{' || c == '[':
		put(c)
		for depth := 1; depth > 0; {
			b, err := d.readByte()
			if err != nil {
				return nil, false, err
			}
			put(b)
			switch b {
			case '"':
				if err := d.readString(put); err != nil {
					return nil, false, err
				}
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
		}
	case c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z':
		// A number or a literal; it ends at a delimiter or at the end of input.
		put(c)
		for {
			b, err := d.br.ReadByte()
			if err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, false, fmt.Errorf("read requests document at byte %d: %w", d.off, err)
			}
			d.off++
			if b == ',' || b == ']' || b == '}' || b == ' ' || b == '\t' || b == '\r' || b == '\n' {
				d.unreadByte()
				break
			}
			put(b)
		}
	default:
		return nil, false, d.errorf("expected a value, got %q", c)
	}
	if size > limit {
		return nil, true, nil
	}
	return dst, false, nil
}

// readString reads the rest of a string after its opening quote.
func (d *DocReader) readString(put func(byte)) error {
	for {
		b, err := d.readByte()
		if err != nil {
			return err
		}
		put(b)
		switch b {
		case '"':
			return nil
		case '\\':
			e, err := d.readByte()
			if err != nil {
				return err
			}
			put(e)
		}
	}
}

// convert turns a request element into a canonical batch line. The result is
// valid until the next call.
func (d *DocReader) convert(el []byte) []byte {
	if !isObject(el) || !json.Valid(el) {
		return el
	}
	var cid, method, url, body []byte
	hasBody := false
	infer := d.ep
	var inferred endpoint
	for it := newMembers(el); ; {
		k, vs, ve, ok := it.next()
		if !ok {
			break
		}
		key, _ := unquote(k)
		switch string(key) {
		case "custom_id":
			cid = el[vs:ve]
		case "method":
			method = el[vs:ve]
		case "url":
			url = el[vs:ve]
		case "body":
			body, hasBody = el[vs:ve], true
		case "messages":
			inferred = epChat
		case "prompt":
			if inferred == 0 {
				inferred = epCompletions
			}
		case "input":
			if inferred == 0 {
				inferred = epEmbeddings
			}
		}
	}
	if !hasBody {
		body = d.shorthandBody(el)
		if !d.urlGiven && inferred != 0 {
			infer = inferred
		}
	}

	out := append(d.out[:0], `{"custom_id":`...)
	if given(cid) {
		out = append(out, cid...)
	} else {
		out = append(out, `"request-`...)
		out = strconv.AppendInt(out, int64(d.n), 10)
		out = append(out, '"')
	}
	out = append(out, `,"method":`...)
	if given(method) {
		out = append(out, method...)
	} else {
		out = append(out, `"POST"`...)
	}
	out = append(out, `,"url":`...)
	ep := infer
	if given(url) {
		out = append(out, url...)
		ep = 0
		if u, ok := unquote(url); ok {
			ep = endpointOf(u)
		}
	} else {
		out = append(out, '"')
		out = append(out, ep.url()...)
		out = append(out, '"')
	}
	out = append(out, `,"body":`...)
	if ep != 0 && isObject(body) {
		body = d.prepareBody(body, ep)
	}
	out = append(out, body...)
	out = append(out, '}')
	d.out = out
	return out
}

// shorthandBody returns el without its custom_id, method and url members.
func (d *DocReader) shorthandBody(el []byte) []byte {
	b := append(d.shorthand[:0], '{')
	first := true
	for it := newMembers(el); ; {
		k, _, ve, ok := it.next()
		if !ok {
			break
		}
		key, _ := unquote(k)
		switch string(key) {
		case "custom_id", "method", "url":
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, el[it.ks:ve]...)
	}
	b = append(b, '}')
	d.shorthand = b
	return b
}

// prepareBody applies the system prompt and the document's defaults to a
// body (a valid JSON object).
func (d *DocReader) prepareBody(body []byte, ep endpoint) []byte {
	if ep == epChat && d.system != nil {
		body = d.withSystemPrompt(body)
	}
	ds := &d.defaults
	if len(ds.items) == 0 {
		return body
	}
	d.fields = [numFields][]byte{}
	d.plan.reset(len(ds.items))
	hasMembers := scanBody(body, ep, ds, &d.fields, &d.plan)
	d.plan.plan(ds, ep, ep == epChat && given(d.fields[fMaxCompletionTokens]))
	if !d.plan.any {
		return body
	}
	d.merged = d.plan.merge(d.merged[:0], ds, body, hasMembers)
	return d.merged
}

// withSystemPrompt prepends the system prompt to a non-empty messages array
// that does not start with a system or developer message.
func (d *DocReader) withSystemPrompt(body []byte) []byte {
	var vs, ve int
	found := false
	for it := newMembers(body); ; {
		k, s, e, ok := it.next()
		if !ok {
			break
		}
		if key, _ := unquote(k); string(key) == "messages" {
			vs, ve, found = s, e, true
		}
	}
	if !found || !isArray(body[vs:ve]) {
		return body
	}
	msgs := body[vs:ve]
	it := newElements(msgs)
	first, ok := it.next()
	if !ok {
		return body
	}
	var role []byte
	for mi := newMembers(first); ; {
		k, s, e, ok := mi.next()
		if !ok {
			break
		}
		if key, _ := unquote(k); string(key) == "role" {
			role = first[s:e]
		}
	}
	if r, _ := unquote(role); string(r) == "system" || string(r) == "developer" {
		return body
	}
	b := append(d.sysBuf[:0], body[:vs]...)
	b = append(b, `[{"role":"system","content":`...)
	b = append(b, d.system...)
	b = append(b, "},"...)
	b = append(b, bytes.TrimLeft(msgs[1:], " \t\r\n")...)
	b = append(b, body[ve:]...)
	d.sysBuf = b
	return b
}
