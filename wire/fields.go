package wire

import (
	"bytes"
	"encoding/json"
	"io"
)

// CodeUnsupportedParameter is the code of a body field batchd would
// otherwise ignore: every field is honoured, forwarded to a remote engine,
// or refused with this code naming it.
const CodeUnsupportedParameter = "unsupported_parameter"

// Endpoints, as the rules below know them (wire imports nothing of batchd).
const (
	endpointChat        = "/v1/chat/completions"
	endpointCompletions = "/v1/completions"
	endpointEmbeddings  = "/v1/embeddings"
)

// documentOnly maps the requests document's own names, which a JSONL body
// must spell the OpenAI way, to what to write instead.
var documentOnly = map[string]string{
	"num_logprobs":        "logprobs: true and top_logprobs: N (chat), or logprobs: N (completions)",
	"max_generate_length": "max_tokens (or max_completion_tokens)",
}

// DocumentOnlyField refuses a body key that only the requests document
// spells that way; nil for any other key. Every engine refuses these: a
// remote server would ignore them.
func DocumentOnlyField(key string) *Invalid {
	use, ok := documentOnly[key]
	if !ok {
		return nil
	}
	return &Invalid{Code: CodeUnsupportedParameter, Param: key,
		Message: "is a requests-document name, not a body field: in a JSONL body set " + use}
}

// fieldSet is the endpoints a native field belongs to, as bits.
type fieldSet uint8

const (
	onChat fieldSet = 1 << iota
	onCompletions
	onEmbeddings

	onGen = onChat | onCompletions
)

// nativeFields are the body fields the native engine honours, or accepts
// because their effect is already there (see docs/formats.md):
// save_system_prompt_kv_cache (prefix caching is always on), user,
// metadata and store (labels, not inference parameters), stream_options
// (read by the API with stream).
var nativeFields = map[string]fieldSet{
	"model":                       onGen | onEmbeddings,
	"user":                        onGen | onEmbeddings,
	"messages":                    onChat,
	"tools":                       onChat,
	"prompt":                      onCompletions,
	"echo":                        onCompletions,
	"input":                       onEmbeddings,
	"dimensions":                  onEmbeddings,
	"encoding_format":             onEmbeddings,
	"stream":                      onGen,
	"stream_options":              onGen,
	"metadata":                    onGen,
	"store":                       onGen,
	"max_tokens":                  onGen,
	"max_completion_tokens":       onGen,
	"n":                           onGen,
	"temperature":                 onGen,
	"top_p":                       onGen,
	"top_k":                       onGen,
	"min_p":                       onGen,
	"seed":                        onGen,
	"stop":                        onGen,
	"stop_token_ids":              onGen,
	"ignore_eos":                  onGen,
	"min_tokens":                  onGen,
	"presence_penalty":            onGen,
	"frequency_penalty":           onGen,
	"repetition_penalty":          onGen,
	"logit_bias":                  onGen,
	"logprobs":                    onGen,
	"top_logprobs":                onChat,
	"apply_chat_template":         onChat,
	"add_generation_prompt":       onChat,
	"enable_thinking":             onChat,
	"chat_template_kwargs":        onChat,
	"save_system_prompt_kv_cache": onChat,
	"disable_spec_decode":         onGen,
	"lora_name":                   onGen,
	"lora_path":                   onGen,
	"speculative":                 onGen,
}

// nativeRefusals say why the native engine refuses a field it knows of.
var nativeRefusals = map[string]string{}

// remoteRefusals say why the remote engine refuses a field rather than
// forward it: a server would ignore it, or read a path on its own disk.
var remoteRefusals = map[string]string{
	"lora_path": "is not sent to a remote engine (an OpenAI-compatible server loads adapters itself): " +
		"load the adapter in the server (vLLM: --lora-modules NAME=PATH) and name it in model, " +
		"or send the batch to the native engine with native.adapter_root set",
}

// CheckRemoteBody refuses the first top-level key of body, a JSON object,
// that the remote engine must not forward. A body that is not an object is
// left to the server.
func CheckRemoteBody(body []byte) *Invalid {
	if !mayRefuseKey(body, remoteRefusals) {
		return nil
	}
	return checkKeys(body, func(key string) *Invalid {
		if why, ok := remoteRefusals[key]; ok {
			return &Invalid{Code: CodeUnsupportedParameter, Param: key, Message: why}
		}
		return nil
	})
}

func endpointBits(endpoint string) fieldSet {
	switch endpoint {
	case endpointChat:
		return onChat
	case endpointCompletions:
		return onCompletions
	case endpointEmbeddings:
		return onEmbeddings
	}
	return 0
}

// NativeField refuses a body key the native engine would not honour on
// endpoint; nil when it honours or accepts it.
func NativeField(endpoint, key string) *Invalid {
	if e := DocumentOnlyField(key); e != nil {
		return e
	}
	if why, ok := nativeRefusals[key]; ok {
		return &Invalid{Code: CodeUnsupportedParameter, Param: key, Message: why}
	}
	set, ok := nativeFields[key]
	if ok && set&endpointBits(endpoint) != 0 {
		return nil
	}
	msg := "is not supported by the native engine"
	if ok {
		msg = "is not supported on " + endpoint + " by the native engine"
	}
	return &Invalid{Code: CodeUnsupportedParameter, Param: key,
		Message: msg + ": remove it, or send the batch to a remote engine that honours it"}
}

// CheckNativeBody refuses the first top-level key of body, a JSON object,
// that the native engine would not honour on endpoint. A body that is not
// an object is left to the caller's own decoding.
func CheckNativeBody(endpoint string, body []byte) *Invalid {
	return checkKeys(body, func(key string) *Invalid { return NativeField(endpoint, key) })
}

// checkKeys returns the first refusal of check for a top-level key of body,
// a JSON object; nil when none, or when body is not an object.
func checkKeys(body []byte, check func(key string) *Invalid) *Invalid {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		if e := check(key); e != nil {
			if e.Param == "" { // the key "", which a JSON object may have
				e = &Invalid{Code: e.Code, Param: "body", Message: `has the empty key "", which ` + e.Message}
			}
			return e
		}
		if err := skipValue(dec); err != nil {
			return nil
		}
	}
	return nil
}

// mayRefuseKey reports whether body, a JSON object, may have a top-level
// key in refused: a key with escapes may, as may what a body that is not
// JSON seems to hold. It scans the body in place, with no allocation, so
// that checkKeys (a decoder, many times slower) runs only on the rare body
// that may be refused, and decides.
func mayRefuseKey(body []byte, refused map[string]string) bool {
	m := NewMembers(body)
	for {
		key, _, _, ok := m.Next()
		if !ok {
			return false
		}
		k := key[1 : len(key)-1]
		if bytes.IndexByte(k, '\\') >= 0 {
			return true
		}
		if _, ok := refused[string(k)]; ok {
			return true
		}
	}
}

// skipValue reads past one JSON value.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// ChatTemplateKwargsNotObject refuses a chat_template_kwargs that is not an
// object; got is the type it is.
func ChatTemplateKwargsNotObject(got string) *Invalid {
	return &Invalid{Code: CodeInvalidType, Param: "chat_template_kwargs",
		Message: "must be an object of template variables, got " + got}
}

// TemplateKwargNotBool refuses a chat_template_kwargs key batchd reads as a
// boolean (enable_thinking, add_generation_prompt) holding something else.
func TemplateKwargNotBool(key, got string) *Invalid {
	return &Invalid{Code: CodeInvalidType, Param: "chat_template_kwargs." + key,
		Message: "must be a boolean, got " + got}
}
