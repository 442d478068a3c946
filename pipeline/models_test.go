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
