package validate

import (
	"encoding/json"
	"fmt"
	"testing"
)

// A /v1/responses line is checked as the chat body it runs as; its
// effective body stays a Responses body with the batch defaults merged
// under their Responses names, and a refusal names the field the line
// wrote.
func TestResponsesLines(t *testing.T) {
	cfg := Config{Defaults: map[string]json.RawMessage{
		"max_tokens": json.RawMessage(`8`), "temperature": json.RawMessage(`0.5`), "logprobs": json.RawMessage(`true`), "model": json.RawMessage(`"m"`)}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c := NewChecker(cfg)
	for i, tc := range []struct{ body, want, param string }{
		{`{"input":"Hi"}`, `{"input":"Hi","max_output_tokens":8,"model":"m","temperature":0.5}`, ""},
		{`{"input":"Hi","max_output_tokens":3,"temperature":null,"model":"x"}`, `{"input":"Hi","max_output_tokens":3,"model":"x","temperature":0.5}`, ""},
		{`{"input":"Hi","max_output_tokens":0}`, "", "max_output_tokens"},
		{`{"input":"Hi","temperature":3}`, "", "temperature"},
		{`{"input":"Hi","stream":true}`, "", "stream"},
		{`{"input":"Hi","previous_response_id":"resp_x"}`, "", "previous_response_id"},
		{`{"input":[{"role":"user","content":[{"type":"input_text","text":"a"}]}],"text":{"format":{"type":"json_object"}}}`, "", "text.format.type"},
	} {
		line := fmt.Sprintf(`{"custom_id":"r%d","method":"POST","url":"/v1/responses","body":%s}`, i, tc.body)
		res := c.Check(i+1, []byte(line))
		if tc.param != "" {
			if res.Problem == nil || res.Problem.Param != tc.param {
				t.Errorf("%s: problem %v, want one naming %s", tc.body, res.Problem, tc.param)
			}
			continue
		}
		if res.Problem != nil {
			t.Fatalf("%s: %v", tc.body, res.Problem)
		}
		if res.Request.URL != "/v1/responses" || res.Request.MaxTokens == 0 {
			t.Errorf("%s: url %s, max tokens %d", tc.body, res.Request.URL, res.Request.MaxTokens)
		}
		if got := string(res.Request.Body); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.body, got, tc.want)
		}
		if p := CheckNative(res.Request); p != nil {
			t.Errorf("%s: the native engine's rules refuse it: %v", tc.body, p)
		}
	}
	// The native engine refuses what it does not honour, by its name.
	res := NewChecker(Config{}).Check(1, []byte(`{"custom_id":"a","method":"POST","url":"/v1/responses","body":{"input":"Hi","guided_json":{}}}`))
	if res.Problem != nil {
		t.Fatal(res.Problem)
	}
	if p := CheckNative(res.Request); p == nil || p.Param != "guided_json" {
		t.Errorf("native rules on guided_json: %v", p)
	}
}
