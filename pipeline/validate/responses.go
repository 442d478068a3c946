package validate

import (
	"encoding/json"
	"strings"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/wire"
)

// checkResponses checks a /v1/responses body: the chat completions body
// it runs as (wire.ResponsesToChat) must pass the chat rules, with the
// batch defaults merged. The effective body stays a Responses body, the
// defaults merged under their Responses names (max_tokens as
// max_output_tokens); a default of a field the Responses API spells
// otherwise or refuses (logprobs, n, ...) does not apply to it.
func (c *Checker) checkResponses(body []byte) (*Request, *Problem) {
	chat, inv := wire.ResponsesToChat(body)
	if inv != nil {
		return nil, fromWire(inv)
	}
	req, p := c.checkBody(epChat, chat)
	if p != nil {
		return nil, responsesProblem(p)
	}
	if !c.plan.any {
		req.Body = append(make([]byte, 0, len(body)), body...)
		return req, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, badRequest(CodeInvalidBody, "", "body: "+err.Error())
	}
	for j, it := range c.defaults.items {
		if !c.plan.apply[j] {
			continue
		}
		key := it.key
		if key == "max_tokens" {
			key = "max_output_tokens"
		}
		if wire.ResponsesRefuses(key) {
			continue
		}
		m[key] = it.val
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, badRequest(CodeInvalidBody, "", "body: "+err.Error())
	}
	req.Body = out
	return req, nil
}

// responsesProblem names, in a problem the chat rules found, the
// Responses field the user wrote.
func responsesProblem(p *Problem) *Problem {
	q := *p
	switch {
	case q.Param == "max_completion_tokens" || q.Param == "max_tokens":
		q.Param = "max_output_tokens"
	case strings.HasPrefix(q.Param, "messages"):
		q.Param = "input"
	default:
		return p
	}
	q.Message = strings.ReplaceAll(q.Message, "max_completion_tokens", "max_output_tokens")
	return &q
}

// checkNativeResponses is CheckNative for a /v1/responses request: the
// native engine's rules on the chat body it runs as.
func checkNativeResponses(r *Request) *Problem {
	chat, inv := wire.ResponsesToChat(r.Body)
	if inv != nil {
		return fromWire(inv)
	}
	if p := CheckNative(&Request{URL: engine.EndpointChat, Body: chat}); p != nil {
		return responsesProblem(p)
	}
	return nil
}
