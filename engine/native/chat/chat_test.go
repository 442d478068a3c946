package chat

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
)

func mustParse(t *testing.T, src string) *Template {
	t.Helper()
	tmpl, err := Parse(src)
	if err != nil {
		t.Fatalf("Parse(%q): %v", src, err)
	}
	return tmpl
}

func render(t *testing.T, tmpl *Template, messages, tools string, opts Options) string {
	t.Helper()
	var tl json.RawMessage
	if tools != "" {
		tl = json.RawMessage(tools)
	}
	out, err := tmpl.Render(json.RawMessage(messages), tl, opts)
	if err != nil {
		t.Fatalf("Render(%s): %v", messages, err)
	}
	return out
}

const twoMessages = `[{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hello"}]`

func TestBuiltins(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"chatml", Options{AddGenerationPrompt: true},
			"<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"},
		{"chatml", Options{},
			"<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"},
		{"llama3", Options{AddGenerationPrompt: true, BOSToken: "<|begin_of_text|>"},
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>" +
				"<|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"llama2", Options{AddGenerationPrompt: true, BOSToken: "<s>", EOSToken: "</s>"},
			"<s>[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHello [/INST]"},
	}
	for _, tt := range tests {
		tmpl, ok := Builtin(tt.name)
		if !ok {
			t.Fatalf("Builtin(%q) not found", tt.name)
		}
		if got := render(t, tmpl, twoMessages, "", tt.opts); got != tt.want {
			t.Errorf("%s %+v:\n got %q\nwant %q", tt.name, tt.opts, got, tt.want)
		}
	}
	if _, ok := Builtin("LLaMA3"); !ok {
		t.Error("Builtin is not case-insensitive")
	}
	if _, ok := Builtin("vicuna"); ok {
		t.Error("Builtin(vicuna) found")
	}
	if got := strings.Join(BuiltinNames(), ","); got != "chatml,llama2,llama3" {
		t.Errorf("BuiltinNames = %s", got)
	}
}

func TestLlama2MultiTurn(t *testing.T) {
	tmpl, _ := Builtin("llama2")
	msgs := `[{"role":"user","content":"Hi"},{"role":"assistant","content":" Hello! "},{"role":"user","content":"Bye"}]`
	want := "<s>[INST] Hi [/INST] Hello! </s><s>[INST] Bye [/INST]"
	if got := render(t, tmpl, msgs, "", Options{BOSToken: "<s>", EOSToken: "</s>"}); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	_, err := tmpl.Render(json.RawMessage(`[{"role":"user","content":"a"},{"role":"user","content":"b"}]`), nil, Options{})
	if err == nil || !strings.Contains(err.Error(), "roles must alternate") {
		t.Errorf("non-alternating roles: err = %v", err)
	}
}

func TestContentParts(t *testing.T) {
	chatml, _ := Builtin("chatml")
	msgs := `[{"role":"user","content":[{"type":"text","text":"first"},{"type":"text","text":"second"}]},
	          {"role":"assistant","content":null,"tool_calls":[]},
	          {"role":"user","content":[]}]`
	want := "<|im_start|>user\nfirst\nsecond<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\n<|im_end|>\n"
	if got := render(t, chatml, msgs, "", Options{}); got != want {
		t.Errorf("joined parts:\n got %q\nwant %q", got, want)
	}

	// A template that iterates over content itself gets the parts array
	// (strings stay strings).
	partsTmpl := mustParse(t, `{%- for m in messages -%}
{{- m.role }}:
{%- if m.content is string %}S[{{ m.content }}]
{%- else %}{% for part in m.content %}P[{{ part.type }}={{ part.text }}]{% endfor %}
{%- endif %};
{%- endfor -%}`)
	if !partsTmpl.contentParts {
		t.Fatal("template iterating over m.content not detected")
	}
	msgs = `[{"role":"system","content":"sys"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`
	if got, want := render(t, partsTmpl, msgs, "", Options{}), "system:S[sys];user:P[text=a]P[text=b];"; got != want {
		t.Errorf("parts template:\n got %q\nwant %q", got, want)
	}

	for _, bad := range []string{
		`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/y.png"}}]}]`,
		`[{"role":"user","content":[{"type":"text"}]}]`,
		`[{"role":"user","content":["text"]}]`,
		`[{"role":"user","content":42}]`,
		`[{"role":"user","content":{"type":"text","text":"x"}}]`,
	} {
		for _, tmpl := range []*Template{chatml, partsTmpl} {
			if _, err := tmpl.Render(json.RawMessage(bad), nil, Options{}); err == nil {
				t.Errorf("Render(%s) (parts=%v): no error", bad, tmpl.contentParts)
			}
		}
	}
}

func TestContentLoopDetection(t *testing.T) {
	for src, want := range map[string]bool{
		`{% for c in message.content %}{% endfor %}`:              true,
		`{%- for block in message['content'] %}{% endfor %}`:      true,
		`{% for x in messages[0]["content"] %}{% endfor %}`:       true,
		`{%- for item in content -%}{% endfor %}`:                 true,
		`{% for m in messages %}{{ m.content }}{% endfor %}`:      false,
		`{% for m in messages if m.content %}{{ m }}{% endfor %}`: false,
		`{{ message.content }}`:                                   false,
		`{% for l in message.content.split('\n') %}{% endfor %}`:  false,
		`{% for p in message.content_parts %}{% endfor %}`:        false,
		`{% for p in message.content | sort(attribute='type') %}`: true,
		`{% for p in m.content if p.type == 'text' %}`:            true,
		`{%- for c in message.content -%}`:                        true,
	} {
		if got := iteratesContent(src); got != want {
			t.Errorf("iteratesContent(%q) = %v, want %v", src, got, want)
		}
	}
}

func TestTemplateErrors(t *testing.T) {
	for _, src := range []string{
		"",
		"{% if messages %}unclosed",
		"{% for m in messages %}{{ m.content }}",
		"{{ messages | }}",
		"{% endfor %}",
	} {
		tmpl, err := Parse(src)
		if err == nil {
			t.Errorf("Parse(%q): no error", src)
			continue
		}
		if tmpl != nil {
			t.Errorf("Parse(%q): template and error", src)
		}
		if !strings.HasPrefix(err.Error(), "chat: parse template") {
			t.Errorf("Parse(%q): error %q lacks context", src, err)
		}
	}

	msgs := json.RawMessage(twoMessages)
	for src, want := range map[string]string{
		`{{ raise_exception('Conversation roles must alternate') }}`: "Conversation roles must alternate",
		`{{ messages | no_such_filter }}`:                            `unknown filter "no_such_filter"`,
		`{{ messages[0].content is no_such_test }}`:                  `unknown test "no_such_test"`,
		`{{ messages.nope() }}`:                                      "not callable",
	} {
		tmpl := mustParse(t, src)
		out, err := tmpl.Render(msgs, nil, Options{})
		if err == nil {
			t.Errorf("Render(%q): no error, output %q", src, out)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Render(%q): error %q does not contain %q", src, err, want)
		}
		if errors.Is(err, ErrInternal) {
			t.Errorf("Render(%q): template error reported as internal: %v", src, err)
		}
	}

	chatml, _ := Builtin("chatml")
	for _, bad := range []string{``, `null`, `{}`, `"x"`, `[1]`, `[{"content":"x"}]`, `[{"role":1}]`, `[`, `[] []`} {
		if _, err := chatml.Render(json.RawMessage(bad), nil, Options{}); err == nil {
			t.Errorf("Render(messages=%q): no error", bad)
		}
	}
	for _, bad := range []string{`{}`, `[1]`, `"x"`, `[`} {
		if _, err := chatml.Render(msgs, json.RawMessage(bad), Options{}); err == nil {
			t.Errorf("Render(tools=%q): no error", bad)
		}
	}
	var nilTmpl *Template
	if _, err := nilTmpl.Render(msgs, nil, Options{}); err == nil {
		t.Error("nil template: no error")
	}
}

func TestVariables(t *testing.T) {
	tmpl := mustParse(t, `{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|`+
		`{{ enable_thinking is defined }}|{{ tools is none }}|{{ documents is none }}|{{ date }}|{{ cfg | tojson }}|{{ n + 1 }}`)
	on := true
	got := render(t, tmpl, `[]`, `[]`, Options{
		AddGenerationPrompt: true, BOSToken: "<s>", EOSToken: "</s>", EnableThinking: &on,
		Extra: map[string]any{
			"date":     "26 Jul 2024",
			"cfg":      json.RawMessage(`{"z": 1, "a": [true, null]}`),
			"n":        int32(41),
			"messages": "ignored: Render's own variables win",
		},
	})
	want := `<s>|</s>|True|True|True|True|26 Jul 2024|{"z": 1, "a": [true, null]}|42`
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}

	// Without EnableThinking the variable is undefined; an Extra bos_token
	// survives an empty BOSToken.
	got = render(t, tmpl, `[]`, ``, Options{Extra: map[string]any{"bos_token": "B", "date": "d", "cfg": nil, "n": 1}})
	if want := `B||False|False|True|True|d|null|2`; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}

	if _, err := tmpl.Render(json.RawMessage(`[]`), nil, Options{Extra: map[string]any{"x": struct{}{}}}); err == nil {
		t.Error("unsupported Extra type: no error")
	}

	tools := `[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`
	if got := render(t, mustParse(t, `{{ tools | length }} {{ tools[0].function.name }}`), `[]`, tools, Options{}); got != "1 f" {
		t.Errorf("tools: got %q", got)
	}
}

// Tool call arguments sent as a JSON string (the OpenAI wire format) reach
// the template as an object in the request's key order; arguments that are
// not a JSON object stay strings.
func TestToolCallArguments(t *testing.T) {
	tmpl := mustParse(t, `{% for m in messages %}{% for c in m.tool_calls %}`+
		`{{ c.function.arguments is mapping }}:{{ c.function.arguments | tojson }};{% endfor %}{% endfor %}`)
	msgs := `[{"role":"assistant","content":null,"tool_calls":[
	  {"type":"function","function":{"name":"a","arguments":"{\"zeta\": 1, \"alpha\": {\"y\": [2.50, \"é\"], \"b\": false}}"}},
	  {"type":"function","function":{"name":"b","arguments":"not json"}},
	  {"type":"function","function":{"name":"c","arguments":{"k":"v"}}},
	  {"type":"function","function":{"name":"d","arguments":"[1]"}}]}]`
	want := `True:{"zeta": 1, "alpha": {"y": [2.5, "é"], "b": false}};` +
		`False:"not json";` +
		`True:{"k": "v"};` +
		`False:"[1]";`
	if got := render(t, tmpl, msgs, "", Options{}); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if _, err := tmpl.Render(json.RawMessage(`[{"role":"assistant","tool_calls":[1]}]`), nil, Options{}); err == nil {
		t.Error("tool call that is not an object: no error")
	}
}

// The expected strings were produced by Python 3.11 json.dumps through
// transformers' tojson filter (ensure_ascii=False by default).
func TestToJSONMatchesPython(t *testing.T) {
	tmpl := mustParse(t, "{{ x|tojson }}\n{{ x|tojson(indent=2) }}\n{{ x|tojson(ensure_ascii=True, sort_keys=True) }}\n"+
		"{{ x|tojson(separators=(',', ':')) }}\n{{ x|tojson(indent='\t') }}\n{{ floats|tojson }}\n{{ x | tojson(false, 0) }}")
	x := json.RawMessage(`{"b": [1, 2.5, {}, []], "a": "é<&>\u2028\u0001` + "\u007f" + `😀\"\\\n"}`)
	floats := json.RawMessage(`[1.0, 1e16, 1e15, 0.0001, 0.00001, -0.0, 123456789.0, 0.1, 1.5e-7, 1e100, 2.5e300, 12345678901234567890]`)
	got := render(t, tmpl, `[]`, "", Options{Extra: map[string]any{"x": x, "floats": floats}})
	want := "{\"b\": [1, 2.5, {}, []], \"a\": \"é<&>\u2028\\u0001\u007f😀\\\"\\\\\\n\"}\n" +
		"{\n  \"b\": [\n    1,\n    2.5,\n    {},\n    []\n  ],\n  \"a\": \"é<&>\u2028\\u0001\u007f😀\\\"\\\\\\n\"\n}\n" +
		"{\"a\": \"\\u00e9<&>\\u2028\\u0001\\u007f\\ud83d\\ude00\\\"\\\\\\n\", \"b\": [1, 2.5, {}, []]}\n" +
		"{\"b\":[1,2.5,{},[]],\"a\":\"é<&>\u2028\\u0001\u007f😀\\\"\\\\\\n\"}\n" +
		"{\n\t\"b\": [\n\t\t1,\n\t\t2.5,\n\t\t{},\n\t\t[]\n\t],\n\t\"a\": \"é<&>\u2028\\u0001\u007f😀\\\"\\\\\\n\"\n}\n" +
		"[1.0, 1e+16, 1000000000000000.0, 0.0001, 1e-05, -0.0, 123456789.0, 0.1, 1.5e-07, 1e+100, 2.5e+300, 1.2345678901234567e+19]\n" +
		"{\n\"b\": [\n1,\n2.5,\n{},\n[]\n],\n\"a\": \"é<&>\u2028\\u0001\u007f😀\\\"\\\\\\n\"\n}"
	if got != want {
		gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
		for i := range max(len(gl), len(wl)) {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Errorf("line %d:\n got %q\nwant %q", i+1, g, w)
			}
		}
	}

	// A self-referencing list is an error, not a stack overflow.
	loop := mustParse(t, `{% set l = [] %}{% set _ = l.append(l) %}{{ l | tojson }}`)
	if _, err := loop.Render(json.RawMessage(`[]`), nil, Options{}); err == nil || !strings.Contains(err.Error(), "tojson") {
		t.Errorf("circular tojson: err = %v", err)
	}
}

// tojson and string are pointed at this package's filters in code, not in
// string literals.
func TestRewriteFilters(t *testing.T) {
	src := ` x|tojson + (y | string) ~ "|tojson" ~ '| string' ~ z |  tojson(indent=2) ~ w|stringify ~ v is string `
	want := ` x|` + tojsonFilter + ` + (y |` + strFilter + `) ~ "|tojson" ~ '| string' ~ z |` + tojsonFilter + `(indent=2) ~ w|stringify ~ v is string `
	if got := rewriteFilters(src); got != want {
		t.Errorf("rewriteFilters:\n got %q\nwant %q", got, want)
	}
}

func TestConcurrentRender(t *testing.T) {
	tmpl, _ := Builtin("chatml")
	want := render(t, tmpl, twoMessages, "", Options{AddGenerationPrompt: true})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for range 50 {
				got, err := tmpl.Render(json.RawMessage(twoMessages), nil, Options{AddGenerationPrompt: true})
				if err != nil || got != want {
					errs <- errors.New("concurrent render differs: " + got)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// richTemplate exercises the paths of this package the ChatML template does
// not: content parts passed through, tool_calls, and tojson on arbitrary
// values.
const richTemplate = `{%- if tools %}{{ tools | tojson(indent=2) }}{% endif -%}
{%- for m in messages -%}
{{ m.role }}:{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}
{%- for c in m.tool_calls %}{{ c | tojson }}{% endfor -%}
{{ m | tojson(ensure_ascii=true, sort_keys=true) }}
{%- endfor -%}`

func FuzzRender(f *testing.F) {
	for _, seed := range []string{
		twoMessages,
		qwen3Conversation,
		`[]`,
		`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`,
		`[{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{\"a\":1e400}"}}]}]`,
		`[{"role":"user","content":"\u0000\ud800"}]`,
		`[{"role":"user","content":"x","name":{"deep":[[[[[]]]]]}}]`,
		`[{"role":"user","content":1.5}]`,
		`[{"role":"user","content":"x"}] trailing`,
		`{"role":"user"}`,
		`[` + strings.Repeat(`[`, 300) + strings.Repeat(`]`, 300) + `]`,
	} {
		f.Add([]byte(seed), []byte(`[{"type":"function","function":{"name":"f","parameters":{"a":[1,2.0,"x"]}}}]`), true)
		f.Add([]byte(seed), []byte(nil), false)
	}
	chatml, ok := Builtin("chatml")
	if !ok {
		f.Fatal("no chatml builtin")
	}
	rich, err := Parse(richTemplate)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, messages, tools []byte, gen bool) {
		for _, tmpl := range []*Template{chatml, rich} {
			_, err := tmpl.Render(json.RawMessage(messages), json.RawMessage(tools), Options{AddGenerationPrompt: gen})
			if errors.Is(err, ErrInternal) {
				t.Fatalf("template engine panicked on messages=%q tools=%q: %v", messages, tools, err)
			}
		}
	})
}

func TestSelectTemplate(t *testing.T) {
	list := json.RawMessage(`[{"name":"default","template":"D"},{"name":"tool_use","template":"T"}]`)
	for _, tt := range []struct {
		raw  json.RawMessage
		name string
		want string
		ok   bool
	}{
		{json.RawMessage(`"S"`), "", "S", true},
		{json.RawMessage(`"S"`), "default", "S", true},
		{json.RawMessage(`"S"`), "tool_use", "", false},
		{list, "", "D", true},
		{list, "tool_use", "T", true},
		{list, "rag", "", false},
		{json.RawMessage(`[{"name":"tool_use","template":"T"}]`), "", "", false},
		{json.RawMessage(`42`), "", "", false},
		{nil, "", "", false},
	} {
		got, err := SelectTemplate(tt.raw, tt.name)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("SelectTemplate(%s, %q) = %q, %v", tt.raw, tt.name, got, err)
		}
	}
}

// Message fields other than role and content reach the template unchanged.
func TestMessageFieldsPassThrough(t *testing.T) {
	tmpl := mustParse(t, `{% for m in messages %}{{ m.role }}|{{ m.name }}|{{ m.tool_call_id }}|{{ m.tool_calls[0].id }}|{{ m.custom.k }};{% endfor %}`)
	msgs := `[{"role":"user","name":"alice","content":"hi","custom":{"k":"v"}},
	          {"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},
	          {"role":"tool","tool_call_id":"call_1","content":"ok"}]`
	want := "user|alice|||v;assistant|||call_1|;tool||call_1||;"
	if got := render(t, tmpl, msgs, "", Options{}); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// Whitespace control, raw blocks, comments and printing match Python
// Jinja2 with transformers' settings (trim_blocks, lstrip_blocks). The
// expected strings were produced by Jinja2 3.1.6.
func TestMatchesJinja2(t *testing.T) {
	vars := map[string]any{
		"x": "X", "xs": json.RawMessage(`["a", "b"]`), "t": true, "f": 1.0, "n": nil,
		"l": json.RawMessage(`[1.5, "it's", {"k": null}]`), "d": json.RawMessage(`{"b": 2, "a": [true]}`),
	}
	for _, tt := range []struct{ src, want string }{
		// The library alone gets these wrong: it applies whitespace
		// control to the nearest text even across other tags.
		{"{% for m in xs %}{{ m }}\n{% endfor %}", "a\nb\n"},
		{"A: {{ x }}{%- if t -%}B{%- endif -%}", "A: XB"},
		{"{% if t -%}{{ x }}  \n  Y{% endif %}", "X  \n  Y"},
		{"line\n    {{ x }}{% if t %}Q{% endif %}", "line\n    XQ"},
		{"{% if t %}{{ x }}\n{% endif %}", "X\n"},
		{"a\n  {% if t %}b{% endif %}\n  c", "a\nb  c"},
		{"{{ x }}\n{% if t %}\nyes\n{% endif %}\ndone", "X\nyes\ndone"},
		{"{%- for m in xs %}\n  - {{ m }}\n{%- endfor %}", "  - a  - b"},
		{"{{ x -}}   \n  {{ x }}", "XX"},
		{"{% raw %}{{ x }}{% endraw %}\n{{ x }}", "{{ x }}X"},
		{"  {%- raw -%}  {{ x }} {%- endraw %}\n{{ x }}", "{{ x }}X"},
		{"a\n  {% raw %}\n  r  \n  {% endraw %}\n  b", "a\n\n  r  \n  b"},
		{"{{ '{%- if' }} {{ x }}", "{%- if X"},
		{"\t\t{% if t %}\n\t\tx\n\t\t{% endif %}\n", "\t\tx\n"},
		// "+" turns lstrip_blocks / trim_blocks off for one tag.
		{"a {%+ if t %}b{% endif +%}\nc", "a b\nc"},
		{"a\n  {%+ if t %}b{% endif %}\n  c", "a\n  b  c"},
		{"{% if t +%}\nkeep{% endif %}", "\nkeep"},
		// One trailing newline is dropped; CRLF becomes LF.
		{"x\n\n", "x\n"},
		{"x\r\ny\r\n{% if t %}\r\nz{% endif %}\r\n", "x\ny\nz"},
		{"{# multi\nline #}\n  {{ x }}", "  X"},
		{"\n  {# c #}\n  X", "\n  X"},
		{"{{ x }}{{ '{' }}{{ x }}", "X{X"},
		{"{% for i in xs %}  {{ i }}  {% endfor %}", "  a    b  "},
		{"{% macro m(v) %}\n  <{{ v }}>\n{% endmacro %}{{ m(1) }}|{{ m(2.0) }}", "  <1>\n|  <2.0>\n"},
		// "-" strips Unicode whitespace too.
		{"\u00a0{%- if t -%}\u2003Y\u3000{%- endif %}", "Y"},
		// Output uses Python's str().
		{"{{ f }} {{ n }} {{ l }} {{ d }} {{ f|string }} {{ [f, 2.5e-7] }} {{ t }} {{ 'a\"b' }} {{ undefined_var }}",
			"1.0 None [1.5, \"it's\", {'k': None}] {'b': 2, 'a': [True]} 1.0 [1.0, 2.5e-07] True a\"b "},
		{"{{ d|tojson }} {{ l|tojson(indent=1) }}", "{\"b\": 2, \"a\": [true]} [\n 1.5,\n \"it's\",\n {\n  \"k\": null\n }\n]"},
	} {
		tmpl, err := Parse(tt.src)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.src, err)
			continue
		}
		got, err := tmpl.Render(json.RawMessage(`[]`), nil, Options{Extra: vars})
		if err != nil {
			t.Errorf("Render(%q): %v", tt.src, err)
			continue
		}
		if got != tt.want {
			t.Errorf("Render(%q):\n got %q\nwant %q", tt.src, got, tt.want)
		}
	}
}

// Parse errors name the line of the original template even though the
// template is rewritten before compilation.
func TestParseErrorLine(t *testing.T) {
	for src, line := range map[string]string{
		"a\n  {%- if x -%}\n\n  b\n{# c\n #}\n{% for %}{% endif %}": "line 7",
		"{{ x -}}\n\n\n{% for %}{% endfor %}":                       "line 4",
		"a\n\n{{ x ":                                                "line 3",
		"a\n{% raw %}\nb":                                           "line 2",
	} {
		_, err := Parse(src)
		if err == nil || !strings.Contains(err.Error(), line) {
			t.Errorf("Parse(%q): err = %v, want one naming %s", src, err, line)
		}
	}
}

func TestPythonStr(t *testing.T) {
	tmpl := mustParse(t, `{{ v }}`)
	for raw, want := range map[string]string{
		`"plain"`:                               "plain",
		`["it's", "say \"hi\"", "a'\"b"]`:       `["it's", 'say "hi"', 'a\'"b']`,
		`["tab\there\nnl\\ \u0001 \u00a0 é 😀"]`: `['tab\there\nnl\\ \x01 \xa0 é 😀']`,
		`[1e400, -1e400]`:                       "[inf, -inf]",
		`12345678901234567890`:                  "1.2345678901234567e+19",
		`[-0.0, 1e-5, 100.0, null, false]`:      "[-0.0, 1e-05, 100.0, None, False]",
		`{}`:                                    "{}",
	} {
		got := render(t, tmpl, `[]`, "", Options{Extra: map[string]any{"v": json.RawMessage(raw)}})
		if got != want {
			t.Errorf("str(%s) = %s, want %s", raw, got, want)
		}
	}
}

// Parse (this package's lexer and the library's parser) and Render never
// panic on arbitrary template text.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		ChatMLTemplate, Llama2Template, Llama3Template, richTemplate,
		"{%- raw -%} {{ x }} {%+ endraw +%}\n{# c #}{{ '}}' -}}\n",
		"{% for m in messages %}{{ m.content|tojson(indent=2) }}\n{% endfor %}",
		"{{ 'unterminated }}", "{%", "{{-", "{#-", "{% raw %}", "a {", "{{ }}",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 1000 {
			return
		}
		tmpl, err := Parse(src)
		if errors.Is(err, ErrInternal) {
			t.Fatalf("Parse(%q) panicked: %v", src, err)
		}
		if err != nil {
			return
		}
		_, err = tmpl.Render(json.RawMessage(twoMessages), nil, Options{AddGenerationPrompt: true})
		if errors.Is(err, ErrInternal) {
			t.Fatalf("Render of %q panicked: %v", src, err)
		}
	})
}
