package pipeline

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/wire"
)

// An engine's answer is checked here, once, whatever engine gave it: a
// result line must be valid UTF-8 JSON whose response.body is an object,
// and a success's usage must be token counts the batch totals can add.
// An answer that is not is that request's engine_bad_response error line.

// AnswerProblem says why an engine's answer cannot be served as it is
// (the online endpoints' check, the same as a batch's): "" when it can,
// else what engine_bad_response would say of it.
func AnswerProblem(resp *engine.Response) string {
	p := bodyProblem(resp.Body)
	if p == "" && !json.Valid(resp.Body) {
		p = syntaxProblem(resp.Body)
	}
	if p == "" && resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, p = usageOf(resp.Body)
	}
	if p == "" {
		return ""
	}
	return answerMessage(resp.StatusCode, p)
}

// answerMessage is the message of an engine_bad_response line.
func answerMessage(status int, problem string) string {
	return fmt.Sprintf("the engine answered status %d with a body that %s; it is not written as a result", status, problem)
}

// bodyProblem says what is wrong with body as the body of a result line,
// or "" when nothing is: it must be valid UTF-8 and begin with '{' (that
// it is one whole JSON value, encodeResponse checks as it encodes it).
// This runs for every answer: the common case is one utf8.Valid pass.
func bodyProblem(body []byte) string {
	if !utf8.Valid(body) {
		return fmt.Sprintf("is not valid UTF-8 (at byte %d)", invalidUTF8At(body))
	}
	if i := wire.SkipSpace(body, 0); i < len(body) && body[i] == '{' {
		return ""
	}
	return notObject(body)
}

// notObject says what body, which is not a JSON object, is instead.
func notObject(body []byte) string {
	if !json.Valid(body) {
		return syntaxProblem(body)
	}
	i := wire.SkipSpace(body, 0)
	kind := "a number"
	switch body[i] {
	case '[':
		kind = "an array"
	case '"':
		kind = "a string"
	case 't', 'f':
		kind = "a boolean"
	case 'n':
		kind = "null"
	}
	return "is " + kind + ", not a JSON object"
}

// syntaxProblem says why body, which encodeResponse refused, is not JSON.
func syntaxProblem(body []byte) string {
	var v json.RawMessage
	if err := json.Unmarshal(body, &v); err != nil {
		return "is not JSON: " + err.Error()
	}
	return "is not JSON"
}

// invalidUTF8At returns the offset of the first byte of b that does not
// begin a valid UTF-8 sequence, or -1.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// badAnswer is the error line of a request whose engine answered status
// with a body that problem describes. It is logged: an engine that
// answers so is broken, and its operator should hear of it.
func (r *run) badAnswer(id, cid string, line, status int, problem string) result {
	msg := answerMessage(status, problem)
	r.log.Warn("the engine's answer cannot be a result line; failing that request", keyLine, line, keyCustomID, cid, "problem", msg)
	l := &OutputLine{ID: id, CustomID: strPtr(cid), Line: line, Error: &LineError{Code: CodeBadResponse, Message: msg}}
	return result{line: line, kind: toErrors, data: encodeLine(l)}
}

// usageFields is a body's usage as encoding/json matches its keys: what
// usageOf reads when its fast path (readUsage) leaves the body to it.
type usageFields struct {
	Usage *struct {
		PromptTokens            json.RawMessage `json:"prompt_tokens"`
		CompletionTokens        json.RawMessage `json:"completion_tokens"`
		TotalTokens             json.RawMessage `json:"total_tokens"`
		PromptTokensDetails     *cachedCount    `json:"prompt_tokens_details"`
		CompletionTokensDetails *struct {
			Accepted json.RawMessage `json:"accepted_prediction_tokens"`
			Rejected json.RawMessage `json:"rejected_prediction_tokens"`
		} `json:"completion_tokens_details"`
		// Responses' and Anthropic's names (/v1/responses, /v1/messages).
		InputTokens         json.RawMessage `json:"input_tokens"`
		OutputTokens        json.RawMessage `json:"output_tokens"`
		CacheReadTokens     json.RawMessage `json:"cache_read_input_tokens"`
		InputTokensDetails  *cachedCount    `json:"input_tokens_details"`
		OutputTokensDetails *struct {
			ReasoningTokens json.RawMessage `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
	} `json:"usage"`
}

// cachedCount is a usage's prompt_tokens_details or input_tokens_details.
type cachedCount struct {
	CachedTokens json.RawMessage `json:"cached_tokens"`
}

// tokenField is one token count of a usage: its name, its raw value
// (nil when absent) and where it is read to.
type tokenField struct {
	name string
	raw  json.RawMessage
	n    *int64
}

// usageOf reads the token usage of body, a JSON object. problem is not ""
// when its usage is not an object (or null) whose token counts are each
// null or an integer from 0 to math.MaxInt64: such an answer is refused,
// not summed.
func usageOf(body []byte) (lineUsage, string) {
	if lu, ok := readUsage(body); ok {
		return lu, ""
	}
	return decodeUsage(body)
}

// decodeUsage is usageOf with encoding/json's judgement (apart, so that
// the fast path allocates nothing).
func decodeUsage(body []byte) (_ lineUsage, problem string) {
	var u usageFields
	if json.Unmarshal(body, &u) != nil {
		return lineUsage{}, "has a usage that is not an object of token counts"
	}
	if u.Usage == nil {
		return lineUsage{}, ""
	}
	var unused int64
	t := newTokenCounts()
	fields := []tokenField{
		{"prompt_tokens", u.Usage.PromptTokens, &t.openai[0]},
		{"completion_tokens", u.Usage.CompletionTokens, &t.openai[1]},
		{"total_tokens", u.Usage.TotalTokens, &unused},
		{"input_tokens", u.Usage.InputTokens, &t.anthropic[0]},
		{"output_tokens", u.Usage.OutputTokens, &t.anthropic[1]},
		{"cache_read_input_tokens", u.Usage.CacheReadTokens, &t.anthropic[2]},
	}
	if d := u.Usage.PromptTokensDetails; d != nil {
		fields = append(fields, tokenField{"prompt_tokens_details.cached_tokens", d.CachedTokens, &t.openai[2]})
	}
	if d := u.Usage.CompletionTokensDetails; d != nil {
		fields = append(fields,
			tokenField{"completion_tokens_details.accepted_prediction_tokens", d.Accepted, &unused},
			tokenField{"completion_tokens_details.rejected_prediction_tokens", d.Rejected, &unused})
	}
	if d := u.Usage.InputTokensDetails; d != nil {
		fields = append(fields, tokenField{"input_tokens_details.cached_tokens", d.CachedTokens, &t.anthropic[2]})
	}
	if d := u.Usage.OutputTokensDetails; d != nil {
		fields = append(fields, tokenField{"output_tokens_details.reasoning_tokens", d.ReasoningTokens, &unused})
	}
	for _, f := range fields {
		if f.raw != nil && !jsonInt(f.raw, f.n) {
			return lineUsage{}, fmt.Sprintf("has a usage.%s that is not a whole number from 0 to %d (%s)", f.name, int64(math.MaxInt64), clip(f.raw))
		}
	}
	return t.usage(), ""
}

// clip returns the start of a raw JSON value, for a message.
func clip(raw []byte) string {
	const limit = 40
	if len(raw) > limit {
		return string(raw[:limit]) + "…"
	}
	return string(raw)
}

// jsonInt reads v, a raw JSON value, into *n: null leaves it; ok is false
// for anything but a whole number from 0 to math.MaxInt64 written as an
// integer (as encoding/json reads an int, less the negatives).
func jsonInt(v []byte, n *int64) bool {
	if string(v) == "null" {
		return true
	}
	x, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || x < 0 {
		return false
	}
	*n = x
	return true
}

// AddTokens adds n tokens to a total, saturating at math.MaxInt64: a total
// never wraps negative, however large the counts an engine reports.
func AddTokens(total, n int64) int64 {
	if n <= 0 {
		return total
	}
	if total > math.MaxInt64-n {
		return math.MaxInt64
	}
	return total + n
}
