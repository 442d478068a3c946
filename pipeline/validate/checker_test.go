package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine"
)

func TestCheckLineRules(t *testing.T) {
	const C = engine.EndpointChat
	long := strings.Repeat("x", 513)
	tests := []struct {
		name   string
		raw    string
		code   string
		kind   Kind
		cid    string
		hasCID bool
	}{
		{"valid", batchLine("a", C, chatOK), "", 0, "a", true},
		{"valid with spaces", "  " + batchLine("a", C, chatOK) + " \t", "", 0, "a", true},
		{"not json", `{"custom_id":"a",`, CodeInvalidJSONLine, KindLine, "", false},
		{"garbage", `hello`, CodeInvalidJSONLine, KindLine, "", false},
		{"array", `[1,2]`, CodeInvalidJSONLine, KindLine, "", false},
		{"string", `"x"`, CodeInvalidJSONLine, KindLine, "", false},
		{"null", `null`, CodeInvalidJSONLine, KindLine, "", false},
		{"trailing garbage", batchLine("a", C, chatOK) + `x`, CodeInvalidJSONLine, KindLine, "", false},
		{"invalid utf-8", "{\"custom_id\":\"a\xff\",\"method\":\"POST\"}", CodeInvalidJSONLine, KindLine, "", false},
		{"custom_id missing", `{"method":"POST","url":"/v1/chat/completions","body":` + chatOK + `}`, CodeInvalidCustomID, KindLine, "", false},
		{"custom_id number", `{"custom_id":7,"method":"POST"}`, CodeInvalidCustomID, KindLine, "", false},
		{"custom_id null", `{"custom_id":null,"method":"POST"}`, CodeInvalidCustomID, KindLine, "", false},
		{"custom_id empty", `{"custom_id":"","method":"POST"}`, CodeInvalidCustomID, KindLine, "", true},
		{"custom_id too long", `{"custom_id":"` + long + `"}`, CodeInvalidCustomID, KindLine, long, true},
		{"custom_id 512 ok", batchLine(long[:512], C, chatOK), "", 0, long[:512], true},
		{"custom_id escaped", `{"custom_id":"q\u002d7","method":"POST","url":"` + C + `","body":` + chatOK + `}`, "", 0, "q-7", true},
		{"custom_id lone high surrogate", batchLine(`\ud800`, C, chatOK), CodeInvalidCustomID, KindLine, "", false},
		{"custom_id lone low surrogate", batchLine(`\udfff`, C, chatOK), CodeInvalidCustomID, KindLine, "", false},
		{"custom_id high surrogate then letter", batchLine(`a\uDBFFb`, C, chatOK), CodeInvalidCustomID, KindLine, "", false},
		{"custom_id two high surrogates", batchLine(`\ud800\ud800\udc00`, C, chatOK), CodeInvalidCustomID, KindLine, "", false},
		{"custom_id surrogate pair", batchLine(`\ud83d\ude00`, C, chatOK), "", 0, "\U0001F600", true},
		{"custom_id escaped backslash u", batchLine(`\\ud800`, C, chatOK), "", 0, `\ud800`, true},
		{"custom_id replacement character", batchLine(`\ufffd`, C, chatOK), "", 0, "\uFFFD", true},
		{"method missing", `{"custom_id":"a","url":"` + C + `","body":{}}`, CodeInvalidMethod, KindLine, "a", true},
		{"method get", `{"custom_id":"a","method":"GET","url":"` + C + `","body":{}}`, CodeInvalidMethod, KindLine, "a", true},
		{"method lower", `{"custom_id":"a","method":"post","url":"` + C + `","body":{}}`, CodeInvalidMethod, KindLine, "a", true},
		{"method number", `{"custom_id":"a","method":1,"url":"` + C + `","body":{}}`, CodeInvalidMethod, KindLine, "a", true},
		{"url missing", `{"custom_id":"a","method":"POST","body":{}}`, CodeInvalidURL, KindLine, "a", true},
		{"url other", `{"custom_id":"a","method":"POST","url":"/v1/moderations","body":{}}`, CodeInvalidURL, KindLine, "a", true},
		{"url trailing slash", `{"custom_id":"a","method":"POST","url":"/v1/embeddings/","body":{}}`, CodeInvalidURL, KindLine, "a", true},
		{"url number", `{"custom_id":"a","method":"POST","url":1,"body":{}}`, CodeInvalidURL, KindLine, "a", true},
		{"body missing", `{"custom_id":"a","method":"POST","url":"` + C + `"}`, CodeInvalidBody, KindLine, "a", true},
		{"body array", `{"custom_id":"a","method":"POST","url":"` + C + `","body":[]}`, CodeInvalidBody, KindLine, "a", true},
		{"body null", `{"custom_id":"a","method":"POST","url":"` + C + `","body":null}`, CodeInvalidBody, KindLine, "a", true},
		{"body string", `{"custom_id":"a","method":"POST","url":"` + C + `","body":"{}"}`, CodeInvalidBody, KindLine, "a", true},
		{"bad request keeps custom_id", batchLine("q-7", C, chat(`"temperature":3`)), CodeInvalidValue, KindBadRequest, "q-7", true},
		{"line keys are exact", `{"Custom_ID":"a","custom_id":"b","method":"POST","url":"` + C + `","body":` + chatOK + `}`, "", 0, "b", true},
		{"unknown line keys ignored", `{"custom_id":"a","method":"POST","url":"` + C + `","body":` + chatOK + `,"extra":1}`, "", 0, "a", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := NewChecker(Config{}).Check(3, []byte(tt.raw))
			assertOutcome(t, res, tt.code, res.paramOr())
			if res.Problem != nil && res.Problem.Kind == KindLine && res.Problem.Param != "" {
				t.Errorf("line problem with a param: %+v", res.Problem)
			}
			if res.Line != 3 || res.CustomID != tt.cid || res.HasCustomID != tt.hasCID {
				t.Errorf("line, custom_id = %d, %q (%v), want 3, %q (%v)", res.Line, res.CustomID, res.HasCustomID, tt.cid, tt.hasCID)
			}
			if res.Problem != nil && res.Problem.Kind != tt.kind {
				t.Errorf("kind = %v, want %v", res.Problem.Kind, tt.kind)
			}
			if res.Request != nil {
				r := res.Request
				if r.Line != 3 || r.CustomID != tt.cid || r.Method != "POST" || r.URL != C || r.MaxTokens != 16 {
					t.Errorf("request = %+v", r)
				}
			}
		})
	}
}

// TestCheckOrder checks that the first failing rule, in the documented order,
// is the one reported.
func TestCheckOrder(t *testing.T) {
	tests := []struct {
		name  string
		raw   string
		code  string
		param string
	}{
		{"custom_id before method", `{"custom_id":1,"method":"GET","url":"x","body":1}`, CodeInvalidCustomID, ""},
		{"method before url", `{"custom_id":"a","method":"GET","url":"x","body":1}`, CodeInvalidMethod, ""},
		{"url before body", `{"custom_id":"a","method":"POST","url":"x","body":1}`, CodeInvalidURL, ""},
		{"body before fields", `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":1}`, CodeInvalidBody, ""},
		{"messages before stream", batchLine("a", engine.EndpointChat, `{"stream":true,"temperature":9}`), CodeMissingRequiredParameter, "messages"},
		{"stream before temperature", batchLine("a", engine.EndpointChat, `{"temperature":9,"stream":true,`+chatMsgs+`}`), CodeUnsupportedValue, "stream"},
		{"temperature before top_p", batchLine("a", engine.EndpointChat, `{"top_p":9,"temperature":9,`+chatMsgs+`}`), CodeInvalidValue, "temperature"},
		{"top_p before stop", batchLine("a", engine.EndpointChat, `{"stop":1,"top_p":9,`+chatMsgs+`}`), CodeInvalidValue, "top_p"},
		{"fields before max tokens", batchLine("a", engine.EndpointChat, `{"seed":"x",`+chatMsgs+`}`), CodeInvalidType, "seed"},
		{"first bad message wins", batchLine("a", engine.EndpointChat, `{"messages":[{"role":"user"},{"role":"bot"}]}`), CodeMissingRequiredParameter, "messages[0].content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assertOutcome(t, NewChecker(Config{}).Check(1, []byte(tt.raw)), tt.code, tt.param)
		})
	}
}

func TestCheckDuplicates(t *testing.T) {
	C := engine.EndpointChat
	lines := []struct {
		raw  string
		code string
	}{
		{batchLine("a", C, chatOK), ""},
		{batchLine("b", C, chat(`"temperature":9`)), CodeInvalidValue}, // reserves "b"
		{batchLine("a", C, chatOK), CodeDuplicateCustomID},
		{batchLine("b", C, chatOK), CodeDuplicateCustomID}, // reserved by the invalid line
		{`{"custom_id":"","method":"POST"}`, CodeInvalidCustomID},
		{`{"custom_id":"","method":"POST"}`, CodeInvalidCustomID}, // an invalid id reserves nothing
		{`{"custom_id":"c"}`, CodeInvalidMethod},
		{batchLine("c", C, chatOK), CodeDuplicateCustomID},
		{`{"custom_id":"\u0061"}`, CodeDuplicateCustomID}, // the same id, escaped
		{`not json`, CodeInvalidJSONLine},
		{batchLine("d", C, chatOK), ""},
		// Lone surrogate halves: each decodes to U+FFFD, so kept they would
		// be one id; refused, they reserve nothing and clash with nothing.
		{batchLine(`\ud800`, C, chatOK), CodeInvalidCustomID},
		{batchLine(`\udfff`, C, chatOK), CodeInvalidCustomID},
		{batchLine(`\ufffd`, C, chatOK), ""},
	}
	c := NewChecker(Config{})
	for i, l := range lines {
		res := c.Check(i+1, []byte(l.raw))
		if got := code(res); got != l.code {
			t.Errorf("line %d: code %q, want %q (%s)", i+1, got, l.code, res)
		}
		if l.code == CodeDuplicateCustomID && (!res.HasCustomID || res.Problem.Kind != KindLine) {
			t.Errorf("line %d: duplicate must carry its custom_id as a line problem: %+v", i+1, res)
		}
	}
	if got := c.Seen(); got != 5 {
		t.Errorf("Seen() = %d, want 5 (a, b, c, d, U+FFFD)", got)
	}
	// A new Checker (a new file) starts empty.
	if res := NewChecker(Config{}).Check(1, []byte(lines[0].raw)); res.Problem != nil {
		t.Errorf("fresh checker: %s", res)
	}
}

func code(r Result) string {
	if r.Problem == nil {
		return ""
	}
	return r.Problem.Code
}

func TestCheckDefaults(t *testing.T) {
	const (
		C = engine.EndpointChat
		P = engine.EndpointCompletions
		E = engine.EndpointEmbeddings
	)
	defaults := map[string]json.RawMessage{
		"max_tokens":  json.RawMessage(`256`),
		"temperature": json.RawMessage(` 0.5 `),
		"model":       json.RawMessage(`"m"`),
		"stop":        json.RawMessage("[\"\\n\",\n \"END\"]"),
		"ignore_eos":  json.RawMessage(`false`),
		"dimensions":  json.RawMessage(`64`),
	}
	tests := []struct {
		name     string
		defaults map[string]json.RawMessage
		url      string
		body     string
		want     string // the effective body
		max      int
		code     string
	}{
		{
			name: "nothing to merge keeps the bytes", defaults: nil, url: C,
			body: `{ "messages" : [ {"role":"user","content":"hi"} ], "max_tokens" : 8 }`,
			want: `{ "messages" : [ {"role":"user","content":"hi"} ], "max_tokens" : 8 }`, max: 8,
		},
		{
			name: "body has every key", url: C,
			defaults: map[string]json.RawMessage{"temperature": json.RawMessage(`0.5`), "max_tokens": json.RawMessage(`9`)},
			body:     `{"temperature":1,` + chatMsgs + `,"max_tokens":8}`,
			want:     `{"temperature":1,` + chatMsgs + `,"max_tokens":8}`, max: 8,
		},
		{
			name: "absent keys appended in key order", defaults: defaults, url: C,
			body: `{` + chatMsgs + `}`,
			want: `{` + chatMsgs + `,"ignore_eos":false,"max_tokens":256,"model":"m","stop":["\n","END"],"temperature":0.5}`, max: 256,
		},
		{
			name: "body wins", defaults: defaults, url: C,
			body: `{` + chatMsgs + `,"temperature":1.5,"model":"x","max_tokens":3,"stop":null,"ignore_eos":true}`,
			want: `{` + chatMsgs + `,"temperature":1.5,"model":"x","max_tokens":3,"stop":["\n","END"],"ignore_eos":true}`, max: 3,
		},
		{
			name: "null takes the default in place", defaults: defaults, url: C,
			body: `{"max_tokens":null,` + chatMsgs + `,"temperature": null ,"model":"x","stop":"s","ignore_eos":true}`,
			want: `{"max_tokens":256,` + chatMsgs + `,"temperature": 0.5 ,"model":"x","stop":"s","ignore_eos":true}`, max: 256,
		},
		{
			name: "max_completion_tokens blocks the max_tokens default", defaults: defaults, url: C,
			body: `{` + chatMsgs + `,"max_completion_tokens":7,"model":"x","stop":"s","ignore_eos":true,"temperature":1}`,
			want: `{` + chatMsgs + `,"max_completion_tokens":7,"model":"x","stop":"s","ignore_eos":true,"temperature":1}`, max: 7,
		},
		{
			name: "max_completion_tokens wins over max_tokens", url: C,
			body: `{` + chatMsgs + `,"max_tokens":100,"max_completion_tokens":7}`,
			want: `{` + chatMsgs + `,"max_tokens":100,"max_completion_tokens":7}`, max: 7,
		},
		{
			name: "max_tokens wins over the default", defaults: map[string]json.RawMessage{"max_tokens": json.RawMessage(`256`)}, url: P,
			body: `{"prompt":"p","max_tokens":5}`, want: `{"prompt":"p","max_tokens":5}`, max: 5,
		},
		{
			name: "completions keep max_completion_tokens over the default", defaults: map[string]json.RawMessage{"max_tokens": json.RawMessage(`256`)}, url: P,
			body: `{"prompt":"p","max_completion_tokens":5}`, want: `{"prompt":"p","max_completion_tokens":5}`, max: 5,
		},
		{
			name: "empty body object", defaults: map[string]json.RawMessage{"max_tokens": json.RawMessage(`4`)}, url: P,
			body: `{}`, code: CodeMissingRequiredParameter,
		},
		{
			name: "embeddings get only what belongs to them", defaults: defaults, url: E,
			body: `{"input":"x"}`, want: `{"input":"x","dimensions":64,"ignore_eos":false,"model":"m"}`, max: 0,
		},
		{
			name: "dimensions stay off chat", defaults: map[string]json.RawMessage{"dimensions": json.RawMessage(`64`), "max_tokens": json.RawMessage(`1`)}, url: C,
			body: `{` + chatMsgs + `}`, want: `{` + chatMsgs + `,"max_tokens":1}`, max: 1,
		},
		{
			name: "logprobs default by type", url: C,
			defaults: map[string]json.RawMessage{"logprobs": json.RawMessage(`true`), "top_logprobs": json.RawMessage(`3`), "max_tokens": json.RawMessage(`1`)},
			body:     `{` + chatMsgs + `}`, want: `{` + chatMsgs + `,"logprobs":true,"max_tokens":1,"top_logprobs":3}`, max: 1,
		},
		{
			name: "boolean logprobs default stays off completions", url: P,
			defaults: map[string]json.RawMessage{"logprobs": json.RawMessage(`true`), "max_tokens": json.RawMessage(`1`)},
			body:     `{"prompt":"p"}`, want: `{"prompt":"p","max_tokens":1}`, max: 1,
		},
		{
			name: "merged body is validated", url: C,
			defaults: map[string]json.RawMessage{"max_tokens": json.RawMessage(`100`)},
			body:     `{` + chatMsgs + `,"min_tokens":200}`, code: CodeInvalidValue,
		},
		{
			name: "defaults Validate rejects are ignored", url: C,
			defaults: map[string]json.RawMessage{"temperature": json.RawMessage(`7`), "max_tokens": json.RawMessage(`nope`)},
			body:     `{` + chatMsgs + `}`, want: `{` + chatMsgs + `}`,
		},
		{
			name: "whitespace before the closing brace", defaults: map[string]json.RawMessage{"max_tokens": json.RawMessage(`2`)}, url: C,
			body: `{` + chatMsgs + ` }`, want: `{` + chatMsgs + ` ,"max_tokens":2}`, max: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := []byte(batchLine("x", tt.url, tt.body))
			res := NewChecker(Config{Defaults: tt.defaults}).Check(1, raw)
			assertOutcome(t, res, tt.code, res.paramOr())
			if tt.code != "" {
				return
			}
			r := res.Request
			if string(r.Body) != tt.want || r.MaxTokens != tt.max {
				t.Fatalf("body, max = %s, %d\nwant        %s, %d", r.Body, r.MaxTokens, tt.want, tt.max)
			}
			if !json.Valid(r.Body) {
				t.Fatalf("merged body is not JSON: %s", r.Body)
			}
			// The body must not alias the line.
			for i := range raw {
				raw[i] = 'x'
			}
			if string(r.Body) != tt.want {
				t.Fatal("Request.Body aliases the input line")
			}
		})
	}
}

// paramOr returns the problem's param, for tests that check only the code.
func (r Result) paramOr() string {
	if r.Problem == nil {
		return ""
	}
	return r.Problem.Param
}

func TestCheckMissingMaxTokens(t *testing.T) {
	line := []byte(batchLine("q", engine.EndpointChat, `{`+chatMsgs+`}`))
	// By default a line with no output length generates until the
	// context is full, as OpenAI's do.
	if res := NewChecker(Config{}).Check(4, line); res.Problem != nil || res.Request.MaxTokens != 0 {
		t.Fatalf("default: %s, MaxTokens %d; want valid with no output length", res, res.Request.MaxTokens)
	}
	// on_missing_max_tokens: reject keeps the strict rule.
	res := NewChecker(Config{RejectMissingMaxTokens: true}).Check(4, line)
	want := Problem{Kind: KindBadRequest, Code: "missing_max_tokens", Param: "max_tokens",
		Message: "max_tokens is required by the batch option on_missing_max_tokens: reject: set body.max_tokens or body.max_completion_tokens, or a batch-level max_tokens"}
	if res.Problem == nil || *res.Problem != want {
		t.Fatalf("problem = %+v, want %+v", res.Problem, want)
	}
	// A batch max_tokens still fills it, and max_completion_tokens counts
	// on completions too.
	cfg := Config{RejectMissingMaxTokens: true, Defaults: map[string]json.RawMessage{"max_tokens": json.RawMessage(`9`)}}
	if res := NewChecker(cfg).Check(4, line); res.Problem != nil || res.Request.MaxTokens != 9 {
		t.Fatalf("with a batch max_tokens: %s", res)
	}
	comp := []byte(batchLine("c", engine.EndpointCompletions, `{"prompt":"p","max_completion_tokens":3}`))
	if res := NewChecker(Config{RejectMissingMaxTokens: true}).Check(5, comp); res.Problem != nil || res.Request.MaxTokens != 3 {
		t.Fatalf("completions with max_completion_tokens: %s", res)
	}
}

func TestTooLong(t *testing.T) {
	res := NewChecker(Config{}).TooLong(9, 1024)
	if res.Line != 9 || res.HasCustomID || res.Request != nil || res.Problem == nil ||
		res.Problem.Code != CodeLineTooLong || res.Problem.Kind != KindLine {
		t.Fatalf("TooLong = %+v", res)
	}
	if got, want := res.String(), "line 9: line_too_long: line is longer than the maximum of 1024 bytes"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestResultString(t *testing.T) {
	C := engine.EndpointChat
	tests := []struct {
		name string
		res  Result
		want string
	}{
		{"bad request", NewChecker(Config{}).Check(12, []byte(batchLine("q-7", C, chat(`"temperature":3`)))),
			`line 12: custom_id "q-7": body.temperature: must be between 0 and 2`},
		{"no custom_id", NewChecker(Config{}).Check(3, []byte(`{`)),
			`line 3: invalid_json_line: line is not valid JSON: unexpected end of JSON input (at byte 1)`},
		{"not an object", NewChecker(Config{}).Check(3, []byte(`[]`)),
			`line 3: invalid_json_line: line must be a JSON object, got an array`},
		{"line problem with custom_id", NewChecker(Config{}).Check(5, []byte(`{"custom_id":"a","method":"GET"}`)),
			`line 5: custom_id "a": invalid_method: method must be "POST", got "GET"`},
		{"nested param", NewChecker(Config{}).Check(2, []byte(batchLine("z", C, `{"messages":[{"role":"bot","content":"x"}],"max_tokens":1}`))),
			`line 2: custom_id "z": body.messages[0].role: unknown role "bot": must be one of system, developer, user, assistant, tool, function`},
		{"custom_id is quoted", NewChecker(Config{}).Check(1, []byte(`{"custom_id":"a\"b\n","url":1}`)),
			`line 1: custom_id "a\"b\n": invalid_method: method is required and must be "POST"`},
		{"valid", NewChecker(Config{}).Check(1, []byte(batchLine("ok", C, chatOK))), `line 1: custom_id "ok": ok`},
		{"missing max tokens", NewChecker(Config{RejectMissingMaxTokens: true}).Check(6, []byte(batchLine("m", C, `{`+chatMsgs+`}`))),
			`line 6: custom_id "m": body.max_tokens: max_tokens is required by the batch option on_missing_max_tokens: reject: set body.max_tokens or body.max_completion_tokens, or a batch-level max_tokens`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.res.String(); got != tt.want {
				t.Errorf("String() =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestProblemError(t *testing.T) {
	tests := []struct {
		p    *Problem
		want string
	}{
		{badRequest(CodeInvalidValue, "temperature", "must be between 0 and 2"), "temperature: must be between 0 and 2"},
		{lineProblem(CodeInvalidBody, "body is required"), "invalid_body: body is required"},
	}
	for _, tt := range tests {
		if got := tt.p.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name     string
		defaults map[string]string
		want     []string // error lines; none when valid
	}{
		{"empty", nil, nil},
		{"all good", map[string]string{
			"max_tokens": "256", "model": `"m"`, "temperature": "0.7", "top_p": "0.9", "top_k": "-1", "min_p": "0.05",
			"presence_penalty": "0.1", "frequency_penalty": "-0.1", "repetition_penalty": "1.1", "seed": "42",
			"stop": `["\n"]`, "n": "1", "logit_bias": `{"1":2}`, "min_tokens": "1", "ignore_eos": "true",
			"dimensions": "8", "encoding_format": `"float"`, "stream": "false", "temperature_extra": `{"x":[1]}`,
		}, nil},
		{"temperature", map[string]string{"temperature": "3"}, []string{"temperature: must be between 0 and 2"}},
		{"several, sorted", map[string]string{"top_p": "0", "max_tokens": "0", "seed": `"1"`},
			[]string{"max_tokens: must be a positive integer (at most 2147483647)", "seed: must be an integer, got a string", "top_p: must be greater than 0 and at most 1"}},
		{"not json", map[string]string{"model": "m"}, []string{"model: must be a JSON value"}},
		{"stream true", map[string]string{"stream": "true"}, []string{"stream: streaming is not supported in a batch: remove stream or set it to false"}},
		{"messages", map[string]string{"messages": "[]"}, []string{"messages: cannot be a batch-level default"}},
		{"max_completion_tokens", map[string]string{"max_completion_tokens": "5"}, []string{"max_completion_tokens: cannot be a batch-level default: set max_tokens"}},
		{"logprobs int", map[string]string{"logprobs": "3"}, nil},
		{"logprobs bad", map[string]string{"logprobs": "9"}, []string{"logprobs: must be a boolean (chat) or an integer between 0 and 5 (completions)"}},
		{"top_logprobs without logprobs", map[string]string{"top_logprobs": "3"}, []string{"top_logprobs: requires a logprobs default of true"}},
		{"top_logprobs with logprobs", map[string]string{"top_logprobs": "3", "logprobs": "true"}, nil},
		{"null is fine", map[string]string{"temperature": "null"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg Config
			if tt.defaults != nil {
				cfg.Defaults = map[string]json.RawMessage{}
				for k, v := range tt.defaults {
					cfg.Defaults[k] = json.RawMessage(v)
				}
			}
			err := cfg.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.want)
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("Validate() =\n%v\nwant\n%s", err, strings.Join(tt.want, "\n"))
			}
			var p *Problem
			if !errors.As(err, &p) || p.Param == "" {
				t.Errorf("errors.As(*Problem) = %v, %+v", p != nil, p)
			}
		})
	}
}

// TestCheckBodyCopy checks that a valid body without merges is byte-identical
// to the input's body.
func TestCheckBodyCopy(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"user","content":"caf\u00e9 \"q\""}],"max_tokens":16,"extra":{"a":[1,{"b":"}"}]}}`
	res := NewChecker(Config{}).Check(1, []byte(batchLine("a", engine.EndpointChat, body)))
	if res.Request == nil || !bytes.Equal(res.Request.Body, []byte(body)) {
		t.Fatalf("body = %s, want %s (%s)", res.Request.Body, body, res)
	}
}
