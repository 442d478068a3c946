package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// jsonlBodies decodes each line of a JSONL text into its custom_id and body.
func jsonlBodies(t *testing.T, text string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		var line struct {
			CustomID string         `json:"custom_id"`
			URL      string         `json:"url"`
			Body     map[string]any `json:"body"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if line.URL != "/v1/chat/completions" {
			t.Errorf("line %s: url %q", line.CustomID, line.URL)
		}
		out[line.CustomID] = line.Body
	}
	return out
}

func TestConvertRoundTrip(t *testing.T) {
	dir := t.TempDir()
	doc := writeFile(t, filepath.Join(dir, "doc.json"), `{
		"batch_size": 2, "temperature": 0.5, "top_k": 5, "num_logprobs": 3, "max_generate_length": 9,
		"logit_bias": {"7": -100}, "enable_thinking": true, "apply_chat_template": false,
		"requests": [
			{"messages": [{"role": "user", "content": "a"}], "stop": ["1","2","3","4","5"]},
			{"custom_id": "own", "messages": [{"role": "user", "content": [{"type": "text", "text": "b"}]}], "num_logprobs": 0, "logit_bias": {"8": 1}}
		]}`)
	code, first, stderr := cli(t, "convert", doc)
	if code != exitOK {
		t.Fatalf("convert doc: %d %s", code, stderr)
	}
	lines := jsonlBodies(t, first)
	want := map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "a"}}, "stop": []any{"1", "2", "3", "4", "5"},
		"max_tokens": 9.0, "temperature": 0.5, "top_p": 0.8, "top_k": 5.0, "logit_bias": map[string]any{"7": -100.0},
		"logprobs": true, "top_logprobs": 3.0, "apply_chat_template": false,
		"chat_template_kwargs": map[string]any{"enable_thinking": true},
	}
	if len(lines) != 2 || !reflect.DeepEqual(lines["request-1"], want) {
		t.Fatalf("request-1 = %v\nwant %v", lines["request-1"], want)
	}
	if b := lines["own"]; b["logprobs"] != false || !reflect.DeepEqual(b["logit_bias"], map[string]any{"8": 1.0}) {
		t.Errorf("own = %v", b)
	}

	// And back: the document made from those lines reads as the same lines.
	jsonl := writeFile(t, filepath.Join(dir, "lines.jsonl"), first)
	back := filepath.Join(dir, "back.json")
	if code, _, stderr := cli(t, "convert", jsonl, "-o", back); code != exitOK {
		t.Fatalf("convert jsonl: %d %s", code, stderr)
	}
	code, second, stderr := cli(t, "convert", back)
	if code != exitOK {
		raw, _ := os.ReadFile(back)
		t.Fatalf("convert back: %d %s\n%s", code, stderr, raw)
	}
	if got := jsonlBodies(t, second); !reflect.DeepEqual(got, lines) {
		t.Fatalf("round trip changed the requests:\n%v\nwant\n%v", got, lines)
	}
}

func TestConvertJSONLGreedyAndRefusals(t *testing.T) {
	dir := t.TempDir()
	ok := writeFile(t, filepath.Join(dir, "ok.jsonl"),
		`{"custom_id":"g","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"x"}],"max_tokens":3}}`+"\n")
	code, doc, stderr := cli(t, "convert", ok)
	if code != exitOK {
		t.Fatalf("%d %s", code, stderr)
	}
	// A JSONL line without temperature is greedy; the document says so.
	var d struct {
		Requests []map[string]any `json:"requests"`
	}
	if err := json.Unmarshal([]byte(doc), &d); err != nil || len(d.Requests) != 1 {
		t.Fatalf("%v: %s", err, doc)
	}
	if r := d.Requests[0]; r["temperature"] != 0.0 || r["top_p"] != 1.0 || r["top_k"] != 0.0 || r["custom_id"] != "g" {
		t.Errorf("request = %v", r)
	}

	for _, tt := range []struct{ line, want string }{
		{`{"custom_id":"c","method":"POST","url":"/v1/completions","body":{"prompt":"x","max_tokens":1}}`, "line 2: a requests document holds chat requests only"},
		{`{"custom_id":"c","method":"POST","url":"/v1/chat/completions","body":{"messages":[]}}`, "line 2: has no max_tokens"},
		{`{"custom_id":"c","method":"POST","url":"/v1/chat/completions","body":{"messages":[],"max_tokens":1,"lora_name":"x"}}`, "line 2: body.lora_name cannot be written"},
		{`[1]`, "line 2: not a batch line"},
	} {
		in := writeFile(t, filepath.Join(dir, "bad.jsonl"), mustRead(t, ok)+tt.line+"\n")
		out := filepath.Join(dir, "out.json")
		code, _, stderr := cli(t, "convert", in, "-o", out)
		if code != exitFailure || !strings.Contains(stderr, tt.want) {
			t.Errorf("%s: code %d, stderr %q, want %q", tt.line, code, stderr, tt.want)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s: output written despite the error", tt.line)
		}
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// A pretty-printed document, as the format's description writes every one,
// converts to one compact line per request, which validate accepts.
func TestConvertPrettyDocumentToCompactLines(t *testing.T) {
	dir := t.TempDir()
	doc := writeFile(t, filepath.Join(dir, "doc.json"), `{
    "max_generate_length": 8,
    "requests": [
        {
            "messages": [
                {
                    "role": "user",
                    "content": "Your message here"
                }
            ],
            "stop": [
                "x"
            ]
        },
        {
            "custom_id": "b",
            "messages": [
                {"role": "user", "content": "again"}
            ]
        }
    ]
}
`)
	out := filepath.Join(dir, "out.jsonl")
	if code, _, stderr := cli(t, "convert", doc, "-o", out); code != exitOK {
		t.Fatalf("convert: %d %s", code, stderr)
	}
	text := mustRead(t, out)
	if lines := nonEmptyLines(text); len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), text)
	}
	if strings.Contains(text, "  ") {
		t.Errorf("lines not compacted:\n%s", text)
	}
	if code, stdout, stderr := cli(t, "validate", out); code != exitOK {
		t.Errorf("validate the converted lines: %d %s %s", code, stdout, stderr)
	}
}

// A conversion to standard output that fails says so and exits non-zero.
func TestConvertToStdoutReportsErrors(t *testing.T) {
	dir := t.TempDir()
	in := writeFile(t, filepath.Join(dir, "bad.jsonl"),
		`{"custom_id":"c","method":"POST","url":"/v1/completions","body":{"prompt":"x","max_tokens":1}}`+"\n")
	code, _, stderr := cli(t, "convert", in)
	if code != exitFailure || !strings.Contains(stderr, "line 1: a requests document holds chat requests only") {
		t.Errorf("code %d, stderr %q", code, stderr)
	}
	doc := writeFile(t, filepath.Join(dir, "bad.json"), `{"requests":[{"messages":[]},`)
	if code, _, stderr := cli(t, "convert", doc); code != exitFailure || stderr == "" {
		t.Errorf("truncated document: code %d, stderr %q", code, stderr)
	}
}

// A document whose keys come after "requests" (json.dumps(sort_keys=True),
// jq -S) is read whole: its keys apply to every request.
func TestConvertAndValidateSortedKeys(t *testing.T) {
	dir := t.TempDir()
	doc := writeFile(t, filepath.Join(dir, "doc.json"), `{
  "max_generate_length": 4,
  "requests": [{"custom_id": "a", "messages": [{"role": "user", "content": "x"}]}],
  "temperature": 0.25
}
`)
	code, out, stderr := cli(t, "convert", doc)
	if code != exitOK {
		t.Fatalf("convert: %d %s", code, stderr)
	}
	if b := jsonlBodies(t, out)["a"]; b["temperature"] != 0.25 || b["max_tokens"] != 4.0 {
		t.Errorf("body %v", b)
	}
	if code, stdout, stderr := cli(t, "validate", doc); code != exitOK || !strings.Contains(stdout, "1 requests, 1 valid") {
		t.Errorf("validate: %d %s %s", code, stdout, stderr)
	}
}
