package native

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/wire"
)

const loraMsgs = `"messages":[{"role":"user","content":"Tell me a story about a cat and a dog who live by the sea"}]`

// loraAsk runs a greedy chat request with extra body members on e and
// returns its tokens' logprobs.
func loraAsk(t *testing.T, e *Engine, extra string) string {
	t.Helper()
	m := do(t, e, engine.EndpointChat, `{`+loraMsgs+`,"max_tokens":4,"temperature":0,"logprobs":true`+extra+`}`)
	return fmt.Sprint(m["choices"].([]any)[0].(map[string]any)["logprobs"])
}

// loraRefusal runs body on e and returns the 400's error object.
func loraRefusal(t *testing.T, e *Engine, body string) wire.Error {
	t.Helper()
	resp, err := e.Do(context.Background(), &engine.Request{CustomID: "x", Endpoint: engine.EndpointChat, Body: json.RawMessage(body)})
	if err != nil {
		t.Fatal(err)
	}
	var eb wire.ErrorBody
	if resp.StatusCode != 400 || json.Unmarshal(resp.Body, &eb) != nil {
		t.Fatalf("%s: %d %s, want a 400", body, resp.StatusCode, resp.Body)
	}
	return eb.Error
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// An adapter a request brings with lora_path under adapter_root loads on
// first use and gives exactly what the same adapter configured at start
// gives; requests arriving while it loads wait for that one load.
func TestLoRAOnFirstUse(t *testing.T) {
	w, _ := loadDemo(t)
	root := t.TempDir()
	dir := filepath.Join(root, "ft")
	if err := os.Rename(makeLoRA(w, allModules, 4, 7, 0.05).writePEFT(t, w, 16), dir); err != nil {
		t.Fatal(err)
	}
	configured := openEngine(t, ModelConfig{Path: demoPath(t), Adapters: map[string]string{"ft": dir}})
	want := loraAsk(t, configured, `,"lora_name":"ft"`)
	if base := loraAsk(t, configured, ""); base == want {
		t.Fatalf("the adapter changes nothing: %s", base)
	}

	e := openEngineWith(t, func(c *Config) { c.AdapterRoot = root }, ModelConfig{Path: demoPath(t)})
	var loads atomic.Int32
	release := make(chan struct{})
	e.adapterLoadHook = func(string) {
		loads.Add(1)
		<-release
	}
	r := e.runners[e.order[0]]
	const n = 6
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = loraAsk(t, e, `,"lora_name":"ft","lora_path":"ft"`)
		}()
	}
	// Hold the load until every request waits for it.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		r.amu.Lock()
		waiting := 0
		if l := r.loading["ft"]; l != nil {
			waiting = len(l.waiters)
		}
		r.amu.Unlock()
		if waiting == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests wait for the load", waiting, n)
		}
		time.Sleep(time.Millisecond) // polling, not synchronisation
	}
	close(release)
	wg.Wait()
	for i, g := range got {
		if g != want {
			t.Errorf("request %d: %s, want the configured adapter's %s", i, g, want)
		}
	}
	// Later requests (by lora_path as an absolute path, by lora_name
	// alone, by model) use the loaded adapter; nothing loads again.
	for _, extra := range []string{`,"lora_name":"ft","lora_path":` + quoteJSON(dir), `,"lora_name":"ft"`, `,"model":"ft"`} {
		if g := loraAsk(t, e, extra); g != want {
			t.Errorf("%s: %s, want %s", extra, g, want)
		}
	}
	if l := loads.Load(); l != 1 {
		t.Fatalf("%d loads, want 1", l)
	}
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Each way a lora_path can be refused has its code and says why.
func TestLoRAOnFirstUseRefused(t *testing.T) {
	w, _ := loadDemo(t)
	root, outside := t.TempDir(), t.TempDir()
	peft := func(seed uint64) string { return makeLoRA(w, allModules, 2, seed, 0.05).writePEFT(t, w, 4) }
	for name, seed := range map[string]uint64{"one": 1, "two": 2} {
		if err := os.Rename(peft(seed), filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(outside, "secret")
	if err := os.Rename(peft(3), secret); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	// A directory inside the root whose weights file leads out.
	leaky := filepath.Join(root, "leaky")
	os.Mkdir(leaky, 0o755)
	b, _ := os.ReadFile(filepath.Join(secret, "adapter_config.json"))
	os.WriteFile(filepath.Join(leaky, "adapter_config.json"), b, 0o644)
	if err := os.Symlink(filepath.Join(secret, "adapter_model.safetensors"), filepath.Join(leaky, "adapter_model.safetensors")); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(root, "bad.safetensors")
	os.WriteFile(bad, []byte("not safetensors"), 0o644)

	e := openEngineWith(t, func(c *Config) { c.AdapterRoot = root; c.MaxAdapters = 2 },
		ModelConfig{Path: demoPath(t), Adapters: map[string]string{"one": filepath.Join(root, "one")}})
	unset := openEngine(t, ModelConfig{Path: demoPath(t)})
	body := func(name, path string) string {
		return `{` + loraMsgs + `,"max_tokens":2,"lora_name":` + quoteJSON(name) + `,"lora_path":` + quoteJSON(path) + `}`
	}
	for _, c := range []struct {
		name        string
		e           *Engine
		body        string
		code, param string
		why         string
	}{
		{"outside", e, body("s", secret), "lora_not_found", "lora_name", "is outside native.adapter_root"},
		{"dotdot", e, body("s", "../"+filepath.Base(outside)+"/secret"), "lora_not_found", "lora_name", "is outside native.adapter_root"},
		{"symlink out", e, body("s", "escape"), "lora_not_found", "lora_name", "is outside native.adapter_root"},
		{"file inside leads out", e, body("s", "leaky"), "lora_not_found", "lora_name", "adapter_model.safetensors outside native.adapter_root"},
		{"missing", e, body("s", "nope"), "lora_not_found", "lora_name", "was not found under native.adapter_root"},
		{"root unset", unset, body("s", filepath.Join(root, "two")), "lora_not_found", "lora_name", "native.adapter_root is not set; set native.adapter_root"},
		{"not an adapter", e, body("b", "bad.safetensors"), "invalid_lora_adapter", "lora_path", "bad.safetensors cannot be loaded: "},
		{"name taken", e, body("one", "two"), "invalid_value", "lora_name", "one name is one adapter"},
		{"no name", e, `{` + loraMsgs + `,"lora_path":"two"}`, "invalid_value", "lora_path", "requires lora_name"},
	} {
		got := loraRefusal(t, c.e, c.body)
		if str(got.Code) != c.code || str(got.Param) != c.param || !strings.Contains(got.Message, c.why) {
			t.Errorf("%s: %s %s %q, want %s %s with %q", c.name, str(got.Code), str(got.Param), got.Message, c.code, c.param, c.why)
		}
	}
	// The configured adapter is used when the path is its own.
	if a, b := loraAsk(t, e, `,"lora_name":"one","lora_path":"one"`), loraAsk(t, e, `,"lora_name":"one"`); a != b {
		t.Errorf("configured adapter by its own path: %s, by name %s", a, b)
	}
	// The limit counts configured and loaded adapters: one + two = 2.
	loraAsk(t, e, `,"lora_name":"two","lora_path":"two"`)
	got := loraRefusal(t, e, body("three", "two"))
	if str(got.Code) != "lora_limit" || !strings.Contains(got.Message, "raise native.max_adapters") {
		t.Errorf("limit: %s %q", str(got.Code), got.Message)
	}

	// A failed load is not kept: once the file is fixed, the name loads.
	e2 := openEngineWith(t, func(c *Config) { c.AdapterRoot = root }, ModelConfig{Path: demoPath(t)})
	if got := loraRefusal(t, e2, body("b", "bad.safetensors")); str(got.Code) != "invalid_lora_adapter" {
		t.Fatalf("bad file: %+v", got)
	}
	if err := weights.WriteSafetensors(bad, makeLoRA(w, allModules, 2, 4, 0.05).tensors(w)); err != nil {
		t.Fatal(err)
	}
	loraAsk(t, e2, `,"lora_name":"b","lora_path":"bad.safetensors"`)
}

// A configured adapter count over max_adapters, a bad max_adapters and a
// missing adapter_root are refused by name.
func TestLoRAOnFirstUseConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxAdapters = 1
	cfg.Models = []ModelConfig{{Path: "a.gguf", Adapters: map[string]string{"x": "1", "y": "2"}}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "native.models[0].adapters: 2 adapters, over native.max_adapters (1)") {
		t.Errorf("over the limit: %v", err)
	}
	cfg.MaxAdapters = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "native.max_adapters: must be at least 1") {
		t.Errorf("zero: %v", err)
	}
	cfg.MaxAdapters = 1
	cfg.Models = nil
	cfg.Models = []ModelConfig{{Path: "a.gguf"}}
	cfg.AdapterRoot = "adapters"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `native.adapter_root: must be an absolute path, got "adapters"`) {
		t.Errorf("relative: %v", err)
	}
	cfg = DefaultConfig()
	cfg.Models = []ModelConfig{{Path: demoPath(t)}}
	cfg.AdapterRoot = filepath.Join(t.TempDir(), "none")
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Open(context.Background()); err == nil || !strings.Contains(err.Error(), "native.adapter_root") {
		t.Fatalf("open: %v", err)
	}
}
