package native

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/batchd/batchd/engine/native/demomodel"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/enginetest"
	"github.com/batchd/batchd/internal/syncbuf"
	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/wire"
)

// demoModel writes the tiny demo model once per test binary.
var demoModel = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "batchd-native-test-")
	if err != nil {
		return "", err
	}
	// BATCHD_TEST_WEIGHTS=TYPE (a weight type or llama.cpp mixture, e.g.
	// q4_k_m) runs the engine's tests on the demo model in that type, in
	// the tiny-k shape whose rows are whole K-quant blocks: CI runs the
	// invariance and caching tests so on quantized weights too.
	if name := os.Getenv("BATCHD_TEST_WEIGHTS"); name != "" {
		q, err := demomodel.ParseDType(name)
		if err != nil {
			return "", fmt.Errorf("BATCHD_TEST_WEIGHTS: %w", err)
		}
		path := filepath.Join(dir, "demo-tiny.gguf") // the model's name in the tests
		return path, demomodel.WriteQuantFile(path, demomodel.Shapes["tiny-k"], q, 1)
	}
	path := filepath.Join(dir, "demo-tiny.gguf")
	return path, demomodel.WriteFile(path, demomodel.Shapes["tiny"], kernels.F32, 1)
})

func TestMain(m *testing.M) {
	// The engine's speculation decides by the steps' timing; tests pin its
	// cost model to one where rows are nearly free, so that sequences
	// draft whenever they have drafts, as on an idle machine with a large
	// model, whatever the machine's load.
	testStepCost = &stepCost{priorF: 1e6, priorR: 1, pinned: true}
	code := m.Run()
	if p, err := demoModel(); err == nil {
		os.RemoveAll(filepath.Dir(p))
	}
	os.Exit(code)
}

// openEngine opens an engine on models. BATCHD_KERNELS, when set, picks its
// kernel backend, so that CI can run the engine's tests on each code path
// the machine has, not only the fastest.
func openEngine(t testing.TB, models ...ModelConfig) *Engine {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Models = models
	cfg.Kernels = os.Getenv("BATCHD_KERNELS")
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

func demoPath(t testing.TB) string {
	t.Helper()
	p, err := demoModel()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestContract(t *testing.T) {
	path := demoPath(t)
	enginetest.Run(t, func(t *testing.T) engine.Engine {
		cfg := DefaultConfig()
		cfg.Models = []ModelConfig{{Path: path}}
		e, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return e
	})
}

func do(t *testing.T, e *Engine, endpoint, body string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := e.Do(ctx, &engine.Request{CustomID: "t", Endpoint: endpoint, Body: json.RawMessage(body)})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(resp.Body, &m); err != nil {
		t.Fatalf("body %s: %v", resp.Body, err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, resp.Body)
	}
	return m
}

func TestDemoChatAndCompletionShapes(t *testing.T) {
	e := openEngine(t, ModelConfig{Path: demoPath(t)})
	m := do(t, e, engine.EndpointChat, `{"messages":[{"role":"user","content":"Say hello"}],"max_tokens":5}`)
	if m["object"] != "chat.completion" || m["model"] != "demo-tiny" {
		t.Fatalf("chat body %v", m)
	}
	ch := m["choices"].([]any)[0].(map[string]any)
	if ch["finish_reason"] != "length" && ch["finish_reason"] != "stop" {
		t.Fatalf("finish_reason %v", ch["finish_reason"])
	}
	u := m["usage"].(map[string]any)
	if u["prompt_tokens"].(float64) < 5 || u["completion_tokens"].(float64) > 5 {
		t.Fatalf("usage %v", u)
	}
	m = do(t, e, engine.EndpointCompletions, `{"prompt":"Once upon a time","max_tokens":3,"n":2}`)
	if m["object"] != "text_completion" || len(m["choices"].([]any)) != 2 {
		t.Fatalf("completion body %v", m)
	}
	if m["usage"].(map[string]any)["completion_tokens"].(float64) != 6 {
		t.Fatalf("usage %v", m["usage"])
	}
}

func TestEmbeddingsNormalizedAndTruncated(t *testing.T) {
	e := openEngine(t, ModelConfig{Path: demoPath(t)})
	m := do(t, e, engine.EndpointEmbeddings, `{"input":["a cat","a dog"],"dimensions":16}`)
	data := m["data"].([]any)
	if len(data) != 2 {
		t.Fatalf("data %v", data)
	}
	for _, d := range data {
		v := d.(map[string]any)["embedding"].([]any)
		if len(v) != 16 {
			t.Fatalf("dimensions: got %d", len(v))
		}
		var ss float64
		for _, x := range v {
			ss += x.(float64) * x.(float64)
		}
		if ss < 0.999 || ss > 1.001 {
			t.Fatalf("not unit length: %v", ss)
		}
	}
	b64 := do(t, e, engine.EndpointEmbeddings, `{"input":"a cat","encoding_format":"base64"}`)
	if _, ok := b64["data"].([]any)[0].(map[string]any)["embedding"].(string); !ok {
		t.Fatalf("base64 embedding not a string: %v", b64)
	}
}

func TestUnknownModelStrict(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Models = []ModelConfig{{Path: demoPath(t)}}
	cfg.StrictModel = true
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	resp, err := e.Do(context.Background(), &engine.Request{Endpoint: engine.EndpointChat, Body: json.RawMessage(`{"model":"gpt-4","messages":[{"role":"user","content":"x"}],"max_tokens":2}`)})
	if err != nil || resp.StatusCode != 400 || !bytes.Contains(resp.Body, []byte("model_not_found")) {
		t.Fatalf("%v %v %s", err, resp.StatusCode, resp.Body)
	}
	// Without strict_model the only model answers whatever name is asked.
	e2 := openEngine(t, ModelConfig{Path: demoPath(t)})
	m := do(t, e2, engine.EndpointChat, `{"model":"gpt-4","messages":[{"role":"user","content":"x"}],"max_tokens":2}`)
	if m["model"] != "demo-tiny" {
		t.Fatalf("response.model = %v, want the model that ran", m["model"])
	}
}

// A request that names no model runs on the only model, with strict_model
// too; with several models it is refused with a message that says so and
// names the served models, not as a model named "".
func TestRequestNamingNoModel(t *testing.T) {
	chat := `{"messages":[{"role":"user","content":"x"}],"max_tokens":2}`
	strict := openEngineWith(t, func(c *Config) { c.StrictModel = true }, ModelConfig{Path: demoPath(t)})
	if m := do(t, strict, engine.EndpointChat, chat); m["model"] != "demo-tiny" {
		t.Fatalf("response.model = %v, want the only model", m["model"])
	}
	two := openEngine(t, ModelConfig{Name: "a", Path: demoPath(t)}, ModelConfig{Name: "b", Path: demoPath(t)})
	for _, tc := range []struct{ endpoint, body string }{
		{engine.EndpointChat, chat},
		{engine.EndpointChat, `{"model":"","messages":[{"role":"user","content":"x"}],"max_tokens":2}`},
		{engine.EndpointEmbeddings, `{"input":"a cat"}`},
	} {
		resp, err := two.Do(context.Background(), &engine.Request{Endpoint: tc.endpoint, Body: json.RawMessage(tc.body)})
		if err != nil || resp.StatusCode != 400 {
			t.Fatalf("%s: %v %+v", tc.body, err, resp)
		}
		var b wire.ErrorBody
		if err := json.Unmarshal(resp.Body, &b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.Error.Message, "names no model") || !strings.Contains(b.Error.Message, "(a, b)") ||
			strings.Contains(b.Error.Message, `""`) || b.Error.Param == nil || *b.Error.Param != "model" || b.Error.Code == nil || *b.Error.Code != wire.CodeMissingRequiredParameter {
			t.Errorf("%s: %s", tc.body, resp.Body)
		}
	}
}

func TestContextLengthExceeded(t *testing.T) {
	e := openEngine(t, ModelConfig{Path: demoPath(t)})
	ids := make([]int32, 3000)
	raw, _ := json.Marshal(map[string]any{"prompt": ids, "max_tokens": 2})
	resp, err := e.Do(context.Background(), &engine.Request{Endpoint: engine.EndpointCompletions, Body: raw})
	if err != nil || resp.StatusCode != 400 || !bytes.Contains(resp.Body, []byte("context_length_exceeded")) {
		t.Fatalf("%v %d %s", err, resp.StatusCode, resp.Body)
	}
}

// Sixteen different prompts decoded together give exactly the tokens each
// gets alone.
func TestStoriesBatchedEqualsAlone(t *testing.T) {
	path := storiesPath(t)
	e := openEngine(t, ModelConfig{Path: path})
	prompts := make([]string, 16)
	for i := range prompts {
		prompts[i] = fmt.Sprintf(`{"prompt":"Once upon a time there was a %s","max_tokens":24}`,
			[]string{"cat", "dog", "girl", "boy", "bird", "tree", "king", "queen", "fish", "frog", "mouse", "bear", "car", "boat", "sun", "moon"}[i])
	}
	text := func(m map[string]any) string { return m["choices"].([]any)[0].(map[string]any)["text"].(string) }
	alone := make([]string, len(prompts))
	for i, p := range prompts {
		alone[i] = text(do(t, e, engine.EndpointCompletions, p))
	}
	together := make([]string, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Go(func() { together[i] = text(do(t, e, engine.EndpointCompletions, p)) })
	}
	wg.Wait()
	for i := range prompts {
		if alone[i] != together[i] {
			t.Errorf("prompt %d: alone %q, batched %q", i, alone[i], together[i])
		}
	}
}

// Every architecture's path (qwen2 biases, qwen3 q/k norms, llama's
// adjacent-pair RoPE with a separate output weight) runs, and greedy
// requests give the same text batched as alone.
func TestArchitecturesBatchedEqualsAlone(t *testing.T) {
	for _, shape := range []string{"tiny", "tiny-qwen3", "tiny-llama"} {
		t.Run(shape, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), shape+".gguf")
			if err := demomodel.WriteFile(path, demomodel.Shapes[shape], kernels.F32, 3); err != nil {
				t.Fatal(err)
			}
			e := openEngine(t, ModelConfig{Path: path})
			if got := e.runners[shape].model.cfg.Arch; got != demomodel.Shapes[shape].Arch && demomodel.Shapes[shape].Arch != "" {
				t.Fatalf("loaded arch %q", got)
			}
			body := func(i int) string {
				return fmt.Sprintf(`{"messages":[{"role":"user","content":"story number %d about a red ball"}],"max_tokens":12,"ignore_eos":true}`, i)
			}
			content := func(m map[string]any) string {
				return m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
			}
			const n = 6
			alone := make([]string, n)
			for i := range n {
				alone[i] = content(do(t, e, engine.EndpointChat, body(i)))
			}
			together := make([]string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { together[i] = content(do(t, e, engine.EndpointChat, body(i))) })
			}
			wg.Wait()
			for i := range n {
				if alone[i] != together[i] {
					t.Errorf("request %d: alone %q, batched %q", i, alone[i], together[i])
				}
			}
		})
	}
}

func TestSeedReproducesAndStopCuts(t *testing.T) {
	e := openEngine(t, ModelConfig{Path: demoPath(t)})
	text := func(body string) string {
		return do(t, e, engine.EndpointCompletions, body)["choices"].([]any)[0].(map[string]any)["text"].(string)
	}
	a := text(`{"prompt":"Once upon a time","max_tokens":24,"temperature":1.0,"seed":42,"ignore_eos":true}`)
	b := text(`{"prompt":"Once upon a time","max_tokens":24,"temperature":1.0,"seed":42,"ignore_eos":true}`)
	c := text(`{"prompt":"Once upon a time","max_tokens":24,"temperature":1.0,"seed":43,"ignore_eos":true}`)
	if a != b {
		t.Fatalf("the same seed gave %q and %q", a, b)
	}
	if a == c {
		t.Fatalf("seeds 42 and 43 gave the same 24 tokens %q", a)
	}
	// A stop string taken from the greedy output cuts it right before.
	g := text(`{"prompt":"Once upon a time","max_tokens":24,"ignore_eos":true}`)
	runes := []rune(g)
	if len(runes) < 6 {
		t.Skipf("greedy output too short to pick a stop string: %q", g)
	}
	stop := string(runes[3:5])
	cut := do(t, e, engine.EndpointCompletions, fmt.Sprintf(`{"prompt":"Once upon a time","max_tokens":24,"ignore_eos":true,"stop":[%q]}`, stop))
	ch := cut["choices"].([]any)[0].(map[string]any)
	want := g[:strings.Index(g, stop)]
	if ch["text"] != want || ch["finish_reason"] != "stop" || ch["stop_reason"] != stop {
		t.Fatalf("stop %q: got %q (%v, stop_reason %v), want %q", stop, ch["text"], ch["finish_reason"], ch["stop_reason"], want)
	}
	// Ended by length or the end of sequence, a choice has no stop_reason.
	full := do(t, e, engine.EndpointCompletions, `{"prompt":"Once upon a time","max_tokens":24,"ignore_eos":true}`)
	if _, has := full["choices"].([]any)[0].(map[string]any)["stop_reason"]; has {
		t.Fatalf("a choice that no stop string ended has a stop_reason: %v", full["choices"])
	}
}

// Chat logprobs name each token by id too: the greedy token is the best
// alternative, id and text alike, and the alternatives' ids differ.
func TestChatLogprobsTokenIDs(t *testing.T) {
	e := openEngine(t, ModelConfig{Path: demoPath(t)})
	m := do(t, e, engine.EndpointChat, `{"messages":[{"role":"user","content":"Once"}],"max_tokens":6,"logprobs":true,"top_logprobs":4,"ignore_eos":true}`)
	raw, _ := json.Marshal(m["choices"].([]any)[0].(map[string]any)["logprobs"])
	var lp struct {
		Content []struct {
			TokenID *int32 `json:"token_id"`
			Token   string `json:"token"`
			Top     []struct {
				TokenID *int32 `json:"token_id"`
				Token   string `json:"token"`
			} `json:"top_logprobs"`
		} `json:"content"`
	}
	if err := json.Unmarshal(raw, &lp); err != nil || len(lp.Content) != 6 {
		t.Fatalf("logprobs %s: %v", raw, err)
	}
	for i, c := range lp.Content {
		if c.TokenID == nil || len(c.Top) != 4 || c.Top[0].TokenID == nil {
			t.Fatalf("token %d has no token_id or not 4 alternatives: %s", i, raw)
		}
		if *c.TokenID != *c.Top[0].TokenID || c.Token != c.Top[0].Token {
			t.Fatalf("token %d: greedy token %d %q is not the best alternative %d %q", i, *c.TokenID, c.Token, *c.Top[0].TokenID, c.Top[0].Token)
		}
		seen := map[int32]bool{}
		for _, a := range c.Top {
			if a.TokenID == nil || seen[*a.TokenID] {
				t.Fatalf("token %d: alternatives without ids or repeated: %s", i, raw)
			}
			seen[*a.TokenID] = true
		}
	}
}

// Integer fields written as integral floats (2.0), which the pipeline's
// validator accepts, are accepted here too.
func TestIntegralFloatsAreIntegers(t *testing.T) {
	e := openEngine(t, ModelConfig{Path: demoPath(t)})
	m := do(t, e, engine.EndpointCompletions, `{"prompt":"Once","max_tokens":3.0,"n":2.0,"seed":7.0,"temperature":0.5}`)
	if len(m["choices"].([]any)) != 2 {
		t.Fatalf("choices %v", m["choices"])
	}
	resp, err := e.Do(context.Background(), &engine.Request{Endpoint: engine.EndpointCompletions, Body: json.RawMessage(`{"prompt":"x","max_tokens":2.5}`)})
	if err != nil || resp.StatusCode != 400 {
		t.Fatalf("max_tokens 2.5: %v %d %s", err, resp.StatusCode, resp.Body)
	}
}

// Pooling: config overrides the default mean; last-token pooling of "a b"
// differs from mean pooling and equals the embedding the last token's state
// gives, so it is not ignored.
func TestEmbeddingPoolingOverride(t *testing.T) {
	vec := func(pooling string) []float64 {
		e := openEngine(t, ModelConfig{Path: demoPath(t), Pooling: pooling})
		m := do(t, e, engine.EndpointEmbeddings, `{"input":"a red ball under a tree"}`)
		var out []float64
		for _, x := range m["data"].([]any)[0].(map[string]any)["embedding"].([]any) {
			out = append(out, x.(float64))
		}
		return out
	}
	mean, last, def := vec("mean"), vec("last"), vec("")
	if fmt.Sprint(def) != fmt.Sprint(mean) {
		t.Fatal("the demo model's default pooling is not mean")
	}
	if fmt.Sprint(mean) == fmt.Sprint(last) {
		t.Fatal("last-token pooling gave the same vector as mean pooling")
	}
	bad := DefaultConfig()
	bad.Models = []ModelConfig{{Path: "x.gguf", Pooling: "max"}}
	if _, err := New(bad); err == nil || !strings.Contains(err.Error(), "pooling") {
		t.Fatalf("a bad pooling name: %v", err)
	}
}

// Batch invariance: 64 mixed requests (chat and completions, greedy and
// seeded sampling, short and long prompts, different lengths, with logprobs)
// give identical tokens and logprobs alone, all together, and after a
// restart.
func TestBatchInvarianceSixtyFourMixed(t *testing.T) {
	checkBatchInvariance64(t, demoPath(t))
}

// checkBatchInvariance64 is TestBatchInvarianceSixtyFourMixed on the
// model at path.
func checkBatchInvariance64(t *testing.T, path string) {
	bodies := make([]struct{ endpoint, body string }, 64)
	words := strings.Fields(demomodel.Corpus)
	for i := range bodies {
		prompt := strings.Join(words[i%17:i%17+3+(i*7)%40], " ")
		if i%2 == 0 {
			bodies[i].endpoint = engine.EndpointChat
			bodies[i].body = fmt.Sprintf(`{"messages":[{"role":"user","content":%q}],"max_tokens":%d,"logprobs":true,"top_logprobs":3,"ignore_eos":true}`, prompt, 4+i%13)
		} else {
			bodies[i].endpoint = engine.EndpointCompletions
			bodies[i].body = fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"logprobs":2,"ignore_eos":true}`, prompt, 4+i%11)
		}
		if i%4 == 1 || i%4 == 2 { // seeded sampling: its draws too must not depend on the batch
			bodies[i].body = strings.Replace(bodies[i].body, "{", fmt.Sprintf(`{"temperature":0.9,"top_p":0.95,"seed":%d,`, 1000+i), 1)
		}
	}
	choices := func(e *Engine, i int) string {
		m := do(t, e, bodies[i].endpoint, bodies[i].body)
		b, _ := json.Marshal(m["choices"])
		return string(b)
	}
	e := openEngine(t, ModelConfig{Path: path})
	alone := make([]string, len(bodies))
	for i := range bodies {
		alone[i] = choices(e, i)
	}
	together := make([]string, len(bodies))
	var wg sync.WaitGroup
	for i := range bodies {
		wg.Go(func() { together[i] = choices(e, i) })
	}
	wg.Wait()
	restarted := openEngine(t, ModelConfig{Path: path})
	for i := range bodies {
		if together[i] != alone[i] {
			t.Errorf("request %d batched differs from alone:\n%s\n%s", i, together[i], alone[i])
		}
		if i%8 == 0 {
			if got := choices(restarted, i); got != alone[i] {
				t.Errorf("request %d after a restart differs:\n%s\n%s", i, got, alone[i])
			}
		}
	}
}

// Config.Kernels picks the CPU code path: each backend this CPU can run
// opens and answers, auto is the best one, and a backend the CPU or binary
// lacks is a start-up error naming native.kernels and what is missing.
func TestKernelsSelection(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Models = []ModelConfig{{Path: "m.gguf"}}
	cfg.Kernels = "sse9"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "native.kernels") {
		t.Errorf("kernels sse9: %v, want an error naming native.kernels", err)
	}
	path := demoPath(t)
	open := func(name string) (*Engine, string, error) {
		logs := new(syncbuf.Buffer)
		cfg := DefaultConfig()
		cfg.Models = []ModelConfig{{Path: path}}
		cfg.Kernels, cfg.Threads = name, 2
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		e, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = e.Open(context.Background())
		if err == nil {
			t.Cleanup(func() { e.Close(context.Background()) })
		}
		return e, logs.String(), err
	}
	for _, name := range []string{"", kernels.BackendAuto} {
		e, logs, err := open(name)
		if err != nil {
			t.Fatalf("kernels %q: %v", name, err)
		}
		if e.Kernels() != kernels.BestBackend() {
			t.Errorf("kernels %q runs %s, want the best, %s", name, e.Kernels(), kernels.BestBackend())
		}
		want := fmt.Sprintf("kernels=%s ", kernels.BestBackend())
		if !strings.Contains(logs, "native engine ready") || !strings.Contains(logs, want) || !strings.Contains(logs, "cpu_features=") {
			t.Errorf("start-up log does not name the backend (%q) and the CPU's features:\n%s", want, logs)
		}
	}
	for _, b := range kernels.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			e, _, err := open(b.Name)
			if !b.Usable() {
				want := "not built"
				if b.Built {
					want = b.Missing[0]
				}
				if err == nil || !errors.Is(err, kernels.ErrBackendUnavailable) ||
					!strings.Contains(err.Error(), "native.kernels") || !strings.Contains(err.Error(), want) {
					t.Fatalf("Open with kernels %s here: %v, want an error naming native.kernels and %q", b.Name, err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.Kernels() != b.Name {
				t.Fatalf("Kernels() = %q, want %q", e.Kernels(), b.Name)
			}
			do(t, e, engine.EndpointCompletions, `{"prompt":"hello","max_tokens":3}`)
		})
	}
}
