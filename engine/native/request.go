package native

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/batchd/batchd/engine"
)

// params is what the engine needs from a request body.
type params struct {
	model     string
	messages  json.RawMessage // chat
	tools     json.RawMessage
	thinking  *bool
	prompts   []promptInput // completions: one per prompt
	maxTokens int
	n         int
	sampling  sampling
	stop      []string
	ignoreEOS bool
	echo      bool
}

// promptInput is a completions prompt: text or token ids.
type promptInput struct {
	text string
	ids  []int32
}

type rawBody struct {
	Model               string          `json:"model"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	N                   *int            `json:"n"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	Echo                bool            `json:"echo"`
	ChatTemplateKwargs  struct {
		EnableThinking *bool `json:"enable_thinking"`
	} `json:"chat_template_kwargs"`
	EnableThinking *bool `json:"enable_thinking"`
}

// parseRequest reads the fields the engine uses. Bodies arrive validated by
// the pipeline, but the engine checks what it relies on again, since the
// HTTP API may call it directly.
func parseRequest(req *engine.Request) (*params, *engine.Response) {
	var b rawBody
	if err := json.Unmarshal(req.Body, &b); err != nil {
		return nil, badRequest("body is not a valid request: "+err.Error(), "", "invalid_json")
	}
	p := &params{model: b.Model, n: 1, ignoreEOS: b.IgnoreEOS, echo: b.Echo}
	switch {
	case b.MaxCompletionTokens != nil:
		p.maxTokens = *b.MaxCompletionTokens
	case b.MaxTokens != nil:
		p.maxTokens = *b.MaxTokens
	}
	if p.maxTokens <= 0 {
		return nil, badRequest("max_tokens is required and must be positive", "max_tokens", "missing_max_tokens")
	}
	if b.N != nil {
		if *b.N < 1 || *b.N > 128 {
			return nil, badRequest("n must be between 1 and 128", "n", "invalid_value")
		}
		p.n = *b.N
	}
	if b.Temperature != nil {
		p.sampling.temperature = *b.Temperature
	}
	p.sampling.topP = 1
	if b.TopP != nil {
		p.sampling.topP = *b.TopP
	}
	if b.TopK != nil {
		p.sampling.topK = *b.TopK
	}
	if b.Seed != nil {
		p.sampling.seed = uint64(*b.Seed)
	} else {
		var s [8]byte
		rand.Read(s[:])
		p.sampling.seed = binary.LittleEndian.Uint64(s[:])
	}
	if len(b.Stop) > 0 && string(b.Stop) != "null" {
		var one string
		if json.Unmarshal(b.Stop, &one) == nil {
			p.stop = []string{one}
		} else if err := json.Unmarshal(b.Stop, &p.stop); err != nil {
			return nil, badRequest("stop must be a string or an array of strings", "stop", "invalid_type")
		}
	}
	p.thinking = b.ChatTemplateKwargs.EnableThinking
	if b.EnableThinking != nil {
		p.thinking = b.EnableThinking
	}
	switch req.Endpoint {
	case engine.EndpointChat:
		if len(b.Messages) == 0 {
			return nil, badRequest("messages is required", "messages", "missing_required_parameter")
		}
		p.messages, p.tools = b.Messages, b.Tools
	case engine.EndpointCompletions:
		prompts, err := parsePrompts(b.Prompt)
		if err != nil {
			return nil, badRequest(err.Error(), "prompt", "invalid_type")
		}
		p.prompts = prompts
	}
	return p, nil
}

// parsePrompts accepts a string, an array of strings, an array of token ids
// or an array of arrays of token ids.
func parsePrompts(raw json.RawMessage) ([]promptInput, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []promptInput{{text: s}}, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		out := make([]promptInput, len(ss))
		for i, x := range ss {
			out[i].text = x
		}
		return out, nil
	}
	var ids []int32
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return []promptInput{{ids: ids}}, nil
	}
	var idss [][]int32
	if json.Unmarshal(raw, &idss) == nil && len(idss) > 0 {
		out := make([]promptInput, len(idss))
		for i, x := range idss {
			out[i].ids = x
		}
		return out, nil
	}
	return nil, fmt.Errorf("prompt must be a string, an array of strings or token ids")
}

// apiError is OpenAI's error object.
type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func errorBody(msg, typ, param, code string) json.RawMessage {
	var e apiError
	e.Error.Message, e.Error.Type = msg, typ
	if param != "" {
		e.Error.Param = &param
	}
	if code != "" {
		e.Error.Code = &code
	}
	b, _ := json.Marshal(e)
	return b
}

func badRequest(msg, param, code string) *engine.Response {
	return &engine.Response{StatusCode: 400, Body: errorBody(msg, "invalid_request_error", param, code)}
}
