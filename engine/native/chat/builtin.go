package chat

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Well-known prompt formats, for models whose configuration carries no chat
// template. They were written for this package from the public descriptions
// of the formats and handle plain conversations (system, user, assistant and,
// for ChatML and Llama 3, any other role name); they do not render tools.

// ChatMLTemplate is the ChatML format (OpenAI ChatML, used by Qwen, Yi,
// Hermes and many fine-tunes):
//
//	<|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
const ChatMLTemplate = `{%- for message in messages -%}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- endif -%}`

// Llama3Template is the Llama 3 Instruct format: bos_token, then for each
// message a role header and the content (surrounding whitespace trimmed)
// closed by <|eot_id|>:
//
//	{bos}<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|> ...
//	<|start_header_id|>assistant<|end_header_id|>\n\n
//
// Pass BOSToken "<|begin_of_text|>" unless the tokenizer adds it itself.
const Llama3Template = `{{- bos_token -}}
{%- for message in messages -%}
{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n' + message.content | trim + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- endif -%}`

// Llama2Template is the Llama 2 Chat format: user turns wrapped in
// bos_token "[INST] ... [/INST]", the system prompt folded into the first
// user turn inside <<SYS>> markers, assistant turns followed by eos_token:
//
//	{bos}[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} {eos}{bos}[INST] {user} [/INST]
//
// Roles after the optional system message must alternate user, assistant,
// user, ...; the prompt always ends ready for the assistant, so
// add_generation_prompt has no effect. Pass BOSToken "<s>" and EOSToken
// "</s>" (or leave BOSToken empty if the tokenizer adds it to the first turn).
const Llama2Template = `{%- if messages and messages[0].role == 'system' -%}
{%- set system_prompt = messages[0].content | trim -%}
{%- set turns = messages[1:] -%}
{%- else -%}
{%- set system_prompt = none -%}
{%- set turns = messages -%}
{%- endif -%}
{%- for message in turns -%}
{%- if message.role == 'user' -%}
{%- if loop.index0 % 2 != 0 -%}
{{- raise_exception('llama2 template: roles must alternate user/assistant after the system message') -}}
{%- endif -%}
{{- bos_token + '[INST] ' -}}
{%- if loop.first and system_prompt is not none -%}
{{- '<<SYS>>\n' + system_prompt + '\n<</SYS>>\n\n' -}}
{%- endif -%}
{{- message.content | trim + ' [/INST]' -}}
{%- elif message.role == 'assistant' -%}
{%- if loop.index0 % 2 != 1 -%}
{{- raise_exception('llama2 template: roles must alternate user/assistant after the system message') -}}
{%- endif -%}
{{- ' ' + message.content | trim + ' ' + eos_token -}}
{%- else -%}
{{- raise_exception('llama2 template: unsupported role ' + message.role) -}}
{%- endif -%}
{%- endfor -%}`

var builtinSources = map[string]string{
	"chatml": ChatMLTemplate,
	"llama3": Llama3Template,
	"llama2": Llama2Template,
}

var builtinParsed = sync.OnceValue(func() map[string]*Template {
	m := make(map[string]*Template, len(builtinSources))
	for name, src := range builtinSources {
		t, err := Parse(src)
		if err != nil {
			panic(fmt.Sprintf("chat: builtin template %q does not parse: %v", name, err))
		}
		m[name] = t
	}
	return m
})

// Builtin returns the built-in template with the given name ("chatml",
// "llama3" or "llama2"; case-insensitive).
func Builtin(name string) (*Template, bool) {
	t, ok := builtinParsed()[strings.ToLower(strings.TrimSpace(name))]
	return t, ok
}

// BuiltinNames lists the names Builtin accepts, sorted.
func BuiltinNames() []string {
	names := make([]string, 0, len(builtinSources))
	for name := range builtinSources {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
