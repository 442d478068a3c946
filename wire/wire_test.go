package wire

import (
	"encoding/json"
	"math"
	"testing"
)

func TestErrorBodyNullsUnsetParamAndCode(t *testing.T) {
	for _, c := range []struct {
		body json.RawMessage
		want string
	}{
		{BadRequest("n: must be an integer between 1 and 128", "n", CodeInvalidValue),
			`{"error":{"message":"n: must be an integer between 1 and 128","type":"invalid_request_error","param":"n","code":"invalid_value"}}`},
		{NewError(TypeServerError, "boom", "", "").JSON(),
			`{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`},
	} {
		if string(c.body) != c.want {
			t.Errorf("got %s, want %s", c.body, c.want)
		}
	}
}

func TestRangesRefuseOutsideAndNaN(t *testing.T) {
	for _, c := range []struct {
		r    Range
		v    float64
		fail bool
	}{
		{Temperature, 0, false}, {Temperature, 2, false}, {Temperature, 2.0001, true}, {Temperature, -0.1, true},
		{TopP, 0, true}, {TopP, 1e-9, false}, {TopP, 1, false},
		{RepetitionPenalty, 0, true}, {RepetitionPenalty, 1e300, false},
		{PresencePenalty, math.NaN(), true},
	} {
		if got := c.r.Check(c.v); (got != nil) != c.fail {
			t.Errorf("%s %v: got %v, want refused=%v", c.r.Param, c.v, got, c.fail)
		}
	}
	for _, c := range []struct {
		r    IntRange
		v    int64
		fail bool
	}{
		{N, 1, false}, {N, MaxN, false}, {N, MaxN + 1, true}, {N, 0, true},
		{TopK, -1, false}, {TopK, -2, true},
		{TopLogprobs, MaxTopLogprobs + 1, true}, {CompletionsLogprobs, MaxTextLogprobs + 1, true},
		{MaxTokens, 0, true}, {MaxTokens, math.MaxInt32 + 1, true},
	} {
		if got := c.r.Check(c.v); (got != nil) != c.fail {
			t.Errorf("%s %v: got %v, want refused=%v", c.r.Param, c.v, got, c.fail)
		}
	}
	if e := N.Check(129); e == nil || e.Error() != "n: must be an integer between 1 and 128" || e.Code != CodeInvalidValue {
		t.Errorf("n 129: %v", e)
	}
}

func TestLogitBiasRules(t *testing.T) {
	for key, want := range map[string]int32{"0": 0, "007": 7, "2147483647": math.MaxInt32} {
		if id, e := LogitBiasKey(key); e != nil || id != want {
			t.Errorf("key %q: %d %v, want %d", key, id, e, want)
		}
	}
	for _, key := range []string{"", "-1", "+1", "1.0", "2147483648", "12345678901", "x"} {
		if _, e := LogitBiasKey(key); e == nil || e.Param != "logit_bias" {
			t.Errorf("key %q accepted: %v", key, e)
		}
	}
	if CheckLogitBias("5", 100) != nil || CheckLogitBias("5", -100) != nil {
		t.Error("the bounds are allowed")
	}
	if e := CheckLogitBias("5", 100.5); e == nil || e.Message != `bias for token "5" must be between -100 and 100` {
		t.Errorf("100.5: %v", e)
	}
	if CheckLogitBiasCount(MaxLogitBias) != nil || CheckLogitBiasCount(MaxLogitBias+1) == nil {
		t.Error("count limit")
	}
	if CheckStopCount(0) == nil || CheckStopCount(MaxStop) != nil || CheckStopCount(MaxStop+1) == nil {
		t.Error("stop count limit")
	}
}

func TestTopByTextKeepsOrderAndFirstOfAText(t *testing.T) {
	b, err := json.Marshal(TopByText{{"b", -0.5}, {"a", -1}, {"b", -2}})
	if err != nil || string(b) != `{"b":-0.5,"a":-1}` {
		t.Fatalf("%s %v", b, err)
	}
}

func TestUsageDetailsOnlyWhenCounted(t *testing.T) {
	b, _ := json.Marshal(Usage{PromptTokens: 2, TotalTokens: 2})
	if string(b) != `{"prompt_tokens":2,"completion_tokens":0,"total_tokens":2}` {
		t.Errorf("without details: %s", b)
	}
	b, _ = json.Marshal(Usage{PromptTokens: 2, TotalTokens: 2, PromptTokensDetails: &TokenDetails{CachedTokens: 1}})
	if string(b) != `{"prompt_tokens":2,"completion_tokens":0,"total_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}` {
		t.Errorf("with details: %s", b)
	}
}

// NonTextPart names the first part that is not text, in either shape, and
// leaves strings, text parts and undecodable messages alone.
func TestNonTextPart(t *testing.T) {
	for messages, param := range map[string]string{
		`[{"role":"user","content":"hi"}]`:                         "",
		`[{"role":"user","content":[{"type":"text","text":"a"}]}]`: "",
		`[{"role":"user","content":null}]`:                         "",
		`{"not":"an array"}`:                                       "",
		``:                                                         "",
		`[{"role":"user","content":[{"type":"text","text":"a"},{"type":"video","video":"v.mp4"}]}]`:                "messages[0].content[1]",
		`[{"role":"user","content":"a"},{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]`: "messages[1].content[0]",
		`[{"role":"user","content":[{"type":"audio","audio":"a.wav"},{"type":"image","image":"b.png"}]}]`:          "messages[0].content[0]",
	} {
		e := NonTextPart(json.RawMessage(messages))
		switch {
		case param == "" && e != nil:
			t.Errorf("%s: refused %v, want nil", messages, e)
		case param != "" && (e == nil || e.Param != param || e.Code != CodeUnsupportedContent):
			t.Errorf("%s: got %+v, want %s naming %s", messages, e, CodeUnsupportedContent, param)
		}
	}
}

// The remote engine's key check finds a refused key however the body is
// spelled, and the fast scan sends a body it cannot judge to the decoder.
func TestCheckRemoteBodyKeys(t *testing.T) {
	for _, c := range []struct {
		body    string
		refused bool
	}{
		{`{"model":"m","messages":[{"role":"user","content":"lora_path"}]}`, false},
		{`{"model":"m","lora_path":"/x"}`, true},
		{` {"nested":{"lora_path":"/x"},"a":"\"lora_path\":"}`, false},
		{`{"lora\u005fpath":"/x"}`, true},
		{`{"a":tru,"lora_path":"/x"}`, false}, // not JSON before the key: left to the server
		{`["lora_path"]`, false},
		{``, false},
	} {
		got := CheckRemoteBody([]byte(c.body))
		if (got != nil) != c.refused || got != nil && got.Param != "lora_path" {
			t.Errorf("%s: %+v, want refused %v", c.body, got, c.refused)
		}
	}
}
