package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/wire"
)

var lineCodes = map[string]bool{
	CodeInvalidJSONLine: true, CodeInvalidCustomID: true, CodeDuplicateCustomID: true,
	CodeInvalidMethod: true, CodeInvalidURL: true, CodeInvalidBody: true,
}

var badRequestCodes = map[string]bool{
	CodeMissingRequiredParameter: true, CodeInvalidType: true, CodeInvalidValue: true,
	CodeUnsupportedValue: true, CodeMissingMaxTokens: true, CodeUnsupportedParameter: true,
	wire.CodeUnsupportedContent: true, // a /v1/messages block batchd does not take
}

func FuzzCheck(f *testing.F) {
	C, P, E := engine.EndpointChat, engine.EndpointCompletions, engine.EndpointEmbeddings
	seeds := []string{
		benchLine,
		batchLine("a", C, chatOK),
		batchLine("a", C, chat(`"temperature":3,"logit_bias":{"1":2},"stop":["a"],"top_logprobs":2,"logprobs":true`)),
		batchLine("a", C, `{"messages":[{"role":"assistant","content":null,"tool_calls":[]},{"role":"tool","tool_call_id":"x","content":[{"type":"text","text":"t"}]}]}`),
		batchLine("b", P, `{"prompt":[[1,2],[3]],"max_tokens":null,"n":2.0,"seed":-1}`),
		batchLine("c", E, `{"input":["a",""],"dimensions":3,"encoding_format":"base64"}`),
		batchLine("d", C, `{ "max_tokens" : null , "temperature":null }`),
		`{"custom_id":"\u0061\ud800","method":"POST","url":"/v1/embeddings","body":{"inp\u0075t":"x"}}`,
		`{"custom_id":1}`, `[]`, `{`, `"x"`, `{"a":{"b":[1,{"c":"}\""}]}}`, "\xff", ``, ` `,
		// Two keys that differ only in invalid UTF-8: encoding/json reads
		// both as "\ufffd0", one key (found by this fuzz target in CI).
		"{\"\xa20\":\"\",\"\x8c0\":{}}",
		`{"\ud800":1,"\udc00":2}`,
		// Lone surrogate halves in custom_id (invalid_custom_id), a valid
		// pair, and an escaped backslash before a u (both valid).
		batchLine(`\ud800`, C, chatOK), batchLine(`\udfff`, C, chatOK), batchLine(`x\udbff\u0041`, C, chatOK),
		batchLine(`\ud83d\ude00`, C, chatOK), batchLine(`\\ud800`, C, chatOK), batchLine(`\ufffd`, C, chatOK),
		// Responses and Anthropic Messages lines, translated to chat.
		batchLine("r", engine.EndpointResponses, `{"input":"hi","instructions":"s","max_output_tokens":4,"text":{"format":{"type":"text"}},"reasoning":{"effort":"low"},"store":false}`),
		batchLine("r", engine.EndpointResponses, `{"input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"message","role":"assistant","content":"b"}]}`),
		batchLine("r", engine.EndpointResponses, `{"input":"x","previous_response_id":"r","tools":[]}`),
		batchLine("m", wire.EndpointMessages, `{"max_tokens":4,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stop_sequences":["z"]}`),
		batchLine("m", wire.EndpointMessages, `{"messages":[{"role":"user","content":"a"}],"thinking":{"type":"enabled"}}`),
		batchLine("m", wire.EndpointMessages, `{"":1,"max_tokens":4,"messages":[{"role":"user","content":"a"}]}`),
		batchLine("r", engine.EndpointResponses, `{"":1,"input":"a"}`),
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	defaults := Config{Defaults: map[string]json.RawMessage{
		"max_tokens": json.RawMessage(`32`), "temperature": json.RawMessage(`0.5`),
		"model": json.RawMessage(`"m"`), "ignore_eos": json.RawMessage(`false`),
	}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		orig := bytes.Clone(raw)
		for _, c := range []*Checker{NewChecker(Config{}), NewChecker(defaults)} {
			res := c.Check(7, raw)
			if !bytes.Equal(raw, orig) {
				t.Fatal("Check modified its input")
			}
			checkCustomIDExact(t, raw, res)
			if res.Line != 7 || (res.Request == nil) == (res.Problem == nil) {
				t.Fatalf("want exactly one of Request and Problem on line 7, got %+v", res)
			}
			if p := res.Problem; p != nil {
				switch p.Kind {
				case KindLine:
					if !lineCodes[p.Code] || p.Param != "" {
						t.Fatalf("bad line problem %+v", p)
					}
				case KindBadRequest:
					if !badRequestCodes[p.Code] || p.Param == "" {
						t.Fatalf("bad 400 problem %+v", p)
					}
				default:
					t.Fatalf("bad kind %+v", p)
				}
				if p.Message == "" || res.String() == "" {
					t.Fatalf("empty message %+v", p)
				}
				continue
			}
			r := res.Request
			var body map[string]json.RawMessage
			if err := json.Unmarshal(r.Body, &body); err != nil || body == nil {
				t.Fatalf("valid result's body is not a JSON object: %v: %s", err, r.Body)
			}
			if !res.HasCustomID || r.CustomID != res.CustomID || r.Method != "POST" || r.Line != 7 {
				t.Fatalf("bad request %+v", r)
			}
			if r.URL == engine.EndpointEmbeddings && r.MaxTokens != 0 || r.MaxTokens < 0 {
				t.Fatalf("MaxTokens = %d for %s", r.MaxTokens, r.URL)
			}
			if c.Seen() != 1 {
				t.Fatalf("Seen() = %d after one valid line", c.Seen())
			}
			// A second check of the same line is a duplicate.
			if again := c.Check(8, raw); code(again) != CodeDuplicateCustomID {
				t.Fatalf("second check: %s", again)
			}
		}
		checkScannerAgainstStdlib(t, raw)
	})
}

// checkCustomIDExact checks that a custom_id kept is the input's exactly:
// every U+FFFD in it was in the raw token (as the character or an escape
// of it), none came from decoding a lone surrogate half or invalid UTF-8,
// so two different ids never decode to one.
func checkCustomIDExact(t *testing.T, raw []byte, res Result) {
	if !res.HasCustomID {
		return
	}
	var cid []byte
	for it := newMembers(raw); ; {
		k, vs, ve, ok := it.next()
		if !ok {
			break
		}
		if key, _ := unquote(k); string(key) == "custom_id" {
			cid = raw[vs:ve]
		}
	}
	given := bytes.Count(cid, []byte("\uFFFD"))
	for i := 0; i+1 < len(cid); i++ {
		if cid[i] != '\\' {
			continue
		}
		if r, ok := hex4(cid[i+2:]); ok && cid[i+1] == 'u' && r == 0xFFFD {
			given++
		}
		i++ // the escaped byte: an escaped backslash escapes nothing after it
	}
	if got := strings.Count(res.CustomID, "\uFFFD"); got != given {
		t.Fatalf("custom_id %q has %d U+FFFD, the input's %s has %d", res.CustomID, got, cid, given)
	}
}

// checkScannerAgainstStdlib compares the in-place scanner with encoding/json
// on a valid object: the same keys (last occurrence wins) with the same raw
// values.
//
// Only on valid UTF-8: encoding/json decodes invalid bytes in a key to
// U+FFFD, so two keys the scanner rightly keeps apart can be one to it; the
// checker refuses such a line (invalid_json_line) before the scanner sees
// it.
func checkScannerAgainstStdlib(t *testing.T, raw []byte) {
	if !json.Valid(raw) || !utf8.Valid(raw) || !isObject(raw[skipSpace(raw, 0):]) {
		return
	}
	var want map[string]json.RawMessage
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	got := map[string]json.RawMessage{}
	for it := newMembers(raw); ; {
		k, vs, ve, ok := it.next()
		if !ok {
			break
		}
		key, ok := unquote(k)
		if !ok {
			t.Fatalf("cannot unquote key %s", k)
		}
		got[string(key)] = raw[vs:ve]
	}
	if len(got) != len(want) {
		t.Fatalf("scanner found %d keys, encoding/json %d in %s", len(got), len(want), raw)
	}
	for k, v := range want {
		if g, ok := got[k]; ok && !bytes.Equal(g, v) {
			t.Fatalf("key %q: scanner %s, encoding/json %s", k, g, v)
		}
	}
}

func FuzzLineReader(f *testing.F) {
	f.Add([]byte("a\nb\r\n\n  \nc"), uint16(0))
	f.Add([]byte("\xEF\xBB\xBF{}\n{\"x\":1}\r\n"), uint16(3))
	f.Add([]byte("12345\n123456\n\r\n1234567"), uint16(5))
	f.Add([]byte(strings.Repeat("x", 70)+"\nshort\n"+strings.Repeat(" ", 70)+"\n"), uint16(40))
	f.Add([]byte("\r\r\n\n\r"), uint16(1))
	f.Fuzz(func(t *testing.T, input []byte, max16 uint16) {
		max := int(max16)
		want := referenceLines(input, max)
		// A 16-byte read buffer makes short inputs cross buffer boundaries,
		// as 64 KiB lines do with the real one.
		lr := newLineReaderSize(iotest.HalfReader(bytes.NewReader(input)), max, 16)
		last := 0
		var got []item
		for {
			n, raw, tooLong, err := lr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if n <= last {
				t.Fatalf("line numbers not increasing: %d after %d", n, last)
			}
			last = n
			if tooLong != (raw == nil) {
				t.Fatalf("line %d: tooLong %v with raw %q", n, tooLong, raw)
			}
			if bytes.IndexByte(raw, '\n') >= 0 || isBlank(raw) && !tooLong {
				t.Fatalf("line %d: bad raw %q", n, raw)
			}
			got = append(got, item{n, string(raw), tooLong})
		}
		if !equalItems(got, want) {
			t.Fatalf("got %s\nwant %s", showItems(got), showItems(want))
		}
	})
}

// referenceLines is the LineReader's contract, the simple way.
func referenceLines(input []byte, max int) []item {
	if max <= 0 {
		max = DefaultMaxLineBytes
	}
	input = bytes.TrimPrefix(input, utf8BOM)
	lines := bytes.Split(input, []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	var out []item
	for i, l := range lines {
		l = bytes.TrimSuffix(l, []byte("\r"))
		switch {
		case isBlank(l):
		case len(l) > max:
			out = append(out, item{i + 1, "", true})
		default:
			out = append(out, item{i + 1, string(l), false})
		}
	}
	return out
}

func FuzzDocReader(f *testing.F) {
	f.Add([]byte(`{"url":"/v1/completions","defaults":{"max_tokens":8},"system_prompt":"s","requests":[{"prompt":"a"},{"custom_id":"x","body":{"messages":[{"role":"user","content":"q"}]}},7]}`), uint16(0))
	f.Add([]byte(`{"system_prompt":"S","requests":[{"messages":[{"role":"user","content":"a"}]},{"messages":"x","max_tokens":null}]}`), uint16(40))
	f.Add([]byte(`{"requests":[{"custom_id":"a\"]}","prompt":"}]\\"}],"defaults":{}}`), uint16(0))
	f.Add([]byte(`{"requests":[[[[`), uint16(3))
	f.Fuzz(func(t *testing.T, doc []byte, max16 uint16) {
		d := NewDocReader(iotest.HalfReader(bytes.NewReader(doc)), int(max16))
		c := NewChecker(Config{})
		last := 0
		for range len(doc) + 1 { // a request takes at least one byte
			n, raw, tooLong, err := d.Next()
			if err != nil {
				var de *DocError
				if !errors.Is(err, io.EOF) && !errors.As(err, &de) {
					t.Fatalf("error is neither io.EOF nor a *DocError: %v", err)
				}
				return
			}
			if n != last+1 {
				t.Fatalf("request %d after %d", n, last)
			}
			last = n
			if tooLong {
				if raw != nil {
					t.Fatal("tooLong with raw bytes")
				}
				continue
			}
			res := c.Check(n, raw)
			if (res.Request == nil) == (res.Problem == nil) {
				t.Fatalf("want exactly one of Request and Problem: %+v", res)
			}
			if isObject(raw) && json.Valid(raw) && bytes.HasPrefix(raw, []byte(`{"custom_id":`)) {
				continue
			}
			if code(res) != CodeInvalidJSONLine {
				t.Fatalf("a non-object element must be an invalid_json_line: %q: %s", raw, res)
			}
		}
		t.Fatal("the reader did not end")
	})
}
