package validate

import (
	"math"
	"strconv"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/wire"
)

// endpoint is a set of endpoints, as bits.
type endpoint uint8

const (
	epChat endpoint = 1 << iota
	epCompletions
	epEmbeddings

	epGen = epChat | epCompletions
	epAll = epChat | epCompletions | epEmbeddings
)

// endpointOf maps a url to its endpoint; 0 when unsupported.
func endpointOf(url []byte) endpoint {
	switch string(url) {
	case engine.EndpointChat:
		return epChat
	case engine.EndpointCompletions:
		return epCompletions
	case engine.EndpointEmbeddings:
		return epEmbeddings
	}
	return 0
}

func (e endpoint) url() string {
	switch e {
	case epChat:
		return engine.EndpointChat
	case epCompletions:
		return engine.EndpointCompletions
	case epEmbeddings:
		return engine.EndpointEmbeddings
	}
	return ""
}

// fieldID names a body field the rules know. The order is the order in which
// fields are checked.
type fieldID int8

const (
	fMessages fieldID = iota
	fPrompt
	fInput
	fModel
	fStream
	fTemperature
	fTopP
	fTopK
	fMinP
	fMaxTokens
	fMaxCompletionTokens
	fN
	fLogprobs
	fTopLogprobs
	fLogitBias
	fStop
	fPresencePenalty
	fFrequencyPenalty
	fRepetitionPenalty
	fSeed
	fMinTokens
	fDimensions
	fEncodingFormat
	fApplyChatTemplate
	fAddGenerationPrompt
	fEnableThinking
	fChatTemplateKwargs
	fSaveSystemPromptKVCache
	fDisableSpecDecode
	fSpeculative
	fLoraName
	fLoraPath
	fNumLogprobs
	fMaxGenerateLength
	numFields

	fUnknown fieldID = -1
)

var fieldNames = [numFields]string{
	fMessages:            "messages",
	fPrompt:              "prompt",
	fInput:               "input",
	fModel:               "model",
	fStream:              "stream",
	fTemperature:         "temperature",
	fTopP:                "top_p",
	fTopK:                "top_k",
	fMinP:                "min_p",
	fMaxTokens:           "max_tokens",
	fMaxCompletionTokens: "max_completion_tokens",
	fN:                   "n",
	fLogprobs:            "logprobs",
	fTopLogprobs:         "top_logprobs",
	fLogitBias:           "logit_bias",
	fStop:                "stop",
	fPresencePenalty:     "presence_penalty",
	fFrequencyPenalty:    "frequency_penalty",
	fRepetitionPenalty:   "repetition_penalty",
	fSeed:                "seed",
	fMinTokens:           "min_tokens",
	fDimensions:          "dimensions",
	fEncodingFormat:      "encoding_format",

	fApplyChatTemplate:       "apply_chat_template",
	fAddGenerationPrompt:     "add_generation_prompt",
	fEnableThinking:          "enable_thinking",
	fChatTemplateKwargs:      "chat_template_kwargs",
	fSaveSystemPromptKVCache: "save_system_prompt_kv_cache",
	fDisableSpecDecode:       "disable_spec_decode",
	fSpeculative:             "speculative",
	fLoraName:                "lora_name",
	fLoraPath:                "lora_path",
	fNumLogprobs:             "num_logprobs",
	fMaxGenerateLength:       "max_generate_length",
}

// fieldEndpoints tells where a field belongs. Elsewhere the key is unknown to
// the rules and passes through untouched (top_logprobs is not part of
// /v1/completions, for instance, so it is neither checked nor honoured
// there). max_completion_tokens belongs to /v1/completions too: it is honoured
// there as on chat.
var fieldEndpoints = [numFields]endpoint{
	fMessages:            epChat,
	fPrompt:              epCompletions,
	fInput:               epEmbeddings,
	fModel:               epAll,
	fStream:              epGen,
	fTemperature:         epGen,
	fTopP:                epGen,
	fTopK:                epGen,
	fMinP:                epGen,
	fMaxTokens:           epGen,
	fMaxCompletionTokens: epGen,
	fN:                   epGen,
	fLogprobs:            epGen,
	fTopLogprobs:         epChat,
	fLogitBias:           epGen,
	fStop:                epGen,
	fPresencePenalty:     epGen,
	fFrequencyPenalty:    epGen,
	fRepetitionPenalty:   epGen,
	fSeed:                epGen,
	fMinTokens:           epGen,
	fDimensions:          epEmbeddings,
	fEncodingFormat:      epEmbeddings,

	fApplyChatTemplate:       epChat,
	fAddGenerationPrompt:     epChat,
	fEnableThinking:          epChat,
	fChatTemplateKwargs:      epChat,
	fSaveSystemPromptKVCache: epChat,
	fDisableSpecDecode:       epGen,
	fSpeculative:             epGen,
	fLoraName:                epAll,
	fLoraPath:                epGen,
	fNumLogprobs:             epAll, // refused: the document's names
	fMaxGenerateLength:       epAll,
}

// lookupField maps an unquoted key to its field.
func lookupField(key []byte) fieldID {
	switch string(key) {
	case "messages":
		return fMessages
	case "prompt":
		return fPrompt
	case "input":
		return fInput
	case "model":
		return fModel
	case "stream":
		return fStream
	case "temperature":
		return fTemperature
	case "top_p":
		return fTopP
	case "top_k":
		return fTopK
	case "min_p":
		return fMinP
	case "max_tokens":
		return fMaxTokens
	case "max_completion_tokens":
		return fMaxCompletionTokens
	case "n":
		return fN
	case "logprobs":
		return fLogprobs
	case "top_logprobs":
		return fTopLogprobs
	case "logit_bias":
		return fLogitBias
	case "stop":
		return fStop
	case "presence_penalty":
		return fPresencePenalty
	case "frequency_penalty":
		return fFrequencyPenalty
	case "repetition_penalty":
		return fRepetitionPenalty
	case "seed":
		return fSeed
	case "min_tokens":
		return fMinTokens
	case "dimensions":
		return fDimensions
	case "encoding_format":
		return fEncodingFormat
	case "apply_chat_template":
		return fApplyChatTemplate
	case "add_generation_prompt":
		return fAddGenerationPrompt
	case "enable_thinking":
		return fEnableThinking
	case "chat_template_kwargs":
		return fChatTemplateKwargs
	case "save_system_prompt_kv_cache":
		return fSaveSystemPromptKVCache
	case "disable_spec_decode":
		return fDisableSpecDecode
	case "speculative":
		return fSpeculative
	case "lora_name":
		return fLoraName
	case "lora_path":
		return fLoraPath
	case "num_logprobs":
		return fNumLogprobs
	case "max_generate_length":
		return fMaxGenerateLength
	}
	return fUnknown
}

// Limits of the rules that are not the body's (those are wire's).
const (
	maxCustomIDBytes = wire.MaxCustomIDBytes
	maxTokenID       = wire.MaxTokenID
)

// checkFields checks the effective body fields f of a body for endpoint ep,
// in field order, and returns the first problem.
func checkFields(ep endpoint, f *[numFields][]byte) *Problem {
	switch ep {
	case epChat:
		if p := checkMessages(f[fMessages]); p != nil {
			return p
		}
	case epCompletions:
		if p := checkPrompt("prompt", f[fPrompt], false); p != nil {
			return p
		}
	case epEmbeddings:
		if p := checkPrompt("input", f[fInput], true); p != nil {
			return p
		}
	}
	for id := fModel; id < numFields; id++ {
		if fieldEndpoints[id]&ep == 0 || (!given(f[id]) && !documentOnly(id)) || len(f[id]) == 0 {
			continue
		}
		if p := checkField(id, f[id], ep); p != nil {
			return p
		}
	}
	// Rules between fields.
	if given(f[fLoraPath]) && !given(f[fLoraName]) {
		return badRequest(CodeInvalidValue, "lora_path", "requires lora_name, the name the adapter is known by")
	}
	if given(f[fSpeculative]) && isTrue(f[fDisableSpecDecode]) {
		mode, _ := wire.ParseSpeculative(f[fSpeculative])
		if p := fromWire(wire.SpeculativeConflict(mode, true)); p != nil {
			return p
		}
	}
	if ep == epChat && given(f[fTopLogprobs]) && !isTrue(f[fLogprobs]) {
		return fromWire(wire.TopLogprobsWithoutLogprobs())
	}
	return nil
}

// documentOnly reports whether id is a requests-document name, refused in
// a body even when null.
func documentOnly(id fieldID) bool { return id == fNumLogprobs || id == fMaxGenerateLength }

// numLogprobsRange is the range of a requests document's num_logprobs on a
// chat or completions request: top_logprobs (chat) or logprobs (completions).
func numLogprobsRange(ep endpoint) wire.IntRange {
	if ep == epCompletions {
		return wire.IntRange{Param: "num_logprobs", Min: 0, Max: wire.MaxTextLogprobs,
			Message: "must be an integer between 0 and 5 on /v1/completions, whose logprobs it sets"}
	}
	return wire.IntRange{Param: "num_logprobs", Min: 0, Max: wire.MaxTopLogprobs,
		Message: "must be an integer between 0 and 50"}
}

// checkField checks one optional field that is given (present, not null).
// The messages, prompt and input fields are checked by their own functions.
func checkField(id fieldID, v []byte, ep endpoint) *Problem {
	name := fieldNames[id]
	switch id {
	case fModel, fLoraName:
		if !isString(v) {
			return badRequest(CodeInvalidType, name, "must be a string, got "+typeName(v))
		}
	case fStream:
		if !isBool(v) {
			return badRequest(CodeInvalidType, name, "must be a boolean, got "+typeName(v))
		}
		if isTrue(v) {
			return badRequest(CodeUnsupportedValue, name, "streaming is not supported in a batch: remove stream or set it to false")
		}
	case fLoraPath:
		if !isString(v) {
			return badRequest(CodeInvalidType, name, "must be a string, got "+typeName(v))
		}
		if string(v) == `""` {
			return badRequest(CodeInvalidValue, name, "must not be empty: the adapter's path under native.adapter_root")
		}
	case fApplyChatTemplate, fAddGenerationPrompt, fEnableThinking, fSaveSystemPromptKVCache, fDisableSpecDecode:
		if !isBool(v) {
			return badRequest(CodeInvalidType, name, "must be a boolean, got "+typeName(v))
		}
	case fChatTemplateKwargs:
		return checkTemplateKwargs(v)
	case fSpeculative:
		_, e := wire.ParseSpeculative(v)
		return fromWire(e)
	case fNumLogprobs:
		// A requests document turns a valid one into logprobs and leaves
		// the rest here, to be refused by the name the user wrote.
		if isNull(v) {
			return fromWire(wire.DocumentOnlyField(name))
		}
		if ep == epEmbeddings {
			return badRequest(CodeUnsupportedParameter, name, "is not supported on /v1/embeddings: remove it")
		}
		if p := checkInt(v, numLogprobsRange(ep)); p != nil {
			return p
		}
		return fromWire(wire.DocumentOnlyField(name))
	case fMaxGenerateLength:
		return fromWire(wire.DocumentOnlyField(name))
	case fTemperature:
		return checkNumber(v, wire.Temperature)
	case fTopP:
		return checkNumber(v, wire.TopP)
	case fTopK:
		return checkInt(v, wire.TopK)
	case fMinP:
		return checkNumber(v, wire.MinP)
	case fMaxTokens:
		return checkInt(v, wire.MaxTokens)
	case fMaxCompletionTokens:
		return checkInt(v, wire.MaxCompletionTokens)
	case fN:
		return checkInt(v, wire.N)
	case fLogprobs:
		if ep == epChat {
			if !isBool(v) {
				return badRequest(CodeInvalidType, name, "must be a boolean, got "+typeName(v))
			}
			return nil
		}
		return checkInt(v, wire.CompletionsLogprobs)
	case fTopLogprobs:
		return checkInt(v, wire.TopLogprobs)
	case fLogitBias:
		return checkLogitBias(v)
	case fStop:
		return checkStop(v)
	case fPresencePenalty:
		return checkNumber(v, wire.PresencePenalty)
	case fFrequencyPenalty:
		return checkNumber(v, wire.FrequencyPenalty)
	case fRepetitionPenalty:
		return checkNumber(v, wire.RepetitionPenalty)
	case fSeed:
		return checkInt(v, wire.Seed)
	case fMinTokens:
		return checkInt(v, wire.MinTokens)
	case fDimensions:
		return checkInt(v, wire.Dimensions)
	case fEncodingFormat:
		if !isString(v) {
			return badRequest(CodeInvalidType, name, `must be "float" or "base64", got `+typeName(v))
		}
		if s, _ := unquote(v); string(s) != "float" && string(s) != "base64" {
			return badRequest(CodeInvalidValue, name, `must be "float" or "base64", got `+quoteShort(s))
		}
	}
	return nil
}

// checkNumber checks a number against its rule.
func checkNumber(v []byte, r wire.Range) *Problem {
	if !isNumber(v) {
		return badRequest(CodeInvalidType, r.Param, "must be a number, got "+typeName(v))
	}
	f, ok := parseFloat(v)
	if !ok {
		return badRequest(CodeInvalidValue, r.Param, r.Message)
	}
	return fromWire(r.Check(f))
}

// checkInt checks an integer against its rule.
func checkInt(v []byte, r wire.IntRange) *Problem {
	n, st := parseInt(v)
	switch st {
	case intNotNumber:
		return badRequest(CodeInvalidType, r.Param, "must be an integer, got "+typeName(v))
	case intNotInteger:
		return badRequest(CodeInvalidType, r.Param, "must be an integer, got a decimal number")
	case intOverflow:
		return fromWire(r.Refuse())
	}
	return fromWire(r.Check(n))
}

// fromWire is a body problem wire's rules found; nil for none.
func fromWire(e *wire.Invalid) *Problem {
	if e == nil {
		return nil
	}
	return badRequest(e.Code, e.Param, e.Message)
}

// checkTemplateKwargs checks chat_template_kwargs: an object, whose
// enable_thinking and add_generation_prompt are booleans; other keys go to
// the template as variables.
func checkTemplateKwargs(v []byte) *Problem {
	if !isObject(v) {
		return fromWire(wire.ChatTemplateKwargsNotObject(typeName(v)))
	}
	for it := newMembers(v); ; {
		k, vs, ve, ok := it.next()
		if !ok {
			return nil
		}
		key, _ := unquote(k)
		switch string(key) {
		case "enable_thinking", "add_generation_prompt":
			if val := v[vs:ve]; !isBool(val) {
				return fromWire(wire.TemplateKwargNotBool(string(key), typeName(val)))
			}
		}
	}
}

const stopMsg = wire.StopMessage

func checkStop(v []byte) *Problem {
	switch {
	case isString(v):
		return nil
	case !isArray(v):
		return badRequest(CodeInvalidType, "stop", stopMsg+", got "+typeName(v))
	}
	n := 0
	for it := newElements(v); ; {
		el, ok := it.next()
		if !ok {
			break
		}
		if !isString(el) {
			return badRequest(CodeInvalidType, "stop", stopMsg+", got an array holding "+typeName(el))
		}
		n++
	}
	return fromWire(wire.CheckStopCount(n))
}

func checkLogitBias(v []byte) *Problem {
	const param = "logit_bias"
	if !isObject(v) {
		return badRequest(CodeInvalidType, param, "must be an object mapping token ids to biases, got "+typeName(v))
	}
	n := 0
	for it := newMembers(v); ; {
		k, vs, ve, ok := it.next()
		if !ok {
			break
		}
		n++
		if p := fromWire(wire.CheckLogitBiasCount(n)); p != nil {
			return p
		}
		k, _ = unquote(k)
		key := string(k)
		if _, e := wire.LogitBiasKey(key); e != nil {
			return fromWire(e)
		}
		val := v[vs:ve]
		if !isNumber(val) {
			return fromWire(wire.LogitBiasNotNumber(key, typeName(val)))
		}
		f, ok := parseFloat(val)
		if !ok {
			f = math.NaN() // out of float64's range: refused as out of the bias range
		}
		if p := fromWire(wire.CheckLogitBias(key, f)); p != nil {
			return p
		}
	}
	return nil
}

// quoteShort quotes s for a message, cut to a readable length.
func quoteShort(s []byte) string { return wire.QuoteShort(string(s)) }

var knownRoles = [...]string{"system", "developer", "user", "assistant", "tool", "function"}

const rolesMsg = "must be one of system, developer, user, assistant, tool, function"

// checkMessages checks a chat body's messages.
func checkMessages(v []byte) *Problem {
	const param = "messages"
	switch {
	case len(v) == 0:
		return badRequest(CodeMissingRequiredParameter, param, "is required")
	case !isArray(v):
		return badRequest(CodeInvalidType, param, "must be an array of messages, got "+typeName(v))
	}
	i := 0
	for it := newElements(v); ; i++ {
		m, ok := it.next()
		if !ok {
			break
		}
		if p := checkMessage(i, m); p != nil {
			return p
		}
	}
	if i == 0 {
		return badRequest(CodeInvalidValue, param, "must contain at least one message")
	}
	return nil
}

func checkMessage(i int, m []byte) *Problem {
	param := func(field string) string {
		return "messages[" + strconv.Itoa(i) + "]" + field
	}
	if !isObject(m) {
		return badRequest(CodeInvalidType, param(""), "must be an object, got "+typeName(m))
	}
	var role, content, toolCalls, functionCall, toolCallID []byte
	for it := newMembers(m); ; {
		k, vs, ve, ok := it.next()
		if !ok {
			break
		}
		// Message keys never need unescaping in practice; an escaped key is
		// compared after decoding all the same.
		key, _ := unquote(k)
		switch string(key) {
		case "role":
			role = m[vs:ve]
		case "content":
			content = m[vs:ve]
		case "tool_calls":
			toolCalls = m[vs:ve]
		case "function_call":
			functionCall = m[vs:ve]
		case "tool_call_id":
			toolCallID = m[vs:ve]
		}
	}
	if len(role) == 0 {
		return badRequest(CodeMissingRequiredParameter, param(".role"), "is required")
	}
	if !isString(role) {
		return badRequest(CodeInvalidType, param(".role"), "must be a string, got "+typeName(role))
	}
	r, _ := unquote(role)
	known := false
	for _, kr := range knownRoles {
		if string(r) == kr {
			known = true
			break
		}
	}
	if !known {
		return badRequest(CodeInvalidValue, param(".role"), "unknown role "+quoteShort(r)+": "+rolesMsg)
	}
	assistant := string(r) == "assistant"
	if given(toolCalls) && !isArray(toolCalls) {
		return badRequest(CodeInvalidType, param(".tool_calls"), "must be an array, got "+typeName(toolCalls))
	}
	switch {
	case !given(content):
		if assistant && (given(toolCalls) || given(functionCall)) {
			break
		}
		if len(content) == 0 {
			return badRequest(CodeMissingRequiredParameter, param(".content"), "is required (it may be null only for assistant messages with tool_calls or function_call)")
		}
		return badRequest(CodeInvalidType, param(".content"), "must be a string or an array of content parts, got null (null is allowed only for assistant messages with tool_calls or function_call)")
	case isString(content):
	case isArray(content):
		if p := checkContentParts(param(".content"), content); p != nil {
			return p
		}
	default:
		return badRequest(CodeInvalidType, param(".content"), "must be a string or an array of content parts, got "+typeName(content))
	}
	if string(r) == "tool" {
		if len(toolCallID) == 0 || isNull(toolCallID) {
			return badRequest(CodeMissingRequiredParameter, param(".tool_call_id"), "is required for tool messages")
		}
		if !isString(toolCallID) {
			return badRequest(CodeInvalidType, param(".tool_call_id"), "must be a string, got "+typeName(toolCallID))
		}
	}
	return nil
}

// checkContentParts checks an array of content parts: objects with a string
// "type"; a "text" part needs a string "text". Other part types (image_url,
// input_audio, file, ...) are the engine's business.
func checkContentParts(param string, v []byte) *Problem {
	j := 0
	for it := newElements(v); ; j++ {
		part, ok := it.next()
		if !ok {
			break
		}
		pp := param + "[" + strconv.Itoa(j) + "]"
		if !isObject(part) {
			return badRequest(CodeInvalidType, pp, "must be a content part object, got "+typeName(part))
		}
		var typ, text []byte
		for mi := newMembers(part); ; {
			k, vs, ve, ok := mi.next()
			if !ok {
				break
			}
			key, _ := unquote(k)
			switch string(key) {
			case "type":
				typ = part[vs:ve]
			case "text":
				text = part[vs:ve]
			}
		}
		if len(typ) == 0 {
			return badRequest(CodeMissingRequiredParameter, pp+".type", "is required")
		}
		if !isString(typ) {
			return badRequest(CodeInvalidType, pp+".type", "must be a string, got "+typeName(typ))
		}
		if t, _ := unquote(typ); string(t) == "text" {
			if len(text) == 0 {
				return badRequest(CodeMissingRequiredParameter, pp+".text", "is required for a text part")
			}
			if !isString(text) {
				return badRequest(CodeInvalidType, pp+".text", "must be a string, got "+typeName(text))
			}
		}
	}
	if j == 0 {
		return badRequest(CodeInvalidValue, param, "must not be an empty array")
	}
	return nil
}

const (
	promptMsg = "must be a string, an array of strings, an array of token ids or an array of arrays of token ids"
	inputMsg  = "must be a non-empty string, an array of non-empty strings, an array of token ids or an array of arrays of token ids"
)

// checkPrompt checks a completions prompt or (embeddings) an input: a string,
// or a non-empty array of strings, of token ids, or of non-empty arrays of
// token ids. Embeddings reject empty strings, as OpenAI does; a completions
// prompt may be "" (the model then starts from its BOS token).
func checkPrompt(param string, v []byte, embeddings bool) *Problem {
	msg := promptMsg
	if embeddings {
		msg = inputMsg
	}
	switch {
	case len(v) == 0:
		return badRequest(CodeMissingRequiredParameter, param, "is required")
	case isString(v):
		if embeddings && len(v) == 2 {
			return badRequest(CodeInvalidValue, param, "must not be an empty string")
		}
		return nil
	case !isArray(v):
		return badRequest(CodeInvalidType, param, msg+", got "+typeName(v))
	}
	var first byte // the kind of the first element: '"', '0' or '['
	i := 0
	for it := newElements(v); ; i++ {
		el, ok := it.next()
		if !ok {
			break
		}
		pp := param + "[" + strconv.Itoa(i) + "]"
		kind := el[0]
		if isNumber(el) {
			kind = '0'
		}
		if i == 0 {
			first = kind
		}
		if kind != first {
			return badRequest(CodeInvalidType, pp, msg+": elements must all be of one kind, got "+typeName(el)+" after "+kindName(first))
		}
		switch kind {
		case '"':
			if embeddings && len(el) == 2 {
				return badRequest(CodeInvalidValue, pp, "must not be an empty string")
			}
		case '0':
			if !isTokenIDNumber(el) {
				return badRequest(CodeInvalidValue, pp, "must be a token id: an integer between 0 and 2147483647")
			}
		case '[':
			if p := checkTokenIDs(pp, el); p != nil {
				return p
			}
		default:
			return badRequest(CodeInvalidType, pp, msg+", got an array holding "+typeName(el))
		}
	}
	if i == 0 {
		return badRequest(CodeInvalidValue, param, "must not be an empty array")
	}
	return nil
}

func kindName(k byte) string {
	switch k {
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '[':
		return "an array"
	}
	return "a value"
}

func isTokenIDNumber(v []byte) bool {
	n, st := parseInt(v)
	return st == intOK && n >= 0 && n <= maxTokenID
}

// checkTokenIDs checks a non-empty array of token ids.
func checkTokenIDs(param string, v []byte) *Problem {
	i := 0
	for it := newElements(v); ; i++ {
		el, ok := it.next()
		if !ok {
			break
		}
		if !isNumber(el) {
			return badRequest(CodeInvalidType, param+"["+strconv.Itoa(i)+"]", "must be a token id, got "+typeName(el))
		}
		if !isTokenIDNumber(el) {
			return badRequest(CodeInvalidValue, param+"["+strconv.Itoa(i)+"]", "must be a token id: an integer between 0 and 2147483647")
		}
	}
	if i == 0 {
		return badRequest(CodeInvalidValue, param, "must not be an empty array of token ids")
	}
	return nil
}

// CheckNative applies the native engine's body rules (wire's, which the
// engine itself runs) to a valid request: the problem the engine would
// answer for it, or nil. A remote engine forwards what these refuse, media
// parts included.
func CheckNative(r *Request) *Problem {
	if r.URL == engine.EndpointResponses {
		return checkNativeResponses(r)
	}
	if e := wire.CheckNativeBody(r.URL, r.Body); e != nil {
		return fromWire(e)
	}
	if r.URL != engine.EndpointChat {
		return nil
	}
	// The engine decodes the body with encoding/json: the last messages
	// key wins, escaped or not.
	var messages []byte
	for it := newMembers(r.Body); ; {
		k, vs, ve, ok := it.next()
		if !ok {
			break
		}
		if key, _ := unquote(k); string(key) == "messages" {
			messages = r.Body[vs:ve]
		}
	}
	return fromWire(wire.NonTextPart(messages))
}
