package validate

import (
	"encoding/json"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/wire"
)

// A /v1/messages line runs as the chat body it translates to, checked by
// the chat rules with the batch defaults merged in; the line's url is
// kept for the answer. What it asks for that is not honoured is refused
// by name.
func TestCheckMessagesLine(t *testing.T) {
	c := NewChecker(Config{Defaults: map[string]json.RawMessage{"model": json.RawMessage(`"m"`), "seed": json.RawMessage(`7`)}})
	res := c.Check(1, []byte(`{"custom_id":"a","method":"POST","url":"/v1/messages","body":{"max_tokens":16,"system":"S","messages":[{"role":"user","content":"Hi"}],"stop_sequences":["END"]}}`))
	if res.Problem != nil {
		t.Fatalf("problem %+v", res.Problem)
	}
	r := res.Request
	if r.URL != engine.EndpointChat || r.LineURL != wire.EndpointMessages || r.MaxTokens != 16 {
		t.Fatalf("request %+v", r)
	}
	var body map[string]any
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	if body["model"] != "m" || body["seed"] != float64(7) || body["stop"].([]any)[0] != "END" || len(body["messages"].([]any)) != 2 {
		t.Errorf("body %s", r.Body)
	}
	for _, tc := range []struct{ body, param string }{
		{`{"max_tokens":16,"messages":[{"role":"user","content":"Hi"}],"tools":[{"name":"x"}]}`, "tools"},
		{`{"messages":[{"role":"user","content":"Hi"}]}`, "max_tokens"},
		{`{"max_tokens":16,"temperature":9,"messages":[{"role":"user","content":"Hi"}]}`, "temperature"},
	} {
		res := NewChecker(Config{}).Check(2, []byte(`{"custom_id":"b","method":"POST","url":"/v1/messages","body":`+tc.body+`}`))
		if res.Problem == nil || res.Problem.Param != tc.param {
			t.Errorf("%s: problem %+v, want one for %s", tc.body, res.Problem, tc.param)
		}
	}
}
