package native

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/chat"
	"github.com/batchd/batchd/engine/native/tokenizer"
	"github.com/batchd/batchd/wire"
)

// runner serves one model. Its loop goroutine runs the engine's step, as
// nano-vllm's LLMEngine does: the scheduler plans (scheduler.go), the model
// runner computes the logits (model_runner.go), the sampler picks the
// tokens (sampler.go), and the scheduler takes them back.
type runner struct {
	e     *Engine
	name  string
	model *Model
	tok   *tokenizer.Tokenizer
	tmpl  *chat.Template
	// pooling is how embeddings pool hidden states (PoolMean, PoolLast).
	pooling string
	// adapters are the model's LoRA adapters by name: configured ones
	// (set at load) and those loaded on first use (adapter_load.go), whose
	// loads in flight are loading; both under amu.
	amu      sync.Mutex
	adapters map[string]*adapter
	loading  map[string]*adapterLoad

	wake  chan struct{}
	sched scheduler
	mr    modelRunner
	samp  sampler
	stats cacheCounters
	// tasks is work for the loop goroutine between steps (embeddings),
	// under sched.mu.
	tasks []func()
	// specDefault is the speculative method of a request that names none
	// (native.speculative.method).
	specDefault specMethod
	// inStep is the sequences of the step being run, for recovery from a
	// panic in it (fault.go).
	inStep []*seq
}

// testStepCost, when set (by the package's tests), is every new runner's
// step cost model: pinned, so that what speculation drafts does not depend
// on the machine's timing.
var testStepCost *stepCost

func newRunner(e *Engine, name string, m *Model, tok *tokenizer.Tokenizer, tmpl *chat.Template) (*runner, error) {
	r := &runner{e: e, name: name, model: m, tok: tok, tmpl: tmpl, wake: make(chan struct{}, 1), pooling: PoolMean,
		adapters: map[string]*adapter{}, loading: map[string]*adapterLoad{}}
	r.samp.cpu, r.samp.tok = e.cpu, tok
	r.mr.model, r.mr.compute = m, &e.compute
	r.sched.maxBatchTokens, r.sched.maxSeqs, r.sched.ctxLen = e.cfg.MaxBatchTokens, e.cfg.MaxSeqs, m.cfg.ContextLength
	r.sched.tok, r.sched.stats, r.sched.onToken = tok, &r.stats, r.noteToken
	spec := e.cfg.Speculative
	r.specDefault, r.sched.specK = spec.method(), spec.K
	// Prompt lookup needs nothing of the model: every model has it. A
	// draft model's drafter goes in drafters[specDraft] when one is
	// configured (native.models[].draft; Open sets it).
	r.sched.drafters[specNgram] = newNgramDrafter(spec.NgramMin, spec.NgramMax)
	if testStepCost != nil {
		r.sched.cost = *testStepCost
	}
	if err := r.initKV(); err != nil {
		return nil, err
	}
	return r, nil
}

// initKV sizes the runner's block pool from the engine's KV budget and
// allocates it.
func (r *runner) initKV() error {
	c := r.model.cfg
	kvDim := c.KVHeads * c.HeadDim
	budget := r.e.cfg.KVCacheBytes
	bb := blockBytes(len(r.model.layers), kvDim, kvBlockSize)
	if budget <= 0 {
		budget = defaultKVCacheBytes()
		if dm, ok := r.model.dev.(deviceMemory); ok {
			budget = deviceKVBudget(dm, r.model, r.e.cfg.MaxBatchTokens, r.e.kvShare())
		}
	}
	n := int(budget / bb)
	if c.ContextLength > 0 {
		// More than every sequence at full context cannot be used.
		n = min(n, r.e.cfg.MaxSeqs*blocksFor(c.ContextLength, kvBlockSize))
	}
	n = max(n, 1)
	kv, err := newKVStore(r.model.dev, len(r.model.layers), kvDim, kvBlockSize, n)
	if err != nil {
		return fmt.Errorf("native.kv_cache_bytes: a KV cache of %d blocks (%d bytes) for %s on %s: %w (set a smaller kv_cache_bytes)",
			n, int64(n)*bb, r.name, r.model.dev.Name(), err)
	}
	r.mr.kv = kv
	r.sched.bm = newBlockManager(n, kvBlockSize, r.e.cfg.DisablePrefixCache)
	r.stats.blocksTotal.Store(int64(n))
	r.stats.blockBytes.Store(bb)
	return nil
}

func (r *runner) inFlight() int { return r.sched.inFlight() }

// windowPerSeq is how many requests a runner holds per sequence it may
// run: enough waiting to keep every slot busy and to group shared prefixes
// across many requests.
const windowPerSeq = 8

// window is how many sequences the runner wants to hold at once: running
// and waiting. It is bounded by the KV cache: one waiting per 16 positions
// of cache, but never fewer than max_seqs.
func (r *runner) window() int {
	positions := r.mr.kv.nBlocks * r.mr.kv.bs
	return max(r.e.cfg.MaxSeqs, min(windowPerSeq*r.e.cfg.MaxSeqs, positions/16))
}

func (r *runner) wakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// submit queues j's sequences for the loop.
func (r *runner) submit(j *job) {
	j.remaining = len(j.seqs)
	r.sched.submit(j)
	r.wakeUp()
}

// post runs f on the loop goroutine between steps.
func (r *runner) post(f func()) {
	r.sched.mu.Lock()
	r.tasks = append(r.tasks, f)
	r.sched.mu.Unlock()
	r.wakeUp()
}

// runTasks runs what post queued.
func (r *runner) runTasks() {
	r.sched.mu.Lock()
	tasks := r.tasks
	r.tasks = nil
	r.sched.mu.Unlock()
	for _, f := range tasks {
		f()
	}
}

// newJob tokenizes the request and makes its sequences, or refuses it.
func (r *runner) newJob(req *engine.Request, p *params) (*job, *engine.Response) {
	ctxLen := r.model.cfg.ContextLength
	prompts, resp := encodePrompts(r.tok, r.tmpl, r.name, req.Endpoint, p)
	if resp != nil {
		return nil, resp
	}
	param := "prompt"
	if req.Endpoint == engine.EndpointChat {
		param = "messages"
	}
	for _, pr := range prompts {
		if resp := r.checkIDs(pr, param); resp != nil {
			return nil, resp
		}
	}
	if resp := p.checkVocab(r.model.cfg.VocabSize); resp != nil {
		return nil, resp
	}
	method, resp := r.specMethod(p.spec)
	if resp != nil {
		return nil, resp
	}
	j := &job{p: p, stream: req.Stream, onStart: req.Started, prio: req.Priority}
	for pi, pr := range prompts {
		if len(pr) == 0 {
			return nil, badRequest("the prompt is empty", "prompt", "invalid_value")
		}
		if ctxLen > 0 && len(pr) >= ctxLen {
			return nil, badRequest(fmt.Sprintf("This model's maximum context length is %d tokens, but the prompt has %d tokens.", ctxLen, len(pr)), "messages", "context_length_exceeded")
		}
		if limit := r.mr.kv.nBlocks * r.mr.kv.bs; len(pr) > limit {
			return nil, badRequest(fmt.Sprintf("The KV cache holds at most %d tokens, but the prompt has %d tokens.", limit, len(pr)), "messages", "context_length_exceeded")
		}
		// The requests document's save_system_prompt_kv_cache needs nothing
		// more: the prefix cache keeps every full block of a shared prompt.
		for k := range p.n {
			s := &seq{job: j, index: pi*p.n + k, promptLen: len(pr), dec: r.tok.NewDecoder(), adapter: p.adapter,
				spec: specState{method: method}}
			s.dec.Prime(pr) // the prompt's text exists: no leading-space stripping for the first token
			s.tokens = append(make([]int32, 0, len(pr)+outputRoom(p.maxTokens)), pr...)
			j.seqs = append(j.seqs, s)
		}
	}
	return j, nil
}

// initialOutputRoom is the most output a sequence's token buffer has room
// for when it is made; a longer output grows it as it comes.
const initialOutputRoom = 256

// outputRoom is the room for output a new sequence's token buffer gets:
// max_tokens up to initialOutputRoom. Never more: max_tokens may be
// 2^31-1, and a request may make thousands of sequences (prompts × n)
// that wait before they run, so a buffer sized by max_tokens, the context
// or the cache would cost memory for output not yet made (once, 8 GiB for
// one request). Grown by append, a buffer costs what its sequence has
// generated, which the cache and the context bound.
func outputRoom(maxTokens int) int { return min(maxTokens, initialOutputRoom) }

// specMethod resolves a request's speculative field to the method its
// sequences draft with, or refuses a method the model does not have.
func (r *runner) specMethod(m specMethod) (specMethod, *engine.Response) {
	switch m {
	case specDefault:
		return r.specDefault, nil
	case specOn:
		if r.specDefault == specOff {
			return specNgram, nil // every model has prompt lookup
		}
		return r.specDefault, nil
	case specDraft:
		if r.sched.drafters[specDraft] == nil {
			return 0, badRequest(fmt.Sprintf(`speculative: model %s has no draft model (native.models[].draft): use "ngram", true or false`, r.name), "speculative", wire.CodeUnsupportedValue)
		}
	}
	return m, nil
}

// run answers a generation request through done (engine.Queue's Submit).
func (r *runner) run(ctx context.Context, req *engine.Request, p *params, done func(*engine.Response, error)) {
	j, resp := r.newJob(req, p)
	if resp != nil {
		done(resp, nil)
		return
	}
	var answered atomic.Bool
	stop := context.AfterFunc(ctx, func() {
		j.cancelled.Store(true)
		r.sched.noteCancel()
		r.wakeUp()
		if answered.CompareAndSwap(false, true) {
			done(nil, ctx.Err())
		}
	})
	j.complete = func(j *job) {
		stop()
		if !answered.CompareAndSwap(false, true) {
			return
		}
		done(r.answer(req, j))
	}
	r.submit(j)
}

// answer is the response of a completed job; a panic building it fails
// that request alone.
func (r *runner) answer(req *engine.Request, j *job) (resp *engine.Response, err error) {
	defer func() {
		if v := recover(); v != nil {
			v, stack := panicDetails(v)
			r.e.log.Error("engine failed a request: panic building its response", "model", r.name, "panic", fmt.Sprint(v), "stack", string(stack))
			resp, err = engine.Recovered(v), nil
		}
	}()
	if j.failed != nil {
		resp := *j.failed
		resp.RequestID = requestID(req)
		return &resp, nil
	}
	return r.response(req, j), nil
}

// checkIDs refuses a prompt with a token id the model has no row for:
// every id is checked here, before it can reach a kernel, whether the
// caller sent it or the tokenizer made it (a tokenizer with more tokens
// than the model's embedding).
func (r *runner) checkIDs(ids []int32, param string) *engine.Response {
	vocab := r.model.cfg.VocabSize
	for _, id := range ids {
		if id < 0 || int(id) >= vocab {
			return badRequest(fmt.Sprintf("token id %d is outside the vocabulary (0..%d)", id, vocab-1), param, "invalid_value")
		}
	}
	return nil
}

// loop is the model's engine loop: it runs steps while there is work.
func (r *runner) loop(ctx context.Context) {
	for {
		r.runTasks()
		if r.sched.idle() {
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		r.safeStep()
	}
}

// step is one step of the engine: schedule, compute, sample, postprocess.
func (r *runner) step() {
	start := time.Now()
	p := r.sched.schedule()
	if p.tokens == 0 {
		r.sched.postprocess(p, nil)
		return
	}
	r.inStep = p.seqs
	logits := r.mr.run(p)
	next := r.samp.sample(p, logits, r.model.cfg.VocabSize)
	r.sched.postprocess(p, next)
	for _, s := range r.samp.nonFinite {
		if s.job.failed == nil {
			resp, adapter := nonFiniteLogits(s)
			r.e.log.Error("engine failed a request: its logits are not finite", "model", r.name, "adapter", adapter)
			r.failJob(s.job, resp)
		}
	}
	// The step's time, drafting included, is what speculation weighs its
	// drafts against (allocDrafts).
	r.sched.cost.observe(len(p.seqs), p.tokens, time.Since(start).Seconds())
	r.inStep = nil
}

// encodePrompts renders and tokenizes a chat or completions request's
// prompts as the engine runs them (one for chat, one per prompt for
// completions); batchd stats counts with it too (PromptCounter).
func encodePrompts(tok *tokenizer.Tokenizer, tmpl *chat.Template, name, endpoint string, p *params) ([][]int32, *engine.Response) {
	var prompts [][]int32
	switch endpoint {
	case engine.EndpointChat:
		if p.noTemplate {
			if given(p.tools) {
				return nil, badRequest("tools: a prompt rendered with apply_chat_template: false has no place for tools: remove tools or apply the chat template", "tools", wire.CodeUnsupportedParameter)
			}
			text, err := chat.RawText(p.messages)
			if err != nil {
				return nil, badRequest(err.Error(), "messages", "invalid_messages")
			}
			prompts = append(prompts, tok.Encode(text, false, false))
			break
		}
		if tmpl == nil {
			return nil, badRequest(fmt.Sprintf("model %s has no chat template: use /v1/completions, or name a template in the model's config (chat_template: chatml|llama3|llama2|<template text>)", name), "messages", "chat_template_missing")
		}
		opts := p.templateOptions()
		if id := tok.BOS(); id >= 0 {
			opts.BOSToken = string(tok.TokenBytes(id))
		}
		if id := tok.EOS(); id >= 0 {
			opts.EOSToken = string(tok.TokenBytes(id))
		}
		text, err := tmpl.Render(p.messages, p.tools, opts)
		if err != nil {
			return nil, badRequest("chat template: "+err.Error(), "messages", "invalid_messages")
		}
		addBOS := !(opts.BOSToken != "" && strings.HasPrefix(text, opts.BOSToken))
		prompts = append(prompts, tok.Encode(text, addBOS, true))
	case engine.EndpointCompletions:
		for _, pi := range p.prompts {
			if pi.ids != nil {
				prompts = append(prompts, pi.ids)
			} else {
				prompts = append(prompts, tok.Encode(pi.text, true, false))
			}
		}
	}
	return prompts, nil
}
