package pipeline_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/pipeline"
)

// readDocResults reads outbox/NAME.results.json.
func (e *env) readDocResults(name string) ([]pipeline.DocResult, []byte) {
	e.t.Helper()
	raw, err := os.ReadFile(filepath.Join(e.outbox, name+".results.json"))
	if err != nil {
		e.t.Fatalf("results.json: %v", err)
	}
	var rs []pipeline.DocResult
	if err := json.Unmarshal(raw, &rs); err != nil {
		e.t.Fatalf("results.json is not a JSON array of results: %v\n%s", err, raw)
	}
	return rs, raw
}

// A document stopped midway and resumed gets each request's result once,
// in the document's order; the same content dropped under another name
// gets the same results.json; a JSONL input gets none.
func TestDocumentResultsAfterShutdownMidway(t *testing.T) {
	e, stopAt := newEnvStopping(t, 20)
	const n = 120
	var doc strings.Builder
	doc.WriteString(`{"max_generate_length":5,"requests":[`)
	for i := range n {
		if i > 0 {
			doc.WriteString(",")
		}
		if i%3 == 1 {
			fmt.Fprintf(&doc, `{"messages":[{"role":"user","content":"hello number %d"}]}`, i)
		} else {
			fmt.Fprintf(&doc, `{"custom_id":"r%d","messages":[{"role":"user","content":"hello number %d"}]}`, i, i)
		}
	}
	doc.WriteString("]}")
	job := e.drop("resume", "json", doc.String(), "")
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stopAt; cancel() }()
	if _, err := e.pipe.Run(ctx, job); err == nil {
		t.Fatal("Run returned no error after its context was cancelled")
	}
	if _, err := os.Stat(filepath.Join(e.outbox, "resume.results.json")); err == nil {
		t.Fatal("results.json was published before the batch ended")
	}
	e.reopen()
	if o := e.run(job); o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != n {
		t.Fatalf("after resume: %s %+v", o.Status, o.RequestCounts)
	}
	e.check("resume", "json")
	rs, raw := e.readDocResults("resume")
	if len(rs) != n {
		t.Fatalf("%d results for %d requests", len(rs), n)
	}
	for i, r := range rs {
		want := fmt.Sprintf("r%d", i)
		if i%3 == 1 {
			want = fmt.Sprintf("request-%d", i+1)
		}
		// The stand-in answers "echo: " and the prompt, cut at max_tokens.
		if r.CustomID != want || r.Error != nil || r.OutputText == nil || *r.OutputText == "" || !strings.HasPrefix(fmt.Sprintf("echo: hello number %d", i), *r.OutputText) {
			t.Fatalf("result %d: %+v (custom_id want %q)", i, r, want)
		}
		if r.FinishReason == nil || r.Usage == nil {
			t.Fatalf("result %d has no finish_reason or usage: %+v", i, r)
		}
	}

	again := e.run(e.drop("again", "json", doc.String(), ""))
	if again.Status != pipeline.StatusCompleted {
		t.Fatalf("again: %s", again.Status)
	}
	if _, raw2 := e.readDocResults("again"); !bytes.Equal(raw, raw2) {
		t.Fatalf("the same content under another name gave other results:\n%s\n---\n%s", raw, raw2)
	}

	e.run(e.drop("lines", "jsonl", chatLines(3, "l"), ""))
	if _, err := os.Stat(filepath.Join(e.outbox, "lines.results.json")); err == nil {
		t.Fatal("a JSONL input got a results.json")
	}
}

// On the native engine (the demo model), results.json tells a stop string
// from a length limit and an invalid request, in order, and gives the
// asked-for logprobs with token ids, best first.
func TestDocumentResultsOnNativeEngine(t *testing.T) {
	e := newEnvOn(t, demoEngine(t), nil)

	// Sampled texts of a few seeds (the demo model's random weights make
	// greedy text mostly broken bytes), with 3 logprobs a token.
	const body = `"messages":[{"role":"user","content":"Once upon a time"}],"max_generate_length":16,"ignore_eos":true,"top_p":1,"top_k":0`
	var sampled strings.Builder
	sampled.WriteString(`{"num_logprobs":3,"requests":[`)
	for seed := range 8 {
		if seed > 0 {
			sampled.WriteString(",")
		}
		fmt.Fprintf(&sampled, `{%s,"seed":%d}`, body, seed)
	}
	sampled.WriteString("]}")
	if o := e.run(e.drop("sampled", "json", sampled.String(), "")); o.RequestCounts.Completed != 8 {
		t.Fatalf("sampled: %s %+v", o.Status, o.RequestCounts)
	}
	rs, raw := e.readDocResults("sampled")
	if len(rs) != 8 {
		t.Fatalf("sampled results: %s", raw)
	}
	// A stop string of two whole characters from past the output's start.
	var g, stop string
	seed := -1
	for i, r := range rs {
		if r.CustomID != fmt.Sprintf("request-%d", i+1) || r.OutputText == nil || r.FinishReason == nil || *r.FinishReason != "length" {
			t.Fatalf("result %d: %s", i, raw)
		}
		if len(r.Logprobs) != 16 {
			t.Fatalf("result %d: %d logprobs entries for 16 tokens: %s", i, len(r.Logprobs), raw)
		}
		for k, top := range r.Logprobs {
			if len(top) != 3 {
				t.Fatalf("result %d token %d: %d candidates, want 3", i, k, len(top))
			}
			for j, c := range top {
				if c.TokenID == nil || c.Bytes == nil {
					t.Fatalf("result %d token %d candidate %d: %+v", i, k, j, c)
				}
				if j > 0 && c.Logprob > top[j-1].Logprob {
					t.Fatalf("result %d token %d: candidates not best first: %+v", i, k, top)
				}
			}
		}
		runes := []rune(*r.OutputText)
		for k := 2; k+2 <= len(runes) && seed < 0; k++ {
			if !strings.ContainsRune(string(runes[k:k+2]), '\uFFFD') {
				g, stop, seed = *r.OutputText, string(runes[k:k+2]), i
			}
		}
	}
	if seed < 0 {
		t.Skipf("no stop string to pick from the sampled outputs: %s", raw)
	}

	doc := fmt.Sprintf(`{"requests":[
		{"custom_id":"s",%s,"seed":%d,"stop":[%q]},
		{"messages":[{"role":"user","content":"Once upon a time"}],"max_generate_length":4,"ignore_eos":true},
		{"custom_id":"bad","messages":[{"role":"user","content":"x"}],"temperature":5}
	]}`, body, seed, stop)
	if o := e.run(e.drop("mixed", "json", doc, "")); o.RequestCounts.Completed != 2 || o.RequestCounts.Failed != 1 {
		t.Fatalf("mixed: %s %+v", o.Status, o.RequestCounts)
	}
	rs, raw = e.readDocResults("mixed")
	if len(rs) != 3 {
		t.Fatalf("mixed results: %s", raw)
	}
	s, l, bad := rs[0], rs[1], rs[2]
	if s.CustomID != "s" || s.FinishReason == nil || *s.FinishReason != "stop-words" || s.OutputText == nil || *s.OutputText != g[:strings.Index(g, stop)] || s.Logprobs != nil {
		t.Fatalf("stop string %q: %+v\n%s", stop, s, raw)
	}
	if l.CustomID != "request-2" || l.FinishReason == nil || *l.FinishReason != "length" || l.Error != nil || l.Usage == nil {
		t.Fatalf("length: %s", raw)
	}
	be, _ := bad.Error.(map[string]any)
	if bad.CustomID != "bad" || be == nil || be["status_code"] != float64(400) || bad.OutputText != nil || bad.FinishReason != nil {
		t.Fatalf("invalid request: %s", raw)
	}
	e.check("mixed", "json")
}

// demoEngine opens the native engine on the tiny demo model.
func demoEngine(t *testing.T) *native.Engine {
	t.Helper()
	path := filepath.Join(t.TempDir(), "demo-tiny.gguf")
	if err := demomodel.WriteFile(path, demomodel.Shapes["tiny"], kernels.F32, 1); err != nil {
		t.Fatal(err)
	}
	cfg := native.DefaultConfig()
	cfg.Models = []native.ModelConfig{{Path: path}}
	eng, err := native.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(context.Background()) })
	return eng
}

// A document's completions request with logprobs gets them in
// results.json as chat's do: per generated token the alternatives with the
// native engine's token ids and exact bytes, best first.
func TestDocumentResultsCompletionsLogprobs(t *testing.T) {
	e := newEnvOn(t, demoEngine(t), nil)
	doc := `{"requests":[
		{"custom_id":"c","method":"POST","url":"/v1/completions","body":{"prompt":"Once upon a time","max_tokens":6,"ignore_eos":true,"logprobs":3,"seed":7}},
		{"custom_id":"none","method":"POST","url":"/v1/completions","body":{"prompt":"Once upon a time","max_tokens":2,"ignore_eos":true}}
	]}`
	if o := e.run(e.drop("comp", "json", doc, "")); o.RequestCounts.Completed != 2 {
		t.Fatalf("comp: %s %+v", o.Status, o.RequestCounts)
	}
	e.check("comp", "json")
	rs, raw := e.readDocResults("comp")
	if len(rs) != 2 || rs[1].Logprobs != nil {
		t.Fatalf("results: %s", raw)
	}
	// What the engine answered: its token ids and top_tokens.
	var line struct {
		CustomID string `json:"custom_id"`
		Response struct {
			Body struct {
				Choices []struct {
					Logprobs struct {
						TokenIDs  []int32                 `json:"token_ids"`
						TopTokens [][]pipeline.DocLogprob `json:"top_tokens"`
					} `json:"logprobs"`
				} `json:"choices"`
			} `json:"body"`
		} `json:"response"`
	}
	for _, l := range readLines(t, filepath.Join(e.outbox, "comp.output.jsonl")) {
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatal(err)
		}
		if line.CustomID == "c" {
			break
		}
	}
	if line.CustomID != "c" || len(line.Response.Body.Choices) != 1 {
		t.Fatalf("no output line for c: %+v", line)
	}
	answer := line.Response.Body.Choices[0].Logprobs
	lp := rs[0].Logprobs
	if len(lp) != 6 || len(answer.TokenIDs) != 6 {
		t.Fatalf("%d logprobs entries, %d token ids for 6 tokens: %s", len(lp), len(answer.TokenIDs), raw)
	}
	for k, top := range lp {
		if len(top) != 3 {
			t.Fatalf("token %d: %d alternatives, want 3: %s", k, len(top), raw)
		}
		for j, c := range top {
			a := answer.TopTokens[k][j]
			if c.TokenID == nil || a.TokenID == nil || *c.TokenID != *a.TokenID || !slices.Equal(c.Bytes, a.Bytes) || c.Logprob != a.Logprob || c.Token != a.Token {
				t.Fatalf("token %d alternative %d: %+v, the engine gave %+v", k, j, c, a)
			}
			if j > 0 && c.Logprob > top[j-1].Logprob {
				t.Fatalf("token %d: not best first: %+v", k, top)
			}
		}
	}
}
