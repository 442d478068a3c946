package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/ardanlabs/jinja"
)

// ErrInternal marks an error produced by recovering a panic inside the
// template engine. It indicates a bug in the engine (or in this package),
// never a problem with the request.
var ErrInternal = errors.New("chat: internal template engine error")

// Template is a parsed chat template. It is immutable and safe for concurrent
// use.
type Template struct {
	src      string
	compiled *jinja.Template
	// contentParts reports whether the template iterates over message
	// content itself, so that content parts are passed as an array instead
	// of being joined into a string.
	contentParts bool
}

// Options carries the variables of a render besides messages and tools.
type Options struct {
	// AddGenerationPrompt is passed as add_generation_prompt: end the
	// prompt with the header that opens an assistant turn.
	AddGenerationPrompt bool
	// EnableThinking, when set, is passed as enable_thinking (Qwen3 and
	// other hybrid reasoning models). When nil the variable is undefined,
	// which templates treat as their default.
	EnableThinking *bool
	// BOSToken and EOSToken are passed as bos_token and eos_token.
	BOSToken, EOSToken string
	// Extra holds other template variables (e.g. "tools_in_user_message",
	// "date_string", "reasoning_effort"). Values may be nil, bool, numbers,
	// strings, []any, map[string]any (converted with sorted keys) or
	// json.RawMessage (converted in document order). The variables above
	// take precedence over Extra entries of the same name, except that an
	// empty BOSToken/EOSToken leaves an Extra bos_token/eos_token alone.
	Extra map[string]any
}

// Parse compiles a chat template. The error names the line of a syntax error.
func Parse(src string) (t *Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t = nil
			err = fmt.Errorf("chat: parse template: %w: %v", ErrInternal, r)
		}
	}()
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("chat: parse template: template is empty")
	}
	normalised, err := normalise(src)
	if err != nil {
		return nil, fmt.Errorf("chat: parse template: %w", err)
	}
	compiled, err := jinja.Compile(normalised)
	if err != nil {
		return nil, fmt.Errorf("chat: parse template: %w", err)
	}
	return &Template{
		src:          src,
		compiled:     compiled,
		contentParts: iteratesContent(src),
	}, nil
}

// Source returns the template text as given to Parse.
func (t *Template) Source() string { return t.src }

// contentLoopRE matches a for loop over something named content:
// "for c in message.content", "for block in message['content']",
// "for item in content", "for x in messages[0]['content'] | sort(...)",
// but not over something derived from it ("in message.content.split(...)").
var contentLoopRE = regexp.MustCompile(`\{%[-+]?\s*for\s+\w+(?:\s*,\s*\w+)?\s+in\s+[\w.\[\]'"]*?\bcontent(?:['"]\])?\s*(?:[-+]?%\}|\||if\s)`)

func iteratesContent(src string) bool {
	return contentLoopRE.MatchString(src)
}

// Render renders the template for an OpenAI chat completion request.
//
// messages is the request's "messages" array: objects with role, content
// (a string, null, or an array of parts {"type":"text","text":...}), and
// optionally name, tool_calls, tool_call_id, reasoning_content and any other
// field, all of which are passed to the template. tools is the request's
// "tools" array; it may be empty or JSON null.
func (t *Template) Render(messages json.RawMessage, tools json.RawMessage, opts Options) (out string, err error) {
	if t == nil || t.compiled == nil {
		return "", errors.New("chat: render: nil template")
	}
	defer func() {
		if r := recover(); r != nil {
			out = ""
			err = fmt.Errorf("chat: render: %w: %v\n%s", ErrInternal, r, debug.Stack())
		}
	}()

	msgs, err := decodeMessages(messages, t.contentParts)
	if err != nil {
		return "", fmt.Errorf("chat: render: %w", err)
	}
	toolsVal, err := decodeTools(tools)
	if err != nil {
		return "", fmt.Errorf("chat: render: %w", err)
	}

	vars := make(map[string]jinja.Value, 8+len(opts.Extra))
	for k, v := range opts.Extra {
		val, err := toValue(v)
		if err != nil {
			return "", fmt.Errorf("chat: render: extra variable %q: %w", k, err)
		}
		vars[k] = val
	}
	vars["messages"] = msgs
	vars["tools"] = toolsVal
	if _, ok := vars["documents"]; !ok {
		vars["documents"] = jinja.None()
	}
	vars["add_generation_prompt"] = jinja.NewBool(opts.AddGenerationPrompt)
	setToken(vars, "bos_token", opts.BOSToken)
	setToken(vars, "eos_token", opts.EOSToken)
	if opts.EnableThinking != nil {
		vars["enable_thinking"] = jinja.NewBool(*opts.EnableThinking)
	}
	vars[tojsonFilter] = jinja.NewCallable("tojson", filterToJSON)
	vars[strFilter] = jinja.NewCallable("string", filterStr)

	out, err = t.compiled.RenderValues(vars)
	if err != nil {
		return "", fmt.Errorf("chat: render template: %w", err)
	}
	return out, nil
}

func setToken(vars map[string]jinja.Value, name, tok string) {
	if _, ok := vars[name]; ok && tok == "" {
		return
	}
	vars[name] = jinja.NewString(tok)
}

// SelectTemplate returns the template source held by a chat_template value
// of a Hugging Face tokenizer_config.json (or chat_template.json): either a
// string, or a list of {"name": ..., "template": ...} objects. name picks a
// template from a list (e.g. "tool_use"); empty means "default". A string
// value is returned for an empty name or "default".
func SelectTemplate(chatTemplate json.RawMessage, name string) (string, error) {
	if name == "" {
		name = "default"
	}
	var s string
	if err := json.Unmarshal(chatTemplate, &s); err == nil {
		if name != "default" {
			return "", fmt.Errorf("chat: select template %q: the configuration has a single template", name)
		}
		return s, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(chatTemplate, &list); err != nil {
		return "", fmt.Errorf("chat: select template: chat_template is neither a string nor a list of {name, template}: %w", err)
	}
	names := make([]string, 0, len(list))
	for _, e := range list {
		if e.Name == name {
			return e.Template, nil
		}
		names = append(names, e.Name)
	}
	return "", fmt.Errorf("chat: select template %q: not among %q", name, names)
}

// RawText is the prompt of a request that asks for no chat template
// (apply_chat_template: false): each message's content, its text parts
// joined with "\n" as for a template, the messages joined with "\n", in
// order. Roles and every other message field are dropped; the caller adds
// no special tokens.
func RawText(messages json.RawMessage) (string, error) {
	msgs, err := decodeMessages(messages, false)
	if err != nil {
		return "", fmt.Errorf("chat: raw text: %w", err)
	}
	var b strings.Builder
	for i, m := range msgs.AsList().Items {
		if i > 0 {
			b.WriteByte('\n')
		}
		c, _ := m.AsDict().Get("content")
		b.WriteString(c.AsString())
	}
	return b.String(), nil
}
