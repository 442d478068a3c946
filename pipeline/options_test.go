package pipeline_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// model_override replaces the model of every line, those that name one
// included; model only fills in the lines that name none.
func TestModelOverrideReplacesEveryLinesModel(t *testing.T) {
	var mu sync.Mutex
	models := map[string]int{}
	e := newEnv(t, func(c *pipeline.Config, o *openaitest.Options) {
		o.Fault = func(n int64, r *http.Request, body []byte) openaitest.Fault {
			var b struct{ Model string }
			_ = json.Unmarshal(body, &b)
			mu.Lock()
			models[b.Model]++
			mu.Unlock()
			return openaitest.Fault{}
		}
	})
	content := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"theirs","messages":[{"role":"user","content":"x"}],"max_tokens":2}}
{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"y"}],"max_tokens":2}}
`
	o := e.run(e.drop("ovr", "jsonl", content, `{"model":"filler","model_override":"ours"}`))
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 2 {
		t.Fatalf("%s %+v", o.Status, o.RequestCounts)
	}
	mu.Lock()
	defer mu.Unlock()
	if models["ours"] != 2 || len(models) != 1 {
		t.Fatalf("the engine saw models %v, want ours twice", models)
	}
}

// A model_override that is not a string fails the batch naming it.
func TestModelOverrideMustBeAString(t *testing.T) {
	e := newEnv(t)
	o := e.run(e.drop("ovrbad", "jsonl", chatLines(1, "o"), `{"model_override": 5}`))
	if o.Status != pipeline.StatusFailed || o.Errors == nil || o.Errors.Data[0].Code != "invalid_options" ||
		!strings.Contains(o.Errors.Data[0].Message, "model_override") {
		t.Fatalf("%s %+v", o.Status, o.Errors)
	}
	if e.srv.Requests() != 0 {
		t.Fatal("a batch with a bad model_override ran requests")
	}
}

// The batch option speculative fills in body.speculative on the lines that
// lack it (false, true or a method), and a line's own value wins.
func TestSpeculativeOptionFillsLines(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{}
	e := newEnv(t, func(c *pipeline.Config, o *openaitest.Options) {
		o.Fault = func(n int64, r *http.Request, body []byte) openaitest.Fault {
			var b struct {
				Messages []struct{ Content string }
				Spec     json.RawMessage `json:"speculative"`
			}
			_ = json.Unmarshal(body, &b)
			mu.Lock()
			seen[b.Messages[0].Content] = string(b.Spec)
			mu.Unlock()
			return openaitest.Fault{}
		}
	})
	content := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"a"}],"max_tokens":2}}
{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"b"}],"max_tokens":2,"speculative":"ngram"}}
`
	o := e.run(e.drop("spec", "jsonl", content, `{"speculative": false}`))
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 2 {
		t.Fatalf("%s %+v", o.Status, o.RequestCounts)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["a"] != "false" || seen["b"] != `"ngram"` {
		t.Fatalf("speculative as the engine saw it: %v", seen)
	}
}

// A speculative option that is not false, true, "ngram" or "draft" fails
// the batch naming it.
func TestSpeculativeOptionRefusesOtherValues(t *testing.T) {
	for _, v := range []string{`"eagle"`, `1`, `"off"`} {
		if _, err := pipeline.ParseOptions([]byte(`{"speculative": `+v+`}`), "x.options.json"); err == nil ||
			!strings.Contains(err.Error(), "speculative") {
			t.Errorf("speculative %s: err %v, want one naming speculative", v, err)
		}
	}
	for v, want := range map[string]pipeline.SpecOption{`true`: "on", `false`: "off", `"draft"`: "draft"} {
		o, err := pipeline.ParseOptions([]byte(`{"speculative": `+v+`}`), "x.options.json")
		if err != nil || o.Speculative != want {
			t.Errorf("speculative %s: %q %v, want %q", v, o.Speculative, err, want)
		}
	}
}
