package native

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/weights"
)

// allFinite finds a NaN or an infinity wherever it is, and passes every
// finite value, the largest and the negative zero included.
func TestAllFinite(t *testing.T) {
	for n := range 11 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(i) - 3.5
		}
		if n > 0 {
			x[0] = math.MaxFloat32
			x[n-1] = float32(math.Copysign(0, -1))
		}
		if !allFinite(x) || n > 1 && !allFinite(x[1:]) {
			t.Fatalf("%v: not finite", x)
		}
		for i := range n {
			for _, bad := range []float32{float32(math.NaN()), math.Float32frombits(0xffc00001), float32(math.Inf(1)), float32(math.Inf(-1))} {
				y := append([]float32(nil), x...)
				y[i] = bad
				// Whole, and from the second value (another alignment).
				if allFinite(y) || i > 0 && allFinite(y[1:]) {
					t.Errorf("%v: finite", y)
				}
			}
		}
	}
}

// An adapter whose alpha or weights are not finite, or so large that
// alpha/r·B·A overflows float32, is refused at load, naming the value.
func TestLoRAOverflowRefusedAtLoad(t *testing.T) {
	w, m := loadDemo(t)
	l := makeLoRA(w, []string{"q_proj"}, 2, 6, 0.05)
	single := func(meta map[string]string, edit func(ts map[string]weights.SafeTensor)) string {
		ts := l.tensors(w)
		if edit != nil {
			edit(ts)
		}
		path := filepath.Join(t.TempDir(), "ft.safetensors")
		if err := weights.WriteSafetensorsMeta(path, ts, meta); err != nil {
			t.Fatal(err)
		}
		return path
	}
	peft := func(cfg string) string {
		dir := l.writePEFT(t, w, 4)
		if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	qB := "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight"
	setB := func(v float32) func(ts map[string]weights.SafeTensor) {
		return func(ts map[string]weights.SafeTensor) {
			b := ts[qB]
			data := bytes.Clone(b.Data)
			// The third element: not only the first is checked.
			copy(data[8:], f32Bytes([]float32{v}))
			ts[qB] = weights.SafeTensor{DType: b.DType, Shape: b.Shape, Data: data}
		}
	}
	for _, c := range []struct {
		name string
		path string
		want []string
	}{
		{"metadata alpha nan", single(map[string]string{"lora_alpha": "nan"}, nil), []string{`metadata lora_alpha "nan" is not a number in (0, 65504]`}},
		{"metadata alpha huge", single(map[string]string{"lora_alpha": "1e300"}, nil), []string{`lora_alpha "1e300"`}},
		{"config alpha string", peft(`{"r":2,"lora_alpha":"nan","target_modules":["q_proj"]}`), []string{"lora_alpha"}},
		{"config alpha huge", peft(`{"r":2,"lora_alpha":3e38,"target_modules":["q_proj"]}`), []string{"lora_alpha 3e+38 is not a number in (0, 65504]"}},
		{"weight 3e38", single(nil, setB(3e38)), []string{qB, "element 2 is 3e+38", "at most 65504"}},
		{"weight 1e5", single(nil, setB(-1e5)), []string{qB, "element 2 is -100000"}},
		{"weight nan", single(nil, setB(float32(math.NaN()))), []string{qB, "element 2 is NaN"}},
		{"weight inf", single(nil, setB(float32(math.Inf(1)))), []string{qB, "element 2 is +Inf"}},
	} {
		t.Run(c.name, func(t *testing.T) { wantLoadError(t, m, c.path, c.want...) })
	}
	// The bounds are inclusive: alpha 65504 and a weight of 65504 load.
	if _, err := m.loadAdapter("edge", single(map[string]string{"lora_alpha": "65504"}, setB(65504))); err != nil {
		t.Fatalf("alpha and a weight at 65504: %v", err)
	}
}

// A FIFO where an adapter's file should be, under adapter_root or
// configured, is refused at once: opening it for reading would wait for
// a writer for ever.
func TestLoRAFIFORefused(t *testing.T) {
	w, m := loadDemo(t)
	root := t.TempDir()
	mkfifo := func(path string) {
		t.Helper()
		if err := syscall.Mkfifo(path, 0o644); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
	}
	mkfifo(filepath.Join(root, "fifo.safetensors"))
	// PEFT directories whose config, or whose weights, is a FIFO.
	for _, f := range []string{"adapter_config.json", "adapter_model.safetensors"} {
		dir := filepath.Join(root, strings.TrimSuffix(f, filepath.Ext(f)))
		if err := os.Rename(makeLoRA(w, allModules, 2, 1, 0.05).writePEFT(t, w, 4), dir); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(dir, f))
		mkfifo(filepath.Join(dir, f))
	}
	for _, loc := range []string{"fifo.safetensors", "adapter_config", "adapter_model"} {
		if _, err := m.loadAdapter("f", filepath.Join(root, loc)); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: %v, want not a regular file", loc, err)
		}
	}
	e := openEngineWith(t, func(c *Config) { c.AdapterRoot = root }, ModelConfig{Path: demoPath(t)})
	for _, loc := range []string{"fifo.safetensors", "adapter_config", "adapter_model"} {
		body := `{` + loraMsgs + `,"max_tokens":2,"lora_name":` + quoteJSON(loc) + `,"lora_path":` + quoteJSON(loc) + `}`
		got := loraRefusal(t, e, body)
		if str(got.Code) != "invalid_lora_adapter" || !strings.Contains(got.Message, "not a regular file") {
			t.Errorf("%s: %s %q, want invalid_lora_adapter, not a regular file", loc, str(got.Code), got.Message)
		}
	}
	// The refusals hold no load slot: the engine still loads an adapter.
	if err := os.Rename(makeLoRA(w, allModules, 2, 2, 0.05).writePEFT(t, w, 4), filepath.Join(root, "ok")); err != nil {
		t.Fatal(err)
	}
	loraAsk(t, e, `,"lora_name":"ok","lora_path":"ok"`)
}

// Logits with NaN (here from an adapter whose weights are NaN, uploaded
// past the load checks) fail that request with a 500
// (engine_numeric_error); a request sharing its forward pass answers what
// it answers alone, and the engine goes on serving.
func TestNonFiniteLogitsFailOnlyTheirRequest(t *testing.T) {
	w, _ := loadDemo(t)
	e := openEngine(t, ModelConfig{Path: demoPath(t)})
	r := e.runners[e.order[0]]
	dir := makeLoRA(w, []string{"q_proj"}, 2, 3, 0.05).writePEFT(t, w, 4)
	l, err := weights.LoadLoRA(dir, r.model.src)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Pairs {
		for i := range p.B {
			p.B[i] = float32(math.NaN())
		}
	}
	a, err := r.model.uploadAdapter("nan", dir, l)
	if err != nil {
		t.Fatal(err)
	}
	a.path = dir
	r.amu.Lock()
	r.adapters["nan"] = a
	r.amu.Unlock()

	const innocent = `{"prompt":[20,40,60,80],"max_tokens":16}`
	text := func(resp *engine.Response) string {
		var m struct {
			Choices []struct{ Text string } `json:"choices"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(resp.Body, &m) != nil || len(m.Choices) != 1 {
			t.Fatalf("answer %d %s", resp.StatusCode, resp.Body)
		}
		return m.Choices[0].Text
	}
	resp, err := doResp(t, e, engine.EndpointCompletions, innocent)
	if err != nil {
		t.Fatal(err)
	}
	alone := text(resp)

	// The innocent's first forward pass waits until the NaN request is
	// queued, so that a later step holds both.
	started, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	var mixed atomic.Int32
	setFaultHook(t, func(tokens []int32) {
		first.Do(func() {
			close(started)
			<-release
		})
		if hasPoison(tokens) && len(tokens) > len(poison) {
			mixed.Add(1)
		}
	})
	var wg sync.WaitGroup
	var good, bad *engine.Response
	var goodErr, badErr error
	wg.Go(func() { good, goodErr = doResp(t, e, engine.EndpointCompletions, innocent) })
	select {
	case <-started:
	case <-time.After(2 * time.Minute):
		t.Fatal("no forward pass began within two minutes")
	}
	wg.Go(func() {
		raw, _ := json.Marshal(map[string]any{"prompt": poison, "max_tokens": 8, "n": 2, "lora_name": "nan", "temperature": 0})
		bad, badErr = doResp(t, e, engine.EndpointCompletions, string(raw))
	})
	for deadline := time.Now().Add(2 * time.Minute); e.Stats().InFlight < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("the NaN request was not queued within two minutes (in flight: %d)", e.Stats().InFlight)
		}
	}
	close(release)
	wg.Wait()
	if goodErr != nil || badErr != nil {
		t.Fatal(goodErr, badErr)
	}
	if bad.StatusCode != 500 || !bytes.Contains(bad.Body, []byte(`"`+CodeNumericError+`"`)) || !bytes.Contains(bad.Body, []byte(`NaN or infinite logits`)) || !bytes.Contains(bad.Body, []byte(`LoRA adapter \"nan\"`)) {
		t.Fatalf("NaN request: %d %s, want a 500 %s naming the adapter", bad.StatusCode, bad.Body, CodeNumericError)
	}
	if mixed.Load() == 0 {
		t.Fatal("the NaN request never shared a forward pass")
	}
	if got := text(good); got != alone {
		t.Errorf("beside the NaN request: %q, alone %q", got, alone)
	}
	if got := text(must(doResp(t, e, engine.EndpointCompletions, innocent))); got != alone {
		t.Errorf("after the NaN request: %q, want %q", got, alone)
	}
	if n := e.Stats().InFlight; n != 0 {
		t.Fatalf("%d sequences still counted in flight", n)
	}
}

func must(resp *engine.Response, err error) *engine.Response {
	if err != nil {
		panic(err)
	}
	return resp
}
