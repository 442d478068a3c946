package native

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/tokenizer"
)

// The scheduler decides, step by step, which tokens of which sequences the
// model computes (schedule → plan), and takes the sampled tokens back
// (postprocess). It runs no model and no kernel: a test drives it alone.
//
// Every step builds one batch from the running sequences' decode tokens
// (oldest first), their prompt chunks, and newly admitted sequences, within
// the step's token budget and the KV cache's blocks.
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
type scheduler struct {
	maxBatchTokens int // token budget of a step
	maxSeqs        int // sequences running at once
	ctxLen         int // the model's context length (0: unbounded)
	bm             *blockManager
	tok            *tokenizer.Tokenizer // end-of-generation ids
	stats          *cacheCounters
	// drafters are the speculative drafters by method (nil: unavailable),
	// specK the most drafts a sequence verifies in a step; specSeqs and
	// specKs are proposeDrafts' buffers.
	drafters [specMethods]drafter
	specK    int
	specSeqs []*seq
	specKs   []int
	// cost is the model's step time as the runner measures it; specSlots,
	// specCaps and specAlloc are allocDrafts' buffers.
	cost      stepCost
	specSlots []draftSlot
	specIdle  int // allocations that drafted nothing (probing counts them)
	specCaps  []int
	specAlloc []int
	// onToken, when set, sees each token postprocess appends and the text
	// it decoded to (the logprobs' bookkeeping).
	onToken func(s *seq, tok int32, piece string)

	// active counts the sequences submitted and not yet retired.
	active atomic.Int64
	// cancels is set when a request went away, so that the next step drops
	// its waiting sequences.
	cancels atomic.Bool
	mu      sync.Mutex
	// incoming is what submit queued since the last step (under mu).
	incoming []*seq

	// The rest belongs to the scheduler goroutine.
	waiting []*seq
	running []*seq
	decodes []*seq // schedule's buffer
	// quarantine is set while suspect jobs may be queued (fault.go).
	quarantine bool
	// passed counts the admissions in a row that went to a priority above
	// the lowest waiting; lowest is that priority in the step being
	// planned (orderWaiting, planAdmissions).
	passed int
	lowest engine.Priority
}

// plan is one step: the sequences whose tokens the model computes, in
// batch order, each with its chunk (s.chunk tokens from position s.n),
// and those of them that get logits and so new tokens.
type plan struct {
	seqs   []*seq
	sample []*seq
	tokens int
}

// submit queues a job's sequences; any goroutine may call it.
func (sc *scheduler) submit(j *job) {
	sc.active.Add(int64(len(j.seqs)))
	sc.mu.Lock()
	sc.incoming = append(sc.incoming, j.seqs...)
	sc.mu.Unlock()
}

// idle says whether nothing is queued or running.
func (sc *scheduler) idle() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return len(sc.running) == 0 && len(sc.waiting) == 0 && len(sc.incoming) == 0
}

// inFlight is the sequences submitted and not yet retired.
func (sc *scheduler) inFlight() int { return int(sc.active.Load()) }

// take moves what submit queued to the waiting queue.
func (sc *scheduler) take() {
	sc.mu.Lock()
	sc.waiting = append(sc.waiting, sc.incoming...)
	clear(sc.incoming)
	sc.incoming = sc.incoming[:0]
	sc.mu.Unlock()
}

// drop ends s, which holds no blocks, without completing its job (its
// request went away or failed).
func (sc *scheduler) drop(s *seq, reason string) {
	s.end(reason)
	sc.active.Add(-1)
}

// noteCancel tells the scheduler that a job was cancelled; any goroutine
// may call it.
func (sc *scheduler) noteCancel() { sc.cancels.Store(true) }

// schedule plans the next step. After taking what was submitted and
// sweeping out what was cancelled, it fills the step's token budget in
// order of urgency: the running sequences' decode tokens, then their
// prompt chunks, then first chunks of newly admitted sequences.
func (sc *scheduler) schedule() plan {
	sc.take()
	sc.sweep()
	pl := planning{budget: sc.maxBatchTokens, iso: sc.isolated()}
	preempted := sc.stats.preemptions.Load()
	sc.planDecodes(&pl)
	sc.planPromptChunks(&pl)
	sc.planAdmissions(&pl, sc.stats.preemptions.Load() != preempted)
	sc.noteBlocksUsed()
	return pl.plan
}

// planning is a plan while schedule builds it.
type planning struct {
	plan
	budget int  // tokens the step has left
	iso    *job // the suspect job that runs alone (isolated), or nil
}

// add puts s in the step with n tokens.
func (pl *planning) add(s *seq, n int) {
	s.chunk = n
	pl.seqs = append(pl.seqs, s)
	if s.sampled() {
		pl.sample = append(pl.sample, s)
	}
	pl.tokens += n
	pl.budget -= n
}

// skips says whether s stays out of the step because a suspect job runs
// alone in it.
func (pl *planning) skips(s *seq) bool { return pl.iso != nil && s.job != pl.iso }

// sweep drops the sequences whose request went away: the running ones,
// freeing their blocks, at every step, and the waiting ones when
// noteCancel said a job was cancelled since the last step.
func (sc *scheduler) sweep() {
	if sc.cancels.Swap(false) {
		sc.waiting = slices.DeleteFunc(sc.waiting, func(s *seq) bool {
			if s.job.cancelled.Load() {
				sc.drop(s, "cancelled")
				return true
			}
			return false
		})
	}
	sc.running = slices.DeleteFunc(sc.running, func(s *seq) bool {
		if !s.job.cancelled.Load() {
			return false
		}
		sc.releaseDraft(s)
		sc.bm.deallocate(s)
		sc.drop(s, "cancelled")
		return true
	})
}

// planDecodes decides which running sequences decode in this step: those
// with one token to compute, oldest first, while the budget lasts. Each
// costs one token and keeps its sequence moving, so it gets its block
// even if that preempts a more recently admitted sequence (grow). Before
// that, proposeDrafts gives decodes drafts to verify in the tokens the
// budget has left after one for every decode.
func (sc *scheduler) planDecodes(pl *planning) {
	decodes := sc.decoding(pl)
	if spare := pl.budget - len(decodes); spare > 0 {
		sc.proposeDrafts(decodes, spare)
	}
	for _, s := range decodes {
		if pl.budget <= 0 || s.status != seqRunning || s.chunk != 0 {
			s.draft = nil // preempted for an earlier decode's block
			continue
		}
		if n := sc.growDecode(s); n > 0 {
			pl.add(s, n)
		}
	}
}

// decoding is the running sequences with one token to compute that may
// join the step, oldest first (in sc.decodes, reused).
func (sc *scheduler) decoding(pl *planning) []*seq {
	decodes := sc.decodes[:0]
	for _, s := range sc.running {
		if !pl.skips(s) && s.status == seqRunning && s.chunk == 0 && len(s.tokens)-s.n == 1 {
			decodes = append(decodes, s)
		}
	}
	sc.decodes = decodes
	return decodes
}

// growDecode gives decoding sequence s blocks for its next token and its
// drafts, and returns how many tokens it got blocks for (0: none). Blocks
// for the drafts are taken only if free: drafts never preempt, and
// without room they are dropped.
func (sc *scheduler) growDecode(s *seq) int {
	if d := len(s.draft); d > 0 {
		if sc.bm.mayAppend(s, 1+d, false) == 1+d {
			sc.bm.appendSlots(s, 1+d)
			return 1 + d
		}
		s.draft = nil
	}
	return sc.grow(s, 1, false)
}

// planPromptChunks decides how much of their prompts (or of what a
// preempted sequence recomputes) the running sequences compute in this
// step, in running order: as much of what the decodes left of the budget
// as free blocks hold, preempting more recently admitted sequences when
// no block is free (grow).
func (sc *scheduler) planPromptChunks(pl *planning) {
	for _, s := range slices.Clone(sc.running) { // grow may preempt, changing sc.running
		if pl.skips(s) || pl.budget <= 0 || s.status != seqRunning || s.chunk != 0 {
			continue
		}
		if left := len(s.tokens) - s.n; left > 1 {
			if k := sc.grow(s, min(left, pl.budget), true); k > 0 {
				pl.add(s, k)
			}
		}
	}
}

// planAdmissions decides which waiting sequences join the running ones,
// in orderWaiting's order, while the budget, maxSeqs and the free KV
// blocks last: each with a first chunk of its prompt and its cached prefix
// blocks (admit). It admits none in a step that had to preempt (short):
// memory is short. It drops the cancelled ones it comes to.
func (sc *scheduler) planAdmissions(pl *planning, short bool) {
	pending := sc.pendingBlocks()
	sc.orderWaiting()
	if short {
		return
	}
	kept := sc.waiting[:0]
	for i, s := range sc.waiting {
		if pl.budget <= 0 || len(sc.running) >= sc.maxSeqs {
			kept = append(kept, sc.waiting[i:]...)
			break
		}
		if pl.skips(s) {
			kept = append(kept, s)
			continue
		}
		if s.job.cancelled.Load() {
			sc.drop(s, "cancelled")
			continue
		}
		// A sequence whose next uncached block another running sequence is
		// computing waits for it, then shares it through the prefix cache:
		// the other choices of an n > 1 request, requests arriving together
		// with the same system prompt.
		if sc.waitsForPending(s, pending) {
			kept = append(kept, s)
			continue
		}
		k := sc.admit(s, pl.budget)
		if k == 0 {
			kept = append(kept, sc.waiting[i:]...)
			break
		}
		sc.running = append(sc.running, s)
		pl.add(s, k)
		sc.addPending(s, pending)
		sc.notePassed(s)
	}
	clear(sc.waiting[len(kept):])
	sc.waiting = kept
}

// noteBlocksUsed records the KV blocks the planned step holds, and their
// peak.
func (sc *scheduler) noteBlocksUsed() {
	used := int64(sc.bm.used())
	sc.stats.blocksUsed.Store(used)
	if used > sc.stats.blocksPeak.Load() {
		sc.stats.blocksPeak.Store(used)
	}
}

// postprocess takes the step's results: the positions computed, and
// tokens[i], the new tokens of p.sample[i] (one each today; several when a
// draft is verified). It appends them until one ends the sequence, turning
// each into output, and retires finished sequences.
func (sc *scheduler) postprocess(p plan, tokens [][]int32) {
	sc.computed(p)
	for i, s := range p.sample {
		if len(tokens[i]) == 0 {
			continue // logits not finite: the runner fails its request
		}
		before := len(s.tokens)
		for _, t := range tokens[i] {
			if s.finished() {
				break
			}
			if sc.advance(s, t) {
				sc.output(s, t)
			}
			s.emit()
		}
		if len(s.draft) > 0 {
			sc.takeVerified(s, tokens[i], before)
		}
	}
	sc.retire()
}

// computed moves p's sequences past the positions the step computed
// (except those that verified drafts: takeVerified moves them).
func (sc *scheduler) computed(p plan) {
	for _, s := range p.seqs {
		if len(s.draft) > 0 {
			continue // verified: takeVerified moves it on by the drafts kept
		}
		if decode := s.chunk == 1 && s.n >= s.promptLen; !decode {
			sc.stats.prefillTokens.Add(int64(s.chunk))
		}
		s.n += s.chunk
		s.chunk = 0
		sc.bm.hashBlocks(s)
	}
}

// advance appends a sampled token to s, or ends s with it, and says
// whether it appended it. It ends s ("stop") at an end-of-generation or
// stop token, which is not part of the output, and ("length") at
// max_tokens or the context length; stop strings are the output step's.
func (sc *scheduler) advance(s *seq, tok int32) bool {
	if endsSeq(s, tok, sc.tok.IsEOG) {
		s.end("stop")
		return false
	}
	s.tokens = append(s.tokens, tok)
	if len(s.tokens)-s.promptLen >= s.job.p.maxTokens || (sc.ctxLen > 0 && len(s.tokens) >= sc.ctxLen) {
		s.end("length")
	}
	return true
}

// retire removes finished sequences and completes their jobs.
func (sc *scheduler) retire() {
	sc.running = slices.DeleteFunc(sc.running, func(s *seq) bool {
		if !s.finished() {
			return false
		}
		sc.releaseDraft(s)
		sc.bm.deallocate(s)
		sc.active.Add(-1)
		s.job.retireSeq()
		return true
	})
}

// preempt frees v's blocks and puts it back at the front of the queue.
func (sc *scheduler) preempt(v *seq) {
	sc.releaseDraft(v)
	sc.bm.deallocate(v)
	v.status = seqPreempted
	sc.running = slices.DeleteFunc(sc.running, func(x *seq) bool { return x == v })
	sc.waiting = slices.Insert(sc.waiting, 0, v)
	sc.stats.preemptions.Add(1)
}

// finishLength ends a sequence that cannot grow in this cache.
func (sc *scheduler) finishLength(s *seq) {
	s.end("length")
	s.text.WriteString(s.dec.Flush())
	s.emit()
}

// grow gives running sequence s blocks for its next want positions and
// returns how many it got: with shrink (a prompt chunk) as many as the free
// blocks hold, else all or none. When no block is free it preempts the most
// recently admitted unscheduled sequence, which may be s itself.
func (sc *scheduler) grow(s *seq, want int, shrink bool) int {
	for {
		if k := sc.bm.mayAppend(s, want, shrink); k > 0 {
			sc.bm.appendSlots(s, k)
			return k
		}
		if blocksFor(s.n+1, sc.bm.bs) > sc.bm.n {
			sc.finishLength(s) // its next position fits in no cache of this size
			return 0
		}
		var victim *seq // finished sequences free their blocks at retire
		for i := len(sc.running) - 1; i >= 0; i-- {
			if x := sc.running[i]; x.chunk == 0 && !x.finished() {
				victim = x
				break
			}
		}
		sc.preempt(victim) // s is unscheduled and unfinished, so there is one
		if victim == s {
			return 0
		}
	}
}

// admit takes s's cached prefix blocks and blocks for a first chunk of up
// to budget tokens, and returns the chunk (0: not admitted, nothing taken).
func (sc *scheduler) admit(s *seq, budget int) int {
	reserve := 0
	if len(sc.running) > 0 {
		reserve = sc.bm.n / 100 // headroom for running decodes
	}
	hits, k := sc.bm.canAllocate(s, budget, reserve)
	if k < 1 {
		return 0
	}
	sc.bm.allocate(s, hits, k)
	if s.status == seqWaiting { // first admission
		s.job.start()
		hitTok := len(hits) * sc.bm.bs
		s.cached = hitTok
		sc.stats.promptTokens.Add(int64(s.promptLen))
		sc.stats.cachedTokens.Add(int64(min(hitTok, s.promptLen)))
	}
	s.status = seqRunning
	return k
}

// maxWaitSteps is how many steps a waiting sequence may be passed over by
// ones of its priority whose prompt prefix is cached before it goes first
// among them regardless.
const maxWaitSteps = 64

// orderWaiting orders the waiting queue for admission. Preempted
// sequences keep the front (they recompute), then, when the priorities
// above the lowest waiting took engine.PriorityShare admissions in a row,
// the longest-waiting sequence below the highest priority waiting (so no
// priority starves), then the rest by priority (engine.Request.Priority),
// highest first. Within a priority it groups by shared prefix: sequences
// whose leading prompt blocks are in the prefix cache go before those
// whose are not, longest cached prefix first, so requests sharing a system
// prompt run while its blocks are cached instead of letting other prompts
// evict them; a sequence passed over for maxWaitSteps steps goes first
// among its priority, and the order is otherwise kept.
//
// It costs one prefix-cache lookup per cached block of each waiting
// sequence and a stable sort: O(n log n) a step for n waiting, so
// thousands may wait.
func (sc *scheduler) orderWaiting() {
	if len(sc.waiting) == 0 {
		return
	}
	top, lowest := sc.waiting[0].job.prio, sc.waiting[0].job.prio
	for _, s := range sc.waiting {
		s.waitSteps++
		top, lowest = max(top, s.job.prio), min(lowest, s.job.prio)
	}
	sc.lowest = lowest
	if len(sc.waiting) < 2 {
		return
	}
	var starved *seq
	if sc.passed >= engine.PriorityShare && lowest < top {
		for _, s := range sc.waiting {
			if s.job.prio < top && (starved == nil || s.waitSteps > starved.waitSteps) {
				starved = s
			}
		}
	}
	const (
		classPreempted = iota << 40 // the class is the key's high bits; priority, age and hits are below
		classStarved
		classRest
	)
	sorted := true
	for i, s := range sc.waiting {
		switch {
		case s.status == seqPreempted: // recompute first
			s.order = classPreempted
		case s == starved:
			s.order = classStarved
		default:
			s.order = classRest + sc.rank(s)
		}
		if i > 0 && s.order < sc.waiting[i-1].order {
			sorted = false
		}
	}
	if !sorted {
		slices.SortStableFunc(sc.waiting, func(a, b *seq) int { return a.order - b.order })
	}
}

// rank is s's place among the waiting sequences that are neither preempted
// nor starved: its priority (high bits, highest first), whether it aged
// past maxWaitSteps, then its cached prefix blocks (most first).
func (sc *scheduler) rank(s *seq) int {
	prio := int(engine.PriorityOnline - min(max(s.job.prio, engine.PriorityLow), engine.PriorityOnline))
	key := prio << 32
	if s.waitSteps <= maxWaitSteps {
		key += 1 << 31
		if !sc.bm.noCache {
			key += (1<<24 - 1) - min(sc.bm.cachedBlocks(s), 1<<24-1)
		}
	}
	return key
}

// notePassed counts admitted sequence s in the share of admissions the
// priorities above the lowest waiting may take in a row.
func (sc *scheduler) notePassed(s *seq) {
	if s.job.prio > sc.lowest {
		sc.passed++
	} else {
		sc.passed = 0
	}
}

// pendingBlocks is the hashes of the full blocks that running sequences
// have still to compute from tokens they already have (nil when prefix
// caching is off).
func (sc *scheduler) pendingBlocks() map[blockHash]bool {
	if sc.bm.noCache {
		return nil
	}
	pending := map[blockHash]bool{}
	for _, s := range sc.running {
		if !s.finished() {
			sc.addPending(s, pending)
		}
	}
	return pending
}

func (sc *scheduler) addPending(s *seq, pending map[blockHash]bool) {
	if pending == nil {
		return
	}
	bs := sc.bm.bs
	for bi := s.registered; (bi+1)*bs <= len(s.tokens); bi++ {
		pending[s.hashAt(bi, bs)] = true
	}
}

// waitsForPending says whether s's first block missing from the prefix
// cache is one a running sequence is computing.
func (sc *scheduler) waitsForPending(s *seq, pending map[blockHash]bool) bool {
	if len(pending) == 0 {
		return false
	}
	h, ok := sc.bm.firstMiss(s)
	return ok && pending[h]
}
