// Package native is batchd's in-process inference engine: it loads
// Llama-family models (GGUF files or Hugging Face directories), renders chat
// templates, tokenizes, and runs many sequences per forward pass on the
// kernels package, continuously batching prompt prefill and decode steps.
//
// Where to find what (one job per file, as in nano-vllm):
//
//   - engine.go: Config, Engine (Open, Close, Do, and Submit/Window: the
//     engine.Queue the pipeline feeds), picking a model.
//   - runner.go: one model's loop: schedule → run → sample → postprocess.
//   - sequence.go: a sequence (one status: waiting, running, preempted,
//     finished) and a job (one request's sequences and its answer).
//   - scheduler.go: schedule() → plan (admission under the token budget and
//     max_seqs, KV growth, preemption, prefix-aware order of the waiting
//     queue) and postprocess(plan, tokens), which takes several tokens per
//     sequence. It runs no model: scheduler_test.go drives it alone.
//   - block_manager.go: the paged KV blocks: reference counts, chained
//     block hashes, the LRU free list, and the policy beside it (can
//     allocate, allocate, may append, cached prefix).
//   - model_runner.go: a plan → the model's batch → logits.
//   - drafter.go, draft_model.go: speculative decoding's drafters; the
//     draft model (native.models[].draft) drafts greedily from its own
//     paged KV cache.
//   - model.go, kvcache.go: the decoder and its K/V pools, on a
//     kernels.Device (device.go picks it: the CPU, or the plain-Go
//     reference device that proves the interface).
//   - sampler.go, logprobs.go: per-sequence sampling and logprobs.
//   - lora.go, adapter_load.go: LoRA adapters applied per row, and those
//     a request's lora_path loads on first use.
//   - speculative.go, drafter.go, ngram.go: speculative decoding (drafts
//     verified in one forward pass, exact by coupling: see speculative.go).
//   - request.go, response.go, embed.go: the OpenAI bodies in and out
//     (shapes and limits from package wire).
//   - fault.go: a panic in a step fails the request that caused it, not
//     the engine.
//
// It imports engine, wire, kernels and its own subpackages; never pipeline,
// daemon or watcher (internal/archtest checks it).
package native

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/tokenizer"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/wire"
)

var _ engine.Engine = (*Engine)(nil)
var _ engine.StatsReporter = (*Engine)(nil)
var _ engine.Queue = (*Engine)(nil)

// ModelConfig names one model to serve.
type ModelConfig struct {
	// Name is what body.model selects; default: the file or directory name.
	Name string `yaml:"name"`
	// Path is a .gguf file or a Hugging Face model directory.
	Path string `yaml:"path"`
	// ChatTemplate overrides the model's template: a builtin name (chatml,
	// llama3, llama2) or template text.
	ChatTemplate string `yaml:"chat_template"`
	// Pooling overrides how embeddings pool token states: mean, last or
	// cls. Default: what the model file says (Qwen3-Embedding-style models
	// say last), else mean.
	Pooling string `yaml:"pooling"`
	// Adapters are LoRA adapters for this model, loaded at start: name →
	// a PEFT directory (adapter_config.json + adapter_model.safetensors)
	// or one .safetensors file. A request chooses one with body.lora_name,
	// or with body.model set to its name (as vLLM does). Names must differ
	// from every model's and adapter's name.
	Adapters map[string]string `yaml:"adapters"`
	// Draft names another entry of native.models (by name) that drafts
	// tokens for this one in speculative decoding: a smaller model with
	// the same tokenizer, checked at start. It has its own KV cache (a
	// quarter of this model's). A model may name itself: every draft is
	// then accepted under greedy decoding, which measures the ceiling of
	// the verify path (benchmarks), not a speed-up.
	Draft string `yaml:"draft"`
}

// Config configures the engine.
type Config struct {
	Models []ModelConfig
	// Threads for the kernels (0: every core).
	Threads int
	// Kernels names the CPU code path: auto (or ""), the fastest this CPU
	// runs, or amx, avx512, avx2, generic to force one (see kernels.NewCPUBackend).
	Kernels string
	// Device is where the models run: cpu (or ""), the CPU kernels, or
	// reference, the plain-Go reference device (slow; for tests).
	Device string
	// MaxBatchTokens is the token budget of one forward pass.
	MaxBatchTokens int
	// MaxSeqs bounds the sequences running at once (in one step). The
	// engine's queue (Window) holds several times as many.
	MaxSeqs int
	// StrictModel makes a request naming an unknown model a 400
	// model_not_found line instead of running on the only model.
	StrictModel bool
	// KVCacheBytes is the KV cache of each model, in bytes (0: 25% of
	// physical memory, at most 4 GiB). It bounds how many sequences run at
	// once and how much of the prefix cache survives.
	KVCacheBytes int64
	// DisablePrefixCache turns off reuse of cached prompt blocks (tests,
	// benchmarks).
	DisablePrefixCache bool
	// KeepWeightsMapped leaves the weights as the file maps them: no packed
	// copy for the CPU kernels (kernels.WeightPacker), which is faster but
	// lives in memory rather than in the page cache.
	KeepWeightsMapped bool
	// AdapterRoot is the directory a request's lora_path is read under
	// (relative paths are relative to it; symlinks leading out are
	// refused); "" : adapters load only from Models[].Adapters.
	AdapterRoot string
	// MaxAdapters bounds each model's LoRA adapters, configured and loaded
	// on first use together.
	MaxAdapters int
	// Speculative is speculative decoding's default method and bounds
	// (native.speculative); a request's speculative field overrides the
	// method for that request.
	Speculative SpeculativeConfig
	Logger      *slog.Logger
}

// DefaultMaxAdapters is native.max_adapters' default.
const DefaultMaxAdapters = 16

// DefaultConfig returns the defaults; Models must still be set.
func DefaultConfig() Config {
	return Config{Kernels: kernels.BackendAuto, MaxBatchTokens: 512, MaxSeqs: 256, MaxAdapters: DefaultMaxAdapters,
		Speculative: DefaultSpeculativeConfig()}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if len(c.Models) == 0 {
		return errors.New("native.models: at least one model is required (or --model PATH)")
	}
	if c.MaxAdapters < 1 {
		return fmt.Errorf("native.max_adapters: must be at least 1, got %d", c.MaxAdapters)
	}
	if c.AdapterRoot != "" && !filepath.IsAbs(c.AdapterRoot) {
		return fmt.Errorf("native.adapter_root: must be an absolute path, got %q", c.AdapterRoot)
	}
	seen := map[string]bool{}
	models := map[string]bool{}
	for _, m := range c.Models {
		seen[m.modelName()] = false
		models[m.modelName()] = true
	}
	for i, m := range c.Models {
		if m.Path == "" {
			return fmt.Errorf("native.models[%d].path: required", i)
		}
		n := m.modelName()
		if seen[n] {
			return fmt.Errorf("native.models[%d].name: %q is used twice", i, n)
		}
		seen[n] = true
		for _, a := range sortedKeys(m.Adapters) {
			switch _, used := seen[a]; {
			case a == "":
				return fmt.Errorf("native.models[%d].adapters: an adapter has an empty name", i)
			case used:
				return fmt.Errorf("native.models[%d].adapters.%s: the name is already a model's or another adapter's", i, a)
			case m.Adapters[a] == "":
				return fmt.Errorf("native.models[%d].adapters.%s: path required (a PEFT directory or a .safetensors file)", i, a)
			}
			seen[a] = true
		}
		if len(m.Adapters) > c.MaxAdapters {
			return fmt.Errorf("native.models[%d].adapters: %d adapters, over native.max_adapters (%d): raise native.max_adapters", i, len(m.Adapters), c.MaxAdapters)
		}
		if m.Draft != "" && !models[m.Draft] {
			return fmt.Errorf("native.models[%d].draft: %q is not the name of a model in native.models (a draft model is loaded as its own entry)", i, m.Draft)
		}
		switch m.Pooling {
		case "", PoolMean, PoolLast, PoolCLS:
		default:
			return fmt.Errorf("native.models[%d].pooling: must be mean, last or cls, got %q", i, m.Pooling)
		}
	}
	switch c.Kernels {
	case "", kernels.BackendAuto, kernels.BackendAMX, kernels.BackendAVX512, kernels.BackendAVX2, kernels.BackendNEON, kernels.BackendGeneric:
	default:
		return fmt.Errorf("native.kernels: must be auto, amx, avx512, avx2, neon or generic, got %q", c.Kernels)
	}
	if _, _, err := parseDevice(c.Device); err != nil {
		return err
	}
	if c.MaxBatchTokens < 1 {
		return fmt.Errorf("native.max_batch_tokens: must be at least 1, got %d", c.MaxBatchTokens)
	}
	if c.KVCacheBytes < 0 {
		return fmt.Errorf("native.kv_cache_bytes: must not be negative, got %d", c.KVCacheBytes)
	}
	if c.MaxSeqs < 1 {
		return fmt.Errorf("native.max_seqs: must be at least 1, got %d", c.MaxSeqs)
	}
	if c.Speculative.Method == SpecDraft && !slices.ContainsFunc(c.Models, func(m ModelConfig) bool { return m.Draft != "" }) {
		return errors.New("native.speculative.method: draft needs a draft model: name one in native.models[].draft, or use ngram")
	}
	return c.Speculative.validate()
}

func (m ModelConfig) modelName() string {
	if m.Name != "" {
		return m.Name
	}
	base := filepath.Base(filepath.Clean(m.Path))
	return strings.TrimSuffix(base, filepath.Ext(base))
}

// Engine runs requests on local models.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	cpu     *kernels.CPU   // the kernels: the CPU device's, and the sampler's
	dev     kernels.Device // where the models run
	backend string         // cpu's code path; kept after Close for Kernels
	runners map[string]*runner
	order   []string
	compute sync.Mutex // one forward pass at a time across models
	// adapterLoadHook, when set (tests), runs as a load on first use
	// starts, off the engine's locks.
	adapterLoadHook func(name string)

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns an engine; it does no I/O.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Engine{cfg: cfg, log: cfg.Logger.With("component", "engine.native"), runners: map[string]*runner{}}, nil
}

// Open loads every model and starts its scheduler.
// A CPU that cannot run the kernels Config names is an error here, at
// start-up, naming the features it lacks.
func (e *Engine) Open(ctx context.Context) error {
	cpu, err := kernels.NewCPUBackend(e.cfg.Threads, e.cfg.Kernels)
	if err != nil {
		return fmt.Errorf("native.kernels: %w", err)
	}
	e.cpu, e.backend = cpu, cpu.Backend()
	if _, err := e.device(); err != nil {
		e.Close(ctx)
		return err
	}
	if root := e.cfg.AdapterRoot; root != "" {
		if st, err := os.Stat(root); err != nil || !st.IsDir() {
			e.Close(ctx)
			if err == nil {
				err = errors.New("not a directory")
			}
			return fmt.Errorf("native.adapter_root %s: %w (a directory holding the LoRA adapters requests name by lora_path)", root, err)
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	for _, mc := range e.cfg.Models {
		r, err := e.load(mc)
		if err != nil {
			e.Close(ctx)
			return err
		}
		name := mc.modelName()
		e.runners[name] = r
		e.order = append(e.order, name)
	}
	// Draft models are other entries, all loaded now; each runner's drafter
	// is set before its loop starts.
	for i, mc := range e.cfg.Models {
		if mc.Draft == "" {
			continue
		}
		r := e.runners[mc.modelName()]
		d, err := newDraftModel(r, e.runners[mc.Draft], 0)
		if err != nil {
			e.Close(ctx)
			return fmt.Errorf("native.models[%d].draft: %w", i, err)
		}
		r.sched.drafters[specDraft] = d
		e.log.Info("draft model ready", "model", r.name, "draft", mc.Draft, "draft_kv_blocks", d.bm.n)
	}
	// With method draft, a model that has no draft model of its own does
	// not speculate unless a request asks for prompt lookup.
	if e.cfg.Speculative.method() == specDraft {
		for _, name := range e.order {
			if r := e.runners[name]; r.sched.drafters[specDraft] == nil {
				r.specDefault = specOff
				e.log.Info("no draft model: speculative decoding off by default for this model", "model", name)
			}
		}
	}
	for _, name := range e.order {
		r := e.runners[name]
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			r.loop(runCtx)
		}()
	}
	e.log.Info("native engine ready", "models", e.order, "device", e.dev.Name(), "kernels", e.cpu.Backend(), "threads", e.cpu.Threads(),
		"requested", kernelsName(e.cfg.Kernels), "arch", runtime.GOARCH, "cpu_features", strings.Join(kernels.Features(), " "))
	return nil
}

// Kernels is the name of the CPU code path the engine runs (amx, avx512, avx2,
// generic); "" before Open.
func (e *Engine) Kernels() string { return e.backend }

// DeviceName describes the device the models run on ("cpu avx512 x16",
// "cuda NVIDIA H200 (...)"); "" before Open.
func (e *Engine) DeviceName() string {
	if e.dev == nil {
		return ""
	}
	return e.dev.Name()
}

func kernelsName(s string) string {
	if s == "" {
		return kernels.BackendAuto
	}
	return s
}

// kvShare is how many models' KV caches are still to be sized on the
// device, the one loading now and those after it, each a draft model's
// cache counting a fraction of its target's.
func (e *Engine) kvShare() float64 {
	share := 0.0
	for _, mc := range e.cfg.Models {
		if _, done := e.runners[mc.modelName()]; done {
			continue
		}
		share++
		if mc.Draft != "" {
			share += 1.0 / draftKVFraction
		}
	}
	return max(share, 1)
}

// device returns the device the models run on, opening it over e.cpu the
// first time.
func (e *Engine) device() (kernels.Device, error) {
	if e.dev == nil {
		name := e.cfg.Device
		if name == "" {
			name = defaultDevice
		}
		dev, err := openDevice(name, e.cpu, e.log)
		if err != nil {
			return nil, err
		}
		e.dev = dev
	}
	return e.dev, nil
}

// modelOn binds w to dev; when dev is the GPU that device "auto" chose
// and it does not run the model yet (a mixture of experts, Gemma's or
// gpt-oss's operations), the model runs on the CPU instead, saying why. A
// device named outright is kept, and its refusal returned.
func (e *Engine) modelOn(w *weights.Model, dev kernels.Device) (*Model, error) {
	m, err := newModelOn(w, dev, !e.cfg.KeepWeightsMapped)
	var lacks *deviceLacksError
	if err == nil || !errors.As(err, &lacks) || cmp.Or(e.cfg.Device, defaultDevice) != DeviceAuto {
		return m, err
	}
	if _, cpu := dev.(*kernels.CPUDevice); cpu {
		return nil, err
	}
	e.log.Warn("the device chosen does not run this model yet: running it on the CPU", "model", w.Source, "device", dev.Name(), "reason", err.Error())
	return newModelOn(w, kernels.NewCPUDevice(e.cpu), !e.cfg.KeepWeightsMapped)
}

func (e *Engine) load(mc ModelConfig) (*runner, error) {
	dev, err := e.device()
	if err != nil {
		return nil, err
	}
	w, err := weights.Load(mc.Path)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", mc.Path, err)
	}
	m, err := e.modelOn(w, dev)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("load model %s: %w", mc.Path, err)
	}
	tok, err := newTokenizer(w.Tokenizer, w.Config.EOSIDs)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("load tokenizer of %s: %w", mc.Path, err)
	}
	tmpl, err := templateOf(w, mc.ChatTemplate)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("chat template of %s: %w", mc.Path, err)
	}
	c := w.Config
	e.log.Info("model loaded", "name", mc.modelName(), "arch", c.Arch, "layers", c.Layers, "dim", c.Dim,
		"vocab", c.VocabSize, "context", c.ContextLength, "chat_template", tmpl != nil, "packed_mib", m.packed>>20)
	r, err := newRunner(e, mc.modelName(), m, tok, tmpl)
	if err != nil {
		w.Close()
		return nil, err
	}
	for _, name := range sortedKeys(mc.Adapters) {
		a, err := m.loadAdapter(name, mc.Adapters[name])
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("native.models[%s].adapters.%s: %w", mc.modelName(), name, err)
		}
		a.path = realPath(mc.Adapters[name])
		r.adapters[name] = a
		e.log.Info("lora adapter loaded", "model", mc.modelName(), "adapter", name, "path", mc.Adapters[name], "rank", a.rank)
	}
	switch {
	case mc.Pooling != "":
		r.pooling = mc.Pooling
	case c.Pooling == PoolLast || c.Pooling == PoolCLS:
		r.pooling = c.Pooling
	}
	return r, nil
}

func newTokenizer(s weights.TokenizerSpec, eosIDs []int) (*tokenizer.Tokenizer, error) {
	if len(s.TokenizerJSON) > 0 {
		return tokenizer.FromHF(s.TokenizerJSON, s.TokenizerConfigJSON)
	}
	var extra []int32
	for _, id := range eosIDs {
		extra = append(extra, int32(id))
	}
	return tokenizer.New(tokenizer.Spec{
		Model: s.Model, Pre: s.Pre, Tokens: s.Tokens, Scores: s.Scores, Types: s.Types, Merges: s.Merges,
		BOS: s.BOS, EOS: s.EOS, UNK: s.UNK, PAD: s.PAD, AddBOS: s.AddBOS, AddEOS: s.AddEOS, ExtraEOG: extra,
	})
}

// Close stops the schedulers and releases the models.
func (e *Engine) Close(ctx context.Context) error {
	if e.cancel != nil {
		e.cancel()
	}
	e.wg.Wait()
	var errs []error
	for _, r := range e.runners {
		errs = append(errs, r.model.src.Close())
	}
	e.runners = map[string]*runner{}
	if e.dev != nil {
		e.dev.Close()
		e.dev = nil
	}
	if e.cpu != nil {
		e.cpu.Close()
		e.cpu = nil
	}
	return errors.Join(errs...)
}

// Stats reports sequences in flight.
func (e *Engine) Stats() engine.Stats {
	n := 0
	for _, r := range e.runners {
		n += r.inFlight()
	}
	return engine.Stats{InFlight: n}
}

// Models lists the served model names.
func (e *Engine) Models() []string { return append([]string(nil), e.order...) }

// Do runs one request to completion: Submit, then wait for its answer.
func (e *Engine) Do(ctx context.Context, req *engine.Request) (*engine.Response, error) {
	type result struct {
		resp *engine.Response
		err  error
	}
	ch := make(chan result, 1)
	e.Submit(ctx, req, func(resp *engine.Response, err error) { ch <- result{resp, err} })
	r := <-ch
	return r.resp, r.err
}

// Window is how many requests the engine wants to hold at once: for each
// model, several times max_seqs, bounded by its KV cache (runner.window).
func (e *Engine) Window() int {
	n := 0
	for _, r := range e.runners {
		n += r.window()
	}
	return max(n, 1)
}

// Submit parses and tokenizes req and queues it for its model's scheduler;
// done gets the answer (engine.Queue). A refused request is answered
// before Submit returns; an embeddings request runs on its model's loop
// between steps.
func (e *Engine) Submit(ctx context.Context, req *engine.Request, done func(*engine.Response, error)) {
	if err := ctx.Err(); err != nil {
		done(nil, err)
		return
	}
	if len(e.runners) == 0 {
		done(nil, fmt.Errorf("native engine not open: %w", engine.ErrUnavailable))
		return
	}
	switch req.Endpoint {
	case engine.EndpointResponses:
		chat, answer, refused := engine.AsChat(req)
		if refused != nil {
			done(refused, nil)
			return
		}
		e.Submit(ctx, chat, func(resp *engine.Response, err error) { done(answer(resp), err) })
		return
	case engine.EndpointChat, engine.EndpointCompletions:
	case engine.EndpointEmbeddings:
		var b struct {
			Model string `json:"model"`
		}
		json.Unmarshal(req.Body, &b)
		r, a, resp := e.pick(b.Model)
		if resp != nil {
			done(resp, nil)
			return
		}
		if a != nil {
			done(badRequest(fmt.Sprintf("The model %q is a LoRA adapter of %q; embeddings run on base models only", b.Model, r.name),
				"model", "model_not_found"), nil)
			return
		}
		r.post(func() {
			if req.Started != nil {
				req.Started()
			}
			resp, err := func() (resp *engine.Response, err error) {
				defer func() {
					if v := recover(); v != nil {
						v, stack := panicDetails(v)
						e.log.Error("engine failed an embeddings request", "model", r.name, "panic", fmt.Sprint(v), "stack", string(stack))
						resp, err = engine.Recovered(v), nil
					}
				}()
				return r.embeddings(ctx, req)
			}()
			done(resp, err)
		})
		return
	default:
		done(badRequest(fmt.Sprintf("endpoint %s is not served by the native engine", req.Endpoint), "url", "unsupported_endpoint"), nil)
		return
	}
	p, resp := parseRequest(req)
	if resp != nil {
		done(resp, nil)
		return
	}
	r, a, resp := e.pick(p.model)
	if resp != nil {
		done(resp, nil)
		return
	}
	r.chooseAdapter(p, a, func(ad *adapter, resp *engine.Response) {
		if resp != nil {
			done(resp, nil)
			return
		}
		p.adapter = ad
		r.run(ctx, req, p, done)
	})
}

// pick chooses the runner for a model name, and the adapter when the name
// is an adapter's (as vLLM serves them: the base model plus the adapter).
// A request that names no model runs on the only model, strict_model or
// not (it names no wrong one); with several models it is refused, saying
// which are served and where a batch names its default.
func (e *Engine) pick(name string) (*runner, *adapter, *engine.Response) {
	if r, ok := e.runners[name]; ok {
		return r, nil, nil
	}
	for _, n := range e.order {
		if a := e.runners[n].adapterByName(name); a != nil {
			return e.runners[n], a, nil
		}
	}
	if len(e.runners) == 1 && (name == "" || !e.cfg.StrictModel) {
		return e.runners[e.order[0]], nil, nil
	}
	if name == "" {
		return nil, nil, &engine.Response{StatusCode: 400, Body: errorBody(
			fmt.Sprintf(`the request names no model and several are served (%s): give body.model, or the batch a default model ("model" in its options)`, strings.Join(e.order, ", ")),
			"invalid_request_error", "model", wire.CodeMissingRequiredParameter)}
	}
	return nil, nil, &engine.Response{StatusCode: 400, Body: errorBody(
		fmt.Sprintf("The model %q does not exist; served models: %s", name, strings.Join(e.order, ", ")),
		"invalid_request_error", "model", "model_not_found")}
}

// chooseAdapter resolves p's adapter on r: body.lora_name's (loaded from
// body.lora_path on first use, see adapter_load.go), else byModel (the
// adapter body.model named), else none; then cont runs with it, or with
// the 400 that refuses the request: before chooseAdapter returns, or once
// the adapter's load ends.
func (r *runner) chooseAdapter(p *params, byModel *adapter, cont func(*adapter, *engine.Response)) {
	conflict := func() *engine.Response {
		return badRequest(fmt.Sprintf("lora_name: %q conflicts with model %q, which names adapter %q: give one of them",
			p.loraName, p.model, byModel.name), "lora_name", "invalid_value")
	}
	if p.loraPath != "" {
		if byModel != nil && byModel.name != p.loraName {
			cont(nil, conflict())
			return
		}
		r.dynamicAdapter(p, cont)
		return
	}
	if p.loraName == "" {
		cont(byModel, nil)
		return
	}
	r.amu.Lock()
	a, ok := r.adapters[p.loraName]
	names := adapterNames(r.adapters)
	r.amu.Unlock()
	if !ok {
		cont(nil, badRequest(fmt.Sprintf("lora_name: the LoRA adapter %q is not loaded for model %q; its adapters: %s",
			p.loraName, r.name, names), "lora_name", "lora_not_found"))
		return
	}
	if byModel != nil && byModel != a {
		cont(nil, conflict())
		return
	}
	cont(a, nil)
}

// realPath is path made absolute with symlinks followed, or as given when
// that fails: an adapter's identity, to compare with a request's lora_path.
func realPath(path string) string {
	if r, err := filepath.EvalSymlinks(path); err == nil {
		if abs, err := filepath.Abs(r); err == nil {
			return abs
		}
	}
	return path
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
