package native

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/kernels"
)

func openEngineWith(t testing.TB, set func(*Config), models ...ModelConfig) *Engine {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Models = models
	cfg.Kernels = os.Getenv("BATCHD_KERNELS") // as openEngine: CI runs the suite again on avx2
	set(&cfg)
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

// idleRunner loads a model's runner without starting its scheduler, so
// that a test may set its queues by hand: a live scheduler would pick the
// hand-made sequences up (they have no job) and race on the block manager.
func idleRunner(t testing.TB, mc ModelConfig) *runner {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Models = []ModelConfig{mc}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.cpu = kernels.NewCPU(1)
	r, err := e.load(mc)
	if err != nil {
		e.cpu.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.model.src.Close()
		e.cpu.Close()
	})
	return r
}

// idsPrompt is a deterministic token-id prompt of n tokens from seed.
func idsPrompt(seed, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(3 + (seed*7919+i*104729)%200)
	}
	return out
}

func completion(t *testing.T, e *Engine, prompt []int32, maxTokens, n int) map[string]any {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTokens, "ignore_eos": true, "n": n})
	return do(t, e, engine.EndpointCompletions, string(raw))
}

func choiceText(m map[string]any, i int) string {
	return m["choices"].([]any)[i].(map[string]any)["text"].(string)
}

func cachedTokens(m map[string]any) int {
	return int(m["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64))
}

func TestBlockManagerLRU(t *testing.T) {
	m := newBlockManager(4, kvBlockSize, false)
	h := func(i byte) blockHash { return blockHash{i} }
	var got []int32
	for range 4 {
		got = append(got, m.alloc())
	}
	if m.alloc() != -1 || m.numFree() != 0 {
		t.Fatalf("a full pool allocated a fifth block")
	}
	for i, b := range got {
		m.register(b, h(byte(i)))
	}
	// Free 2, 0, 3 in that order: they stay cached, LRU order 2, 0, 3.
	m.release(got[2])
	m.release(got[0])
	m.release(got[3])
	if m.numFree() != 3 || m.cachedFree() != 3 {
		t.Fatalf("free %d, cached free %d; want 3, 3", m.numFree(), m.cachedFree())
	}
	// Reuse by hash takes block 0 out of the free list.
	if b, ok := m.lookup(h(0)); !ok || b != got[0] {
		t.Fatalf("lookup(0) = %d, %v", b, ok)
	}
	m.acquire(got[0])
	if m.numFree() != 2 || m.ref[got[0]] != 1 {
		t.Fatalf("after reuse: free %d, ref %d", m.numFree(), m.ref[got[0]])
	}
	// A new block evicts the least recently freed: 2, then 3.
	if b := m.alloc(); b != got[2] {
		t.Fatalf("evicted %d, want %d", b, got[2])
	}
	if _, ok := m.lookup(h(2)); ok {
		t.Fatal("an evicted block is still found by hash")
	}
	if _, ok := m.lookup(h(3)); !ok {
		t.Fatal("block 3 was evicted out of order")
	}
	if b := m.alloc(); b != got[3] {
		t.Fatalf("evicted %d, want %d", b, got[3])
	}
	// A second block computing the same hash is not registered over the first.
	m.register(got[2], h(0))
	if b, _ := m.lookup(h(0)); b != got[0] {
		t.Fatalf("hash 0 moved to block %d", b)
	}
	// Shared blocks are freed at their last release only.
	m.acquire(got[0])
	m.release(got[0])
	if m.numFree() != 0 {
		t.Fatalf("a block with a reference left is free")
	}
	m.release(got[0])
	if m.numFree() != 1 {
		t.Fatalf("free %d, want 1", m.numFree())
	}
	// With caching disabled nothing is found.
	d := newBlockManager(2, kvBlockSize, true)
	d.register(d.alloc(), h(1))
	if _, ok := d.lookup(h(1)); ok {
		t.Fatal("a disabled prefix cache found a block")
	}
}

// A second request sharing a 64-token system prompt takes its full blocks
// (48+ tokens for blocks of 16; all 64 for blocks of 32 or 64) from the prefix cache and generates what an engine without the cache
// does; n > 1 choices share the prompt's blocks.
func TestPrefixCacheSharedSystemPrompt(t *testing.T) {
	path := demoPath(t)
	on := openEngine(t, ModelConfig{Path: path})
	off := openEngineWith(t, func(c *Config) { c.DisablePrefixCache = true }, ModelConfig{Path: path})
	system := idsPrompt(1, 64)
	a := append(append([]int32(nil), system...), idsPrompt(2, 9)...)
	b := append(append([]int32(nil), system...), idsPrompt(3, 13)...)

	first := completion(t, on, a, 16, 1)
	if c := cachedTokens(first); c != 0 {
		t.Fatalf("first request: cached_tokens %d, want 0", c)
	}
	second := completion(t, on, b, 16, 1)
	if c := cachedTokens(second); c < 48 {
		t.Fatalf("second request: cached_tokens %d, want >= 48", c)
	}
	if want := choiceText(completion(t, off, b, 16, 1), 0); choiceText(second, 0) != want {
		t.Fatalf("with the prefix cache %q, without %q", choiceText(second, 0), want)
	}
	if c := cachedTokens(completion(t, off, b, 16, 1)); c != 0 {
		t.Fatalf("disabled cache reported %d cached tokens", c)
	}
	// The same prompt again: every full block (the last token is always
	// computed).
	if c, want := cachedTokens(completion(t, on, b, 16, 1)), (len(b)-1)/kvBlockSize*kvBlockSize; c != want {
		t.Fatalf("repeat: cached_tokens %d, want %d", c, want)
	}

	// n = 4 on a new 40-token prompt: the three later choices reuse the
	// first one's full blocks.
	before := on.CacheStats()
	p := idsPrompt(4, 40)
	m := completion(t, on, p, 8, 4)
	want := choiceText(completion(t, off, p, 8, 1), 0)
	for i := range 4 {
		if choiceText(m, i) != want {
			t.Fatalf("choice %d: %q, want %q", i, choiceText(m, i), want)
		}
	}
	if d, want := on.CacheStats().CachedTokens-before.CachedTokens, int64(3*(39/kvBlockSize*kvBlockSize)); d != want {
		t.Fatalf("n=4: %d cached tokens across the choices, want %d", d, want)
	}
}

// A KV cache for about two sequences and sixteen concurrent requests:
// sequences are preempted and recomputed, and every request gets exactly
// the tokens it gets alone.
func TestPreemptionUnderTinyKVBudget(t *testing.T) {
	path := demoPath(t)
	alone := openEngine(t, ModelConfig{Path: path})
	var e *Engine
	e = openEngineWith(t, func(c *Config) {
		c.KVCacheBytes = 1 // replaced below once the shape is known
	}, ModelConfig{Path: path})
	mc := e.runners[e.order[0]].model.cfg
	bb := blockBytes(mc.Layers, mc.KVHeads*mc.HeadDim, kvBlockSize)
	e.Close(context.Background())
	// Room for about two requests of 24 prompt + 16 generated tokens.
	blocks := 2*blocksFor(24+16, kvBlockSize) + 1
	e = openEngineWith(t, func(c *Config) { c.KVCacheBytes = int64(blocks) * bb }, ModelConfig{Path: path})
	if n := e.CacheStats().Blocks; n != blocks {
		t.Fatalf("%d blocks, want %d", n, blocks)
	}
	const reqs = 16
	want := make([]string, reqs)
	for i := range reqs {
		want[i] = choiceText(completion(t, alone, idsPrompt(100+i, 24), 16, 1), 0)
	}
	got := make([]string, reqs)
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() { got[i] = choiceText(completion(t, e, idsPrompt(100+i, 24), 16, 1), 0) })
	}
	wg.Wait()
	for i := range reqs {
		if got[i] != want[i] {
			t.Errorf("request %d: %q under preemption, %q alone", i, got[i], want[i])
		}
	}
	st := e.CacheStats()
	if st.Preemptions == 0 {
		t.Errorf("no preemption with %d blocks and %d requests", st.Blocks, reqs)
	}
	if st.BlocksPeak > st.Blocks {
		t.Errorf("peak %d blocks of %d", st.BlocksPeak, st.Blocks)
	}
	t.Logf("%d preemptions, peak %d of %d blocks", st.Preemptions, st.BlocksPeak, st.Blocks)

	// A prompt larger than the whole cache is a 400, not a wait.
	raw, _ := json.Marshal(map[string]any{"prompt": idsPrompt(7, blocks*kvBlockSize+1), "max_tokens": 2})
	resp, err := e.Do(context.Background(), &engine.Request{Endpoint: engine.EndpointCompletions, Body: raw})
	if err != nil || resp.StatusCode != 400 || !bytes.Contains(resp.Body, []byte("context_length_exceeded")) {
		t.Fatalf("%v %d %s", err, resp.StatusCode, resp.Body)
	}
	// One that fits but then outgrows the cache ends with "length".
	m := completion(t, e, idsPrompt(8, (blocks-1)*kvBlockSize), 2*kvBlockSize, 1)
	ch := m["choices"].([]any)[0].(map[string]any)
	if ch["finish_reason"] != "length" {
		t.Fatalf("finish_reason %v", ch["finish_reason"])
	}
	if u := m["usage"].(map[string]any)["completion_tokens"].(float64); u < 1 || u > kvBlockSize+1 {
		t.Fatalf("completion_tokens %v, want 1..%d", u, kvBlockSize+1)
	}
}

// A sequence that reuses another's cached prefix blocks (in a shuffled
// block table) gets bit-identical logits to one pass over its whole prompt
// in a private cache.
func TestSharedPrefixBlocksGiveSameLogits(t *testing.T) {
	_, m, _ := loadModel(t, demoPath(t))
	bs := kvBlockSize
	shared := 2 * bs
	a := append(idsPrompt(1, shared), idsPrompt(2, 5)...)
	b := append(idsPrompt(1, shared), idsPrompt(3, 7)...)
	kv := m.newKVStore(bs, 6)
	var s scratch
	run := func(toks []int32, table []int32, start int) []float32 {
		bt := batch{kv: kv, tokens: toks[start:], segs: []segment{{blocks: table, n: len(toks) - start, start: start}}}
		for i := range bt.tokens {
			bt.pos = append(bt.pos, int32(start+i))
			bt.logitRows = append(bt.logitRows, i)
		}
		return append([]float32(nil), m.forward(&bt, &s)...)
	}
	run(a, []int32{4, 1, 5}, 0)             // a fills blocks 4, 1 (its prefix) and 5
	got := run(b, []int32{4, 1, 2}, shared) // b computes only its own tokens
	want := logitsAt(m, b)[shared*m.cfg.VocabSize:]
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("logit %d (token %d): %g with shared blocks, %g alone", i, shared+i/m.cfg.VocabSize, got[i], want[i])
		}
	}
}

// Requests arriving together with the same system prompt compute it once:
// the later ones wait for the blocks the first is computing.
func TestPrefixComputedOnceForConcurrentRequests(t *testing.T) {
	e := openEngine(t, ModelConfig{Path: demoPath(t)})
	system := idsPrompt(9, 3*kvBlockSize)
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { completion(t, e, append(append([]int32(nil), system...), idsPrompt(20+i, 5)...), 4, 1) })
	}
	wg.Wait()
	st := e.CacheStats()
	if want := int64((n - 1) * len(system)); st.CachedTokens != want {
		t.Errorf("cached %d prompt tokens, want %d", st.CachedTokens, want)
	}
	if want := int64(len(system) + n*5); st.PrefillTokens != want {
		t.Errorf("computed %d prompt tokens, want %d", st.PrefillTokens, want)
	}
}

// orderWaiting groups waiting requests by cached prefix: those whose
// leading blocks are cached go first (longest first), preempted ones keep
// the front, one passed over too long goes first, the rest keep their order.
func TestOrderWaitingGroupsByCachedPrefix(t *testing.T) {
	r := idleRunner(t, ModelConfig{Path: demoPath(t)})
	bs := r.mr.kv.bs
	mk := func(first int32) *seq {
		s := &seq{job: &job{}, tokens: make([]int32, 2*bs+3)}
		for i := range s.tokens {
			s.tokens[i] = first + int32(i%7)
		}
		return s
	}
	cache := func(s *seq, blocks int) {
		for bi := range blocks {
			b := r.sched.bm.alloc()
			r.sched.bm.register(b, s.hashAt(bi, bs))
			r.sched.bm.release(b)
		}
	}
	a, b, c, d, pre := mk(10), mk(20), mk(30), mk(40), mk(50)
	cache(b, 1)
	cache(d, 2)
	pre.status = seqPreempted
	r.sched.waiting = []*seq{a, b, pre, c, d}
	r.sched.orderWaiting()
	got := slices.Clone(r.sched.waiting)
	name := map[*seq]string{a: "a", b: "b", c: "c", d: "d", pre: "preempted"}
	var order []string
	for _, s := range got {
		order = append(order, name[s])
	}
	if want := "preempted d b a c"; strings.Join(order, " ") != want {
		t.Fatalf("order %v, want %s", order, want)
	}
	// A sequence passed over for too long goes before cached ones.
	c.waitSteps = maxWaitSteps
	r.sched.waiting = []*seq{a, b, c, d}
	r.sched.orderWaiting()
	first := r.sched.waiting[0]
	if first != c {
		t.Fatalf("an aged sequence is not first: %s", name[first])
	}
}
