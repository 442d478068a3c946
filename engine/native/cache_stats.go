package native

import "sync/atomic"

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
	// specDraftTokens are draft tokens verified; specAcceptedTokens, those
	// of them kept in the output.
	specDraftTokens    atomic.Int64
	specAcceptedTokens atomic.Int64
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
	// SpecDraftTokens are the draft tokens speculative decoding verified;
	// SpecAcceptedTokens, those of them kept in the output.
	SpecDraftTokens    int64
	SpecAcceptedTokens int64
}

// HitRate is the fraction of admitted prompt tokens served from the cache.
func (s CacheStats) HitRate() float64 {
	if s.PromptTokens == 0 {
		return 0
	}
	return float64(s.CachedTokens) / float64(s.PromptTokens)
}

// SpecStats is one model's speculative decoding so far.
type SpecStats struct {
	Model          string
	DraftTokens    int64 // draft tokens verified
	AcceptedTokens int64 // of those, kept in the output
}

// SpecStats reports speculative decoding per model, in the order the
// models were configured.
func (e *Engine) SpecStats() []SpecStats {
	out := make([]SpecStats, 0, len(e.order))
	for _, name := range e.order {
		c := &e.runners[name].stats
		out = append(out, SpecStats{Model: name, DraftTokens: c.specDraftTokens.Load(), AcceptedTokens: c.specAcceptedTokens.Load()})
	}
	return out
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
		s.SpecDraftTokens += c.specDraftTokens.Load()
		s.SpecAcceptedTokens += c.specAcceptedTokens.Load()
	}
	return s
}
