package validate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
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

// The keys of the requests document as TensorRT Edge-LLM's inference tool
// reads it (its "input JSON format"), with the defaults that format gives.
// They apply to every request of the document; a request's own fields win.
const (
	docKeyBatchSize           = "batch_size"            // 1; accepted, no effect on results
	docKeyTemperature         = "temperature"           // 1.0
	docKeyTopP                = "top_p"                 // 0.8
	docKeyTopK                = "top_k"                 // 50
	docKeyLogitBias           = "logit_bias"            // none
	docKeyMaxGenerateLength   = "max_generate_length"   // 256, as max_tokens
	docKeyNumLogprobs         = "num_logprobs"          // 0; at most MaxDocLogprobs
	docKeyApplyChatTemplate   = "apply_chat_template"   // true
	docKeyAddGenerationPrompt = "add_generation_prompt" // true
	docKeyEnableThinking      = "enable_thinking"       // false
	docKeyLoraWeights         = "available_lora_weights"
)

// The format's defaults.
const (
	docDefaultTemperature       = "1.0"
	docDefaultTopP              = "0.8"
	docDefaultTopK              = "50"
	docDefaultMaxGenerateLength = "256"
	// MaxDocLogprobs is the largest num_logprobs of a document.
	MaxDocLogprobs = 50
)

// isHeaderKey reports whether key may come before "requests".
func isHeaderKey(key string) bool {
	switch key {
	case docKeyURL, docKeyDefaults, docKeySystemPrompt, docKeySaveKV,
		docKeyBatchSize, docKeyTemperature, docKeyTopP, docKeyTopK, docKeyLogitBias,
		docKeyMaxGenerateLength, docKeyNumLogprobs, docKeyApplyChatTemplate,
		docKeyAddGenerationPrompt, docKeyEnableThinking, docKeyLoraWeights:
		return true
	}
	return false
}

// docOptionField maps a format key that is a body default to its body field.
var docOptionField = map[string]string{
	docKeyTemperature:       "temperature",
	docKeyTopP:              "top_p",
	docKeyTopK:              "top_k",
	docKeyLogitBias:         "logit_bias",
	docKeyMaxGenerateLength: "max_tokens",
}

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

// DocReader is the LineSource of a requests document (NAME.json):
//
//	{
//	  "url": "/v1/chat/completions",            // optional: the requests' default endpoint
//	  "defaults": {"max_tokens": 256, ...},     // optional: body fields under each request's body
//	  "system_prompt": "You are ...",           // optional: chat only
//	  "save_system_prompt_kv_cache": true,      // optional: for the native engine
//	  "requests": [ ... ]                       // required, and last
//	}
//
// and every key of TensorRT Edge-LLM's input JSON (batch_size, temperature,
// top_p, top_k, logit_bias, max_generate_length, num_logprobs,
// apply_chat_template, add_generation_prompt, enable_thinking,
// available_lora_weights), with that format's defaults: they become body
// defaults of the requests (see compileOptions), under "defaults".
//
// It streams: requests[] is never held whole, only one request (at most
// maxRequestBytes; longer ones are reported tooLong, skipped and the next one
// read). Keys after "requests" are read by a look ahead over a second open
// of the input (see LookAhead) before the first request is yielded; without
// one such a key is a structural error ("\"defaults\" must come before
// \"requests\" in a document read in one pass"), reported when the reader
// reaches it, i.e. after the requests before it were yielded. Callers that
// must not act on a document that turns out malformed can read it through
// once first. Unknown keys and repeated keys are structural errors too.
//
// Each request is either a full batch line ({"custom_id", "method"?, "url"?,
// "body"}: it has a "body" key) or a shorthand body ({"custom_id",
// "messages"|"prompt"|"input", ...}: every key but custom_id, method and url
// goes to the body). It is turned into a canonical batch line
// {"custom_id","method","url","body"} that a Checker validates like a JSONL
// line:
//   - a missing or null custom_id becomes "request-N", N the request's 1-based
//     index, or "request-N.K" (K = 2, 3, ...) when a request gives that id:
//     with LookAhead, any request of the document; without, one before it;
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

	// open opens the input again from its start, for the look ahead at the
	// keys after requests[]; nil when there is none (see LookAhead).
	open func() (io.ReadCloser, error)
	// after is the keys the look ahead read after requests[], which the
	// main pass then skips.
	after map[string]bool
	// taken is the custom_ids starting "request-" that requests give,
	// which a generated one skips: all of them after a look ahead, else
	// those read so far.
	taken    map[string]bool
	defaults defaultSet

	// The format's keys, gathered in the header and compiled at requests[].
	userDefaults map[string]json.RawMessage // the "defaults" key
	options      map[string]json.RawMessage // body defaults from the format's keys
	numLogprobs  int64
	chat         defaultSet // chat-only defaults: template controls
	chatLP       defaultSet // chat-only defaults: logprobs from num_logprobs
	reqLP        bool       // the current request has its own num_logprobs
	noTemplate   bool       // apply_chat_template false
	noGenPrompt  bool       // add_generation_prompt false
	thinking     bool       // enable_thinking
	// loraPaths is available_lora_weights: adapter name → its path as a
	// JSON string, sent as lora_path with a request's lora_name.
	loraPaths map[string]json.RawMessage

	// Scratch, reused between requests.
	el, out, shorthand, sysBuf, tmp []byte
	merged                          [2][]byte
	buf                             int // the merged buffer last written
	fields                          [numFields][]byte
	plan                            mergePlan
}

var _ LineSource = (*DocReader)(nil)

// NewDocReader returns a DocReader over r that accepts requests of at most
// maxRequestBytes bytes (DefaultMaxLineBytes when maxRequestBytes <= 0).
func NewDocReader(r io.Reader, maxRequestBytes int) *DocReader {
	if maxRequestBytes <= 0 {
		maxRequestBytes = DefaultMaxLineBytes
	}
	return &DocReader{
		br:      bufio.NewReaderSize(r, readBufferSize),
		max:     maxRequestBytes,
		ep:      epChat,
		seen:    make(map[string]bool),
		options: make(map[string]json.RawMessage),
	}
}

// LookAhead lets d read the document's top-level keys that come after
// "requests" (as json.dumps(sort_keys=True) and jq -S write them) before its
// first request: when it reaches requests[], it opens the input again with
// open and reads that copy through, skipping the requests, for those keys.
// The look ahead also gathers the custom_ids starting "request-" that the
// requests give, for generated ones to skip. Memory stays bounded by one
// request and those ids. Without it such a key is a structural
// error. Call it before the first Next.
func (d *DocReader) LookAhead(open func() (io.ReadCloser, error)) { d.open = open }

// SaveSystemPromptKVCache reports the document's save_system_prompt_kv_cache;
// it is known once Next has been called.
func (d *DocReader) SaveSystemPromptKVCache() bool { return d.saveKV }

// Next implements LineSource.
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
			if err := d.readAhead(); err != nil {
				return err
			}
			if err := d.compileOptions(); err != nil {
				return err
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

// readAhead reads the keys after requests[] from a second copy of the input
// (see LookAhead), with the copy's offsets in its errors.
func (d *DocReader) readAhead() error {
	if d.open == nil {
		return nil
	}
	rc, err := d.open()
	if err != nil {
		return fmt.Errorf("open the requests document again: %w", err)
	}
	defer rc.Close()
	br, off := d.br, d.off
	d.br, d.off = bufio.NewReaderSize(rc, readBufferSize), 0
	defer func() { d.br, d.off = br, off }()
	d.after = make(map[string]bool)
	if c, err := d.skipSpace(); err != nil || c != '{' {
		return err // the main pass read a '{' here; a changed input is for its reader to tell
	}
	past := false
	for first := true; ; first = false {
		c, err := d.skipSpace()
		if err != nil {
			return err
		}
		if c == '}' {
			return nil
		}
		if !first && c != ',' {
			return d.errorf("expected ',' or '}' after a value, got %q", c)
		}
		if first {
			d.unreadByte()
		}
		key, err := d.readKey()
		if err != nil {
			return err
		}
		switch {
		case key == docKeyRequests && !past:
			past = true
			if err := d.readAheadIDs(); err != nil {
				return err
			}
		case !past:
			// Read by the main pass already; requests[] is its to stream.
			if _, _, err := d.readValue(nil, 0); err != nil {
				return err
			}
		case key == docKeyRequests:
			return d.errorf("repeated key %q", key)
		default:
			if err := d.readOption(key); err != nil {
				return err
			}
			d.after[key] = true
		}
	}
}

// readAheadIDs reads requests[] in the look ahead for the custom_ids that
// a generated one must skip.
func (d *DocReader) readAheadIDs() error {
	if c, err := d.skipSpace(); err != nil || c != '[' {
		return err // as in readAhead
	}
	for n := 0; ; n++ {
		c, err := d.skipSpace()
		if err != nil {
			return err
		}
		if c == ']' {
			return nil
		}
		if n > 0 && c != ',' {
			return d.errorf("expected ',' or ']' after request %d, got %q", n, c)
		}
		if n == 0 {
			d.unreadByte()
		}
		el, tooLong, err := d.readValue(d.el[:0], d.max)
		if err != nil {
			return err
		}
		if !tooLong {
			d.el = el
			d.noteID(el)
		}
	}
}

// noteID adds the custom_id of a request element to taken when a generated
// one could be it.
func (d *DocReader) noteID(el []byte) {
	if !isObject(el) || !json.Valid(el) {
		return
	}
	if vs, ve, ok := member(el, "custom_id"); ok {
		if id, ok := unquote(el[vs:ve]); ok && bytes.HasPrefix(id, []byte(generatedIDPrefix)) {
			if d.taken == nil {
				d.taken = make(map[string]bool)
			}
			d.taken[string(id)] = true
		}
	}
}

// generatedIDPrefix starts the custom_id of a request that gives none.
const generatedIDPrefix = "request-"

// appendGeneratedID appends, as a JSON string, the custom_id of the n-th
// request, which gives none: "request-n", or when a request gives that one,
// the first free "request-n.k" (k = 2, 3, ...).
func (d *DocReader) appendGeneratedID(out []byte, n int) []byte {
	id := strconv.AppendInt(append(d.tmp[:0], generatedIDPrefix...), int64(n), 10)
	base := len(id)
	for k := 2; d.taken[string(id)]; k++ {
		id = strconv.AppendInt(append(id[:base], '.'), int64(k), 10)
	}
	d.tmp = id
	out = append(out, '"')
	out = append(out, id...)
	return append(out, '"')
}

// readOption reads the value of a key before requests[].
func (d *DocReader) readOption(key string) error {
	if !isHeaderKey(key) {
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
		d.userDefaults = m
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
	default:
		return d.readFormatOption(key, v)
	}
	return nil
}

// readFormatOption reads one of the format's keys (v is valid JSON, not null).
func (d *DocReader) readFormatOption(key string, v []byte) error {
	switch key {
	case docKeyBatchSize:
		if n, st := parseInt(v); st != intOK || n < 1 {
			return d.errorf("%q must be a positive integer, got %s", key, v)
		}
	case docKeyNumLogprobs:
		n, st := parseInt(v)
		if st != intOK || n < 0 || n > MaxDocLogprobs {
			return d.errorf("%q must be an integer between 0 and %d, got %s", key, MaxDocLogprobs, v)
		}
		d.numLogprobs = n
	case docKeyApplyChatTemplate, docKeyAddGenerationPrompt, docKeyEnableThinking:
		if !isBool(v) {
			return d.errorf("%q must be a boolean, got %s", key, typeName(v))
		}
		switch key {
		case docKeyApplyChatTemplate:
			d.noTemplate = !isTrue(v)
		case docKeyAddGenerationPrompt:
			d.noGenPrompt = !isTrue(v)
		default:
			d.thinking = isTrue(v)
		}
	case docKeyLoraWeights:
		var m map[string]json.RawMessage
		if json.Unmarshal(v, &m) != nil {
			return d.errorf("%q must be an object mapping adapter names to paths, got %s", key, typeName(v))
		}
		d.loraPaths = make(map[string]json.RawMessage, len(m))
		for _, name := range slices.Sorted(maps.Keys(m)) {
			var path string
			if name == "" {
				return d.errorf("%q: an adapter has an empty name", key)
			}
			if json.Unmarshal(m[name], &path) != nil || path == "" {
				return d.errorf("%q.%q must be a non-empty string, the adapter's path, got %s", key, name, m[name])
			}
			d.loraPaths[name] = m[name]
		}
	default:
		field := docOptionField[key]
		if p := checkDefault(field, v); p != nil {
			return d.errorf("%q: %s", key, p.Message)
		}
		d.options[field] = v
	}
	return nil
}

// compileOptions builds the defaults of the document's requests: the
// "defaults" key, over the format's keys, over the format's defaults. A body
// field set both by a format key and in "defaults" is refused.
func (d *DocReader) compileOptions() error {
	m := map[string]json.RawMessage{
		"temperature": json.RawMessage(docDefaultTemperature),
		"top_p":       json.RawMessage(docDefaultTopP),
		"top_k":       json.RawMessage(docDefaultTopK),
		"max_tokens":  json.RawMessage(docDefaultMaxGenerateLength),
	}
	for k, v := range d.options {
		m[k] = v
	}
	for k, v := range d.userDefaults {
		if _, dup := d.options[k]; dup {
			return d.errorf("%q is set both at the top level and in \"defaults\": keep one", k)
		}
		m[k] = v
	}
	d.defaults = compileDefaults(m)
	if d.numLogprobs > 0 {
		d.chatLP = compileDefaults(map[string]json.RawMessage{
			"logprobs":     json.RawMessage("true"),
			"top_logprobs": json.RawMessage(strconv.FormatInt(d.numLogprobs, 10)),
		})
	}
	chat := map[string]json.RawMessage{}
	if d.noTemplate {
		chat["apply_chat_template"] = json.RawMessage("false")
	}
	if d.noGenPrompt {
		chat["add_generation_prompt"] = json.RawMessage("false")
	}
	d.chat = compileDefaults(chat)
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
		switch {
		case d.after[key]:
			// Read ahead: skip it.
			if _, _, err := d.readValue(nil, 0); err != nil {
				return err
			}
			return d.readTail()
		case key == docKeyRequests:
			return d.errorf("repeated key %q", key)
		case isHeaderKey(key):
			return d.errorf("%q must come before %q in a document read in one pass", key, docKeyRequests)
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
	if !hasBody && !d.urlGiven && inferred != 0 {
		infer = inferred
	}
	ep := infer
	if given(url) {
		ep = 0
		if u, ok := unquote(url); ok {
			ep = endpointOf(u)
		}
	}
	d.reqLP = false
	if !hasBody {
		body = d.shorthandBody(el, ep)
	}

	out := append(d.out[:0], `{"custom_id":`...)
	if given(cid) {
		if d.open == nil {
			d.noteID(el)
		}
		out = append(out, cid...)
	} else {
		out = d.appendGeneratedID(out, d.n)
	}
	out = append(out, `,"method":`...)
	if given(method) {
		out = append(out, method...)
	} else {
		out = append(out, `"POST"`...)
	}
	out = append(out, `,"url":`...)
	if given(url) {
		out = append(out, url...)
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

// shorthandBody returns el without its custom_id, method and url members,
// and with the format's names spelled as the body fields of ep.
func (d *DocReader) shorthandBody(el []byte, ep endpoint) []byte {
	b := append(d.shorthand[:0], '{')
	first := true
	for it := newMembers(el); ; {
		k, vs, ve, ok := it.next()
		if !ok {
			break
		}
		key, _ := unquote(k)
		member := el[it.KeyStart():ve]
		v := el[vs:ve]
		switch string(key) {
		case "custom_id", "method", "url":
			continue
		case docKeySaveKV:
			// Accepted: prefix caching is always on.
			if isBool(v) || isNull(v) {
				continue
			}
		case "disable_spec_decode":
			// true turns speculative decoding off for this request alone
			// (the format's tool turns it off for the whole batch); false
			// is the default.
			if (isBool(v) && !isTrue(v)) || isNull(v) {
				continue
			}
		case "lora_name":
			// No name is no adapter; a name is sent as lora_name, which
			// the native engine resolves among its configured adapters.
			if isNull(v) || string(v) == `""` {
				continue
			}
		case docKeyMaxGenerateLength:
			d.tmp = append(append(d.tmp[:0], `"max_tokens":`...), v...)
			member = d.tmp
		case docKeyNumLogprobs:
			if isNull(v) {
				continue
			}
			lp, ok := numLogprobs(v, ep)
			if !ok {
				// Left as written: the Checker refuses it by this name.
				break
			}
			d.reqLP = true
			switch {
			case ep == epCompletions && lp == 0:
				continue
			case ep == epCompletions:
				d.tmp = append(append(d.tmp[:0], `"logprobs":`...), v...)
			case lp == 0:
				d.tmp = append(d.tmp[:0], `"logprobs":false`...)
			default:
				d.tmp = append(append(d.tmp[:0], `"logprobs":true,"top_logprobs":`...), v...)
			}
			member = d.tmp
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, member...)
	}
	b = append(b, '}')
	d.shorthand = b
	return b
}

// numLogprobs reads a request's num_logprobs, and reports whether it is one
// that ep takes (an integer within numLogprobsRange; never on embeddings).
func numLogprobs(v []byte, ep endpoint) (int64, bool) {
	if ep != epChat && ep != epCompletions {
		return 0, false
	}
	n, st := parseInt(v)
	r := numLogprobsRange(ep)
	return n, st == intOK && n >= r.Min && n <= r.Max
}

// prepareBody applies the system prompt and the document's defaults to a
// body (a valid JSON object).
func (d *DocReader) prepareBody(body []byte, ep endpoint) []byte {
	if ep != epEmbeddings && len(d.loraPaths) > 0 {
		body = d.withLoraPath(body)
	}
	if ep == epChat && d.system != nil {
		body = d.withSystemPrompt(body)
	}
	body = d.applyDefaults(body, ep, &d.defaults)
	switch ep {
	case epChat:
		if !d.reqLP {
			body = d.applyDefaults(body, ep, &d.chatLP)
		}
		body = d.applyDefaults(body, ep, &d.chat)
		body = d.withThinking(body)
	case epCompletions:
		if !d.reqLP && d.numLogprobs > 0 {
			body = d.withCompletionsLogprobs(body)
		}
	}
	return body
}

// withCompletionsLogprobs applies the document's num_logprobs to a
// completions body without its own logprobs: as logprobs when completions
// take that many, else as num_logprobs, which the Checker refuses by name.
func (d *DocReader) withCompletionsLogprobs(body []byte) []byte {
	if vs, ve, ok := member(body, "logprobs"); ok && given(body[vs:ve]) {
		return body
	}
	sep := `,"logprobs":`
	if d.numLogprobs > numLogprobsRange(epCompletions).Max {
		sep = `,"num_logprobs":`
	}
	return appendMember(body, sep, strconv.AppendInt(nil, d.numLogprobs, 10))
}

// withThinking sets chat_template_kwargs.enable_thinking, which a chat
// template reads (and a remote server passes on), of a chat body that has
// none: to the body's own enable_thinking when it has one, else to the
// document's enable_thinking. Other chat_template_kwargs are kept.
func (d *DocReader) withThinking(body []byte) []byte {
	value := []byte(strconv.FormatBool(d.thinking))
	if vs, ve, ok := member(body, "enable_thinking"); ok && isBool(body[vs:ve]) {
		value = body[vs:ve]
	}
	vs, ve, ok := member(body, "chat_template_kwargs")
	if !ok || !isObject(body[vs:ve]) {
		// None (or null: the member added after it counts).
		d.tmp = append(append(d.tmp[:0], `{"enable_thinking":`...), value...)
		return appendMember(body, `,"chat_template_kwargs":`, append(d.tmp, '}'))
	}
	kwargs := body[vs:ve]
	if _, _, ok := member(kwargs, "enable_thinking"); ok {
		return body
	}
	kwargs = appendMember(kwargs, `,"enable_thinking":`, value)
	out := make([]byte, 0, len(body)+len(kwargs)-(ve-vs))
	out = append(out, body[:vs]...)
	out = append(out, kwargs...)
	return append(out, body[ve:]...)
}

// member returns the offsets of the value of key in the object obj (the
// last one, when repeated).
func member(obj []byte, key string) (vs, ve int, found bool) {
	for it := newMembers(obj); ; {
		k, s, e, ok := it.next()
		if !ok {
			return vs, ve, found
		}
		if name, _ := unquote(k); string(name) == key {
			vs, ve, found = s, e, true
		}
	}
}

// appendMember returns a copy of the object body with `,"key":` (sep) and v
// added before its closing brace.
func appendMember(body []byte, sep string, v []byte) []byte {
	end := bytes.LastIndexByte(body, '}')
	if end < 0 {
		return body
	}
	out := make([]byte, 0, len(body)+len(sep)+len(v))
	out = append(out, body[:end]...)
	if len(bytes.TrimSpace(body[:end])) <= 1 {
		sep = sep[1:] // an empty object
	}
	out = append(out, sep...)
	out = append(out, v...)
	return append(out, body[end:]...)
}

// withLoraPath adds "lora_path" to a body whose lora_name is an adapter of
// available_lora_weights, with the path as written there; the engine loads
// it on first use. A name not listed there goes as it is (the engine may
// know it from its config), and a body with its own lora_path keeps it.
func (d *DocReader) withLoraPath(body []byte) []byte {
	var path json.RawMessage
	for it := newMembers(body); ; {
		k, vs, ve, ok := it.next()
		if !ok {
			break
		}
		switch key, _ := unquote(k); string(key) {
		case "lora_path":
			return body
		case "lora_name":
			if name, ok := unquote(body[vs:ve]); ok {
				path = d.loraPaths[string(name)]
			}
		}
	}
	if path == nil {
		return body
	}
	return appendMember(body, `,"lora_path":`, path)
}

// applyDefaults merges ds under body, into the scratch buffer that the
// previous merge did not write.
func (d *DocReader) applyDefaults(body []byte, ep endpoint, ds *defaultSet) []byte {
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
	d.buf = 1 - d.buf
	d.merged[d.buf] = d.plan.merge(d.merged[d.buf][:0], ds, body, hasMembers)
	return d.merged[d.buf]
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
