package pipeline

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/batchd/batchd/wire"
)

// encodeResponse writes the very bytes json.Marshal writes for the same
// OutputLine, and refuses what json.Valid refuses.
func TestEncodeResponseMatchesMarshal(t *testing.T) {
	bodies := []string{
		`{"id":"chatcmpl-1","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3}}`,
		" {\n  \"a\" : [1, 2.5e3, true, null],\t\"b\": {} } \n",
		`{"html":"<b>&amp;</b>","sep":"a` + "\u2028" + `b` + "\u2029" + `c","dots":"…—€"}`,
		`{"esc":"\"\\\/\u00e9\ud83d\ude00\n"}`,
		`"just a string"`, `42`, `[]`,
		`{"a":1`, `{"a":}`, ``, `nul`, "{\"bad\":\"\xff\"}", `{"a":1}{"b":2}`,
	}
	ids := [][3]string{
		{"batch_req_0123abcd", "request-1", "req_x"},
		{"batch_req_1", `quote " and \ back`, "<id>&"},
		{"batch_req_2", "é\u2028\x01", ""},
		{"batch_req_3", "bad \xff utf8", "tab\there"},
	}
	for _, body := range bodies {
		for _, id := range ids {
			for _, status := range []int{200, 400} {
				line := 0
				if status != 200 {
					line = 7
				}
				got, ok := encodeResponse(id[0], id[1], status, id[2], []byte(body), line)
				if ok != json.Valid([]byte(body)) {
					t.Fatalf("body %q: ok %v, json.Valid says %v", body, ok, !ok)
				}
				if !ok {
					continue
				}
				want := encodeLine(&OutputLine{ID: id[0], CustomID: strPtr(id[1]), Line: line,
					Response: &LineResponse{StatusCode: status, RequestID: id[2], Body: json.RawMessage(body)}})
				if !bytes.Equal(got, want) {
					t.Fatalf("body %q ids %q:\n got %s\nwant %s", body, id, got, want)
				}
			}
		}
	}
}

// usageOf's fast path gives what decoding the body gives, and leaves to
// the decoder every body it cannot read the same way; a usage whose
// counts are not whole numbers from 0 to MaxInt64 is refused.
func TestReadUsageMatchesDecoding(t *testing.T) {
	decoded := func(body string) (lineUsage, bool) {
		var u struct {
			Usage wire.Usage `json:"usage"`
		}
		if json.Unmarshal([]byte(body), &u) != nil {
			return lineUsage{}, false
		}
		lu := lineUsage{in: int64(u.Usage.PromptTokens), out: int64(u.Usage.CompletionTokens)}
		if d := u.Usage.PromptTokensDetails; d != nil {
			lu.cached = int64(d.CachedTokens)
		}
		return lu, true
	}
	for _, c := range []struct {
		body string
		fast bool // readUsage answers itself
		bad  string
	}{
		{`{"choices":[{"usage":{"prompt_tokens":99}}],"usage":{"prompt_tokens":24,"completion_tokens":12,"total_tokens":36}}`, true, ""},
		{`{"usage":{"prompt_tokens":5,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":4}}}`, true, ""},
		{`{"usage":{"prompt_tokens":5,"prompt_tokens_details":null,"completion_tokens_details":{"accepted_prediction_tokens":2,"rejected_prediction_tokens":1}}}`, true, ""},
		{` { "usage" : { "prompt_tokens" : 3 , "other": "x\"}" } } `, true, ""},
		{`{"usage":null}`, true, ""},
		{`{"id":"x"}`, true, ""},
		{`{"usage":{"prompt_tokens":null,"completion_tokens":2}}`, true, ""},
		{`{"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":0}}`, true, ""},
		{`{"Usage":{"prompt_tokens":5}}`, false, ""},
		{`{"usage":{"Prompt_Tokens":5}}`, false, ""},
		{`{"usage":{"prompt_tokens":5},"usage":{"completion_tokens":6}}`, false, ""},
		{`{"usage":{"prompt_tokens":5,"prompt_tokens":6}}`, false, ""},
		{`{"us\u0061ge":{"prompt_tokens":5}}`, false, ""},
		{` { "usage" : { "prompt_tokens" : -3 , "other": "x\"}" } } `, false, "usage.prompt_tokens that is not a whole number from 0 to 9223372036854775807 (-3)"},
		{`{"usage":{"prompt_tokens":4611686018427387904,"completion_tokens":-4611686018427387904}}`, false, "usage.completion_tokens"},
		{`{"usage":{"prompt_tokens":5.0,"completion_tokens":6}}`, false, "usage.prompt_tokens"},
		{`{"usage":{"prompt_tokens":"5"}}`, false, "usage.prompt_tokens"},
		{`{"usage":{"prompt_tokens":5,"total_tokens":1e2}}`, false, "usage.total_tokens"},
		{`{"usage":{"prompt_tokens":99999999999999999999}}`, false, "usage.prompt_tokens"},
		{`{"usage":{"prompt_tokens":5,"completion_tokens_details":{"accepted_prediction_tokens":true}}}`, false, "usage.completion_tokens_details.accepted_prediction_tokens"},
		{`{"usage":{"prompt_tokens_details":{"cached_tokens":[]}}}`, false, "usage.prompt_tokens_details.cached_tokens"},
		{`{"usage":{"prompt_tokens_details":{"cached_tokens":-1}}}`, false, "usage.prompt_tokens_details.cached_tokens"},
		{`{"usage":{"prompt_tokens_details":7}}`, false, "not an object of token counts"},
		{`{"usage":[1]}`, false, "not an object of token counts"},
		{`{"usage":"lots"}`, false, "not an object of token counts"},
	} {
		_, fast := readUsage([]byte(c.body))
		if fast != c.fast {
			t.Errorf("%s: fast path %v, want %v", c.body, fast, c.fast)
		}
		got, problem := usageOf([]byte(c.body))
		if c.bad != "" {
			if !strings.Contains(problem, c.bad) {
				t.Errorf("%s: problem %q, want one with %q", c.body, problem, c.bad)
			}
			continue
		}
		want, ok := decoded(c.body)
		if problem != "" || !ok || got != want {
			t.Errorf("%s: usage %+v (problem %q), decoding gives %+v (ok %v)", c.body, got, problem, want, ok)
		}
	}
}

// A /v1/messages answer's usage, under Anthropic's names, is summed as
// OpenAI's is; OpenAI's names win when both are given. The fast path and
// decoding agree.
func TestUsageUnderAnthropicNames(t *testing.T) {
	for _, c := range []struct {
		body string
		want lineUsage
		bad  string
	}{
		{`{"usage":{"input_tokens":7,"output_tokens":3}}`, lineUsage{in: 7, out: 3}, ""},
		{`{"usage":{"input_tokens":7,"output_tokens":3,"cache_read_input_tokens":2}}`, lineUsage{in: 7, out: 3, cached: 2}, ""},
		{`{"usage":{"input_tokens":7,"prompt_tokens":5,"output_tokens":null,"completion_tokens":1}}`, lineUsage{in: 5, out: 1}, ""},
		{`{"usage":{"prompt_tokens":null,"input_tokens":7}}`, lineUsage{in: 7}, ""},
		{`{"usage":{"input_tokens":-1}}`, lineUsage{}, "usage.input_tokens"},
		{`{"usage":{"output_tokens":"3"}}`, lineUsage{}, "usage.output_tokens"},
	} {
		got, problem := usageOf([]byte(c.body))
		slow, slowProblem := decodeUsage([]byte(c.body))
		switch {
		case c.bad != "":
			if !strings.Contains(problem, c.bad) || problem != slowProblem {
				t.Errorf("%s: problem %q (decoding %q), want one with %q", c.body, problem, slowProblem, c.bad)
			}
		case problem != "" || got != c.want || slow != c.want || slowProblem != "":
			t.Errorf("%s: usage %+v %q, decoding %+v %q, want %+v", c.body, got, problem, slow, slowProblem, c.want)
		}
		if _, fast := readUsage([]byte(c.body)); fast == (c.bad != "") {
			t.Errorf("%s: fast path %v", c.body, fast)
		}
	}
}
