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
// The package sits on the hot path (every input line passes through Check), so
// it never decodes JSON through reflection: a line is validated once with
// json.Valid, then walked in place with a small scanner that slices out raw
// values (see scan.go). Keys are matched exactly, byte for byte after
// unescaping, unlike encoding/json's case-insensitive struct matching, so the
// field validated is the field an engine will read.
//
// This package imports no other batchd package except engine (for the
// endpoint names).
package validate
