package native

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/chat"
	"github.com/batchd/batchd/wire"
)

// params is what the engine needs from a request body.
type params struct {
	model string
	// loraName is body.lora_name ("" : none); adapter is the adapter the
	// engine resolved from it or from model (nil: the base model).
	loraName string
	// loraPath is body.lora_path: the adapter's file or directory under
	// native.adapter_root, loaded on first use.
	loraPath string
	adapter  *adapter
	messages json.RawMessage // chat
	tools    json.RawMessage
	thinking *bool
	// noTemplate renders the messages' text with no chat template and no
	// special tokens (apply_chat_template: false).
	noTemplate bool
	// addGenerationPrompt is passed to the template (default true).
	addGenerationPrompt bool
	// templateVars are chat_template_kwargs other than enable_thinking and
	// add_generation_prompt, passed to the template as variables.
	templateVars map[string]any
	prompts      []promptInput // completions: one per prompt
	maxTokens    int
	n            int
	sampling     sampling
	stop         []string
	ignoreEOS    bool
	echo         bool
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
	// spec is body.speculative (or disable_spec_decode): specDefault when
	// neither is given, specOff, specOn, specNgram or specDraft.
	spec specMethod
}

// promptInput is a completions prompt: text or token ids.
type promptInput struct {
	text string
	ids  []int32
}

type rawBody struct {
	Model               string          `json:"model"`
	LoraName            *string         `json:"lora_name"`
	LoraPath            *string         `json:"lora_path"`
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
	ChatTemplateKwargs  json.RawMessage `json:"chat_template_kwargs"`
	EnableThinking      *bool           `json:"enable_thinking"`
	ApplyChatTemplate   *bool           `json:"apply_chat_template"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	Speculative         json.RawMessage `json:"speculative"`
	DisableSpecDecode   *bool           `json:"disable_spec_decode"`
}

// parseRequest reads the fields the engine uses. Bodies arrive validated by
// the pipeline, but the engine checks what it relies on again, since the
// HTTP API may call it directly: with wire's rules, the validator's own, so
// the two cannot disagree on a limit.
func parseRequest(req *engine.Request) (*params, *engine.Response) {
	if e := wire.CheckNativeBody(req.Endpoint, req.Body); e != nil {
		return nil, refuse(e)
	}
	var b rawBody
	if err := json.Unmarshal(req.Body, &b); err != nil {
		return nil, badRequest("body is not a valid request: "+err.Error(), "", "invalid_json")
	}
	if e := checkRanges(&b); e != nil {
		return nil, refuse(e)
	}
	p := &params{model: b.Model, n: 1, ignoreEOS: b.IgnoreEOS, echo: b.Echo}
	if b.LoraName != nil {
		p.loraName = *b.LoraName
	}
	if b.LoraPath != nil {
		p.loraPath = *b.LoraPath
	}
	switch {
	case b.MaxCompletionTokens != nil:
		p.maxTokens = int(*b.MaxCompletionTokens)
	case b.MaxTokens != nil:
		p.maxTokens = int(*b.MaxTokens)
	default:
		// As OpenAI: generate until the model's context is full (the
		// pipeline applies a batch's max_tokens, or refuses the line
		// when the batch asks for on_missing_max_tokens: reject).
		p.maxTokens = wire.MaxOutputTokens
	}
	if b.N != nil {
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
			return nil, refuse(&wire.Invalid{Code: wire.CodeInvalidType, Param: "stop", Message: wire.StopMessage})
		} else if e := wire.CheckStopCount(len(p.stop)); e != nil {
			return nil, refuse(e)
		}
	}
	if resp := parseTemplateControls(&b, p); resp != nil {
		return nil, resp
	}
	if resp := parseSpeculative(&b, p); resp != nil {
		return nil, resp
	}
	switch req.Endpoint {
	case engine.EndpointChat:
		if len(b.Messages) == 0 {
			return nil, badRequest("messages is required", "messages", "missing_required_parameter")
		}
		if e := wire.NonTextPart(b.Messages); e != nil {
			return nil, refuse(e)
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

// parseTemplateControls reads the chat template controls: top-level
// apply_chat_template, add_generation_prompt and enable_thinking, and
// chat_template_kwargs, whose enable_thinking and add_generation_prompt win
// over the top-level ones (as vLLM's do) and whose other keys become
// template variables.
func parseTemplateControls(b *rawBody, p *params) *engine.Response {
	p.noTemplate = b.ApplyChatTemplate != nil && !*b.ApplyChatTemplate
	p.addGenerationPrompt = b.AddGenerationPrompt == nil || *b.AddGenerationPrompt
	p.thinking = b.EnableThinking
	if !given(b.ChatTemplateKwargs) {
		return nil
	}
	var kw map[string]json.RawMessage
	if err := json.Unmarshal(b.ChatTemplateKwargs, &kw); err != nil {
		return refuse(wire.ChatTemplateKwargsNotObject(wire.TypeName(b.ChatTemplateKwargs)))
	}
	for k, raw := range kw {
		switch k {
		case "enable_thinking", "add_generation_prompt":
			var on bool
			if err := json.Unmarshal(raw, &on); err != nil {
				return refuse(wire.TemplateKwargNotBool(k, wire.TypeName(raw)))
			}
			if k == "enable_thinking" {
				p.thinking = &on
			} else {
				p.addGenerationPrompt = on
			}
		default:
			if p.templateVars == nil {
				p.templateVars = make(map[string]any, len(kw))
			}
			p.templateVars[k] = raw
		}
	}
	return nil
}

// templateOptions are the chat template's variables from the request (the
// caller adds the model's special tokens).
func (p *params) templateOptions() chat.Options {
	return chat.Options{AddGenerationPrompt: p.addGenerationPrompt, EnableThinking: p.thinking, Extra: p.templateVars}
}

// checkRanges checks the number fields of b against wire's rules.
func checkRanges(b *rawBody) *wire.Invalid {
	for _, c := range []struct {
		v *float64
		r wire.Range
	}{
		{b.Temperature, wire.Temperature}, {b.TopP, wire.TopP}, {b.MinP, wire.MinP},
		{b.PresencePenalty, wire.PresencePenalty}, {b.FrequencyPenalty, wire.FrequencyPenalty},
		{b.RepetitionPenalty, wire.RepetitionPenalty},
	} {
		if c.v != nil {
			if e := c.r.Check(*c.v); e != nil {
				return e
			}
		}
	}
	for _, c := range []struct {
		v *jsonInt
		r wire.IntRange
	}{
		{b.TopK, wire.TopK}, {b.MaxTokens, wire.MaxTokens}, {b.MaxCompletionTokens, wire.MaxCompletionTokens},
		{b.N, wire.N}, {b.MinTokens, wire.MinTokens}, {b.TopLogprobs, wire.TopLogprobs},
	} {
		if c.v != nil {
			if e := c.r.Check(int64(*c.v)); e != nil {
				return e
			}
		}
	}
	return nil
}

// refuse is the 400 for a value wire's rules refuse.
func refuse(e *wire.Invalid) *engine.Response {
	return &engine.Response{StatusCode: 400, Body: e.Body()}
}

// parseSampling reads the sampling, stopping and logprobs fields that go
// beyond temperature, top_p and top_k.
func parseSampling(b *rawBody, p *params, endpoint string) *engine.Response {
	s := &p.sampling
	if b.MinP != nil {
		s.minP = *b.MinP
	}
	if b.PresencePenalty != nil {
		s.presence = *b.PresencePenalty
	}
	if b.FrequencyPenalty != nil {
		s.frequency = *b.FrequencyPenalty
	}
	s.repetition = 1
	if b.RepetitionPenalty != nil {
		s.repetition = *b.RepetitionPenalty
	}
	if given(b.LogitBias) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b.LogitBias, &m); err != nil {
			return badRequest("logit_bias: must be an object mapping token ids to biases", "logit_bias", wire.CodeInvalidType)
		}
		if e := wire.CheckLogitBiasCount(len(m)); e != nil {
			return refuse(e)
		}
		for k, raw := range m {
			id, e := wire.LogitBiasKey(k)
			if e != nil {
				return refuse(e)
			}
			var v float64
			if err := json.Unmarshal(raw, &v); err != nil {
				if len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
					v = math.NaN() // out of float64's range: out of the bias range
				} else {
					return refuse(wire.LogitBiasNotNumber(k, wire.TypeName(raw)))
				}
			}
			if e := wire.CheckLogitBias(k, v); e != nil {
				return refuse(e)
			}
			s.bias = append(s.bias, logitBias{id: id, v: float32(v)})
		}
		slices.SortFunc(s.bias, func(a, b logitBias) int { return int(a.id) - int(b.id) })
	}
	if b.MinTokens != nil {
		if e := wire.CheckMinTokens(int64(*b.MinTokens), int64(p.maxTokens)); e != nil {
			return refuse(e)
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
		if b.TopLogprobs != nil && !on {
			return refuse(wire.TopLogprobsWithoutLogprobs())
		}
		if on {
			p.logprobs = true
			if b.TopLogprobs != nil {
				p.topLogprobs = int(*b.TopLogprobs)
			}
		}
	case engine.EndpointCompletions:
		if given(b.Logprobs) {
			var k jsonInt
			if err := json.Unmarshal(b.Logprobs, &k); err != nil {
				return refuse(&wire.Invalid{Code: wire.CodeInvalidType, Param: "logprobs", Message: wire.CompletionsLogprobs.Message})
			}
			if e := wire.CompletionsLogprobs.Check(int64(k)); e != nil {
				return refuse(e)
			}
			p.logprobs, p.topLogprobs = true, int(k)
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

func errorBody(msg, typ, param, code string) json.RawMessage {
	return wire.NewError(typ, msg, param, code).JSON()
}

func badRequest(msg, param, code string) *engine.Response {
	return &engine.Response{StatusCode: 400, Body: wire.BadRequest(msg, param, code)}
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

// parseSpeculative reads speculative (false, true, "ngram" or "draft") and
// the requests document's disable_spec_decode, which means speculative:
// false and contradicts a speculative that turns it on.
func parseSpeculative(b *rawBody, p *params) *engine.Response {
	mode, bad := wire.ParseSpeculative(b.Speculative)
	if bad != nil {
		return refuse(bad)
	}
	disable := b.DisableSpecDecode != nil && *b.DisableSpecDecode
	if bad := wire.SpeculativeConflict(mode, disable); bad != nil {
		return refuse(bad)
	}
	switch {
	case disable || mode == wire.SpecOff:
		p.spec = specOff
	case mode == wire.SpecOn:
		p.spec = specOn
	case mode == wire.SpecNgram:
		p.spec = specNgram
	case mode == wire.SpecDraft:
		p.spec = specDraft
	}
	return nil
}
