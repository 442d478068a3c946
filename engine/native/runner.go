package native

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
}

func newRunner(e *Engine, name string, m *Model, tok *tokenizer.Tokenizer, tmpl *chat.Template) *runner {
	return &runner{e: e, name: name, model: m, tok: tok, tmpl: tmpl, wake: make(chan struct{}, 1), pooling: PoolMean}
}

func (r *runner) inFlight() int { return int(r.active.Load()) }

// seq is one sequence being generated.
type seq struct {
	job       *job
	index     int     // choice index
	tokens    []int32 // prompt then generated tokens
	promptLen int
	cache     *kvCache
	dec       *tokenizer.Decoder
	text      strings.Builder
	finish    string
	samp      *seqSampling // penalties and logprobs (sample.go)
}

// job is one request: its sequences and where its result goes.
type job struct {
	p         *params
	seqs      []*seq
	remaining int
	done      chan struct{}
	cancelled atomic.Bool
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
				for _, id := range pi.ids {
					if id < 0 || int(id) >= r.model.cfg.VocabSize {
						return badRequest(fmt.Sprintf("token id %d is outside the vocabulary (0..%d)", id, r.model.cfg.VocabSize-1), "prompt", "invalid_value"), nil
					}
				}
				prompts = append(prompts, pi.ids)
			} else {
				prompts = append(prompts, r.tok.Encode(pi.text, true, false))
			}
		}
	}
	if resp := p.checkVocab(r.model.cfg.VocabSize); resp != nil {
		return resp, nil
	}
	j := &job{p: p, done: make(chan struct{})}
	for pi, pr := range prompts {
		if len(pr) == 0 {
			return badRequest("the prompt is empty", "prompt", "invalid_value"), nil
		}
		if ctxLen > 0 && len(pr) >= ctxLen {
			return badRequest(fmt.Sprintf("This model's maximum context length is %d tokens, but the prompt has %d tokens.", ctxLen, len(pr)), "messages", "context_length_exceeded"), nil
		}
		for k := range p.n {
			s := &seq{job: j, index: pi*p.n + k, promptLen: len(pr), cache: newKVCache(len(r.model.layers)), dec: r.tok.NewDecoder()}
			s.dec.Prime(pr) // the prompt's text exists: no leading-space stripping for the first token
			s.tokens = append(make([]int32, 0, len(pr)+p.maxTokens), pr...)
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
	return r.response(req, j), nil
}

// loop is the model's scheduler: every step it builds one batch of decode
// tokens and prefill chunks from the running sequences, runs it, samples,
// and retires finished sequences.
func (r *runner) loop(ctx context.Context) {
	for {
		r.mu.Lock()
		for len(r.running) < r.e.cfg.MaxSeqs && len(r.waiting) > 0 {
			r.running = append(r.running, r.waiting[0])
			r.waiting = r.waiting[1:]
		}
		// Drop sequences whose request went away.
		kept := r.running[:0]
		for _, s := range r.running {
			if s.job.cancelled.Load() {
				r.active.Add(-1)
				continue
			}
			kept = append(kept, s)
		}
		r.running = kept
		idle := len(r.running) == 0
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
		r.step()
	}
}

// step runs one forward pass over the running sequences.
func (r *runner) step() {
	budget := r.e.cfg.MaxBatchTokens
	var b batch
	var owners []*seq // the sequence of each logits row
	add := func(s *seq, n int) {
		start := s.cache.n
		first := len(b.tokens)
		b.tokens = append(b.tokens, s.tokens[start:start+n]...)
		for i := range n {
			b.pos = append(b.pos, int32(start+i))
		}
		b.segs = append(b.segs, segment{cache: s.cache, first: first, n: n, start: start})
		if start+n == len(s.tokens) {
			b.logitRows = append(b.logitRows, first+n-1)
			owners = append(owners, s)
		}
		budget -= n
	}
	// Decodes first: each costs one token and keeps its sequence moving.
	for _, s := range r.running {
		if s.cache.n >= s.promptLen && budget > 0 {
			add(s, len(s.tokens)-s.cache.n)
		}
	}
	// Then prompt chunks with what the budget leaves.
	for _, s := range r.running {
		if s.cache.n < s.promptLen && budget > 0 {
			add(s, min(s.promptLen-s.cache.n, budget))
		}
	}
	if len(b.tokens) == 0 {
		return
	}
	r.e.compute.Lock()
	logits := r.model.forward(&b, &r.scratch)
	r.e.compute.Unlock()
	vocab := r.model.cfg.VocabSize
	for i, s := range owners {
		row := logits[i*vocab : (i+1)*vocab]
		tok := r.pick(s, row)
		r.advance(s, tok)
	}
	r.retire()
}

// advance appends a sampled token and decides whether the sequence ends.
func (r *runner) advance(s *seq, tok int32) {
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
		s.cache = nil
		r.active.Add(-1)
		s.job.remaining--
		if s.job.remaining == 0 {
			close(s.job.done)
		}
	}
	r.running = kept
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (r *runner) response(req *engine.Request, j *job) *engine.Response {
	var u usage
	counted := map[int]bool{}
	for _, s := range j.seqs {
		u.CompletionTokens += len(s.tokens) - s.promptLen
		if !counted[s.index/j.p.n] {
			counted[s.index/j.p.n] = true
			u.PromptTokens += s.promptLen
		}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	id := requestHash(req)
	created := time.Now().Unix()
	var body any
	if req.Endpoint == engine.EndpointChat {
		type msg struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}
		type choice struct {
			Index        int    `json:"index"`
			Message      msg    `json:"message"`
			Logprobs     any    `json:"logprobs"`
			FinishReason string `json:"finish_reason"`
		}
		cs := make([]choice, len(j.seqs))
		for i, s := range j.seqs {
			cs[i] = choice{Index: s.index, Message: msg{Role: "assistant", Content: s.text.String()},
				Logprobs: r.chatLogprobs(j.p, s), FinishReason: s.finish}
		}
		body = struct {
			ID      string   `json:"id"`
			Object  string   `json:"object"`
			Created int64    `json:"created"`
			Model   string   `json:"model"`
			Choices []choice `json:"choices"`
			Usage   usage    `json:"usage"`
		}{"chatcmpl-" + id, "chat.completion", created, r.name, cs, u}
	} else {
		type choice struct {
			Index        int    `json:"index"`
			Text         string `json:"text"`
			Logprobs     any    `json:"logprobs"`
			FinishReason string `json:"finish_reason"`
		}
		cs := make([]choice, len(j.seqs))
		for i, s := range j.seqs {
			text, prompt := s.text.String(), ""
			if j.p.echo {
				prompt = r.tok.Decode(s.tokens[:s.promptLen])
				text = prompt + text
			}
			cs[i] = choice{Index: s.index, Text: text, FinishReason: s.finish,
				Logprobs: r.legacyLogprobs(j.p, s, text, prompt)}
		}
		body = struct {
			ID      string   `json:"id"`
			Object  string   `json:"object"`
			Created int64    `json:"created"`
			Model   string   `json:"model"`
			Choices []choice `json:"choices"`
			Usage   usage    `json:"usage"`
		}{"cmpl-" + id, "text_completion", created, r.name, cs, u}
	}
	raw, _ := json.Marshal(body)
	return &engine.Response{StatusCode: 200, RequestID: "req_" + id, Body: raw}
}

// requestHash names a request's answer: the same request gets the same ids.
func requestHash(req *engine.Request) string {
	h := sha256.Sum256(append([]byte(req.CustomID+"\x00"), req.Body...))
	return hex.EncodeToString(h[:12])
}

func requestID(req *engine.Request) string { return "req_" + requestHash(req) }
