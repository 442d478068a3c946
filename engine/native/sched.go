package native

import (
	"slices"
	"sync/atomic"
)

// The scheduler: every step builds one batch from the running sequences'
// decode tokens (oldest first), their prompt chunks, and newly admitted
// sequences, within the step's token budget and the KV cache's blocks.
//
// Admission is bounded by KV memory: a waiting sequence is admitted only
// when blocks for its first chunk are free (after taking its cached prefix
// blocks). When a running sequence needs a block and none is free, the most
// recently admitted sequence not yet in this step's batch is preempted: its
// blocks are freed (its full blocks stay in the prefix cache), and it goes
// back to the front of the waiting queue to recompute its prompt and
// generated tokens later. Recomputation gives the same K/V and, with
// position-keyed sampling, the same next token, so preemption is invisible
// in the output. A sequence that alone cannot fit the next block in the
// whole cache ends with finish_reason "length".

// cacheCounters are a runner's KV cache statistics.
type cacheCounters struct {
	promptTokens  atomic.Int64 // prompt tokens of admitted sequences (first admission)
	cachedTokens  atomic.Int64 // of those, taken from the prefix cache
	prefillTokens atomic.Int64 // prompt and recomputed tokens run through the model
	preemptions   atomic.Int64
	blocksUsed    atomic.Int64 // referenced now
	blocksPeak    atomic.Int64
	blocksTotal   atomic.Int64
	blockBytes    atomic.Int64
}

// CacheStats reports the KV cache of all models together.
type CacheStats struct {
	Blocks, BlockSize int
	BlocksUsed        int   // referenced by sequences now
	BlocksPeak        int   // most ever referenced at once
	BudgetBytes       int64 // bytes of all blocks
	PeakBytes         int64 // bytes of BlocksPeak blocks
	PromptTokens      int64 // prompt tokens admitted
	CachedTokens      int64 // of those, served from the prefix cache
	PrefillTokens     int64 // prompt (and preemption recompute) tokens computed
	Preemptions       int64
}

// HitRate is the fraction of admitted prompt tokens served from the cache.
func (s CacheStats) HitRate() float64 {
	if s.PromptTokens == 0 {
		return 0
	}
	return float64(s.CachedTokens) / float64(s.PromptTokens)
}

// CacheStats sums the runners' KV cache statistics.
func (e *Engine) CacheStats() CacheStats {
	s := CacheStats{BlockSize: kvBlockSize}
	for _, r := range e.runners {
		c := &r.stats
		bb := c.blockBytes.Load()
		s.Blocks += int(c.blocksTotal.Load())
		s.BlocksUsed += int(c.blocksUsed.Load())
		s.BlocksPeak += int(c.blocksPeak.Load())
		s.BudgetBytes += c.blocksTotal.Load() * bb
		s.PeakBytes += c.blocksPeak.Load() * bb
		s.PromptTokens += c.promptTokens.Load()
		s.CachedTokens += c.cachedTokens.Load()
		s.PrefillTokens += c.prefillTokens.Load()
		s.Preemptions += c.preemptions.Load()
	}
	return s
}

// initKV sizes the runner's block pool from the engine's KV budget.
func (r *runner) initKV() {
	c := r.model.cfg
	kvDim := c.KVHeads * c.HeadDim
	budget := r.e.cfg.KVCacheBytes
	if budget <= 0 {
		budget = defaultKVCacheBytes()
	}
	bb := blockBytes(len(r.model.layers), kvDim, kvBlockSize)
	n := int(budget / bb)
	if c.ContextLength > 0 {
		// More than every sequence at full context cannot be used.
		n = min(n, r.e.cfg.MaxSeqs*blocksFor(c.ContextLength, kvBlockSize))
	}
	n = max(n, 1)
	r.kv = r.model.newKVStore(kvBlockSize, n)
	r.bm = newBlockManager(n, r.e.cfg.DisablePrefixCache)
	r.stats.blocksTotal.Store(int64(n))
	r.stats.blockBytes.Store(bb)
}

// hashAt is the chained hash of s's full block bi.
func (s *seq) hashAt(bi, bs int) blockHash {
	for len(s.hashes) <= bi {
		i := len(s.hashes)
		var parent blockHash
		if i > 0 {
			parent = s.hashes[i-1]
		}
		// The adapter is "" until LoRA adapters exist.
		s.hashes = append(s.hashes, chainHash(parent, "", s.tokens[i*bs:(i+1)*bs]))
	}
	return s.hashes[bi]
}

// releaseBlocks drops s's blocks, last first, so that a prefix outlives
// the blocks that extend it in the LRU order.
func (r *runner) releaseBlocks(s *seq) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		r.bm.release(s.blocks[i])
	}
	s.blocks, s.n, s.registered = s.blocks[:0], 0, 0
}

// preempt frees v's blocks and puts it back at the front of the queue.
func (r *runner) preempt(v *seq) {
	r.releaseBlocks(v)
	v.running = false
	r.running = slices.DeleteFunc(r.running, func(x *seq) bool { return x == v })
	r.mu.Lock()
	r.waiting = slices.Insert(r.waiting, 0, v)
	r.mu.Unlock()
	r.stats.preemptions.Add(1)
}

// finishLength ends a sequence that cannot grow in this cache.
func (r *runner) finishLength(s *seq) {
	s.finish = "length"
	s.text.WriteString(s.dec.Flush())
	r.emit(s)
}

// grow gives running sequence s blocks for its next want positions and
// returns how many it got: with shrink (a prompt chunk) as many as the free
// blocks hold, else all or none. When no block is free it preempts the most
// recently admitted unscheduled sequence, which may be s itself.
func (r *runner) grow(s *seq, want int, shrink bool) int {
	bs := r.kv.bs
	for {
		free := r.bm.numFree()
		need := blocksFor(s.n+want, bs) - len(s.blocks)
		if need > free && shrink {
			if c := (len(s.blocks)+free)*bs - s.n; c > 0 {
				want = c
				need = blocksFor(s.n+want, bs) - len(s.blocks)
			}
		}
		if need <= free {
			for range need {
				s.blocks = append(s.blocks, r.bm.alloc())
			}
			return want
		}
		if blocksFor(s.n+1, bs) > r.kv.nBlocks {
			r.finishLength(s) // its next position fits in no cache of this size
			return 0
		}
		var victim *seq // finished sequences free their blocks at retire
		for i := len(r.running) - 1; i >= 0; i-- {
			if x := r.running[i]; !x.sched && x.finish == "" {
				victim = x
				break
			}
		}
		r.preempt(victim) // s is unscheduled and unfinished, so there is one
		if victim == s {
			return 0
		}
	}
}

// admit takes s's cached prefix blocks and blocks for a first chunk of up
// to budget tokens, and returns the chunk (0: not admitted, nothing taken).
func (r *runner) admit(s *seq, budget int) int {
	bs := r.kv.bs
	var hits []int32
	hitFree := 0
	for bi := range (len(s.tokens) - 1) / bs { // the last token is always computed
		b, ok := r.bm.lookup(s.hashAt(bi, bs))
		if !ok {
			break
		}
		hits = append(hits, b)
		if r.bm.ref[b] == 0 {
			hitFree++
		}
	}
	avail := r.bm.numFree() - hitFree
	if len(r.running) > 0 {
		avail -= r.kv.nBlocks / 100 // headroom for running decodes
	}
	hitTok := len(hits) * bs
	k := min(len(s.tokens)-hitTok, budget, avail*bs)
	if k < 1 {
		return 0
	}
	for _, b := range hits {
		r.bm.acquire(b)
	}
	s.blocks = append(s.blocks[:0], hits...)
	for range blocksFor(hitTok+k, bs) - len(hits) {
		s.blocks = append(s.blocks, r.bm.alloc())
	}
	s.n, s.registered, s.running = hitTok, len(hits), true
	if !s.admitted {
		s.admitted, s.cached = true, hitTok
		r.stats.promptTokens.Add(int64(s.promptLen))
		r.stats.cachedTokens.Add(int64(min(hitTok, s.promptLen)))
	}
	return k
}

// maxWaitSteps is how many steps a waiting sequence may be passed over by
// ones whose prompt prefix is cached before it goes first regardless.
const maxWaitSteps = 64

// orderWaiting groups the waiting queue by shared prefix: sequences whose
// leading prompt blocks are in the prefix cache go before those whose are
// not, longest cached prefix first, so requests sharing a system prompt run
// while its blocks are cached instead of letting other prompts evict them.
// Preempted sequences keep the front, a sequence passed over for
// maxWaitSteps steps goes first, and the order is otherwise kept.
func (r *runner) orderWaiting() {
	if r.bm.noCache || len(r.waiting) < 2 {
		return
	}
	bs := r.kv.bs
	type key struct {
		class, hits int
	}
	keys := make(map[*seq]key, len(r.waiting))
	for _, s := range r.waiting {
		s.waitSteps++
		k := key{class: 2}
		switch {
		case s.admitted: // preempted: recompute first
			k.class = 0
		case s.waitSteps > maxWaitSteps:
			k.class = 1
		default:
			for bi := range (len(s.tokens) - 1) / bs {
				if _, ok := r.bm.lookup(s.hashAt(bi, bs)); !ok {
					break
				}
				k.hits++
			}
		}
		keys[s] = k
	}
	slices.SortStableFunc(r.waiting, func(a, b *seq) int {
		ka, kb := keys[a], keys[b]
		if ka.class != kb.class {
			return ka.class - kb.class
		}
		return kb.hits - ka.hits
	})
}

// pendingBlocks is the hashes of the full blocks that running sequences
// have still to compute from tokens they already have (nil when prefix
// caching is off).
func (r *runner) pendingBlocks() map[blockHash]bool {
	if r.bm.noCache {
		return nil
	}
	pending := map[blockHash]bool{}
	for _, s := range r.running {
		if s.finish == "" {
			r.addPending(s, pending)
		}
	}
	return pending
}

func (r *runner) addPending(s *seq, pending map[blockHash]bool) {
	if pending == nil {
		return
	}
	bs := r.kv.bs
	for bi := s.registered; (bi+1)*bs <= len(s.tokens); bi++ {
		pending[s.hashAt(bi, bs)] = true
	}
}

// waitsForPending says whether s's first block missing from the prefix
// cache is one a running sequence is computing.
func (r *runner) waitsForPending(s *seq, pending map[blockHash]bool) bool {
	if len(pending) == 0 {
		return false
	}
	bs := r.kv.bs
	for bi := range (len(s.tokens) - 1) / bs {
		h := s.hashAt(bi, bs)
		if _, ok := r.bm.lookup(h); !ok {
			return pending[h]
		}
	}
	return false
}

// step runs one forward pass over the running sequences.
func (r *runner) step() {
	bs := r.kv.bs
	budget := r.e.cfg.MaxBatchTokens
	b := batch{kv: r.kv}
	var owners, sched []*seq // the sequence of each logits row; the batch's sequences
	preempted := r.stats.preemptions.Load()
	add := func(s *seq, n int) {
		start := s.n
		first := len(b.tokens)
		b.tokens = append(b.tokens, s.tokens[start:start+n]...)
		for i := range n {
			b.pos = append(b.pos, int32(start+i))
		}
		b.segs = append(b.segs, segment{blocks: s.blocks, first: first, n: n, start: start})
		if start+n == len(s.tokens) {
			b.logitRows = append(b.logitRows, first+n-1)
			owners = append(owners, s)
		}
		s.sched, s.chunk = true, n
		sched = append(sched, s)
		budget -= n
	}
	// Decodes first, oldest first: each costs one token and keeps its
	// sequence moving.
	iso := r.isolated()
	for _, s := range slices.Clone(r.running) {
		if iso != nil && s.job != iso {
			continue
		}
		if budget > 0 && s.running && !s.sched && s.finish == "" && len(s.tokens)-s.n == 1 {
			if r.grow(s, 1, false) == 1 {
				add(s, 1)
			}
		}
	}
	// Then prompt (or recompute) chunks with what the budget leaves.
	for _, s := range slices.Clone(r.running) {
		if iso != nil && s.job != iso {
			continue
		}
		if budget > 0 && s.running && !s.sched && s.finish == "" && len(s.tokens)-s.n > 1 {
			if k := r.grow(s, min(len(s.tokens)-s.n, budget), true); k > 0 {
				add(s, k)
			}
		}
	}
	// Then admit waiting sequences, in order, while blocks and budget last
	// (not in a step that had to preempt: memory is short).
	func() {
		pending := r.pendingBlocks()
		r.mu.Lock()
		defer r.mu.Unlock() // deferred: a panic in the step (fault.go) must not leave it held
		r.orderWaiting()
		for i := 0; i < len(r.waiting) && budget > 0 && len(r.running) < r.e.cfg.MaxSeqs && r.stats.preemptions.Load() == preempted; {
			s := r.waiting[i]
			if iso != nil && s.job != iso {
				i++
				continue
			}
			if s.job.cancelled.Load() {
				r.waiting = slices.Delete(r.waiting, i, i+1)
				r.active.Add(-1)
				continue
			}
			// A sequence whose next uncached block another running sequence is
			// computing waits for it, then shares it through the prefix cache:
			// the other choices of an n > 1 request, requests arriving together
			// with the same system prompt.
			if r.waitsForPending(s, pending) {
				i++
				continue
			}
			k := r.admit(s, budget)
			if k == 0 {
				break
			}
			r.waiting = slices.Delete(r.waiting, i, i+1)
			r.running = append(r.running, s)
			add(s, k)
			r.addPending(s, pending)
		}
	}()
	r.stats.blocksUsed.Store(int64(r.bm.used()))
	if u := int64(r.bm.used()); u > r.stats.blocksPeak.Load() {
		r.stats.blocksPeak.Store(u)
	}
	if len(b.tokens) == 0 {
		r.retire()
		return
	}
	r.inStep = sched
	logits := r.forward(&b)
	for _, s := range sched {
		if decode := s.chunk == 1 && s.n >= s.promptLen; !decode {
			r.stats.prefillTokens.Add(int64(s.chunk))
		}
		s.n += s.chunk
		s.sched = false
		for ; (s.registered+1)*bs <= s.n; s.registered++ {
			r.bm.register(s.blocks[s.registered], s.hashAt(s.registered, bs))
		}
	}
	vocab := r.model.cfg.VocabSize
	for i, s := range owners {
		row := logits[i*vocab : (i+1)*vocab]
		tok := r.pick(s, row)
		r.advance(s, tok)
	}
	r.inStep = nil
	r.retire()
}
