package native

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/demomodel"
)

// Speculative decoding against the real models: every test runs the same
// requests with speculation off and on and asserts the answers are the
// same, and that drafts were accepted (so speculation did run).

// specAnswer is what must not change with speculation: the choices
// (text, finish and stop reasons, logprobs) and the token counts.
type specAnswer struct {
	choices          string
	completionTokens float64
	accepted         float64
	rejected         float64
}

// withSpec sets body's speculative field to spec (a JSON value).
func withSpec(body, spec string) string {
	return strings.Replace(body, "{", `{"speculative":`+spec+",", 1)
}

func answer(t *testing.T, e *Engine, endpoint, body string) specAnswer {
	t.Helper()
	m := do(t, e, endpoint, body)
	ch, _ := json.Marshal(m["choices"])
	u := m["usage"].(map[string]any)
	a := specAnswer{choices: string(ch), completionTokens: u["completion_tokens"].(float64)}
	if d, ok := u["completion_tokens_details"].(map[string]any); ok {
		a.accepted, a.rejected = d["accepted_prediction_tokens"].(float64), d["rejected_prediction_tokens"].(float64)
	}
	return a
}

// sameWithSpec runs each body with speculation off and with n-gram drafts,
// one at a time, asserts equal answers, and returns the drafts accepted.
func sameWithSpec(t *testing.T, e *Engine, endpoint string, bodies []string) (accepted float64) {
	t.Helper()
	for i, b := range bodies {
		off := answer(t, e, endpoint, withSpec(b, "false"))
		on := answer(t, e, endpoint, withSpec(b, `"ngram"`))
		if off.choices != on.choices || off.completionTokens != on.completionTokens {
			t.Errorf("request %d %s:\nwithout speculation %s\nwith              %s", i, b, off.choices, on.choices)
		}
		if off.accepted != 0 || off.rejected != 0 {
			t.Errorf("request %d: speculation off reports drafts: %+v", i, off)
		}
		accepted += on.accepted
	}
	return accepted
}

// storiesPrompts are prompts whose greedy continuations on stories260K
// repeat names and phrases.
var storiesPrompts = []string{
	"Once upon a time there was a little girl named Lily. Lily liked to play. Lily",
	"Tom and Sam were friends. Tom said to Sam, \"Sam, let's play.\" Sam said to Tom,",
	"The cat sat on the mat. The dog sat on the mat. The bird",
	"Once upon a time",
}

func TestSpecGreedyIdenticalStories(t *testing.T) {
	e := openEngineWith(t, func(*Config) {}, ModelConfig{Path: storiesPath(t)})
	var bodies []string
	for _, p := range storiesPrompts {
		bodies = append(bodies, fmt.Sprintf(`{"prompt":%q,"max_tokens":64}`, p))
	}
	if acc := sameWithSpec(t, e, engine.EndpointCompletions, bodies); acc == 0 {
		t.Fatal("no draft was accepted: speculation did not run")
	}
	cs := e.CacheStats()
	if cs.SpecDraftTokens == 0 || cs.SpecAcceptedTokens == 0 || cs.SpecAcceptedTokens > cs.SpecDraftTokens {
		t.Fatalf("engine stats: %d drafts, %d accepted", cs.SpecDraftTokens, cs.SpecAcceptedTokens)
	}
}

// A Qwen-shaped random model (and qwen3's, llama's paths) decodes the
// same with speculation; random weights fall into loops that prompt
// lookup catches.
func TestSpecGreedyIdenticalArchitectures(t *testing.T) {
	for _, shape := range []string{"tiny", "tiny-qwen3", "tiny-llama"} {
		t.Run(shape, func(t *testing.T) {
			e := openEngineWith(t, func(*Config) {}, ModelConfig{Path: writeDemo(t, demomodel.Shapes[shape])})
			var bodies []string
			for i := range 3 {
				bodies = append(bodies, fmt.Sprintf(`{"messages":[{"role":"user","content":"story %d: the red ball, the red ball, the red ball"}],"max_tokens":40,"ignore_eos":true}`, i))
			}
			if acc := sameWithSpec(t, e, engine.EndpointChat, bodies); acc == 0 {
				t.Fatal("no draft was accepted: speculation did not run")
			}
		})
	}
}

// Sampling parameters behave exactly as without speculation: temperature
// with a seed (coupling makes the output the same seed for seed), top_p,
// top_k, min_p, penalties, logit_bias, min_tokens, stop strings,
// stop_token_ids, logprobs, max_tokens and n > 1.
func TestSpecSamplingIdentical(t *testing.T) {
	e := openEngineWith(t, func(*Config) {}, ModelConfig{Path: storiesPath(t), ChatTemplate: "chatml"})
	p := storiesPrompts[0]
	bodies := []string{
		fmt.Sprintf(`{"prompt":%q,"max_tokens":48,"temperature":0.8,"seed":7}`, p),
		fmt.Sprintf(`{"prompt":%q,"max_tokens":48,"temperature":1.0,"top_p":0.9,"seed":11,"n":3}`, p),
		fmt.Sprintf(`{"prompt":%q,"max_tokens":48,"temperature":0.7,"top_k":5,"min_p":0.05,"seed":3}`, p),
		fmt.Sprintf(`{"prompt":%q,"max_tokens":48,"presence_penalty":0.5,"frequency_penalty":0.3,"repetition_penalty":1.1}`, p),
		fmt.Sprintf(`{"prompt":%q,"max_tokens":48,"logit_bias":{"13":-100,"29":5}}`, p),
		fmt.Sprintf(`{"prompt":%q,"max_tokens":48,"min_tokens":40,"stop":["."]}`, p),
		fmt.Sprintf(`{"prompt":%q,"max_tokens":48,"stop":["Lily","ball"]}`, p),
		fmt.Sprintf(`{"prompt":%q,"max_tokens":48,"stop_token_ids":[13]}`, p),
		fmt.Sprintf(`{"prompt":%q,"max_tokens":48,"logprobs":3,"echo":true}`, p),
		fmt.Sprintf(`{"prompt":%q,"max_tokens":7}`, p),
		fmt.Sprintf(`{"prompt":%q,"max_tokens":1}`, p),
	}
	if acc := sameWithSpec(t, e, engine.EndpointCompletions, bodies); acc == 0 {
		t.Fatal("no draft was accepted: speculation did not run")
	}
	chat := []string{
		`{"messages":[{"role":"user","content":"Lily and Lily and Lily"}],"max_tokens":64,"logprobs":true,"top_logprobs":4}`,
		`{"messages":[{"role":"user","content":"Lily and Lily and Lily"}],"max_tokens":64,"logprobs":true,"top_logprobs":2,"temperature":0.9,"seed":5}`,
	}
	if acc := sameWithSpec(t, e, engine.EndpointChat, chat); acc == 0 {
		t.Fatal("chat: no draft was accepted: speculation did not run")
	}
}

// The distribution of sampled tokens is the target's: over many seeds,
// the histogram of the tokens at every decoded position (verified rows
// included) is the same with and without speculation. By coupling it is
// not only within tolerance but exactly equal.
func TestSpecSampledHistogramMatches(t *testing.T) {
	e := openEngineWith(t, func(*Config) {}, ModelConfig{Path: storiesPath(t)})
	const seeds, tokens = 96, 8
	hist := func(spec string) (map[string]int, float64) {
		h := map[string]int{}
		var accepted float64
		for seed := range seeds {
			body := fmt.Sprintf(`{"speculative":%s,"prompt":%q,"max_tokens":%d,"temperature":1.0,"seed":%d,"logprobs":0,"ignore_eos":true}`,
				spec, storiesPrompts[0], tokens, seed)
			m := do(t, e, engine.EndpointCompletions, body)
			toks := m["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)["tokens"].([]any)
			for i, tok := range toks {
				h[fmt.Sprintf("%d:%s", i, tok)]++
			}
			if d, ok := m["usage"].(map[string]any)["completion_tokens_details"].(map[string]any); ok {
				accepted += d["accepted_prediction_tokens"].(float64)
			}
		}
		return h, accepted
	}
	off, _ := hist("false")
	on, accepted := hist(`"ngram"`)
	if !reflect.DeepEqual(off, on) {
		t.Fatalf("token histograms differ:\nwithout speculation %v\nwith %v", off, on)
	}
	if accepted == 0 {
		t.Fatal("no draft was accepted: speculation did not run")
	}
}

// eightBodies are eight completions of the stories prompts, every other
// one sampled at temperature, each with its own seed.
func eightBodies(maxTokens int, temperature float64, extra string) []string {
	bodies := make([]string, 8)
	for i := range bodies {
		bodies[i] = fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"temperature":%g,"seed":%d%s}`,
			storiesPrompts[i%len(storiesPrompts)], maxTokens, float64(i%2)*temperature, i, extra)
	}
	return bodies
}

// answersWithout answers bodies one at a time without speculation.
func answersWithout(t *testing.T, e *Engine, bodies []string) []specAnswer {
	out := make([]specAnswer, len(bodies))
	for i, b := range bodies {
		out[i] = answer(t, e, engine.EndpointCompletions, withSpec(b, "false"))
	}
	return out
}

// Eight requests in one step, speculation on for some and off for others
// (by the request, over a config default of ngram), give the answers each
// gives alone without speculation.
func TestSpecBatchedMixedPerRequest(t *testing.T) {
	for _, c := range []struct{ name, path string }{{"stories260K", ""}, {"qwen", "tiny"}} {
		t.Run(c.name, func(t *testing.T) {
			var path string
			if c.path == "" {
				path = storiesPath(t)
			} else {
				path = writeDemo(t, demomodel.Shapes[c.path])
			}
			e := openEngineWith(t, func(cfg *Config) { cfg.Speculative.Method = SpecNgram }, ModelConfig{Path: path})
			bodies := eightBodies(40, 0.8, "")
			alone := answersWithout(t, e, bodies)
			together := make([]specAnswer, len(bodies))
			var wg sync.WaitGroup
			for i, b := range bodies {
				switch i % 3 {
				case 0:
					b = strings.Replace(b, "{", `{"disable_spec_decode":true,`, 1)
				case 1:
					b = withSpec(b, "true")
				} // case 2: the config's default, ngram
				wg.Go(func() { together[i] = answer(t, e, engine.EndpointCompletions, b) })
			}
			wg.Wait()
			var accepted float64
			for i := range bodies {
				if alone[i].choices != together[i].choices {
					t.Errorf("request %d: alone %s\nbatched %s", i, alone[i].choices, together[i].choices)
				}
				if i%3 == 0 && (together[i].accepted != 0 || together[i].rejected != 0) {
					t.Errorf("request %d disabled speculation but reports drafts %+v", i, together[i])
				}
				accepted += together[i].accepted
			}
			if accepted == 0 {
				t.Fatal("no draft was accepted: speculation did not run")
			}
		})
	}
}

// K/V written for rejected drafts never reaches the prefix cache: a
// request that shares a speculative request's prompt and output as its
// prefix answers as on an engine that never speculated.
func TestSpecPrefixCacheConsistent(t *testing.T) {
	path := storiesPath(t)
	spec := openEngineWith(t, func(cfg *Config) { cfg.Speculative.Method = SpecNgram }, ModelConfig{Path: path})
	plain := openEngineWith(t, func(cfg *Config) { cfg.DisablePrefixCache = true }, ModelConfig{Path: path})
	for _, p := range storiesPrompts[:2] {
		first := do(t, spec, engine.EndpointCompletions, fmt.Sprintf(`{"prompt":%q,"max_tokens":96}`, p))
		text := first["choices"].([]any)[0].(map[string]any)["text"].(string)
		second := fmt.Sprintf(`{"prompt":%q,"max_tokens":32}`, p+text+" Then")
		a := answer(t, spec, engine.EndpointCompletions, second)
		b := answer(t, plain, engine.EndpointCompletions, second)
		if a.choices != b.choices {
			t.Errorf("prompt %q: after speculation %s\nplain %s", p, a.choices, b.choices)
		}
	}
	if spec.CacheStats().CachedTokens == 0 {
		t.Fatal("the second requests found no cached prefix: the test proves nothing")
	}
}

// Under a KV cache too small for the batch, sequences are preempted and
// recomputed mid-speculation, and the answers do not change.
func TestSpecPreemptionIdentical(t *testing.T) {
	path := storiesPath(t)
	plain := openEngineWith(t, func(*Config) {}, ModelConfig{Path: path})
	mc := plain.runners[plain.order[0]].model.cfg
	bb := blockBytes(mc.Layers, mc.KVHeads*mc.HeadDim, kvBlockSize)
	// Room for about two of the requests.
	blocks := 2*blocksFor(24+80, kvBlockSize) + 1
	e := openEngineWith(t, func(cfg *Config) {
		cfg.Speculative.Method = SpecNgram
		cfg.KVCacheBytes = int64(blocks) * bb
	}, ModelConfig{Path: path})
	bodies := eightBodies(80, 1, `,"ignore_eos":true`)
	want := answersWithout(t, plain, bodies)
	got := make([]specAnswer, len(bodies))
	var wg sync.WaitGroup
	for i, b := range bodies {
		wg.Go(func() { got[i] = answer(t, e, engine.EndpointCompletions, b) })
	}
	wg.Wait()
	for i := range bodies {
		if want[i].choices != got[i].choices {
			t.Errorf("request %d: plain %s\npreempted with speculation %s", i, want[i].choices, got[i].choices)
		}
	}
	cs := e.CacheStats()
	if cs.Preemptions == 0 {
		t.Fatalf("no preemption with %d blocks: the test proves nothing", cs.Blocks)
	}
	if cs.SpecAcceptedTokens == 0 {
		t.Fatal("no draft was accepted: speculation did not run")
	}
}

func TestSpecRequestField(t *testing.T) {
	e := openEngineWith(t, func(*Config) {}, ModelConfig{Path: demoPath(t)})
	for _, c := range []struct{ body, param, code string }{
		{`{"prompt":"a","max_tokens":2,"speculative":"draft"}`, "speculative", "unsupported_value"},
		{`{"prompt":"a","max_tokens":2,"speculative":"eagle"}`, "speculative", "invalid_value"},
		{`{"prompt":"a","max_tokens":2,"speculative":3}`, "speculative", "invalid_type"},
		{`{"prompt":"a","max_tokens":2,"speculative":true,"disable_spec_decode":true}`, "disable_spec_decode", "invalid_value"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		resp, err := e.Do(ctx, &engine.Request{CustomID: "t", Endpoint: engine.EndpointCompletions, Body: json.RawMessage(c.body)})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Error struct{ Param, Code, Message string }
		}
		json.Unmarshal(resp.Body, &m)
		if resp.StatusCode != 400 || m.Error.Param != c.param || m.Error.Code != c.code {
			t.Errorf("%s: status %d %s, want 400 %s %s", c.body, resp.StatusCode, resp.Body, c.param, c.code)
		}
	}
	// Off by default: no details; asked for: details, even when all zero.
	if a := do(t, e, engine.EndpointCompletions, `{"prompt":"a","max_tokens":2}`); a["usage"].(map[string]any)["completion_tokens_details"] != nil {
		t.Errorf("speculation off, usage has completion_tokens_details: %v", a["usage"])
	}
	for _, spec := range []string{"true", `"ngram"`} {
		a := do(t, e, engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"speculative":`+spec+`}`)
		if a["usage"].(map[string]any)["completion_tokens_details"] == nil {
			t.Errorf("speculative %s: usage lacks completion_tokens_details: %v", spec, a["usage"])
		}
	}
}

func TestSpeculativeConfigValidate(t *testing.T) {
	for _, c := range []struct {
		edit func(*SpeculativeConfig)
		want string
	}{
		{func(s *SpeculativeConfig) { s.Method = "eagle" }, "native.speculative.method"},
		{func(s *SpeculativeConfig) { s.Method = SpecDraft }, "native.speculative.method"},
		{func(s *SpeculativeConfig) { s.K = 0 }, "native.speculative.k"},
		{func(s *SpeculativeConfig) { s.K = 17 }, "native.speculative.k"},
		{func(s *SpeculativeConfig) { s.NgramMin = 0 }, "native.speculative.ngram_min"},
		{func(s *SpeculativeConfig) { s.NgramMax = 0 }, "native.speculative.ngram_max"},
	} {
		cfg := DefaultConfig()
		cfg.Models = []ModelConfig{{Path: "m.gguf"}}
		c.edit(&cfg.Speculative)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error naming %s", cfg.Speculative, err, c.want)
		}
	}
	cfg := DefaultConfig()
	cfg.Models = []ModelConfig{{Path: "m.gguf"}}
	cfg.Speculative.Method = SpecNgram
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

// sameWithDraft runs each body with speculation off and with the model's
// draft model, asserts equal answers, and returns the drafts accepted.
func sameWithDraft(t *testing.T, e *Engine, bodies []string) (accepted, rejected float64) {
	t.Helper()
	for i, b := range bodies {
		off := answer(t, e, engine.EndpointCompletions, withSpec(b, "false"))
		on := answer(t, e, engine.EndpointCompletions, withSpec(b, `"draft"`))
		if off.choices != on.choices || off.completionTokens != on.completionTokens {
			t.Errorf("request %d %s:\nwithout speculation %s\nwith the draft model %s", i, b, off.choices, on.choices)
		}
		accepted += on.accepted
		rejected += on.rejected
	}
	return accepted, rejected
}

// A draft model's drafts, verified, give the same output as plain
// decoding: stories260K drafting for itself (every greedy draft is
// accepted), and a demo model drafted for by another shape with the same
// tokenizer (drafts often wrong), greedy and sampled, alone and batched.
func TestSpecDraftModelIdentical(t *testing.T) {
	t.Run("self", func(t *testing.T) {
		e := openEngineWith(t, func(c *Config) { c.Speculative.Method = SpecDraft },
			ModelConfig{Name: "s", Path: storiesPath(t), Draft: "s"})
		var bodies []string
		for _, p := range storiesPrompts {
			bodies = append(bodies, fmt.Sprintf(`{"prompt":%q,"max_tokens":48}`, p))
		}
		acc, rej := sameWithDraft(t, e, bodies)
		if acc == 0 || rej != 0 {
			t.Fatalf("greedy self-drafting: %v accepted, %v rejected; want some and none", acc, rej)
		}
		// The configured method applies to a request that names none.
		if a := answer(t, e, engine.EndpointCompletions, bodies[0]); a.accepted == 0 {
			t.Fatalf("method draft by default: %+v", a)
		}
	})
	t.Run("other", func(t *testing.T) {
		draft := writeDemo(t, demomodel.Shapes["tiny-llama"])
		e := openEngineWith(t, func(*Config) {}, ModelConfig{Name: "target", Path: demoPath(t), Draft: "tiny-llama"},
			ModelConfig{Name: "tiny-llama", Path: draft})
		bodies := []string{
			`{"model":"target","prompt":"Once upon a time, there was a little girl named Lily.","max_tokens":40}`,
			`{"model":"target","prompt":"Hello, world! Hello, world!","max_tokens":40,"temperature":0.9,"seed":4}`,
			`{"model":"target","prompt":"a b c a b c a b","max_tokens":40,"logprobs":2}`,
		}
		if acc, rej := sameWithDraft(t, e, bodies); acc+rej == 0 {
			t.Fatal("the draft model proposed nothing")
		} else {
			t.Logf("tiny-llama drafting for the demo model: %v accepted, %v rejected", acc, rej)
		}
		// Batched: all at once, each as it was alone.
		want := make([]specAnswer, len(bodies))
		for i, b := range bodies {
			want[i] = answer(t, e, engine.EndpointCompletions, withSpec(b, "false"))
		}
		got := make([]specAnswer, len(bodies))
		var wg sync.WaitGroup
		for i, b := range bodies {
			wg.Go(func() { got[i] = answer(t, e, engine.EndpointCompletions, withSpec(b, `"draft"`)) })
		}
		wg.Wait()
		for i := range bodies {
			if got[i].choices != want[i].choices {
				t.Errorf("batched request %d: %s, alone without speculation %s", i, got[i].choices, want[i].choices)
			}
		}
		// The draft model itself has no draft model.
		resp, err := e.Do(context.Background(), &engine.Request{CustomID: "t", Endpoint: engine.EndpointCompletions,
			Body: json.RawMessage(`{"model":"tiny-llama","prompt":"a","max_tokens":2,"speculative":"draft"}`)})
		if err != nil || resp.StatusCode != 400 || !strings.Contains(string(resp.Body), "unsupported_value") {
			t.Fatalf("speculative draft on a model without a draft model: %v %+v", err, resp)
		}
	})
}
