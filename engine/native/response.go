package native

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/batchd/batchd/engine"
)

// The OpenAI-shaped answer of a finished job.

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (r *runner) response(req *engine.Request, j *job) *engine.Response {
	var u usage
	counted := map[int]bool{}
	for _, s := range j.seqs {
		u.CompletionTokens += len(s.tokens) - s.promptLen
		if !counted[s.index/j.p.n] {
			counted[s.index/j.p.n] = true
			u.PromptTokens += s.promptLen
			u.PromptTokensDetails.CachedTokens += min(s.cached, s.promptLen)
		}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	id := requestHash(req)
	created := time.Now().Unix()
	var body any
	if req.Endpoint == engine.EndpointChat {
		type msg struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}
		type choice struct {
			Index        int    `json:"index"`
			Message      msg    `json:"message"`
			Logprobs     any    `json:"logprobs"`
			FinishReason string `json:"finish_reason"`
		}
		cs := make([]choice, len(j.seqs))
		for i, s := range j.seqs {
			cs[i] = choice{Index: s.index, Message: msg{Role: "assistant", Content: s.text.String()},
				Logprobs: r.chatLogprobs(j.p, s), FinishReason: s.finish}
		}
		body = struct {
			ID      string   `json:"id"`
			Object  string   `json:"object"`
			Created int64    `json:"created"`
			Model   string   `json:"model"`
			Choices []choice `json:"choices"`
			Usage   usage    `json:"usage"`
		}{"chatcmpl-" + id, "chat.completion", created, r.name, cs, u}
	} else {
		type choice struct {
			Index        int    `json:"index"`
			Text         string `json:"text"`
			Logprobs     any    `json:"logprobs"`
			FinishReason string `json:"finish_reason"`
		}
		cs := make([]choice, len(j.seqs))
		for i, s := range j.seqs {
			text, prompt := s.text.String(), ""
			if j.p.echo {
				prompt = r.tok.Decode(s.tokens[:s.promptLen])
				text = prompt + text
			}
			cs[i] = choice{Index: s.index, Text: text, FinishReason: s.finish,
				Logprobs: r.legacyLogprobs(j.p, s, text, prompt)}
		}
		body = struct {
			ID      string   `json:"id"`
			Object  string   `json:"object"`
			Created int64    `json:"created"`
			Model   string   `json:"model"`
			Choices []choice `json:"choices"`
			Usage   usage    `json:"usage"`
		}{"cmpl-" + id, "text_completion", created, r.name, cs, u}
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
