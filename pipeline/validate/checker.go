package validate

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/wire"
)

// Checker validates the lines of one input file.
//
// It remembers the custom_ids it has seen in the file, so it is not safe for
// concurrent use and one Checker serves exactly one file. A custom_id is
// reserved by the first line that carries it validly (a non-empty string of
// at most 512 bytes), whatever happens later on that line: a later line with
// the same custom_id is a duplicate_custom_id even when the first line failed
// a later check. That keeps "every custom_id appears once in the outputs"
// true, since the first line already produced an error line under that id.
//
// Each id is remembered as the first 16 bytes of its SHA-256 (deterministic
// across processes; about 20 bytes per id in the map).
type Checker struct {
	defaults defaultSet
	// rejectMissing refuses a line with no output length (Config).
	rejectMissing bool
	seen          map[[16]byte]struct{}

	// Per-line scratch, reused.
	fields [numFields][]byte
	plan   mergePlan
}

// NewChecker returns a Checker for one file. cfg should have passed
// Validate: defaults it would reject are ignored.
func NewChecker(cfg Config) *Checker {
	return &Checker{
		defaults:      compileConfig(cfg),
		rejectMissing: cfg.RejectMissingMaxTokens,
		seen:          make(map[[16]byte]struct{}),
	}
}

// Seen returns the number of distinct custom_ids reserved so far (by lines
// that passed the custom_id checks, valid or not later on).
func (c *Checker) Seen() int { return len(c.seen) }

// TooLong returns the result for line n that exceeded maxLineBytes. The line
// was not read, so it has no custom_id.
func (c *Checker) TooLong(n int, maxLineBytes int) Result {
	return Result{Line: n, Problem: lineProblem(CodeLineTooLong,
		"line is longer than the maximum of "+strconv.Itoa(maxLineBytes)+" bytes")}
}

// Check validates line n. raw is not retained: the Result owns its bytes.
func (c *Checker) Check(n int, raw []byte) Result {
	res := Result{Line: n}

	// 1. The line: UTF-8 JSON, an object.
	if p := checkJSONLine(raw); p != nil {
		res.Problem = p
		return res
	}
	var cid, method, url, body []byte
	for it := newMembers(raw); ; {
		k, vs, ve, ok := it.next()
		if !ok {
			break
		}
		key, _ := unquote(k)
		switch string(key) {
		case "custom_id":
			cid = raw[vs:ve]
		case "method":
			method = raw[vs:ve]
		case "url":
			url = raw[vs:ve]
		case "body":
			body = raw[vs:ve]
		}
	}

	// 2. custom_id, then duplicates.
	if len(cid) == 0 {
		res.Problem = lineProblem(CodeInvalidCustomID, "custom_id is required")
		return res
	}
	if !isString(cid) {
		res.Problem = lineProblem(CodeInvalidCustomID, "custom_id must be a string, got "+typeName(cid))
		return res
	}
	if loneSurrogate(cid) {
		// No custom_id is kept: decoded, the half would be U+FFFD, an id
		// that is not the input's and that another half would share.
		res.Problem = lineProblem(CodeInvalidCustomID, `custom_id must be valid Unicode: it holds half a UTF-16 surrogate pair (a \uD800-\uDFFF escape without its other half)`)
		return res
	}
	id, _ := unquote(cid)
	res.CustomID, res.HasCustomID = string(id), true
	switch {
	case len(id) == 0:
		res.Problem = lineProblem(CodeInvalidCustomID, "custom_id must not be empty")
		return res
	case len(id) > maxCustomIDBytes:
		res.Problem = lineProblem(CodeInvalidCustomID, "custom_id must be at most 512 bytes, got "+strconv.Itoa(len(id)))
		return res
	}
	h := hashID(id)
	if _, dup := c.seen[h]; dup {
		res.Problem = lineProblem(CodeDuplicateCustomID, "custom_id was already used by an earlier line of this file")
		return res
	}
	c.seen[h] = struct{}{}

	// 3. method, url, body.
	if !isString(method) {
		msg := `method must be "POST"`
		if len(method) == 0 {
			msg = `method is required and must be "POST"`
		} else {
			msg += ", got " + typeName(method)
		}
		res.Problem = lineProblem(CodeInvalidMethod, msg)
		return res
	}
	if m, _ := unquote(method); string(m) != "POST" {
		res.Problem = lineProblem(CodeInvalidMethod, `method must be "POST", got `+quoteShort(m))
		return res
	}
	var ep endpoint
	responses := false
	lineURL := "" // a url translated to ep's (see Request.LineURL)
	if isString(url) {
		u, _ := unquote(url)
		ep = endpointOf(u)
		switch string(u) {
		case engine.EndpointResponses:
			ep, responses = epChat, true
		case wire.EndpointMessages:
			ep, lineURL = epChat, wire.EndpointMessages
		}
	}
	if ep == 0 {
		msg := "url must be one of /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses, /v1/messages"
		switch {
		case len(url) == 0:
			msg = "url is required and " + msg[4:]
		case isString(url):
			u, _ := unquote(url)
			msg += ", got " + quoteShort(u)
		default:
			msg += ", got " + typeName(url)
		}
		res.Problem = lineProblem(CodeInvalidURL, msg)
		return res
	}
	if !isObject(body) {
		msg := "body is required"
		if len(body) > 0 {
			msg = "body must be a JSON object, got " + typeName(body)
		}
		res.Problem = lineProblem(CodeInvalidBody, msg)
		return res
	}

	// A Messages body runs as the chat body it translates to.
	if lineURL == wire.EndpointMessages {
		chat, inv := wire.MessagesToChat(body)
		if inv != nil {
			res.Problem = fromWire(inv)
			return res
		}
		body = chat
	}

	// 4. The body's fields, with the defaults merged in.
	var req *Request
	var p *Problem
	if responses {
		req, p = c.checkResponses(body)
	} else {
		req, p = c.checkBody(ep, body)
	}
	if p != nil {
		res.Problem = p
		return res
	}
	req.Line, req.CustomID, req.Method, req.URL, req.LineURL = n, res.CustomID, "POST", ep.url(), lineURL
	if responses {
		req.URL = engine.EndpointResponses
	}
	res.Request = req
	return res
}

// checkJSONLine checks that raw is a UTF-8 JSON object.
func checkJSONLine(raw []byte) *Problem {
	if !utf8.Valid(raw) {
		return lineProblem(CodeInvalidJSONLine, "line is not valid UTF-8")
	}
	if !json.Valid(raw) {
		msg := "line is not valid JSON"
		var v json.RawMessage
		var se *json.SyntaxError
		if err := json.Unmarshal(raw, &v); errors.As(err, &se) {
			msg += ": " + se.Error() + " (at byte " + strconv.FormatInt(se.Offset, 10) + ")"
		}
		return lineProblem(CodeInvalidJSONLine, msg)
	}
	if v := raw[skipSpace(raw, 0):]; !isObject(v) {
		return lineProblem(CodeInvalidJSONLine, "line must be a JSON object, got "+typeName(v))
	}
	return nil
}

func hashID(id []byte) [16]byte {
	sum := sha256.Sum256(id)
	return [16]byte(sum[:16])
}

// scanBody walks body once: it records the fields the rules know for ep in
// fields (last occurrence wins, as with encoding/json and Python) and what
// the body holds for each default in plan. It reports whether the body has
// any member.
func scanBody(body []byte, ep endpoint, ds *defaultSet, fields *[numFields][]byte, plan *mergePlan) bool {
	has := false
	for it := newMembers(body); ; {
		k, vs, ve, ok := it.next()
		if !ok {
			return has
		}
		has = true
		key, _ := unquote(k)
		id := lookupField(key)
		if id != fUnknown && fieldEndpoints[id]&ep != 0 {
			fields[id] = body[vs:ve]
		}
		plan.see(ds, id, key, vs, ve, body[vs:ve])
	}
}

// checkBody checks a body for ep and returns the request with the effective
// body, or the first problem.
func (c *Checker) checkBody(ep endpoint, body []byte) (*Request, *Problem) {
	ds := &c.defaults
	f := &c.fields
	*f = [numFields][]byte{}
	c.plan.reset(len(ds.items))
	hasMembers := scanBody(body, ep, ds, f, &c.plan)
	c.plan.plan(ds, ep, given(f[fMaxCompletionTokens]))
	for j, it := range ds.items {
		if c.plan.apply[j] && it.field != fUnknown {
			f[it.field] = it.val
		}
	}

	if p := checkFields(ep, f); p != nil {
		return nil, p
	}

	// Output length: max_completion_tokens, then max_tokens (the body's or
	// the default, already merged into f); with neither, the engine
	// generates until the model's context is full, as OpenAI does, unless
	// the batch asks for every line to give one.
	maxTokens := 0
	if ep&epGen != 0 {
		v := f[fMaxTokens]
		if given(f[fMaxCompletionTokens]) {
			v = f[fMaxCompletionTokens]
		}
		if !given(v) && c.rejectMissing {
			return nil, badRequest(CodeMissingMaxTokens, "max_tokens",
				"max_tokens is required by the batch option on_missing_max_tokens: reject: set body.max_tokens or body.max_completion_tokens, or a batch-level max_tokens")
		}
		n, _ := parseInt(v) // checked by checkFields
		maxTokens = int(n)
		if given(v) && given(f[fMinTokens]) {
			if m, _ := parseInt(f[fMinTokens]); m > n {
				return nil, fromWire(wire.CheckMinTokens(m, n))
			}
		}
	}

	var out []byte
	if c.plan.any {
		out = c.plan.merge(make([]byte, 0, c.plan.mergedLen(ds, body)), ds, body, hasMembers)
	} else {
		out = append(make([]byte, 0, len(body)), body...)
	}
	return &Request{Body: out, MaxTokens: maxTokens}, nil
}
