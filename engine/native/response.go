package native

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/wire"
)

// The OpenAI-shaped answer of a finished job.

func (r *runner) response(req *engine.Request, j *job) *engine.Response {
	u := wire.Usage{PromptTokensDetails: &wire.TokenDetails{}}
	counted := map[int]bool{}
	spec := false
	var cd wire.CompletionTokenDetails
	for _, s := range j.seqs {
		u.CompletionTokens += len(s.tokens) - s.promptLen
		spec = spec || s.spec.method != specOff
		cd.AcceptedPredictionTokens += s.spec.accepted
		cd.RejectedPredictionTokens += s.spec.rejected
		if !counted[s.index/j.p.n] {
			counted[s.index/j.p.n] = true
			u.PromptTokens += s.promptLen
			u.PromptTokensDetails.CachedTokens += min(s.cached, s.promptLen)
		}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if spec {
		u.CompletionTokensDetails = &cd // a request that speculated says how it went
	}
	id := requestHash(req)
	created := time.Now().Unix()
	model := r.name
	if j.p.adapter != nil {
		model = j.p.adapter.name // as vLLM answers for an adapter
	}
	var body any
	if req.Endpoint == engine.EndpointChat {
		cs := make([]wire.ChatChoice, len(j.seqs))
		for i, s := range j.seqs {
			cs[i] = wire.ChatChoice{Index: s.index, Message: wire.ChatMessage{Role: "assistant", Content: s.text.String()},
				Logprobs: r.chatLogprobs(j.p, s), FinishReason: s.finish, StopReason: s.stopReason()}
		}
		body = wire.ChatCompletion{ID: "chatcmpl-" + id, Object: wire.ObjectChatCompletion, Created: created,
			Model: model, Choices: cs, Usage: u}
	} else {
		cs := make([]wire.TextChoice, len(j.seqs))
		for i, s := range j.seqs {
			text, prompt := s.text.String(), ""
			if j.p.echo {
				prompt = r.tok.Decode(s.tokens[:s.promptLen])
				text = prompt + text
			}
			cs[i] = wire.TextChoice{Index: s.index, Text: text, FinishReason: s.finish, StopReason: s.stopReason(),
				Logprobs: r.legacyLogprobs(j.p, s, text, prompt)}
		}
		body = wire.TextCompletion{ID: "cmpl-" + id, Object: wire.ObjectTextCompletion, Created: created,
			Model: model, Choices: cs, Usage: u}
	}
	raw, _ := json.Marshal(body)
	return &engine.Response{StatusCode: 200, RequestID: "req_" + id, Body: raw}
}

// requestHash names a request's answer: the same request gets the same ids.
func requestHash(req *engine.Request) string {
	h := sha256.Sum256(append([]byte(req.CustomID+"\x00"), req.Body...))
	return hex.EncodeToString(h[:12])
}

func requestID(req *engine.Request) string { return "req_" + requestHash(req) }
