package validate

import (
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// The body fields every request of a document gets from the format's
// defaults (TensorRT Edge-LLM's input JSON): docGen on the generating
// endpoints, docChat on chat.
const (
	docGen  = `"max_tokens":256,"temperature":1.0,"top_k":50,"top_p":0.8`
	docChat = docGen + `,"chat_template_kwargs":{"enable_thinking":false}`
)

func TestDocReader(t *testing.T) {
	tests := []struct {
		name  string
		doc   string
		max   int
		want  []item
		saveK bool
	}{
		{
			name: "shorthand chat with auto custom_id",
			doc:  `{"requests":[{"messages":[{"role":"user","content":"hi"}],"max_tokens":5}]}`,
			want: []item{{1, `{"custom_id":"request-1","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"temperature":1.0,"top_k":50,"top_p":0.8,"chat_template_kwargs":{"enable_thinking":false}}}`, false}},
		},
		{
			name: "shorthand keeps its custom_id out of the body",
			doc:  `{"requests":[{"messages":[],"custom_id":"a","temperature":1}, {"custom_id":"b","messages":[]}]}`,
			want: []item{
				{1, `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[],"temperature":1,"max_tokens":256,"top_k":50,"top_p":0.8,"chat_template_kwargs":{"enable_thinking":false}}}`, false},
				{2, `{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"messages":[],` + docChat + `}}`, false},
			},
		},
		{
			name: "full lines keep their fields",
			doc:  `{"requests":[{"custom_id":"x","method":"POST","url":"/v1/embeddings","body":{"input":"a"}},{"custom_id":"y","body":{"prompt":"p"},"url":"/v1/completions"},{"body":{"messages":[]}}]}`,
			want: []item{
				{1, `{"custom_id":"x","method":"POST","url":"/v1/embeddings","body":{"input":"a"}}`, false},
				{2, `{"custom_id":"y","method":"POST","url":"/v1/completions","body":{"prompt":"p",` + docGen + `}}`, false},
				{3, `{"custom_id":"request-3","method":"POST","url":"/v1/chat/completions","body":{"messages":[],` + docChat + `}}`, false},
			},
		},
		{
			name: "document url and defaults",
			doc:  `{"url":"/v1/completions","defaults":{"max_tokens":32,"temperature":0},"requests":[{"prompt":"a"},{"prompt":"b","temperature":1,"max_tokens":null}]}`,
			want: []item{
				{1, `{"custom_id":"request-1","method":"POST","url":"/v1/completions","body":{"prompt":"a","max_tokens":32,"temperature":0,"top_k":50,"top_p":0.8}}`, false},
				{2, `{"custom_id":"request-2","method":"POST","url":"/v1/completions","body":{"prompt":"b","temperature":1,"max_tokens":32,"top_k":50,"top_p":0.8}}`, false},
			},
		},
		{
			name: "shorthand endpoint inferred without a document url",
			doc:  `{"requests":[{"prompt":"a"},{"input":"b"},{"messages":[]},{"foo":1}]}`,
			want: []item{
				{1, `{"custom_id":"request-1","method":"POST","url":"/v1/completions","body":{"prompt":"a",` + docGen + `}}`, false},
				{2, `{"custom_id":"request-2","method":"POST","url":"/v1/embeddings","body":{"input":"b"}}`, false},
				{3, `{"custom_id":"request-3","method":"POST","url":"/v1/chat/completions","body":{"messages":[],` + docChat + `}}`, false},
				{4, `{"custom_id":"request-4","method":"POST","url":"/v1/chat/completions","body":{"foo":1,` + docChat + `}}`, false},
			},
		},
		{
			name: "system prompt",
			doc: `{"system_prompt":"Be brief.","save_system_prompt_kv_cache":true,"requests":[` +
				`{"messages":[{"role":"user","content":"a"}]},` +
				`{"messages":[{"role":"system","content":"own"},{"role":"user","content":"b"}]},` +
				`{"messages":[{"role":"developer","content":"own"}]},` +
				`{"messages":[ ]},` +
				`{"prompt":"c","url":"/v1/completions"},` +
				`{"body":{"messages":[ {"role":"user","content":"d"} ]}}]}`,
			saveK: true,
			want: []item{
				{1, `{"custom_id":"request-1","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"a"}],` + docChat + `}}`, false},
				{2, `{"custom_id":"request-2","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"system","content":"own"},{"role":"user","content":"b"}],` + docChat + `}}`, false},
				{3, `{"custom_id":"request-3","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"developer","content":"own"}],` + docChat + `}}`, false},
				{4, `{"custom_id":"request-4","method":"POST","url":"/v1/chat/completions","body":{"messages":[ ],` + docChat + `}}`, false},
				{5, `{"custom_id":"request-5","method":"POST","url":"/v1/completions","body":{"prompt":"c",` + docGen + `}}`, false},
				{6, `{"custom_id":"request-6","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"d"} ],` + docChat + `}}`, false},
			},
		},
		{
			name: "non-object elements are yielded raw",
			doc:  `{"requests":[1, "x", [1,2], null, {"a":}, tru]}`,
			want: []item{{1, `1`, false}, {2, `"x"`, false}, {3, `[1,2]`, false}, {4, `null`, false}, {5, `{"a":}`, false}, {6, `tru`, false}},
		},
		{
			name: "too long request skipped",
			doc:  `{"requests":[{"messages":"` + strings.Repeat("x", 100) + `"},{"prompt":"ok"}]}`,
			max:  50,
			want: []item{{1, "", true}, {2, `{"custom_id":"request-2","method":"POST","url":"/v1/completions","body":{"prompt":"ok",` + docGen + `}}`, false}},
		},
		{
			name: "empty requests, whitespace everywhere",
			doc:  " \n{ \"url\" : \"/v1/embeddings\" ,\n \"requests\" : [ ] } \n",
		},
		{
			name: "null options are no options",
			doc:  `{"url":null,"defaults":null,"system_prompt":null,"save_system_prompt_kv_cache":null,"requests":[{"messages":[]}]}`,
			want: []item{{1, `{"custom_id":"request-1","method":"POST","url":"/v1/chat/completions","body":{"messages":[],` + docChat + `}}`, false}},
		},
		{
			name: "strings with brackets and escapes",
			doc:  `{"requests":[{"custom_id":"a\"]}","prompt":"}]\\"}]}`,
			want: []item{{1, `{"custom_id":"a\"]}","method":"POST","url":"/v1/completions","body":{"prompt":"}]\\",` + docGen + `}}`, false}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, mode := range []string{"whole", "one byte at a time"} {
				var r io.Reader = strings.NewReader(tt.doc)
				if mode != "whole" {
					r = iotest.OneByteReader(r)
				}
				d := NewDocReader(r, tt.max)
				got, err := drain(t, d)
				if err != nil {
					t.Fatalf("%s: %v", mode, err)
				}
				if !equalItems(got, tt.want) {
					t.Fatalf("%s: got\n%s\nwant\n%s", mode, showItems(got), showItems(tt.want))
				}
				for _, it := range got {
					if !it.tooLong && strings.HasPrefix(it.raw, `{"custom_id"`) && !json.Valid([]byte(it.raw)) {
						t.Errorf("line %d is not JSON: %s", it.n, it.raw)
					}
				}
				if d.SaveSystemPromptKVCache() != tt.saveK {
					t.Errorf("SaveSystemPromptKVCache() = %v", d.SaveSystemPromptKVCache())
				}
			}
		})
	}
}

func TestDocReaderErrors(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		yielded int    // requests yielded before the error
		want    string // the error text
		eof     bool   // the error wraps io.ErrUnexpectedEOF
	}{
		{"empty input", ``, 0, `requests document: unexpected EOF (at byte 0)`, true},
		{"not an object", `[{"prompt":"a"}]`, 0, `requests document: must be a JSON object, got '[' (at byte 1)`, false},
		{"missing requests", `{"url":"/v1/completions"}`, 0, `requests document: missing "requests" (at byte 25)`, false},
		{"requests not array", `{"requests":{}}`, 0, `requests document: "requests" must be an array, got '{' (at byte 13)`, false},
		{"defaults after requests", `{"requests":[{"prompt":"a"}],"defaults":{"max_tokens":1}}`, 1, `requests document: "defaults" must come before "requests" in a document read in one pass (at byte 40)`, false},
		{"url after requests", `{"requests":[],"url":"/v1/completions"}`, 0, `requests document: "url" must come before "requests" in a document read in one pass (at byte 21)`, false},
		{"system_prompt after requests", `{"requests":[], "system_prompt":"x"}`, 0, `requests document: "system_prompt" must come before "requests" in a document read in one pass (at byte 32)`, false},
		{"unknown key", `{"model":"m","requests":[]}`, 0, `requests document: unknown key "model" (at byte 9)`, false},
		{"unknown key after requests", `{"requests":[],"x":1}`, 0, `requests document: unknown key "x" (at byte 19)`, false},
		{"repeated key", `{"url":"/v1/completions","url":"/v1/embeddings","requests":[]}`, 0, `requests document: repeated key "url" (at byte 31)`, false},
		{"repeated requests", `{"requests":[],"requests":[]}`, 0, `requests document: repeated key "requests" (at byte 26)`, false},
		{"bad url", `{"url":"/v1/x","requests":[]}`, 0, `requests document: "url" must be one of /v1/chat/completions, /v1/completions, /v1/embeddings, got "/v1/x" (at byte 14)`, false},
		{"bad defaults", `{"defaults":{"temperature":3},"requests":[]}`, 0, `requests document: defaults: temperature: must be between 0 and 2 (at byte 29)`, false},
		{"defaults not object", `{"defaults":[1],"requests":[]}`, 0, `requests document: "defaults" must be an object, got an array (at byte 15)`, false},
		{"system_prompt not string", `{"system_prompt":1,"requests":[]}`, 0, `requests document: "system_prompt" must be a string, got a number (at byte 18)`, false},
		{"save flag not bool", `{"save_system_prompt_kv_cache":"yes","requests":[]}`, 0, `requests document: "save_system_prompt_kv_cache" must be a boolean, got a string (at byte 36)`, false},
		{"truncated in a request", `{"requests":[{"prompt":"a"},{"prompt":`, 1, `requests document: unexpected EOF (at byte 38)`, true},
		{"truncated in a string", `{"requests":[{"prompt":"ab`, 0, `requests document: unexpected EOF (at byte 26)`, true},
		{"truncated after requests", `{"requests":[{"prompt":"a"}]`, 1, `requests document: unexpected EOF (at byte 28)`, true},
		{"missing comma", `{"requests":[{"prompt":"a"} {"prompt":"b"}]}`, 1, `requests document: expected ',' or ']' after request 1, got '{' (at byte 29)`, false},
		{"trailing comma", `{"requests":[{"prompt":"a"},]}`, 1, `requests document: expected a value, got ']' (at byte 29)`, false},
		{"data after the document", `{"requests":[]} {}`, 0, `requests document: unexpected data after the document (at byte 17)`, false},
		{"unbalanced close", `{"requests":[{"prompt":"a"}}]}`, 1, `requests document: expected ',' or ']' after request 1, got '}' (at byte 28)`, false},
		{"too long option", `{"system_prompt":"` + strings.Repeat("s", maxDocHeaderBytes) + `","requests":[]}`, 0, `requests document: "system_prompt" is too long (at byte 1048595)`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDocReader(strings.NewReader(tt.doc), 1024)
			got, err := drain(t, d)
			if len(got) != tt.yielded {
				t.Errorf("yielded %d requests, want %d", len(got), tt.yielded)
			}
			if err == nil {
				t.Fatalf("want error %q, got none", tt.want)
			}
			if err.Error() != tt.want {
				t.Fatalf("error =\n%s\nwant\n%s", err, tt.want)
			}
			var de *DocError
			if !errors.As(err, &de) {
				t.Errorf("error is not a *DocError: %T", err)
			}
			if errors.Is(err, io.ErrUnexpectedEOF) != tt.eof {
				t.Errorf("errors.Is(ErrUnexpectedEOF) = %v, want %v", !tt.eof, tt.eof)
			}
			if _, _, _, again := d.Next(); again != err {
				t.Errorf("the error does not stick: %v", again)
			}
		})
	}
}

func TestDocReaderIOError(t *testing.T) {
	boom := errors.New("boom")
	d := NewDocReader(io.MultiReader(strings.NewReader(`{"requests":[`), iotest.ErrReader(boom)), 0)
	_, err := drain(t, d)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	var de *DocError
	if errors.As(err, &de) {
		t.Errorf("an I/O error must not read as a structural one: %v", err)
	}
}

// TestDocReaderThroughChecker runs a document through a Checker.
func TestDocReaderThroughChecker(t *testing.T) {
	doc := `{"defaults":{"max_tokens":64},"system_prompt":"S","requests":[
		{"custom_id":"a","messages":[{"role":"user","content":"hi"}]},
		{"messages":[{"role":"user","content":"hi"}],"temperature":5},
		7,
		{"custom_id":"a","messages":[{"role":"user","content":"hi"}]},
		{"custom_id":"request-5","body":{"messages":[{"role":"user","content":"x"}]},"method":"GET"},
		{"custom_id":"e","url":"/v1/embeddings","input":"x"}
	]}`
	c := NewChecker(Config{Defaults: map[string]json.RawMessage{"max_tokens": json.RawMessage(`8`), "model": json.RawMessage(`"m"`)}})
	d := NewDocReader(strings.NewReader(doc), 0)
	want := []string{
		`line 1: custom_id "a": ok`,
		`line 2: custom_id "request-2": body.temperature: must be between 0 and 2`,
		`line 3: invalid_json_line: line must be a JSON object, got a number`,
		`line 4: custom_id "a": duplicate_custom_id: custom_id was already used by an earlier line of this file`,
		`line 5: custom_id "request-5": invalid_method: method must be "POST", got "GET"`,
		`line 6: custom_id "e": ok`,
	}
	var got []string
	var first *Request
	for {
		n, raw, tooLong, err := d.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || tooLong {
			t.Fatalf("Next() = %v, %v", tooLong, err)
		}
		res := c.Check(n, raw)
		got = append(got, res.String())
		if first == nil {
			first = res.Request
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantBody := `{"messages":[{"role":"system","content":"S"},{"role":"user","content":"hi"}],"max_tokens":64,"temperature":1.0,"top_k":50,"top_p":0.8,"chat_template_kwargs":{"enable_thinking":false},"model":"m"}`
	if string(first.Body) != wantBody || first.MaxTokens != 64 {
		t.Errorf("first body = %s (%d), want %s (64)", first.Body, first.MaxTokens, wantBody)
	}
}

// docResults runs a document through a Checker and returns each request's
// result, as Result.String writes it.
func docResults(t *testing.T, doc string) []string {
	t.Helper()
	c := NewChecker(Config{})
	d := NewDocReader(strings.NewReader(doc), 0)
	var got []string
	for {
		n, raw, tooLong, err := d.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil || tooLong {
			t.Fatalf("Next() = %v, %v", tooLong, err)
		}
		got = append(got, c.Check(n, raw).String())
	}
}

// TestDocReaderNumLogprobsByEndpoint: num_logprobs becomes the logprobs of
// the request's endpoint, at the top level and in a request, and a value the
// endpoint cannot take is refused by the name the user wrote.
func TestDocReaderNumLogprobsByEndpoint(t *testing.T) {
	got := docBodies(t, `{"num_logprobs":4,"requests":[
		{"prompt":"a"},
		{"prompt":"b","num_logprobs":2},
		{"prompt":"c","num_logprobs":0},
		{"prompt":"d","logprobs":1},
		{"messages":[{"role":"user","content":"e"}],"num_logprobs":0}
	]}`)
	for i, want := range []any{4.0, 2.0, nil, 1.0, false} {
		if got[i]["logprobs"] != want {
			t.Errorf("request %d: logprobs %v, want %v (body %v)", i+1, got[i]["logprobs"], want, got[i])
		}
	}
	if _, ok := got[1]["top_logprobs"]; ok {
		t.Errorf("a completions request got top_logprobs: %v", got[1])
	}

	res := docResults(t, `{"num_logprobs":9,"requests":[
		{"custom_id":"a","prompt":"a"},
		{"custom_id":"b","prompt":"b","num_logprobs":6},
		{"custom_id":"c","messages":[{"role":"user","content":"c"}],"num_logprobs":51},
		{"custom_id":"d","messages":[{"role":"user","content":"d"}],"num_logprobs":"3"},
		{"custom_id":"e","input":"e","num_logprobs":1},
		{"custom_id":"f","messages":[{"role":"user","content":"f"}]},
		{"custom_id":"g","prompt":"g","num_logprobs":5}
	]}`)
	want := []string{
		`line 1: custom_id "a": body.num_logprobs: must be an integer between 0 and 5 on /v1/completions, whose logprobs it sets`,
		`line 2: custom_id "b": body.num_logprobs: must be an integer between 0 and 5 on /v1/completions, whose logprobs it sets`,
		`line 3: custom_id "c": body.num_logprobs: must be an integer between 0 and 50`,
		`line 4: custom_id "d": body.num_logprobs: must be an integer, got a string`,
		`line 5: custom_id "e": body.num_logprobs: is not supported on /v1/embeddings: remove it`,
		`line 6: custom_id "f": ok`,
		`line 7: custom_id "g": ok`,
	}
	if strings.Join(res, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(res, "\n"), strings.Join(want, "\n"))
	}
}

// TestDocReaderLookAhead: with a second copy of its input, a document's keys
// may come in any order, as json.dumps(sort_keys=True) and jq -S write them.
func TestDocReaderLookAhead(t *testing.T) {
	opens := map[string]func(doc string) func() (io.ReadCloser, error){}
	opens["seekable"] = func(doc string) func() (io.ReadCloser, error) {
		return func() (io.ReadCloser, error) { return seekCloser{strings.NewReader(doc)}, nil }
	}
	opens["stream"] = func(doc string) func() (io.ReadCloser, error) {
		return func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(doc)), nil }
	}
	read := func(doc string, open func(string) func() (io.ReadCloser, error)) ([]map[string]any, error) {
		d := NewDocReader(strings.NewReader(doc), 0)
		d.LookAhead(open(doc))
		var out []map[string]any
		for {
			_, raw, _, err := d.Next()
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			if err != nil {
				return out, err
			}
			var line struct {
				Body map[string]any `json:"body"`
			}
			if err := json.Unmarshal(raw, &line); err != nil {
				t.Fatalf("line %s: %v", raw, err)
			}
			out = append(out, line.Body)
		}
	}
	sorted := `{
  "enable_thinking": true,
  "max_generate_length": 7,
  "requests": [
    {"messages": [{"role": "user", "content": "a"}]},
    {"prompt": "b"}
  ],
  "system_prompt": "S",
  "temperature": 0.5,
  "top_k": 3
}`
	for name, open := range opens {
		got, err := read(sorted, open)
		if err != nil || len(got) != 2 {
			t.Fatalf("%s: %d requests, %v", name, len(got), err)
		}
		chat, comp := got[0], got[1]
		if chat["temperature"] != 0.5 || chat["top_k"] != 3.0 || chat["max_tokens"] != 7.0 ||
			!reflect.DeepEqual(chat["chat_template_kwargs"], map[string]any{"enable_thinking": true}) ||
			!reflect.DeepEqual(chat["messages"], []any{map[string]any{"role": "system", "content": "S"}, map[string]any{"role": "user", "content": "a"}}) {
			t.Errorf("%s: chat body %v", name, chat)
		}
		if comp["temperature"] != 0.5 || comp["top_k"] != 3.0 || comp["max_tokens"] != 7.0 {
			t.Errorf("%s: completions body %v", name, comp)
		}

		for _, tt := range []struct{ doc, want string }{
			{`{"top_k":1,"requests":[],"top_k":2}`, `repeated key "top_k"`},
			{`{"requests":[],"requests":[]}`, `repeated key "requests"`},
			{`{"requests":[],"bogus":1}`, `unknown key "bogus"`},
			{`{"requests":[],"top_k":"x"}`, `"top_k": must be an integer`},
			{`{"requests":[],"url":["x"]}`, `"url" must be a string, got an array`},
			{`{"requests":[],"defaults":{"temperature":1},"temperature":0}`, `"temperature" is set both at the top level and in "defaults"`},
			{`{"requests":[{"prompt":"a"}],"top_k":1`, `unexpected EOF`},
		} {
			got, err := read(tt.doc, open)
			var de *DocError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: %s: error %v, want one containing %q", name, tt.doc, err, tt.want)
			}
			if len(got) != 0 {
				t.Errorf("%s: %s: %d requests yielded before the error", name, tt.doc, len(got))
			}
		}
	}
}

type seekCloser struct{ *strings.Reader }

func (seekCloser) Close() error { return nil }

// TestDocReaderGeneratedIDsSkipGivenOnes: a generated custom_id never
// collides with one a request gives, before it or (with LookAhead) after it.
func TestDocReaderGeneratedIDsSkipGivenOnes(t *testing.T) {
	m := `"messages":[{"role":"user","content":"x"}]`
	doc := `{"requests":[{` + m + `},{"custom_id":"request-1",` + m + `},{` + m + `},{"custom_id":"request-3",` + m + `},{"custom_id":"request-3.2",` + m + `},{"custom_id":"request-2.2",` + m + `}]}`
	ids := func(d *DocReader) []string {
		c := NewChecker(Config{})
		var out []string
		for {
			n, raw, _, err := d.Next()
			if errors.Is(err, io.EOF) {
				return out
			}
			if err != nil {
				t.Fatal(err)
			}
			res := c.Check(n, raw)
			if res.Problem != nil {
				t.Errorf("request %d: %v", n, res)
			}
			out = append(out, res.CustomID)
		}
	}
	d := NewDocReader(strings.NewReader(doc), 0)
	d.LookAhead(func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(doc)), nil })
	want := "request-1.2 request-1 request-3.3 request-3 request-3.2 request-2.2"
	if got := strings.Join(ids(d), " "); got != want {
		t.Errorf("with a look ahead: %s, want %s", got, want)
	}
	// Read in one pass, the ids given before a request are skipped.
	one := `{"requests":[{"custom_id":"request-2",` + m + `},{` + m + `}]}`
	if got := strings.Join(ids(NewDocReader(strings.NewReader(one), 0)), " "); got != "request-2 request-2.2" {
		t.Errorf("in one pass: %s", got)
	}
}
