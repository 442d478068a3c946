package pipeline

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/pipeline/validate"
)

// FuzzOptions: whatever the bytes of a NAME.options.json file, the path Run
// takes (read, merge over the config's defaults, Validate, the body
// defaults and their check) ends in options that work or an error naming
// the file or the field; never a panic. Options that pass give defaults
// every request line takes.
func FuzzOptions(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"on_invalid":"reject","completion_window":"90m","metadata":{"a":"b"}}`,
		`{"max_tokens":64,"model":"m","temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.05,"seed":-1,"stop":["\n\n"]}`,
		`{"presence_penalty":2.5,"frequency_penalty":-3,"repetition_penalty":0}`,
		`{"temperature":1e309}`, `{"max_tokens":-1}`, `{"max_tokens":1.5}`, `{"top_k":9223372036854775808}`,
		`{"completion_window":"0s"}`, `{"completion_window":"-1h"}`, `{"completion_window":"9999999999h"}`,
		`{"metadata":{"1":"","2":"","3":"","4":"","5":"","6":"","7":"","8":"","9":"","10":"","11":"","12":"","13":"","14":"","15":"","16":"","17":""}}`,
		`{"stop":null,"seed":null}`, `{"stop":"x"}`, `{"unknown":1}`, `{"on_invalid":"skip"}`,
		`{} {}`, `{}   `, `[]`, `null`, `"x"`, `{`, ``, "\xef\xbb\xbf{}",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	five := 5
	config := Options{MaxTokens: 16, TopK: &five, CompletionWindow: "24h"}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "in.options.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		opts, raw, err := ReadOptionsFile(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("the error does not name the file: %v", err)
			}
			return
		}
		if string(raw) != string(data) {
			t.Fatalf("ReadOptionsFile returned %q, the file holds %q", raw, data)
		}
		eff := config.Merge(opts)
		if err := eff.Validate(); err != nil {
			if !strings.Contains(err.Error(), ":") {
				t.Fatalf("the error names no field: %v", err)
			}
			return
		}
		if w, err := eff.Window(); err != nil || w <= 0 {
			t.Fatalf("valid options: window %v, %v", w, err)
		}
		vcfg := validate.Config{Defaults: eff.Defaults()}
		for k, v := range vcfg.Defaults {
			if !json.Valid(v) {
				t.Fatalf("default %s is not JSON: %s", k, v)
			}
		}
		if err := vcfg.Validate(); err != nil {
			return // Run fails the batch with invalid_options and this message
		}
		line := `{"custom_id":"a","method":"POST","url":"` + engine.EndpointChat + `","body":{"messages":[{"role":"user","content":"hi"}]}}`
		res := validate.NewChecker(vcfg).Check(1, []byte(line))
		if res.Problem != nil {
			t.Fatalf("options %s passed their checks, yet a plain line fails under them: %v", data, res.Problem)
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(res.Request.Body, &body); err != nil {
			t.Fatalf("body %s: %v", res.Request.Body, err)
		}
		if opts.MaxTokens > 0 && string(body["max_tokens"]) != string(vcfg.Defaults["max_tokens"]) {
			t.Fatalf("max_tokens %s in the body, %s in the options", body["max_tokens"], vcfg.Defaults["max_tokens"])
		}
	})
}
