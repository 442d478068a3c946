package validate

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/batchd/batchd/wire"
)

// Kind tells how a Problem is reported in NAME.errors.jsonl.
type Kind int

const (
	// KindLine is a failure that is not HTTP-like: the error line carries
	// `error{code,message}` and `response` null.
	KindLine Kind = iota + 1
	// KindBadRequest is a request the API would refuse with 400: the error line
	// carries `response{status_code:400, body:{error:{message,type,param,code}}}`.
	KindBadRequest
)

func (k Kind) String() string {
	switch k {
	case KindLine:
		return "line"
	case KindBadRequest:
		return "bad_request"
	}
	return "unknown"
}

// Codes of KindLine problems (the error file's `error.code`).
const (
	CodeInvalidJSONLine   = "invalid_json_line"
	CodeLineTooLong       = "line_too_long"
	CodeInvalidCustomID   = "invalid_custom_id"
	CodeDuplicateCustomID = "duplicate_custom_id"
	CodeInvalidMethod     = "invalid_method"
	CodeInvalidURL        = "invalid_url"
	CodeInvalidBody       = "invalid_body"
)

// Codes of KindBadRequest problems (the 400 body's `error.code`), after
// OpenAI's.
const (
	CodeMissingRequiredParameter = wire.CodeMissingRequiredParameter
	CodeInvalidType              = wire.CodeInvalidType
	CodeInvalidValue             = wire.CodeInvalidValue
	CodeUnsupportedValue         = wire.CodeUnsupportedValue
	CodeUnsupportedParameter     = wire.CodeUnsupportedParameter
	CodeMissingMaxTokens         = wire.CodeMissingMaxTokens
)

// Problem is why a line is invalid.
type Problem struct {
	Kind Kind
	// Code is one of the Code constants.
	Code string
	// Message is human text that reads after the param, e.g. "must be between 0
	// and 2".
	Message string
	// Param is the body path of the offending value for KindBadRequest
	// problems, e.g. "temperature" or "messages[2].role"; empty for KindLine.
	Param string
}

// Error returns "param: message" or, without a param, "code: message".
func (p *Problem) Error() string {
	if p.Param != "" {
		return p.Param + ": " + p.Message
	}
	return p.Code + ": " + p.Message
}

// Request is a valid request, ready to dispatch.
type Request struct {
	// Line is the 1-based input line (or index in a requests document).
	Line     int
	CustomID string
	// Method is always "POST"; URL is one of the engine.Endpoint constants.
	Method, URL string
	// LineURL, when not "", is the line's url, translated to URL to run
	// (wire.EndpointMessages: the body is the chat body it translates to,
	// and the answer is to be translated back, see wire.ChatToMessage).
	LineURL string
	// Body is the effective body: the batch defaults merged in, or a copy of
	// the original bytes when nothing was merged. It does not alias the
	// LineSource's buffer.
	Body json.RawMessage
	// MaxTokens is the effective output length: body.max_completion_tokens,
	// else body.max_tokens, else the batch default; 0 for embeddings and
	// for a line that gives none (it generates until the context is full).
	MaxTokens int
}

// Result is the outcome of checking one line: exactly one of Request and
// Problem is set.
type Result struct {
	Line int
	// CustomID is the line's custom_id when one could be read, even on an
	// invalid line (HasCustomID true); otherwise the error line's custom_id is
	// null.
	CustomID    string
	HasCustomID bool
	Request     *Request
	Problem     *Problem
}

// String formats the result for `batchd validate`:
//
//	line N: [custom_id "X": ](body.param | code): message
//
// A KindBadRequest problem names its body param (prefixed "body."), a
// KindLine problem its code. A valid line reads `line N: custom_id "X": ok`.
func (r Result) String() string {
	var b strings.Builder
	b.Grow(64)
	b.WriteString("line ")
	b.WriteString(strconv.Itoa(r.Line))
	b.WriteString(": ")
	if r.HasCustomID {
		b.WriteString("custom_id ")
		b.WriteString(strconv.Quote(r.CustomID))
		b.WriteString(": ")
	}
	p := r.Problem
	if p == nil {
		b.WriteString("ok")
		return b.String()
	}
	if p.Kind == KindBadRequest && p.Param != "" {
		b.WriteString("body.")
		b.WriteString(p.Param)
	} else {
		b.WriteString(p.Code)
	}
	b.WriteString(": ")
	b.WriteString(p.Message)
	return b.String()
}

func lineProblem(code, msg string) *Problem {
	return &Problem{Kind: KindLine, Code: code, Message: msg}
}

func badRequest(code, param, msg string) *Problem {
	return &Problem{Kind: KindBadRequest, Code: code, Param: param, Message: msg}
}
