package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// scriptedEngine is a test double at the engine boundary: it answers each
// request with the status and body scripted for its custom_id.
type scriptedEngine map[string]engine.Response

func (e scriptedEngine) Open(context.Context) error  { return nil }
func (e scriptedEngine) Close(context.Context) error { return nil }
func (e scriptedEngine) Do(_ context.Context, req *engine.Request) (*engine.Response, error) {
	resp, ok := e[req.CustomID]
	if !ok {
		return nil, fmt.Errorf("no answer scripted for %q", req.CustomID)
	}
	return &resp, nil
}

const twoTo62 = 1 << 62

// usageBody is a chat answer whose usage is the given JSON.
func usageBody(usage string) string {
	return `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":` + usage + `}`
}

// An engine's answer is written only when it can be a result line: valid
// UTF-8 JSON whose body is an object, with a usage of token counts. Any
// other answer is that request's engine_bad_response error line; the
// batch's usage totals saturate instead of wrapping; `batchd check`
// passes on what is written.
func TestBadAnswersAreErrorLines(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 100_000) + "1" + strings.Repeat("}", 100_000)
	answers := []struct {
		cid    string
		status int
		body   string
		bad    string // the error line's message names this; "" for a result
	}{
		{"ok", 200, string(okBody), ""},
		{"utf8", 200, "{\"choices\":[{\"message\":{\"content\":\"bad \xff\xfe bytes\"}}]}", "is not valid UTF-8 (at byte 39)"},
		{"utf8-refusal", 400, "{\"error\":{\"message\":\"no \xc3\",\"type\":\"invalid_request_error\"}}", "status 400 with a body that is not valid UTF-8"},
		{"array", 200, `[]`, "is an array, not a JSON object"},
		{"null", 200, `null`, "is null, not a JSON object"},
		{"string", 200, `"x"`, "is a string, not a JSON object"},
		{"number", 200, ` 42 `, "is a number, not a JSON object"},
		{"empty", 200, ``, "is not JSON"},
		{"deep", 200, deep, "exceeded max depth"},
		{"trailing", 200, `{"a":1}{"b":2}`, "is not JSON"},
		{"negative", 200, usageBody(fmt.Sprintf(`{"prompt_tokens":-%d,"completion_tokens":1}`, twoTo62)), "usage.prompt_tokens that is not a whole number"},
		{"fraction", 200, usageBody(`{"prompt_tokens":1.5}`), "usage.prompt_tokens"},
		{"huge", 200, usageBody(`{"prompt_tokens":9223372036854775808}`), "usage.prompt_tokens"},
		{"cached", 200, usageBody(`{"prompt_tokens":1,"prompt_tokens_details":{"cached_tokens":-1}}`), "usage.prompt_tokens_details.cached_tokens"},
		{"usage-array", 200, usageBody(`[]`), "usage that is not an object of token counts"},
		// Large but whole: results, whose totals saturate.
		{"big1", 200, usageBody(fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, twoTo62, twoTo62, int64(math.MaxInt64))), ""},
		{"big2", 200, usageBody(fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d}`, twoTo62, twoTo62)), ""},
		{"big3", 200, usageBody(fmt.Sprintf(`{"prompt_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}`, int64(math.MaxInt64), int64(math.MaxInt64))), ""},
	}
	eng := scriptedEngine{}
	var input strings.Builder
	for _, a := range answers {
		eng[a.cid] = engine.Response{StatusCode: a.status, RequestID: "req_" + a.cid, Body: []byte(a.body)}
		fmt.Fprintf(&input, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"max_tokens":5}}`+"\n", a.cid)
	}
	e := newEnvOn(t, eng, nil)
	o := e.run(e.drop("answers", "jsonl", input.String(), ""))

	out := filepath.Join(e.outbox, "answers.output.jsonl")
	errs := filepath.Join(e.outbox, "answers.errors.jsonl")
	got := map[string]lineObj{}
	for _, path := range []string{out, errs} {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range bytes.SplitAfter(raw, []byte("\n")) {
			if len(l) == 0 {
				continue
			}
			if !utf8.Valid(l) {
				t.Errorf("%s:%d: not valid UTF-8: %q", path, i+1, l)
			}
		}
		for _, l := range parseLines(t, path) {
			got[*l.CustomID] = l
			if l.Response != nil && !bytes.HasPrefix(l.Response.Body, []byte("{")) {
				t.Errorf("%s: custom_id %s: body %.40s is not an object", path, *l.CustomID, l.Response.Body)
			}
		}
	}
	completed := 0
	for i, a := range answers {
		l := got[a.cid]
		if a.bad == "" {
			completed++
			if l.Response == nil || l.Response.StatusCode != 200 {
				t.Errorf("%s: %+v, want a result line", a.cid, l)
			}
			continue
		}
		if l.Error == nil || l.Error.Code != pipeline.CodeBadResponse || !strings.Contains(l.Error.Message, a.bad) || l.Line != i+1 {
			t.Errorf("%s: line %d error %+v, want %s on line %d naming %q", a.cid, l.Line, l.Error, pipeline.CodeBadResponse, i+1, a.bad)
		}
	}
	if c := o.RequestCounts; c.Completed != completed || c.Failed != len(answers)-completed {
		t.Errorf("request_counts %+v, want %d completed", c, completed)
	}
	// okBody's 3+1 tokens, then 3×2^62 input and 2×2^62 output: both past
	// MaxInt64, held there.
	want := pipeline.Usage{InputTokens: math.MaxInt64, OutputTokens: math.MaxInt64, TotalTokens: math.MaxInt64,
		InputTokensDetails: pipeline.InputTokensDetails{CachedTokens: math.MaxInt64}}
	if o.Usage != want {
		t.Errorf("usage %+v, want %+v", o.Usage, want)
	}
	e.check("answers", "jsonl")
}

// `batchd check` refuses a result line that is not valid UTF-8, a body that
// is not an object and a success whose usage is not token counts, naming
// the line.
func TestCheckRefusesBadResultLines(t *testing.T) {
	eng := scriptedEngine{}
	var input strings.Builder
	for i := range 4 {
		cid := fmt.Sprint("c", i)
		eng[cid] = engine.Response{StatusCode: 200, RequestID: "r", Body: okBody}
		fmt.Fprintf(&input, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"max_tokens":5}}`+"\n", cid)
	}
	e := newEnvOn(t, eng, nil)
	e.run(e.drop("tamper", "jsonl", input.String(), ""))
	e.check("tamper", "jsonl")
	outPath := filepath.Join(e.outbox, "tamper.output.jsonl")
	intact, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(intact), "\n")
	// The lines hold okBody as the engine gave it (it needs no escaping).
	withBody := func(line, body string) string { return strings.Replace(line, string(okBody), body, 1) }
	for _, tc := range []struct {
		name string
		idx  int // of the line changed
		line string
		want string
	}{
		{"invalid UTF-8", 1, strings.Replace(lines[1], `"content":"ok"`, "\"content\":\"o\xffk\"", 1), "tamper.output.jsonl:2: not valid UTF-8 (at byte"},
		{"an array body", 2, withBody(lines[2], `[]`), "tamper.output.jsonl:3: response.body is an array, not a JSON object"},
		{"a null body", 2, withBody(lines[2], `null`), "tamper.output.jsonl:3: response.body is null, not a JSON object"},
		{"negative usage", 0, withBody(lines[0], usageBody(`{"prompt_tokens":-4611686018427387904}`)), "tamper.output.jsonl:1: response.body has a usage.prompt_tokens that is not a whole number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.line == lines[tc.idx] {
				t.Fatal("the line was not changed")
			}
			tampered := append(append(slices.Clone(lines[:tc.idx]), tc.line), lines[tc.idx+1:]...)
			if err := os.WriteFile(outPath, []byte(strings.Join(tampered, "")), 0o644); err != nil {
				t.Fatal(err)
			}
			rep, err := pipeline.Check(pipeline.CheckInput{
				Input:  filepath.Join(e.done, "tamper.jsonl"),
				Format: "jsonl",
				Output: outPath,
				Errors: filepath.Join(e.outbox, "tamper.errors.jsonl"),
				Object: filepath.Join(e.outbox, "tamper.batch.json"),
			})
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() || !strings.Contains(strings.Join(rep.Problems, "\n"), tc.want) {
				t.Errorf("problems %q, want one with %q", rep.Problems, tc.want)
			}
		})
	}
	if err := os.WriteFile(outPath, intact, 0o644); err != nil {
		t.Fatal(err)
	}
	e.check("tamper", "jsonl")
}

// Through the remote engine: a server that answers one request with a
// body nested 100,000 deep, every time, fails that request alone with
// engine_bad_response after max_retries (2 here), and the batch ends.
func TestDeepAnswerFromServerIsAnErrorLine(t *testing.T) {
	deep := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	var deepPosts atomic.Int64
	e := newEnv(t, func(_ *pipeline.Config, so *openaitest.Options) {
		so.Fault = func(_ int64, _ *http.Request, body []byte) openaitest.Fault {
			if !bytes.Contains(body, []byte(`"hello number 3"`)) {
				return openaitest.Fault{}
			}
			deepPosts.Add(1)
			return openaitest.Fault{Status: 200, Body: deep}
		}
	})
	o := e.run(e.drop("deep", "jsonl", chatLines(5, "d"), ""))
	if c := o.RequestCounts; o.Status != pipeline.StatusCompleted || c.Completed != 4 || c.Failed != 1 {
		t.Fatalf("status %s, counts %+v, want completed with 4 results and 1 error", o.Status, c)
	}
	ls := parseLines(t, filepath.Join(e.outbox, "deep.errors.jsonl"))
	if len(ls) != 1 || *ls[0].CustomID != "d3" || ls[0].Error == nil || ls[0].Error.Code != pipeline.CodeBadResponse ||
		!strings.Contains(ls[0].Error.Message, "exceeded max depth") {
		t.Errorf("error lines %+v, want d3's %s naming the depth", ls, pipeline.CodeBadResponse)
	}
	if n := deepPosts.Load(); n != 3 {
		t.Errorf("the deep request was sent %d times, want 3 (max_retries 2)", n)
	}
	e.check("deep", "jsonl")
}
