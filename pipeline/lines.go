package pipeline

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/pipeline/validate"
	"github.com/batchd/batchd/wire"
)

// Result lines: the shape of a line of NAME.output.jsonl and
// NAME.errors.jsonl, the builders that make one of an invalid line, a
// stopped batch or the engine's answer, and their encoding.

// Codes of error lines that are not HTTP-like (response null).
const (
	CodeBatchExpired      = "batch_expired"
	CodeBatchCancelled    = "batch_cancelled"
	CodeEngineUnavailable = "engine_unavailable"
	// CodeBadResponse: the engine answered with a body no result line may
	// hold (answer.go): not valid UTF-8, not a JSON object, or a success
	// whose usage is not token counts.
	CodeBadResponse = "engine_bad_response"
	// CodeEngineCrashed: the request was in flight at two unclean stops of
	// the daemon, the second time alone (inflight.go); it is not run again
	// (POST /v1/batches/{id}/retry runs it once more, alone).
	CodeEngineCrashed = "engine_crashed"
)

// codeInvalidResponse is what CodeBadResponse was called before it
// covered more than a body that is not JSON; lines of older runs have it.
const codeInvalidResponse = "invalid_engine_response"

// suspectLimit is how many unclean stops with a request in flight fail it.
const suspectLimit = 2

// rerunnable tells which error-line codes a later run of the same content
// retries instead of reusing: they say nothing about the request itself.
func rerunnable(code string) bool {
	switch code {
	case CodeBatchExpired, CodeBatchCancelled, CodeEngineUnavailable, CodeBadResponse, codeInvalidResponse:
		return true
	}
	return false
}

// OutputLine is one line of NAME.output.jsonl or NAME.errors.jsonl, in
// OpenAI's batch output shape plus, on error lines, the 1-based input line.
type OutputLine struct {
	ID       string        `json:"id"`
	CustomID *string       `json:"custom_id"`
	Response *LineResponse `json:"response"`
	Error    *LineError    `json:"error"`
	Line     int           `json:"line,omitempty"`
}

// UnmarshalJSON reads a result line of either shape a batch publishes
// (result_shape): OpenAI's, and Doubleword's {id, custom_id,
// response_body}, a success whose body is response_body (status 200).
func (l *OutputLine) UnmarshalJSON(data []byte) error {
	type plain OutputLine // without this method
	var v struct {
		plain
		ResponseBody json.RawMessage `json:"response_body"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*l = OutputLine(v.plain)
	if l.Response == nil && l.Error == nil && v.ResponseBody != nil {
		l.Response = &LineResponse{StatusCode: 200, Body: v.ResponseBody}
	}
	return nil
}

// LineResponse is an output line's response.
type LineResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

// LineError is an output line's error, for failures that are not HTTP-like.
type LineError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// requestID returns the stable id of a batch's line: the same line of the
// same batch always gets the same id, so a resumed run writes exactly what an
// uninterrupted one would.
func requestID(batchID string, line int) string {
	h := sha256.New()
	h.Write([]byte(batchID))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, int64(line), 10))
	var sum [sha256.Size]byte
	return "batch_req_" + hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// lineKind tells whether a result line goes to the output or the errors file.
type lineKind uint8

const (
	toOutput lineKind = iota
	toErrors
)

// result is one finished line on its way to the writer.
type result struct {
	line  int
	kind  lineKind
	data  []byte // the JSON line without its newline
	usage lineUsage
}

// lineUsage is the token usage a result line's body reports.
type lineUsage struct {
	in, out, cached int64
}

func encodeLine(l *OutputLine) []byte {
	b, err := json.Marshal(l)
	if err != nil {
		// Only a body that is not JSON can fail, and callers check bodies first.
		panic("encode output line: " + err.Error())
	}
	return b
}

func strPtr(s string) *string { return &s }

// encodeResponse returns the line json.Marshal makes of an OutputLine with
// this response and no error (its bytes exactly: the body compacted, HTML
// characters escaped), in one pass over the body that also checks it; ok
// is false when the body is not JSON. It is encodeLine's fast path for
// the line every answer becomes.
func encodeResponse(id, cid string, status int, requestID string, body []byte, line int) (data []byte, ok bool) {
	b := make([]byte, 0, len(body)+len(id)+len(cid)+len(requestID)+96)
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"custom_id":`...)
	b = appendJSONString(b, cid)
	b = append(b, `,"response":{"status_code":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"request_id":`...)
	b = appendJSONString(b, requestID)
	b = append(b, `,"body":`...)
	start := len(b)
	buf := bytes.NewBuffer(b)
	if json.Compact(buf, body) != nil {
		return nil, false
	}
	b = buf.Bytes()
	if needsHTMLEscape(b[start:]) {
		// Rare: json.Marshal writes <, >, & and U+2028/9 escaped.
		var esc bytes.Buffer
		json.HTMLEscape(&esc, b[start:])
		b = append(b[:start], esc.Bytes()...)
	}
	b = append(b, `},"error":null`...)
	if line != 0 {
		b = append(b, `,"line":`...)
		b = strconv.AppendInt(b, int64(line), 10)
	}
	return append(b, '}'), true
}

// needsHTMLEscape reports whether b holds a byte json.Marshal escapes in a
// raw message: <, > and &, and the first byte of U+2028 and U+2029.
func needsHTMLEscape(b []byte) bool {
	for i, c := range b {
		switch {
		case c == '<', c == '>', c == '&':
			return true
		case c == 0xE2 && i+2 < len(b) && b[i+1] == 0x80 && b[i+2]&^1 == 0xA8:
			return true
		}
	}
	return false
}

// appendJSONString appends s as json.Marshal writes a string.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7E || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func problemResult(batchID string, res validate.Result) result {
	l := &OutputLine{ID: requestID(batchID, res.Line), Line: res.Line}
	if res.HasCustomID {
		l.CustomID = strPtr(res.CustomID)
	}
	p := res.Problem
	if p.Kind == validate.KindBadRequest {
		msg := p.Message
		if p.Param != "" {
			msg = p.Param + ": " + msg
		}
		l.Response = &LineResponse{StatusCode: 400, RequestID: l.ID, Body: wire.BadRequest(msg, p.Param, p.Code)}
	} else {
		l.Error = &LineError{Code: p.Code, Message: p.Message}
	}
	return result{line: res.Line, kind: toErrors, data: encodeLine(l)}
}

func causeResult(batchID string, line int, cid string, cause error) result {
	code, msg := CodeBatchCancelled, "The batch was cancelled before this request completed."
	if errors.Is(cause, errExpired) {
		code, msg = CodeBatchExpired, "The batch's completion window passed before this request completed."
	}
	l := &OutputLine{ID: requestID(batchID, line), CustomID: strPtr(cid), Error: &LineError{Code: code, Message: msg}, Line: line}
	return result{line: line, kind: toErrors, data: encodeLine(l)}
}

func crashedResult(batchID string, line int, cid string, stops int) result {
	l := &OutputLine{ID: requestID(batchID, line), CustomID: strPtr(cid), Line: line, Error: &LineError{Code: CodeEngineCrashed,
		Message: fmt.Sprintf("batchd stopped without closing %d times while this request ran, the last time with nothing else running (a crash, an OOM kill or kill -9): it is not run again. Retry the batch to run it once more.", stops)}}
	return result{line: line, kind: toErrors, data: encodeLine(l)}
}

// answerResult is engineResult for an outcome, run by whoever took the
// engine's answer (a worker, or the engine's goroutine in done). A panic
// while reading the answer (a response the engine built wrong) fails that
// request alone with a 500, as a panic in the engine does.
func (r *run) answerResult(o outcome) (res result, ok bool) {
	defer func() {
		if v := recover(); v != nil {
			r.log.Error("the engine's answer to a request could not be read; failing that request", keyLine, o.line, keyCustomID, o.cid,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			res, ok = r.engineResult(o.line, o.cid, engine.Recovered(v), nil)
		}
	}()
	resp := o.resp
	if o.lineURL == wire.EndpointMessages && o.err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300 && bodyProblem(resp.Body) == "" {
		msg, err := wire.ChatToMessage(resp.Body)
		if err != nil {
			return r.badAnswer(requestID(r.b.ID, o.line), o.cid, o.line, resp.StatusCode,
				fmt.Sprintf("cannot be translated to a /v1/messages answer (%v)", err)), true
		}
		resp = &engine.Response{StatusCode: resp.StatusCode, RequestID: resp.RequestID, Body: msg}
	}
	return r.engineResult(o.line, o.cid, resp, o.err)
}

// engineResult turns the engine's answer into a result line. It reports
// false when the run is shutting down: the line is left for the next run.
func (r *run) engineResult(line int, cid string, resp *engine.Response, err error) (result, bool) {
	id := requestID(r.b.ID, line)
	switch {
	case err == nil:
		success := resp.StatusCode >= 200 && resp.StatusCode < 300
		errLine := line // an error line names its input line
		if success {
			errLine = 0
		}
		if p := bodyProblem(resp.Body); p != "" {
			return r.badAnswer(id, cid, line, resp.StatusCode, p), true
		}
		data, ok := encodeResponse(id, cid, resp.StatusCode, answerID(resp, id), resp.Body, errLine)
		switch {
		case !ok:
			return r.badAnswer(id, cid, line, resp.StatusCode, syntaxProblem(resp.Body)), true
		case !success:
			return result{line: line, kind: toErrors, data: data}, true
		}
		usage, p := usageOf(resp.Body)
		if p != "" {
			return r.badAnswer(id, cid, line, resp.StatusCode, p), true
		}
		return result{line: line, kind: toOutput, data: data, usage: usage}, true
	case r.runCtx.Err() != nil:
		return result{}, false
	case r.reqCtx.Err() != nil:
		if cause := r.stopCause(); cause != nil {
			return causeResult(r.b.ID, line, cid, cause), true
		}
		return result{}, false // the run shut down after all
	default:
		if !errors.Is(err, engine.ErrUnavailable) {
			r.log.Warn("engine error", keyLine, line, keyCustomID, cid, "error", err)
		}
		l := &OutputLine{ID: id, CustomID: strPtr(cid), Error: &LineError{Code: CodeEngineUnavailable, Message: err.Error()}, Line: line}
		return result{line: line, kind: toErrors, data: encodeLine(l)}, true
	}
}

// answerID is the request_id of an engine's answer: the engine's own, or
// the line's id when the engine gave none (a native engine's 400), so
// every response line names its request.
func answerID(resp *engine.Response, lineID string) string {
	if resp.RequestID != "" {
		return resp.RequestID
	}
	return lineID
}

// The members of a body's usage that usageOf reads or checks.
var (
	usageKeys = []string{"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details", "completion_tokens_details",
		"input_tokens", "output_tokens", "cache_read_input_tokens", "input_tokens_details", "output_tokens_details"} // from 5: Responses' and Anthropic's
	cachedKeys    = []string{"cached_tokens"}
	specKeys      = []string{"accepted_prediction_tokens", "rejected_prediction_tokens"}
	reasoningKeys = []string{"reasoning_tokens"}
	topUsageKey   = []string{"usage"}
)

// readUsage is usageOf's fast path: it reads the usage of body, valid JSON,
// in place. ok is false whenever the answer needs encoding/json's own
// judgement (usageOf then decodes the body): a key with escapes, one of
// the keys read spelled in another case or given twice, a value of a type
// or spelling encoding/json would refuse for an int, a negative count
// (usageOf then says what is wrong).
func readUsage(body []byte) (lineUsage, bool) {
	var usage []byte
	if !knownMembers(body, topUsageKey, func(_ int, v []byte) bool { usage = v; return true }) {
		return lineUsage{}, false
	}
	if usage == nil || string(usage) == "null" {
		return lineUsage{}, true
	}
	var unused int64
	t := newTokenCounts()
	ok := knownMembers(usage, usageKeys, func(i int, v []byte) bool {
		switch i {
		case 0:
			return jsonInt(v, &t.openai[0])
		case 1:
			return jsonInt(v, &t.openai[1])
		case 2:
			return jsonInt(v, &unused)
		case 3:
			return string(v) == "null" || knownMembers(v, cachedKeys, func(_ int, v []byte) bool { return jsonInt(v, &t.openai[2]) })
		case 4:
			return string(v) == "null" || knownMembers(v, specKeys, func(_ int, v []byte) bool { return jsonInt(v, &unused) })
		case 5, 6, 7: // input_tokens, output_tokens, cache_read_input_tokens
			return jsonInt(v, &t.anthropic[i-5])
		case 8: // a Response's input_tokens_details
			return string(v) == "null" || knownMembers(v, cachedKeys, func(_ int, v []byte) bool { return jsonInt(v, &t.anthropic[2]) })
		default: // a Response's output_tokens_details
			return string(v) == "null" || knownMembers(v, reasoningKeys, func(_ int, v []byte) bool { return jsonInt(v, &unused) })
		}
	})
	return t.usage(), ok
}

// tokenCounts are the input, output and cached tokens of a usage under
// chat completions' names (prompt_tokens, completion_tokens,
// prompt_tokens_details.cached_tokens) and under the Responses and
// Anthropic names (input_tokens, output_tokens,
// input_tokens_details.cached_tokens or cache_read_input_tokens); -1 when
// not given.
type tokenCounts struct{ openai, anthropic [3]int64 }

func newTokenCounts() tokenCounts {
	return tokenCounts{openai: [3]int64{-1, -1, -1}, anthropic: [3]int64{-1, -1, -1}}
}

// usage is the line's usage: each count under OpenAI's name when given,
// else under Anthropic's, else 0.
func (t tokenCounts) usage() lineUsage {
	var n [3]int64
	for i := range n {
		n[i] = max(t.anthropic[i], 0)
		if t.openai[i] >= 0 {
			n[i] = t.openai[i]
		}
	}
	return lineUsage{in: n[0], out: n[1], cached: n[2]}
}

// knownMembers calls read with the index in keys and the raw value of each
// member of obj whose key is one of keys, and reports false when obj is
// not an object, when read does, or when a key has escapes, is not ASCII,
// or matches one of keys twice or in another case (encoding/json matches
// keys without regard to case).
func knownMembers(obj []byte, keys []string, read func(i int, v []byte) bool) bool {
	i := wire.SkipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	var seen uint64
	m := wire.NewMembers(obj)
	for {
		key, vs, ve, ok := m.Next()
		if !ok {
			return true
		}
		k := key[1 : len(key)-1]
		for _, c := range k {
			if c == '\\' || c >= 0x80 {
				return false
			}
		}
		for j, want := range keys {
			if len(k) != len(want) || !bytes.EqualFold(k, []byte(want)) {
				continue
			}
			if string(k) != want || seen&(1<<j) != 0 || !read(j, obj[vs:ve]) {
				return false
			}
			seen |= 1 << j
		}
	}
}
