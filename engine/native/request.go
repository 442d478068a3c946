package native

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

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
	// minTokens masks the end-of-generation and stop tokens, and defers
	// the stop strings, until that many tokens are generated.
	minTokens int
	// stopIDs end generation like EOS (even with ignore_eos), and are not
	// part of the output.
	stopIDs []int32
	// logprobs asks for each output token's logprob, with topLogprobs
	// alternatives (chat top_logprobs, completions logprobs).
	logprobs    bool
	topLogprobs int
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
	MaxTokens           *jsonInt        `json:"max_tokens"`
	MaxCompletionTokens *jsonInt        `json:"max_completion_tokens"`
	N                   *jsonInt        `json:"n"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *jsonInt        `json:"top_k"`
	Seed                *jsonInt        `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	IgnoreEOS           bool            `json:"ignore_eos"`
	Echo                bool            `json:"echo"`
	MinP                *float64        `json:"min_p"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	RepetitionPenalty   *float64        `json:"repetition_penalty"`
	LogitBias           json.RawMessage `json:"logit_bias"`
	MinTokens           *jsonInt        `json:"min_tokens"`
	StopTokenIDs        json.RawMessage `json:"stop_token_ids"`
	Logprobs            json.RawMessage `json:"logprobs"`
	TopLogprobs         *jsonInt        `json:"top_logprobs"`
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
		p.maxTokens = int(*b.MaxCompletionTokens)
	case b.MaxTokens != nil:
		p.maxTokens = int(*b.MaxTokens)
	}
	if p.maxTokens <= 0 {
		return nil, badRequest("max_tokens is required and must be positive", "max_tokens", "missing_max_tokens")
	}
	if b.N != nil {
		if int(*b.N) < 1 || int(*b.N) > 128 {
			return nil, badRequest("n must be between 1 and 128", "n", "invalid_value")
		}
		p.n = int(*b.N)
	}
	if b.Temperature != nil {
		p.sampling.temperature = *b.Temperature
	}
	p.sampling.topP = 1
	if b.TopP != nil {
		p.sampling.topP = *b.TopP
	}
	if b.TopK != nil {
		p.sampling.topK = int(*b.TopK)
	}
	if resp := parseSampling(&b, p, req.Endpoint); resp != nil {
		return nil, resp
	}
	if b.Seed != nil {
		p.sampling.seed = uint64(int64(*b.Seed))
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

// Limits the engine checks again (the pipeline's validator has the same).
const (
	maxLogitBias         = 1024
	maxTopLogprobs       = 20
	maxCompletionLogprob = 5
)

// parseSampling reads the sampling, stopping and logprobs fields that go
// beyond temperature, top_p and top_k.
func parseSampling(b *rawBody, p *params, endpoint string) *engine.Response {
	s := &p.sampling
	if b.MinP != nil {
		if *b.MinP < 0 || *b.MinP > 1 {
			return badRequest("min_p must be between 0 and 1", "min_p", "invalid_value")
		}
		s.minP = *b.MinP
	}
	if b.PresencePenalty != nil {
		if *b.PresencePenalty < -2 || *b.PresencePenalty > 2 {
			return badRequest("presence_penalty must be between -2 and 2", "presence_penalty", "invalid_value")
		}
		s.presence = *b.PresencePenalty
	}
	if b.FrequencyPenalty != nil {
		if *b.FrequencyPenalty < -2 || *b.FrequencyPenalty > 2 {
			return badRequest("frequency_penalty must be between -2 and 2", "frequency_penalty", "invalid_value")
		}
		s.frequency = *b.FrequencyPenalty
	}
	s.repetition = 1
	if b.RepetitionPenalty != nil {
		if !(*b.RepetitionPenalty > 0) || math.IsInf(*b.RepetitionPenalty, 0) {
			return badRequest("repetition_penalty must be greater than 0", "repetition_penalty", "invalid_value")
		}
		s.repetition = *b.RepetitionPenalty
	}
	if given(b.LogitBias) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b.LogitBias, &m); err != nil {
			return badRequest("logit_bias must be an object mapping token ids to biases", "logit_bias", "invalid_type")
		}
		if len(m) > maxLogitBias {
			return badRequest("logit_bias must have at most 1024 entries", "logit_bias", "invalid_value")
		}
		for k, raw := range m {
			id, err := strconv.ParseUint(k, 10, 31)
			if err != nil {
				return badRequest(fmt.Sprintf("logit_bias key %q is not a token id: keys must be non-negative integers written as strings", k), "logit_bias", "invalid_value")
			}
			var v float64
			if err := json.Unmarshal(raw, &v); err != nil {
				return badRequest(fmt.Sprintf("logit_bias for token %q must be a number", k), "logit_bias", "invalid_type")
			}
			if v < -100 || v > 100 {
				return badRequest(fmt.Sprintf("logit_bias for token %q must be between -100 and 100", k), "logit_bias", "invalid_value")
			}
			s.bias = append(s.bias, logitBias{id: int32(id), v: float32(v)})
		}
		slices.SortFunc(s.bias, func(a, b logitBias) int { return int(a.id) - int(b.id) })
	}
	if b.MinTokens != nil {
		if int(*b.MinTokens) < 0 {
			return badRequest("min_tokens must be a non-negative integer", "min_tokens", "invalid_value")
		}
		if int(*b.MinTokens) > p.maxTokens {
			return badRequest(fmt.Sprintf("min_tokens must not exceed the output length (%d tokens)", p.maxTokens), "min_tokens", "invalid_value")
		}
		p.minTokens = int(*b.MinTokens)
	}
	if given(b.StopTokenIDs) {
		var ids []int64
		if err := json.Unmarshal(b.StopTokenIDs, &ids); err != nil {
			return badRequest("stop_token_ids must be an array of token ids", "stop_token_ids", "invalid_type")
		}
		for _, id := range ids {
			if id < 0 || id > math.MaxInt32 {
				return badRequest(fmt.Sprintf("stop_token_ids: %d is not a token id", id), "stop_token_ids", "invalid_value")
			}
			p.stopIDs = append(p.stopIDs, int32(id))
		}
	}
	switch endpoint {
	case engine.EndpointChat:
		on := false
		if given(b.Logprobs) {
			if err := json.Unmarshal(b.Logprobs, &on); err != nil {
				return badRequest("logprobs must be a boolean", "logprobs", "invalid_type")
			}
		}
		if b.TopLogprobs != nil {
			if !on {
				return badRequest("top_logprobs requires logprobs to be true", "top_logprobs", "invalid_value")
			}
			if int(*b.TopLogprobs) < 0 || int(*b.TopLogprobs) > maxTopLogprobs {
				return badRequest("top_logprobs must be an integer between 0 and 20", "top_logprobs", "invalid_value")
			}
		}
		if on {
			p.logprobs = true
			if b.TopLogprobs != nil {
				p.topLogprobs = int(*b.TopLogprobs)
			}
		}
	case engine.EndpointCompletions:
		if given(b.Logprobs) {
			var k int
			if err := json.Unmarshal(b.Logprobs, &k); err != nil {
				return badRequest("logprobs must be an integer between 0 and 5", "logprobs", "invalid_type")
			}
			if k < 0 || k > maxCompletionLogprob {
				return badRequest("logprobs must be an integer between 0 and 5", "logprobs", "invalid_value")
			}
			p.logprobs, p.topLogprobs = true, k
		}
	}
	return nil
}

// given reports whether an optional raw field is present and not null.
func given(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

// checkVocab rejects logit_bias entries for ids the model does not have
// (stop_token_ids outside the vocabulary simply never occur).
func (p *params) checkVocab(vocab int) *engine.Response {
	for _, b := range p.sampling.bias {
		if int(b.id) >= vocab {
			return badRequest(fmt.Sprintf("logit_bias: token id %d is outside the vocabulary (0..%d)", b.id, vocab-1), "logit_bias", "invalid_value")
		}
	}
	return nil
}

// isStopID reports whether tok is one of the request's stop_token_ids.
func (p *params) isStopID(tok int32) bool {
	return slices.Contains(p.stopIDs, tok)
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

// findStop returns where the earliest stop string starts in text, or -1.
// The text before byte from was searched already, so only a match that
// ends after it can be new: the search starts len(stop)-1 bytes before it.
func findStop(text string, from int, stops []string) int {
	best := -1
	for _, st := range stops {
		if st == "" {
			continue
		}
		lo := max(0, from-len(st)+1)
		if i := strings.Index(text[lo:], st); i >= 0 && (best < 0 || lo+i < best) {
			best = lo + i
		}
	}
	return best
}

// jsonInt is an integer field that also accepts an integral JSON number
// written with a fraction or exponent (2.0, 1e3), as the pipeline's
// validator does.
type jsonInt int64

func (j *jsonInt) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	if i, err := n.Int64(); err == nil {
		*j = jsonInt(i)
		return nil
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return fmt.Errorf("%s is not an integer", n)
	}
	*j = jsonInt(f)
	return nil
}
