package pipeline_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/openai"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/kernels"
)

// mixedModelLines returns chat lines naming, in turn, each of models.
func mixedModelLines(models ...string) string {
	var b strings.Builder
	for i, m := range models {
		fmt.Fprintf(&b, `{"custom_id":"m%d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"user","content":"hello %d"}],"max_tokens":3}}`+"\n", i, m, i)
	}
	return b.String()
}

// checkMixedModels runs a batch whose lines name model-a, model-b and one
// model not served, and checks that each served line was answered by its
// model and the other is a model_not_found line of status notFound naming
// the served models.
func checkMixedModels(t *testing.T, e *env, notFound int) {
	t.Helper()
	models := []string{"model-a", "model-b", "gpt-4", "model-b", "model-a"}
	o := e.run(e.drop("mixed", "jsonl", mixedModelLines(models...), ""))
	if c := o.RequestCounts; c.Total != 5 || c.Completed != 4 || c.Failed != 1 {
		t.Fatalf("counts %+v", c)
	}
	for _, l := range parseLines(t, filepath.Join(e.outbox, "mixed.output.jsonl")) {
		var i int
		fmt.Sscanf(*l.CustomID, "m%d", &i)
		var body struct{ Model string }
		if err := json.Unmarshal(l.Response.Body, &body); err != nil || body.Model != models[i] {
			t.Errorf("%s: answered by %q, want %q (%v)", *l.CustomID, body.Model, models[i], err)
		}
	}
	errs := parseLines(t, filepath.Join(e.outbox, "mixed.errors.jsonl"))
	if len(errs) != 1 || *errs[0].CustomID != "m2" || errs[0].Response == nil || errs[0].Response.StatusCode != notFound {
		t.Fatalf("errors %+v", errs)
	}
	var eb struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(errs[0].Response.Body, &eb); err != nil || eb.Error.Code != "model_not_found" ||
		!strings.Contains(eb.Error.Message, "model-a, model-b") {
		t.Errorf("not-found line body %s (%v)", errs[0].Response.Body, err)
	}
	e.check("mixed", "jsonl")
}

// One batch names two models served remotely by routes, each by its own
// stand-in server, and one not served.
func TestMixedModelsRoutedRemotely(t *testing.T) {
	var urls []string
	for range 2 {
		srv := openaitest.NewServer(openaitest.Options{})
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL())
	}
	oc := openai.DefaultConfig()
	oc.Routes = []openai.Route{{Model: "model-a", URLs: urls[:1]}, {Model: "model-b", URLs: urls[1:]}}
	rt, err := openai.NewRouter(oc)
	if err != nil {
		t.Fatal(err)
	}
	openEngineForTest(t, rt)
	checkMixedModels(t, newEnvOn(t, rt, nil), 404)
}

// One batch names two models of the native engine and one not served.
func TestMixedModelsNative(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo-tiny.gguf")
	if err := demomodel.WriteFile(path, demomodel.Shapes["tiny"], kernels.F32, 1); err != nil {
		t.Fatal(err)
	}
	cfg := native.DefaultConfig()
	cfg.Models = []native.ModelConfig{{Name: "model-a", Path: path}, {Name: "model-b", Path: path}}
	eng, err := native.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	openEngineForTest(t, eng)
	checkMixedModels(t, newEnvOn(t, eng, nil), 400)
}

// openEngineForTest opens eng and closes it when t ends.
func openEngineForTest(t *testing.T, eng engine.Engine) {
	t.Helper()
	if err := eng.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(context.Background()) })
}

// messagesBatch is /v1/messages lines: two runnable, one asking for tools.
const messagesBatch = `{"custom_id":"m1","method":"POST","url":"/v1/messages","body":{"max_tokens":4,"system":"Be brief.","messages":[{"role":"user","content":"Say hi"}]}}
{"custom_id":"m2","method":"POST","url":"/v1/messages","body":{"max_tokens":4,"messages":[{"role":"user","content":[{"type":"text","text":"Once upon"}]}],"stop_sequences":["END"]}}
{"custom_id":"m3","method":"POST","url":"/v1/messages","body":{"max_tokens":4,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"t"}]}}
`

// checkMessagesBatch runs messagesBatch and checks its answers are
// Anthropic messages, their usage summed, and the tools line refused.
func checkMessagesBatch(t *testing.T, e *env) {
	t.Helper()
	o := e.run(e.drop("msgs", "jsonl", messagesBatch, ""))
	if c := o.RequestCounts; c.Total != 3 || c.Completed != 2 || c.Failed != 1 {
		t.Fatalf("counts %+v", c)
	}
	if o.Endpoint != "/v1/messages" {
		t.Errorf("batch endpoint %q", o.Endpoint)
	}
	var in, out int64
	for _, l := range parseLines(t, filepath.Join(e.outbox, "msgs.output.jsonl")) {
		var m struct {
			ID         string `json:"id"`
			Type       string `json:"type"`
			Role       string `json:"role"`
			StopReason string `json:"stop_reason"`
			Usage      struct {
				InputTokens  int64 `json:"input_tokens"`
				OutputTokens int64 `json:"output_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(l.Response.Body, &m); err != nil {
			t.Fatalf("%s: %v", l.Response.Body, err)
		}
		if !strings.HasPrefix(m.ID, "msg_") || m.Type != "message" || m.Role != "assistant" ||
			(m.StopReason != "end_turn" && m.StopReason != "max_tokens" && m.StopReason != "stop_sequence") ||
			m.Usage.InputTokens == 0 || m.Usage.OutputTokens == 0 {
			t.Errorf("answer %s", l.Response.Body)
		}
		in += m.Usage.InputTokens
		out += m.Usage.OutputTokens
	}
	if o.Usage.InputTokens != in || o.Usage.OutputTokens != out {
		t.Errorf("batch usage %+v, lines sum to %d in, %d out", o.Usage, in, out)
	}
	errs := parseLines(t, filepath.Join(e.outbox, "msgs.errors.jsonl"))
	if len(errs) != 1 || *errs[0].CustomID != "m3" || errs[0].Response == nil || !strings.Contains(string(errs[0].Response.Body), `"param":"tools"`) {
		t.Fatalf("errors %+v", errs)
	}
	e.check("msgs", "jsonl")
}

func TestMessagesLinesRemote(t *testing.T) {
	checkMessagesBatch(t, newEnv(t))
}

func TestMessagesLinesNative(t *testing.T) {
	checkMessagesBatch(t, newEnvOn(t, demoEngine(t), nil))
}
