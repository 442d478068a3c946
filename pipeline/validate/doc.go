// Package validate reads batch input and validates it, one request at a time,
// with bounded memory.
//
// It owns three things:
//   - Sources: LineReader splits an OpenAI batch file (NAME.jsonl) into lines;
//     DocReader streams a requests document (NAME.json) and turns each of its
//     requests into a canonical batch line, so both feed the same Checker.
//   - The Checker: the per-line rules (JSON shape, custom_id, method, url,
//     body), duplicate custom_id detection, and the merging of batch-level body
//     defaults.
//   - Problem and Result: what an invalid line is reported as. A Problem of
//     KindLine becomes an error line with `error{code,message}` and `response`
//     null; one of KindBadRequest becomes an error line with a 400-like
//     `response` whose body carries `error{message,type,param,code}`.
//
// # Rules
//
// Check applies these in order; the first failure is the line's one Problem.
//
//	line     not UTF-8 JSON, or not an object             invalid_json_line
//	         (Checker.TooLong: over the size limit)        line_too_long
//	         custom_id missing, not a string, "", > 512 B  invalid_custom_id
//	         custom_id reserved by an earlier line         duplicate_custom_id
//	         method not "POST"                             invalid_method
//	         url not one of the three endpoints            invalid_url
//	         body missing or not an object                 invalid_body
//	body     (400-like; Param is the body path)
//	         messages / prompt / input missing             missing_required_parameter
//	         wrong JSON type (a number given as a string)  invalid_type
//	         out of range, empty, too many                 invalid_value
//	         stream: true                                  unsupported_value
//	         a requests-document name (num_logprobs)       unsupported_parameter
//	         no output length, on_missing_max_tokens: reject missing_max_tokens
//
// Body fields are checked in this order: messages (chat), prompt
// (completions) or input (embeddings); then model, stream, temperature,
// top_p, top_k, min_p, max_tokens, max_completion_tokens, n, logprobs,
// top_logprobs, logit_bias, stop, presence_penalty, frequency_penalty,
// repetition_penalty, seed, min_tokens, dimensions, encoding_format, the
// chat template controls (apply_chat_template, add_generation_prompt,
// enable_thinking, chat_template_kwargs), save_system_prompt_kv_cache,
// disable_spec_decode, speculative, lora_name, and the refused num_logprobs
// and max_generate_length; then speculative against disable_spec_decode,
// top_logprobs against logprobs, the output length and min_tokens against it.
// A field is checked only on the endpoints it belongs to (elsewhere it is an
// unknown field), null counts as not set, and unknown fields pass through
// untouched. Integers may be written 2.0 or 2e0 (JSON does not tell them
// apart) but not 2.5 or "2". Choices where the API leaves room: top_k is an
// integer >= -1 (-1 or 0 disable it, as in vLLM); repetition_penalty is any
// number > 0; logit_bias keys are decimal token ids up to 2^31-1; a
// completions prompt may be "" but an embeddings input may not; with duplicate
// keys the last one counts, as with encoding/json and Python.
//
// The package sits on the hot path (every input line passes through Check), so
// Check never decodes JSON through reflection: a line is validated once with
// json.Valid, then walked in place with a small scanner that slices out raw
// values (see scan.go); only strings with escapes and error messages go
// through encoding/json. Keys are matched exactly, byte for byte after
// unescaping, unlike encoding/json's case-insensitive struct matching, so the
// field validated is the field an engine will read.
//
// The body's numeric limits and their messages are wire's rules, shared with
// the native engine; this package reads the values and applies them.
//
// This package imports no other batchd package except engine (for the
// endpoint names) and wire.
package validate
