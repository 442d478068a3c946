package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// EndpointResponses is OpenAI's Responses API. batchd runs a Responses
// request as a chat completion (ResponsesToChat) and answers it as a
// Response object (ChatToResponse).
const EndpointResponses = "/v1/responses"

// ObjectResponse is a Response object's object.
const ObjectResponse = "response"

// responsesRefused are the Responses fields batchd knows and does not
// honour, each with why; a null value is the same as none. An empty
// array of tools is no tool.
var responsesRefused = map[string]string{
	"previous_response_id":   "is not supported: batchd stores no responses; send the whole conversation in input",
	"conversation":           "is not supported: batchd stores no conversations; send the whole conversation in input",
	"background":             "is not supported: a batch already runs in the background; send background requests as a batch (POST /v1/batches with endpoint /v1/responses)",
	"tools":                  "is not supported on /v1/responses: use /v1/chat/completions for tools",
	"tool_choice":            "is not supported on /v1/responses: use /v1/chat/completions for tools",
	"parallel_tool_calls":    "is not supported on /v1/responses: use /v1/chat/completions for tools",
	"max_tool_calls":         "is not supported on /v1/responses: use /v1/chat/completions for tools",
	"include":                "is not supported: a Response here holds its output message and usage only",
	"prompt":                 "is not supported: batchd has no stored prompt templates; send the text in input and instructions",
	"prompt_cache_key":       "is not supported: prefix caching needs no key (the native engine reuses every shared prompt prefix)",
	"prompt_cache_retention": "is not supported: prefix caching needs no key (the native engine reuses every shared prompt prefix)",
	"top_logprobs":           "is not supported on /v1/responses: use /v1/chat/completions with logprobs",
	"service_tier":           "is not supported: every request of a batch is served alike",
	"safety_identifier":      "is not supported: set user to label a request",
	"stream_options":         "is not supported on /v1/responses",
	// Chat names a Responses body spells otherwise.
	"messages":              "is a chat completions field: on /v1/responses set input (and instructions)",
	"max_tokens":            "is a chat completions field: on /v1/responses set max_output_tokens",
	"max_completion_tokens": "is a chat completions field: on /v1/responses set max_output_tokens",
	"response_format":       "is a chat completions field: on /v1/responses set text.format",
	"n":                     "is not supported on /v1/responses (one output per request): send one request per sample",
	"logprobs":              "is not supported on /v1/responses: use /v1/chat/completions with logprobs",
	"tool_calls":            "is not supported on /v1/responses",
}

// ResponsesRefuses reports whether key is a body field /v1/responses
// refuses (when not null).
func ResponsesRefuses(key string) bool {
	_, ok := responsesRefused[key]
	return ok
}

// ResponsesToChat turns a Responses body into the chat completions body it
// runs as: input (a string, or message items whose content is a string or
// input_text/output_text parts) and instructions become messages,
// max_output_tokens max_completion_tokens, reasoning.effort enable_thinking
// ("none" false, any other effort true), text.format type "text" nothing;
// temperature, top_p, model, user, metadata and stream are kept, as is every
// other field the Responses API does not define (vLLM's and batchd's own,
// top_k, seed, stop, ...), left to the chat rules. store must be false (or
// absent): batchd keeps no responses to retrieve. A field batchd does not
// honour is refused by name (previous_response_id, tools, background,
// JSON text formats, ...).
func ResponsesToChat(body []byte) ([]byte, *Invalid) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, &Invalid{Code: CodeInvalidType, Param: "body", Message: "must be a JSON object: " + err.Error()}
	}
	// Each refused key is named in a fixed order, so the refusal is the same
	// every time.
	for _, k := range sortedKeys(m) {
		v := m[k]
		why, ok := responsesRefused[k]
		if !ok || isNullRaw(v) || (k == "tools" && string(bytes.TrimSpace(v)) == "[]") {
			continue
		}
		return nil, &Invalid{Code: CodeUnsupportedParameter, Param: k, Message: why}
	}
	delete(m, "tools")
	out := make(map[string]json.RawMessage, len(m)+2)
	for k, v := range m {
		if _, refused := responsesRefused[k]; refused {
			continue // null, checked above
		}
		switch k {
		case "input", "instructions", "max_output_tokens", "text", "reasoning", "store", "truncation":
		default:
			out[k] = v
		}
	}
	msgs, e := responsesMessages(m["instructions"], m["input"])
	if e != nil {
		return nil, e
	}
	out["messages"] = msgs
	if v := m["max_output_tokens"]; !isNullRaw(v) {
		out["max_completion_tokens"] = v
	}
	if e := checkTextFormat(m["text"]); e != nil {
		return nil, e
	}
	if v := m["store"]; !isNullRaw(v) {
		var b bool
		if json.Unmarshal(v, &b) != nil {
			return nil, &Invalid{Code: CodeInvalidType, Param: "store", Message: "must be a boolean, got " + TypeName(bytes.TrimSpace(v))}
		}
		if b {
			return nil, &Invalid{Code: CodeUnsupportedValue, Param: "store",
				Message: "true is not supported: batchd keeps no responses to retrieve later; set store to false (a batch's results are in its output file)"}
		}
	}
	if v := m["truncation"]; !isNullRaw(v) {
		var s string
		if json.Unmarshal(v, &s) != nil || s != "disabled" {
			return nil, &Invalid{Code: CodeUnsupportedValue, Param: "truncation",
				Message: `only "disabled" is supported: a prompt longer than the model's context is refused, never cut`}
		}
	}
	if v := m["reasoning"]; !isNullRaw(v) {
		think, e := reasoningThinking(v)
		if e != nil {
			return nil, e
		}
		if think != nil {
			if _, set := out["enable_thinking"]; set {
				return nil, &Invalid{Code: CodeInvalidValue, Param: "reasoning",
					Message: "and enable_thinking both set thinking: give one"}
			}
			out["enable_thinking"] = json.RawMessage(fmt.Sprint(*think))
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, &Invalid{Code: CodeInvalidValue, Param: "body", Message: err.Error()}
	}
	return b, nil
}

func isNullRaw(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) == 0 || string(v) == "null"
}

func sortedKeys(m map[string]json.RawMessage) []string { return slices.Sorted(maps.Keys(m)) }

// chatMessage is a message of the chat body a Responses body becomes.
type chatMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

type textPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// responsesMessages builds the chat messages of instructions and input.
func responsesMessages(instructions, input json.RawMessage) (json.RawMessage, *Invalid) {
	var msgs []chatMessage
	if !isNullRaw(instructions) {
		var s string
		if json.Unmarshal(instructions, &s) != nil {
			return nil, &Invalid{Code: CodeInvalidType, Param: "instructions", Message: "must be a string, got " + TypeName(bytes.TrimSpace(instructions))}
		}
		msgs = append(msgs, chatMessage{Role: "system", Content: s})
	}
	input = bytes.TrimSpace(input)
	switch {
	case isNullRaw(input):
		return nil, &Invalid{Code: CodeMissingRequiredParameter, Param: "input", Message: "is required"}
	case input[0] == '"':
		var s string
		if err := json.Unmarshal(input, &s); err != nil {
			return nil, &Invalid{Code: CodeInvalidValue, Param: "input", Message: err.Error()}
		}
		msgs = append(msgs, chatMessage{Role: "user", Content: s})
	case input[0] == '[':
		var items []json.RawMessage
		if err := json.Unmarshal(input, &items); err != nil {
			return nil, &Invalid{Code: CodeInvalidValue, Param: "input", Message: err.Error()}
		}
		if len(items) == 0 {
			return nil, &Invalid{Code: CodeInvalidValue, Param: "input", Message: "must not be an empty array"}
		}
		for i, it := range items {
			msg, e := inputItem(fmt.Sprintf("input[%d]", i), it)
			if e != nil {
				return nil, e
			}
			msgs = append(msgs, msg)
		}
	default:
		return nil, &Invalid{Code: CodeInvalidType, Param: "input", Message: "must be a string or an array of message items, got " + TypeName(input)}
	}
	b, err := json.Marshal(msgs)
	if err != nil {
		return nil, &Invalid{Code: CodeInvalidValue, Param: "input", Message: err.Error()}
	}
	return b, nil
}

var inputRoles = map[string]bool{"user": true, "system": true, "developer": true, "assistant": true}

// inputItem turns one input item, a message, into a chat message.
func inputItem(param string, raw json.RawMessage) (chatMessage, *Invalid) {
	var it map[string]json.RawMessage
	if json.Unmarshal(raw, &it) != nil || it == nil {
		return chatMessage{}, &Invalid{Code: CodeInvalidType, Param: param, Message: "must be a message item object, got " + TypeName(bytes.TrimSpace(raw))}
	}
	for _, k := range sortedKeys(it) {
		switch k {
		case "type", "role", "content", "id", "status":
		default:
			return chatMessage{}, &Invalid{Code: CodeUnsupportedParameter, Param: param + "." + k, Message: "is not supported in an input message item"}
		}
	}
	if v := it["type"]; !isNullRaw(v) {
		var t string
		json.Unmarshal(v, &t)
		if t != "message" {
			return chatMessage{}, &Invalid{Code: CodeUnsupportedValue, Param: param + ".type",
				Message: fmt.Sprintf("%s is not supported: input items are messages only (function calls, reasoning and item references are not)", QuoteShort(string(bytes.TrimSpace(v))))}
		}
	}
	var role string
	if v := it["role"]; isNullRaw(v) {
		return chatMessage{}, &Invalid{Code: CodeMissingRequiredParameter, Param: param + ".role", Message: "is required"}
	} else if json.Unmarshal(v, &role) != nil || !inputRoles[role] {
		return chatMessage{}, &Invalid{Code: CodeInvalidValue, Param: param + ".role", Message: "must be one of user, system, developer, assistant, got " + QuoteShort(string(bytes.TrimSpace(v)))}
	}
	content := bytes.TrimSpace(it["content"])
	switch {
	case isNullRaw(content):
		return chatMessage{}, &Invalid{Code: CodeMissingRequiredParameter, Param: param + ".content", Message: "is required"}
	case content[0] == '"':
		var s string
		json.Unmarshal(content, &s)
		return chatMessage{Role: role, Content: s}, nil
	case content[0] != '[':
		return chatMessage{}, &Invalid{Code: CodeInvalidType, Param: param + ".content", Message: "must be a string or an array of input_text parts, got " + TypeName(content)}
	}
	var parts []map[string]json.RawMessage
	if json.Unmarshal(content, &parts) != nil {
		return chatMessage{}, &Invalid{Code: CodeInvalidType, Param: param + ".content", Message: "must be an array of content part objects"}
	}
	if len(parts) == 0 {
		return chatMessage{}, &Invalid{Code: CodeInvalidValue, Param: param + ".content", Message: "must not be an empty array"}
	}
	out := make([]textPart, 0, len(parts))
	for j, p := range parts {
		pp := fmt.Sprintf("%s.content[%d]", param, j)
		var typ, text string
		if json.Unmarshal(p["type"], &typ) != nil {
			return chatMessage{}, &Invalid{Code: CodeMissingRequiredParameter, Param: pp + ".type", Message: "is required and must be a string"}
		}
		if typ != "input_text" && typ != "output_text" {
			return chatMessage{}, &Invalid{Code: CodeUnsupportedContent, Param: pp,
				Message: fmt.Sprintf("content part type %q is not supported on /v1/responses: parts are input_text (or output_text in an assistant message); send images and files to /v1/chat/completions", typ)}
		}
		if json.Unmarshal(p["text"], &text) != nil {
			return chatMessage{}, &Invalid{Code: CodeMissingRequiredParameter, Param: pp + ".text", Message: "is required and must be a string"}
		}
		for k := range p {
			if k != "type" && k != "text" && !(k == "annotations" && typ == "output_text") {
				return chatMessage{}, &Invalid{Code: CodeUnsupportedParameter, Param: pp + "." + k, Message: "is not supported in a text part"}
			}
		}
		out = append(out, textPart{Type: "text", Text: text})
	}
	return chatMessage{Role: role, Content: out}, nil
}

// checkTextFormat accepts text: {format: {type: "text"}} (and null parts):
// the output is plain text.
func checkTextFormat(v json.RawMessage) *Invalid {
	if isNullRaw(v) {
		return nil
	}
	var text map[string]json.RawMessage
	if json.Unmarshal(v, &text) != nil || text == nil {
		return &Invalid{Code: CodeInvalidType, Param: "text", Message: "must be an object, got " + TypeName(bytes.TrimSpace(v))}
	}
	for _, k := range sortedKeys(text) {
		if k != "format" && !isNullRaw(text[k]) {
			return &Invalid{Code: CodeUnsupportedParameter, Param: "text." + k, Message: "is not supported: text takes format only"}
		}
	}
	f := text["format"]
	if isNullRaw(f) {
		return nil
	}
	var format struct {
		Type *string `json:"type"`
	}
	if json.Unmarshal(f, &format) != nil || format.Type == nil {
		return &Invalid{Code: CodeInvalidValue, Param: "text.format.type", Message: `is required: "text"`}
	}
	if *format.Type != "text" {
		return &Invalid{Code: CodeUnsupportedValue, Param: "text.format.type",
			Message: fmt.Sprintf("%q is not supported: the output is plain text (type \"text\"); structured output (json_object, json_schema) is not honoured", *format.Type)}
	}
	return nil
}

// reasoningThinking reads reasoning: {effort, summary}: effort "none" turns
// the template's thinking off, any other effort on; nil when effort is
// unset. A summary is refused: thinking text is not summarized.
func reasoningThinking(v json.RawMessage) (*bool, *Invalid) {
	var r map[string]json.RawMessage
	if json.Unmarshal(v, &r) != nil || r == nil {
		return nil, &Invalid{Code: CodeInvalidType, Param: "reasoning", Message: "must be an object, got " + TypeName(bytes.TrimSpace(v))}
	}
	for _, k := range sortedKeys(r) {
		if k != "effort" && !isNullRaw(r[k]) {
			return nil, &Invalid{Code: CodeUnsupportedParameter, Param: "reasoning." + k,
				Message: "is not supported: reasoning takes effort only (passed to the chat template as enable_thinking)"}
		}
	}
	if isNullRaw(r["effort"]) {
		return nil, nil
	}
	var effort string
	json.Unmarshal(r["effort"], &effort)
	switch effort {
	case "none":
		f := false
		return &f, nil
	case "minimal", "low", "medium", "high", "xhigh":
		t := true
		return &t, nil
	}
	return nil, &Invalid{Code: CodeInvalidValue, Param: "reasoning.effort",
		Message: "must be one of none, minimal, low, medium, high, xhigh, got " + QuoteShort(string(bytes.TrimSpace(r["effort"])))}
}

// Response is OpenAI's Response object, as batchd answers /v1/responses.
type Response struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"`
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"`
	Background         bool               `json:"background"`
	Error              any                `json:"error"`
	IncompleteDetails  *IncompleteDetails `json:"incomplete_details"`
	Instructions       any                `json:"instructions"`
	MaxOutputTokens    any                `json:"max_output_tokens"`
	Model              string             `json:"model"`
	Output             []OutputItem       `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID any                `json:"previous_response_id"`
	Reasoning          ResponseReasoning  `json:"reasoning"`
	Store              bool               `json:"store"`
	Temperature        any                `json:"temperature"`
	Text               ResponseText       `json:"text"`
	ToolChoice         string             `json:"tool_choice"`
	Tools              []any              `json:"tools"`
	TopP               any                `json:"top_p"`
	Truncation         string             `json:"truncation"`
	Usage              *ResponseUsage     `json:"usage"`
	User               any                `json:"user"`
	Metadata           json.RawMessage    `json:"metadata"`
}

// IncompleteDetails says why a Response is incomplete.
type IncompleteDetails struct {
	Reason string `json:"reason"`
}

// ResponseReasoning is a Response's reasoning echo.
type ResponseReasoning struct {
	Effort  any `json:"effort"`
	Summary any `json:"summary"`
}

// ResponseText is a Response's text echo.
type ResponseText struct {
	Format struct {
		Type string `json:"type"`
	} `json:"format"`
}

// OutputItem is an item of a Response's output: a message, or the
// model's reasoning (a thinking model's text before its answer).
type OutputItem struct {
	Type    string       `json:"type"`
	ID      string       `json:"id"`
	Status  string       `json:"status,omitempty"`
	Role    string       `json:"role,omitempty"`
	Content []OutputPart `json:"content"`
	Summary []OutputPart `json:"summary,omitzero"`
}

// OutputPart is a part of an OutputItem's content: output_text (with its
// annotations, always none) or reasoning_text.
type OutputPart struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations,omitzero"`
}

// ResponseUsage is a Response's usage.
type ResponseUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int64 `json:"total_tokens"`
}

// ChatToResponse turns the chat.completion a Responses request ran as into
// its Response object. request is the Responses body (for the echoed
// fields). The ids derive from the chat completion's, so the same answer
// gives the same Response.
func ChatToResponse(request, chat []byte) ([]byte, error) {
	var c struct {
		ID      string `json:"id"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content          *string `json:"content"`
				ReasoningContent *string `json:"reasoning_content"`
				Reasoning        *string `json:"reasoning"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			PromptTokens        int64 `json:"prompt_tokens"`
			CompletionTokens    int64 `json:"completion_tokens"`
			TotalTokens         int64 `json:"total_tokens"`
			PromptTokensDetails *struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
			CompletionTokensDetails *struct {
				ReasoningTokens int64 `json:"reasoning_tokens"`
			} `json:"completion_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(chat, &c); err != nil {
		return nil, fmt.Errorf("decode chat completion: %w", err)
	}
	if len(c.Choices) != 1 {
		return nil, fmt.Errorf("chat completion has %d choices, want 1", len(c.Choices))
	}
	suffix := strings.TrimPrefix(c.ID, "chatcmpl-")
	ch := c.Choices[0]
	r, err := echoResponse(request)
	if err != nil {
		return nil, err
	}
	r.ID, r.CreatedAt, r.Status, r.Model = "resp_"+suffix, c.Created, "completed", c.Model
	msgStatus := "completed"
	switch ch.FinishReason {
	case "length":
		r.Status, msgStatus = "incomplete", "incomplete"
		r.IncompleteDetails = &IncompleteDetails{Reason: "max_output_tokens"}
	case "content_filter":
		r.Status, msgStatus = "incomplete", "incomplete"
		r.IncompleteDetails = &IncompleteDetails{Reason: "content_filter"}
	}
	thought := ch.Message.ReasoningContent
	if thought == nil {
		thought = ch.Message.Reasoning
	}
	if thought != nil && *thought != "" {
		r.Output = append(r.Output, OutputItem{Type: "reasoning", ID: "rs_" + suffix, Summary: []OutputPart{},
			Content: []OutputPart{{Type: "reasoning_text", Text: *thought}}})
	}
	text := ""
	if ch.Message.Content != nil {
		text = *ch.Message.Content
	}
	r.Output = append(r.Output, OutputItem{Type: "message", ID: "msg_" + suffix, Status: msgStatus, Role: "assistant",
		Content: []OutputPart{{Type: "output_text", Text: text, Annotations: []any{}}}})
	if u := c.Usage; u != nil {
		ru := &ResponseUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
		if u.PromptTokensDetails != nil {
			ru.InputTokensDetails.CachedTokens = u.PromptTokensDetails.CachedTokens
		}
		if u.CompletionTokensDetails != nil {
			ru.OutputTokensDetails.ReasoningTokens = u.CompletionTokensDetails.ReasoningTokens
		}
		r.Usage = ru
	}
	return json.Marshal(r)
}

// InProgressResponse is the Response object a streamed Responses request
// opens with (response.created): status in_progress, no output yet, the
// request's fields echoed, model as the request names it.
func InProgressResponse(request []byte, id string, createdAt int64) ([]byte, error) {
	r, err := echoResponse(request)
	if err != nil {
		return nil, err
	}
	var req struct {
		Model string `json:"model"`
	}
	json.Unmarshal(request, &req)
	r.ID, r.CreatedAt, r.Status, r.Model, r.Output = id, createdAt, "in_progress", req.Model, []OutputItem{}
	return json.Marshal(r)
}

// echoResponse is the Response of request with its echoed fields set and
// nothing of the answer (no id, status, model, output or usage).
func echoResponse(request []byte) (Response, error) {
	var req struct {
		Instructions    json.RawMessage `json:"instructions"`
		MaxOutputTokens json.RawMessage `json:"max_output_tokens"`
		Temperature     json.RawMessage `json:"temperature"`
		TopP            json.RawMessage `json:"top_p"`
		User            json.RawMessage `json:"user"`
		Metadata        json.RawMessage `json:"metadata"`
		Reasoning       struct {
			Effort json.RawMessage `json:"effort"`
		} `json:"reasoning"`
	}
	if err := json.Unmarshal(request, &req); err != nil {
		return Response{}, fmt.Errorf("decode responses request: %w", err)
	}
	r := Response{
		Object:       ObjectResponse,
		Instructions: rawOrNull(req.Instructions), MaxOutputTokens: rawOrNull(req.MaxOutputTokens),
		Temperature: rawOrNull(req.Temperature), TopP: rawOrNull(req.TopP),
		User: rawOrNull(req.User), Metadata: json.RawMessage(`{}`),
		Reasoning:  ResponseReasoning{Effort: rawOrNull(req.Reasoning.Effort)},
		ToolChoice: "auto", Tools: []any{}, Truncation: "disabled", ParallelToolCalls: true,
	}
	r.Text.Format.Type = "text"
	if !isNullRaw(req.Metadata) {
		r.Metadata = req.Metadata
	}
	return r, nil
}

// rawOrNull is v as an echoed value: null when absent.
func rawOrNull(v json.RawMessage) any {
	if isNullRaw(v) {
		return nil
	}
	return v
}
