// Package chat renders model chat templates: the Jinja programs that models
// ship (GGUF "tokenizer.chat_template", or Hugging Face tokenizer_config.json
// "chat_template") to turn an OpenAI-style list of messages into the exact
// prompt text the model was trained on.
//
// Templates are executed with github.com/ardanlabs/jinja, configured the way
// Hugging Face transformers runs them (trim_blocks and lstrip_blocks on,
// loop controls, raise_exception, strftime_now, the {% generation %} tag),
// and given the same variables transformers' apply_chat_template passes:
// messages, tools (none when the request has no tools), documents (none),
// add_generation_prompt, bos_token, eos_token, enable_thinking (only when
// Options.EnableThinking is set) and any Options.Extra variables.
//
// # Message normalisation
//
// The request's "messages" array is decoded with its key order preserved
// (Python dicts keep insertion order, and tojson output depends on it), then:
//
//   - content given as an array of parts ({"type":"text","text":...}) is
//     joined into one string, parts separated by "\n" (as vLLM does), unless
//     the template itself iterates over message content (e.g. Qwen3-VL,
//     Mistral 3, Gemma), in which case the parts array is passed unchanged.
//     Only "text" parts are accepted; other part types (images, audio) are
//     an error, as this engine is text only.
//   - null or missing content becomes "" so that templates that concatenate
//     or search content (Qwen3 does '</think>' in message.content) work for
//     assistant messages that carry only tool_calls.
//   - tool_calls[].function.arguments given as a JSON string (the OpenAI wire
//     format) is decoded into an object when it holds one, as vLLM does;
//     templates expect a mapping there (tool_call.arguments | tojson, or
//     | items). Arguments that are not a JSON object stay strings.
//   - an empty tools array is passed as none, like an absent one.
//
// # Gaps in github.com/ardanlabs/jinja v1.8.0 and what this package does
//
// The library covers what chat templates commonly use (loops with loop.*,
// namespace(), macros, slicing such as [::-1], is defined/none/string/...,
// raise_exception, strftime_now, {% generation %}, the string methods
// startswith, endswith, split, strip, lstrip, rstrip, replace, and the
// filters trim, tojson, items, length, map, selectattr, join, ...). The 17
// real templates of the library's test data (Qwen3/3.5/3.6/VL, Llama 3.2,
// gpt-oss, Gemma 4, Mistral, GLM, DeepSeek, Kimi, Nemotron, ...) render
// byte-for-byte like transformers' Jinja2 once the workarounds below are in
// place; without them five of them differ.
//
// Worked around here (Parse rewrites the template, see normalise.go):
//
//   - Whitespace control: the library applies "-", trim_blocks and
//     lstrip_blocks to the nearest text segment even across other tags, so
//     "{% for m in messages %}{{ m }}\n{% endfor %}" lost its newlines and
//     "Effort: {{ x }}{%- endif %}" its space (GLM). This package lexes the
//     template like Jinja2's lexer, applies Jinja2's rules itself (also "+",
//     Unicode whitespace, CRLF, the dropped trailing newline, raw blocks)
//     and hands the library a template with nothing left to trim.
//   - Printing: the library prints floats with Go's %g (1.0 as "1", which
//     changes tool-call arguments in Qwen3.5, Nemotron and Gemma 4 prompts)
//     and None as "". {{ ... }} output and the string filter now use
//     Python's str(): 1.0, 1e-05, None, True, Python reprs of lists/dicts.
//   - tojson: the library's filter, with indent=, sorts keys and
//     HTML-escapes <, > and & (Llama 3.x tool prompts); it writes 1.0 as 1,
//     escapes U+2028/U+2029 and ignores ensure_ascii and sort_keys. tojson
//     now runs transformers' filter (json.dumps with ensure_ascii=False)
//     byte-for-byte.
//   - Key order: the library converts Go maps with sorted keys, which would
//     reorder tool schemas and arguments; messages, tools and
//     json.RawMessage values in Options.Extra are decoded by this package
//     straight into jinja values in document order.
//   - A panic inside the library is recovered and returned as an error
//     (ErrInternal) instead of crashing the server.
//
// Built-in filters cannot be replaced, but the library looks unknown filter
// names up among the render variables; the rewritten template calls this
// package's filters under the names __batchd_tojson and __batchd_str, passed
// as variables. Missing filters could be added the same way.
//
// Not supported by the library and not worked around (templates using them
// fail to parse, fail to render, or render differently from Python):
//
//   - string methods join, splitlines, rsplit, partition, removeprefix,
//     isdigit and friends; split(sep, maxsplit) ignores maxsplit;
//     startswith/endswith with a tuple of prefixes always return false;
//     strip()/lstrip()/rstrip() without arguments strip only space, tab,
//     CR and LF.
//   - printf-style "%s" % x formatting, tuple unpacking in {% set a, b = ... %},
//     implicit concatenation of adjacent string literals, \u and \v escapes
//     in string literals, number literals like 1e22 (an exponent without a
//     decimal point).
//   - filters format, truncate, center, wordwrap, groupby, attr, striptags,
//     urlencode, xmlattr; the divisibleby test.
//   - concatenation with ~ or + (and filters such as join) still formats
//     floats with %g and None as "".
//   - integers beyond int64 become floats; namespace(...) attributes are kept
//     in random order (visible only if a template applies tojson to one).
package chat
