package validate

import (
	"encoding/json"
	"strings"
	"testing"
)

// An override replaces the body's own value (present, null or absent) on
// every endpoint, and wins over a default of the same key; the rest of the
// body is kept byte for byte.
func TestOverrideReplacesTheBodysModel(t *testing.T) {
	cfg := Config{
		Defaults:  map[string]json.RawMessage{"model": json.RawMessage(`"fill"`), "max_tokens": json.RawMessage(`4`)},
		Overrides: map[string]json.RawMessage{"model": json.RawMessage(`"forced"`)},
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c := NewChecker(cfg)
	for i, tc := range []struct{ url, body, want string }{
		{"/v1/chat/completions", `{"model":"mine","messages":[{"role":"user","content":"x"}]}`,
			`{"model":"forced","messages":[{"role":"user","content":"x"}],"max_tokens":4}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"model":null,"max_tokens":2}`,
			`{"messages":[{"role":"user","content":"x"}],"model":"forced","max_tokens":2}`},
		{"/v1/completions", `{"prompt":"p"}`, `{"prompt":"p","max_tokens":4,"model":"forced"}`},
		{"/v1/embeddings", `{"input":"e","model":"other"}`, `{"input":"e","model":"forced"}`},
	} {
		line := `{"custom_id":"c` + string(rune('0'+i)) + `","method":"POST","url":"` + tc.url + `","body":` + tc.body + `}`
		res := c.Check(i+1, []byte(line))
		if res.Problem != nil {
			t.Fatalf("%s: %v", tc.body, res.Problem)
		}
		if got := string(res.Request.Body); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.body, got, tc.want)
		}
	}
}

// An override is checked as a default is: a model that is not a string is
// refused naming the field.
func TestOverrideIsChecked(t *testing.T) {
	err := Config{Overrides: map[string]json.RawMessage{"model": json.RawMessage(`5`)}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "model") {
		t.Fatalf("a numeric model override: %v, want an error naming model", err)
	}
}
