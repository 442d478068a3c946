package native

import "fmt"

// Speculative decoding: a drafter (drafter.go; ngram.go is prompt lookup)
// guesses the next tokens of a decoding sequence; one forward pass computes
// the sequence's last token and the k drafts together, with logits for
// every row, and the sampler verifies them.
//
// Exact by coupling: the sampler is deterministic given a logits row, the
// request's parameters, the tokens so far and the draw at the position
// (counterUniform), and a row's logits are bit-identical whether computed
// alone or in a chunk. So row i is sampled exactly as plain decoding would
// sample that position, with the sequence's tokens extended by the drafts
// before it; the drafts are kept up to the first one that differs from the
// token sampled there, and that sampled token follows them. The output is
// the same as without speculation, greedy or not, seed for seed; logprobs,
// stop strings, min_tokens, logit_bias, penalties and max_tokens behave as
// without it, because each token is still taken in by advance one by one.
//
// KV: a verify chunk writes K/V at positions s.n..s.n+k; after m drafts are
// kept, positions up to s.n+m hold the K/V of real tokens, so s.n advances
// by m+1. What the rejected drafts wrote lies past s.n and is overwritten
// when those positions are computed; the prefix cache hashes only blocks
// wholly below s.n, so it never sees it. Drafts never preempt anyone: a
// sequence whose drafts get no blocks decodes one token instead.

// specMethod is how a sequence drafts.
type specMethod uint8

const (
	// specDefault: the request did not say; the runner's configured method.
	specDefault specMethod = iota
	// specOff: plain decoding.
	specOff
	// specOn: speculative: true, the runner's configured method (prompt
	// lookup when the configuration has none).
	specOn
	// specNgram: prompt lookup.
	specNgram
	// specDraft: a draft model (native.models[].draft).
	specDraft
	specMethods
)

// Speculative method names, as config and request bodies spell them.
const (
	SpecOff   = "off"
	SpecNgram = "ngram"
	SpecDraft = "draft"
)

// SpeculativeConfig is native.speculative: the default method of every
// model, and the drafts' bounds.
type SpeculativeConfig struct {
	// Method is off (or ""), ngram (prompt lookup) or draft (a draft
	// model; needs native.models[].draft). A request's speculative field
	// overrides it for that request.
	Method string `yaml:"method"`
	// K is the most draft tokens a sequence verifies in one step (1..16);
	// each sequence adapts its own k below it.
	K int `yaml:"k"`
	// NgramMin and NgramMax bound the n-grams prompt lookup matches: the
	// longest from NgramMax down to NgramMin that occurred before wins.
	NgramMin int `yaml:"ngram_min"`
	NgramMax int `yaml:"ngram_max"`
}

// maxSpecK bounds native.speculative.k.
const maxSpecK = 16

// DefaultSpeculativeConfig is speculation off, with k 4 and n-grams of 1
// to 3 tokens when a request turns it on.
func DefaultSpeculativeConfig() SpeculativeConfig {
	return SpeculativeConfig{Method: SpecOff, K: 4, NgramMin: 1, NgramMax: 3}
}

// validate names the first bad field of native.speculative.
func (c SpeculativeConfig) validate() error {
	switch c.Method {
	case "", SpecOff, SpecNgram, SpecDraft:
	default:
		return fmt.Errorf("native.speculative.method: must be off, ngram or draft, got %q", c.Method)
	}
	if c.K < 1 || c.K > maxSpecK {
		return fmt.Errorf("native.speculative.k: must be 1..%d draft tokens, got %d", maxSpecK, c.K)
	}
	if c.NgramMin < 1 {
		return fmt.Errorf("native.speculative.ngram_min: must be at least 1, got %d", c.NgramMin)
	}
	if c.NgramMax < c.NgramMin || c.NgramMax > maxSpecK {
		return fmt.Errorf("native.speculative.ngram_max: must be ngram_min (%d) .. %d, got %d", c.NgramMin, maxSpecK, c.NgramMax)
	}
	return nil
}

// method is the configured method as a specMethod.
func (c SpeculativeConfig) method() specMethod {
	switch c.Method {
	case SpecNgram:
		return specNgram
	case SpecDraft:
		return specDraft
	}
	return specOff
}

// specState is one sequence's speculation: its method, its adaptive k and
// what its usage reports.
type specState struct {
	method specMethod // specOff, specNgram or specDraft once resolved
	k      int        // drafts asked for next (0: not started: the config's k)
	misses int        // verify steps in a row with every draft rejected
	skip   int        // steps left without drafting (back-off)
	pause  int        // the next back-off's length; doubles while drafts keep failing

	accepted, rejected int // draft tokens kept in the output, and not
}

// Adaptive k: after missLimit verify steps in a row that kept no draft, a
// sequence stops drafting for a back-off of minPause steps, doubling up to
// maxPause while its drafts keep failing. On random text a sequence then
// spends at most missLimit verify steps in every maxPause+missLimit, which
// keeps the cost of wrong drafts within a few percent.
const (
	specMissLimit = 2
	specMinPause  = 8
	specMaxPause  = 256
)

// feedback adapts k to a verify step that kept accepted of proposed drafts.
func (st *specState) feedback(proposed, accepted, maxK int) {
	switch {
	case accepted == proposed:
		st.k = min(st.k+1, maxK)
		st.misses, st.pause = 0, 0
	case accepted == 0:
		st.k = max(1, st.k/2)
		st.misses++
		if st.misses >= specMissLimit {
			st.pause = min(max(specMinPause, 2*st.pause), specMaxPause)
			st.skip, st.misses = st.pause, 0
		}
	default:
		st.k = max(1, accepted+1)
		st.misses, st.pause = 0, 0
	}
}

// wantDrafts is how many drafts s may verify this step (0: plain decode):
// its adaptive k, capped so that the last draft stays within max_tokens
// (the token sampled after it is the last one) and the context.
func (sc *scheduler) wantDrafts(s *seq) int {
	st := &s.spec
	if st.method == specOff || sc.drafters[st.method] == nil {
		return 0
	}
	if st.skip > 0 {
		st.skip--
		return 0
	}
	if st.k == 0 {
		st.k = sc.specK
	}
	k := min(st.k, s.job.p.maxTokens-(len(s.tokens)-s.promptLen)-1)
	if sc.ctxLen > 0 {
		k = min(k, sc.ctxLen-len(s.tokens))
	}
	return max(k, 0)
}

// proposeDrafts sets s.draft for the decoding sequences that speculate,
// oldest first, within spare tokens of the step's budget: one propose call
// per drafter for all its sequences.
func (sc *scheduler) proposeDrafts(decodes []*seq, spare int) {
	for m := range specMethods {
		d := sc.drafters[m]
		if d == nil {
			continue
		}
		sc.specSeqs, sc.specKs = sc.specSeqs[:0], sc.specKs[:0]
		left := spare
		for _, s := range decodes {
			if s.spec.method != m || left <= 0 {
				continue
			}
			if k := min(sc.wantDrafts(s), left); k > 0 {
				sc.specSeqs = append(sc.specSeqs, s)
				sc.specKs = append(sc.specKs, k)
				left -= k
			}
		}
		if len(sc.specSeqs) == 0 {
			continue
		}
		drafts := d.propose(sc.specSeqs, sc.specKs)
		for i, s := range sc.specSeqs {
			if k := sc.specKs[i]; len(drafts[i]) > k {
				drafts[i] = drafts[i][:k]
			}
			s.draft = drafts[i]
			spare -= len(s.draft)
		}
	}
}

// takeVerified takes a verify step's result for s: toks are the kept
// drafts then the sampled token, already given to advance. It moves s.n
// past the positions whose K/V now hold real tokens and adapts k.
func (sc *scheduler) takeVerified(s *seq, toks []int32, before int) {
	d := s.draft
	kept := len(toks) - 1                // drafts verification kept
	appended := len(s.tokens) - before   // tokens advance appended
	accepted := min(kept, appended)      // drafts in the output
	s.n = min(s.n+kept+1, len(s.tokens)) // a stop may have cut what follows
	s.spec.accepted += accepted
	s.spec.rejected += len(d) - accepted
	sc.stats.specDraftTokens.Add(int64(len(d)))
	sc.stats.specAcceptedTokens.Add(int64(accepted))
	s.spec.feedback(len(d), kept, sc.specK)
	s.chunk, s.draft = 0, nil
	sc.bm.hashBlocks(s)
}

// releaseDraft tells s's drafter that s is done with drafting for now.
func (sc *scheduler) releaseDraft(s *seq) {
	s.draft = nil
	if m := s.spec.method; m < specMethods {
		if d := sc.drafters[m]; d != nil {
			d.release(s)
		}
	}
}

// endsSeq says whether tok ends s instead of joining it (advance's test).
func endsSeq(s *seq, tok int32, isEOG func(int32) bool) bool {
	p := s.job.p
	return (isEOG(tok) && !p.ignoreEOS) || p.isStopID(tok)
}
