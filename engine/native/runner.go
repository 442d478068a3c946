package native

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/chat"
	"github.com/batchd/batchd/engine/native/tokenizer"
)

// runner serves one model: it owns the model's scheduler loop.
type runner struct {
	e     *Engine
	name  string
	model *Model
	tok   *tokenizer.Tokenizer
	tmpl  *chat.Template
	// pooling is how embeddings pool hidden states (PoolMean, PoolLast).
	pooling string

	mu      sync.Mutex
	wake    chan struct{}
	waiting []*seq
	running []*seq
	active  atomic.Int64
	scratch scratch
	samp    sampler
	// The paged KV cache (see kvcache.go, sched.go); the scheduler
	// goroutine alone uses kv and bm.
	kv    *kvStore
	bm    *blockManager
	stats cacheCounters
	// inStep is the sequences of the step being run, for recovery from a
	// panic in it (fault.go).
	inStep []*seq
	// quarantine is set while suspect jobs may be queued (fault.go).
	quarantine bool
}

func newRunner(e *Engine, name string, m *Model, tok *tokenizer.Tokenizer, tmpl *chat.Template) *runner {
	r := &runner{e: e, name: name, model: m, tok: tok, tmpl: tmpl, wake: make(chan struct{}, 1), pooling: PoolMean}
	r.samp.cpu = e.cpu
	r.initKV()
	return r
}

func (r *runner) inFlight() int { return int(r.active.Load()) }

// seq is one sequence being generated.
type seq struct {
	job       *job
	index     int     // choice index
	tokens    []int32 // prompt then generated tokens
	promptLen int
	dec       *tokenizer.Decoder
	text      strings.Builder
	finish    string
	streamed  int          // bytes of text streamed (emit)
	samp      *seqSampling // penalties and logprobs (sample.go)

	// KV cache and scheduling state (sched.go).
	blocks     []int32     // block table
	n          int         // positions whose K/V are in blocks
	hashes     []blockHash // chained hashes of tokens' first full blocks, computed on demand
	registered int         // leading blocks entered in the prefix cache
	cached     int         // prompt tokens found in the prefix cache at first admission
	admitted   bool        // admitted at least once
	running    bool        // in runner.running
	sched      bool        // in the step being built
	chunk      int         // its tokens in that step
	waitSteps  int         // steps spent waiting since it arrived (orderWaiting)
}

// job is one request: its sequences and where its result goes.
type job struct {
	p         *params
	seqs      []*seq
	remaining int
	done      chan struct{}
	cancelled atomic.Bool
	// stream, when set, gets each sequence's new text as it is decided
	// (engine.Request.Stream).
	stream func(choice int, delta string)
	// suspect: the job was in a step that panicked with other jobs, so it
	// runs alone until it ends (fault.go). Scheduler goroutine only.
	suspect bool
	// failed is set, before done closes, when the engine failed the job.
	failed *engine.Response
}

func (r *runner) submit(j *job) {
	r.mu.Lock()
	r.waiting = append(r.waiting, j.seqs...)
	r.mu.Unlock()
	r.active.Add(int64(len(j.seqs)))
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// do tokenizes the request, runs its sequences and builds the response.
func (r *runner) do(ctx context.Context, req *engine.Request, p *params) (*engine.Response, error) {
	ctxLen := r.model.cfg.ContextLength
	var prompts [][]int32
	switch req.Endpoint {
	case engine.EndpointChat:
		if r.tmpl == nil {
			return badRequest(fmt.Sprintf("model %s has no chat template: use /v1/completions, or name a template in the model's config (chat_template: chatml|llama3|llama2|<template text>)", r.name), "messages", "chat_template_missing"), nil
		}
		opts := chat.Options{AddGenerationPrompt: true, EnableThinking: p.thinking}
		if id := r.tok.BOS(); id >= 0 {
			opts.BOSToken = string(r.tok.TokenBytes(id))
		}
		if id := r.tok.EOS(); id >= 0 {
			opts.EOSToken = string(r.tok.TokenBytes(id))
		}
		text, err := r.tmpl.Render(p.messages, p.tools, opts)
		if err != nil {
			return badRequest("chat template: "+err.Error(), "messages", "invalid_messages"), nil
		}
		addBOS := !(opts.BOSToken != "" && strings.HasPrefix(text, opts.BOSToken))
		prompts = append(prompts, r.tok.Encode(text, addBOS, true))
	case engine.EndpointCompletions:
		for _, pi := range p.prompts {
			if pi.ids != nil {
				prompts = append(prompts, pi.ids)
			} else {
				prompts = append(prompts, r.tok.Encode(pi.text, true, false))
			}
		}
	}
	param := "prompt"
	if req.Endpoint == engine.EndpointChat {
		param = "messages"
	}
	for _, pr := range prompts {
		if resp := r.checkIDs(pr, param); resp != nil {
			return resp, nil
		}
	}
	if resp := p.checkVocab(r.model.cfg.VocabSize); resp != nil {
		return resp, nil
	}
	j := &job{p: p, done: make(chan struct{}), stream: req.Stream}
	for pi, pr := range prompts {
		if len(pr) == 0 {
			return badRequest("the prompt is empty", "prompt", "invalid_value"), nil
		}
		if ctxLen > 0 && len(pr) >= ctxLen {
			return badRequest(fmt.Sprintf("This model's maximum context length is %d tokens, but the prompt has %d tokens.", ctxLen, len(pr)), "messages", "context_length_exceeded"), nil
		}
		if limit := r.kv.nBlocks * r.kv.bs; len(pr) > limit {
			return badRequest(fmt.Sprintf("The KV cache holds at most %d tokens, but the prompt has %d tokens.", limit, len(pr)), "messages", "context_length_exceeded"), nil
		}
		// The requests document's save_system_prompt_kv_cache needs nothing
		// more: the prefix cache keeps every full block of a shared prompt.
		for k := range p.n {
			s := &seq{job: j, index: pi*p.n + k, promptLen: len(pr), dec: r.tok.NewDecoder()}
			s.dec.Prime(pr) // the prompt's text exists: no leading-space stripping for the first token
			// Room for the whole output, but never more than the cache
			// could hold: max_tokens may be 2^31-1.
			s.tokens = append(make([]int32, 0, min(len(pr)+p.maxTokens, r.kv.nBlocks*r.kv.bs+1)), pr...)
			j.seqs = append(j.seqs, s)
		}
	}
	j.remaining = len(j.seqs)
	r.submit(j)
	select {
	case <-j.done:
	case <-ctx.Done():
		j.cancelled.Store(true)
		return nil, ctx.Err()
	}
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

// loop is the model's scheduler: it drops cancelled sequences and runs
// steps (sched.go) while there is work.
func (r *runner) loop(ctx context.Context) {
	for {
		// Drop sequences whose request went away.
		kept := r.running[:0]
		for _, s := range r.running {
			if s.job.cancelled.Load() {
				r.releaseBlocks(s)
				s.running = false
				r.active.Add(-1)
				continue
			}
			kept = append(kept, s)
		}
		r.running = kept
		r.mu.Lock()
		idle := len(r.running) == 0 && len(r.waiting) == 0
		r.mu.Unlock()
		if idle {
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

// advance appends a sampled token and decides whether the sequence ends.
func (r *runner) advance(s *seq, tok int32) {
	defer r.emit(s)
	p := s.job.p
	generated := len(s.tokens) - s.promptLen
	if (r.tok.IsEOG(tok) && !p.ignoreEOS) || p.isStopID(tok) {
		s.finish = "stop" // the token is not part of the output
		return
	}
	s.tokens = append(s.tokens, tok)
	generated++
	old := s.text.Len()
	piece := s.dec.Next(tok)
	s.text.WriteString(piece)
	r.noteToken(s, tok, piece)
	// Stop strings count once min_tokens are out (vLLM's rule); only a
	// match ending in the new text can be new.
	if len(p.stop) > 0 && generated > p.minTokens {
		if i := findStop(s.text.String(), old, p.stop); i >= 0 {
			text := s.text.String()
			s.text.Reset()
			s.text.WriteString(text[:i])
			cutLogprobs(s, i)
			s.finish = "stop"
			return
		}
	}
	if generated >= p.maxTokens {
		s.finish = "length"
	} else if ctx := r.model.cfg.ContextLength; ctx > 0 && len(s.tokens) >= ctx {
		s.finish = "length"
	}
	if s.finish != "" {
		s.text.WriteString(s.dec.Flush())
	}
}

// emit streams the text of s decided since the last call: all of it once s
// has finished, else all but what could still turn out to be the start of
// a stop string.
func (r *runner) emit(s *seq) {
	if s.job.stream == nil {
		return
	}
	text := s.text.String()
	upto := len(text)
	if s.finish == "" {
		hold := 0
		for _, st := range s.job.p.stop {
			hold = max(hold, len(st)-1)
		}
		upto = max(s.streamed, len(text)-hold)
		for upto > s.streamed && upto < len(text) && !utf8.RuneStart(text[upto]) {
			upto--
		}
	}
	if upto > s.streamed {
		s.job.stream(s.index, text[s.streamed:upto])
		s.streamed = upto
	}
}

// retire removes finished sequences and completes their jobs.
func (r *runner) retire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.running[:0]
	for _, s := range r.running {
		if s.finish == "" {
			kept = append(kept, s)
			continue
		}
		r.releaseBlocks(s)
		s.running = false
		r.active.Add(-1)
		s.job.remaining--
		if s.job.remaining == 0 {
			close(s.job.done)
		}
	}
	r.running = kept
}
