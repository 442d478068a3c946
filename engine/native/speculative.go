package native

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/batchd/batchd/wire"
)

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

// Speculative method names, as config and request bodies spell them
// (wire's, the one home of the body's rule).
const (
	SpecOff   = wire.SpecOff
	SpecNgram = wire.SpecNgram
	SpecDraft = wire.SpecDraft
)

// SpeculativeConfig is native.speculative: the default method of every
// model, and the drafts' bounds.
type SpeculativeConfig struct {
	// Method is off (or ""), ngram (prompt lookup) or draft (a draft
	// model; needs native.models[].draft). A request's speculative field
	// overrides it for that request.
	Method string `yaml:"method"`
	// K is the most draft tokens a sequence verifies in one step (1..16);
	// how many a step verifies below it is decided by cost (allocDrafts).
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

// specState is one sequence's speculation: its method, its acceptance
// estimate, its back-off and what its usage reports.
type specState struct {
	method specMethod // specOff, specNgram or specDraft once resolved
	// hits and fails are decayed counts of draft tokens verified right and
	// of first wrong drafts: alpha estimates P(draft j right | drafts
	// before it right).
	hits, fails float64
	misses      int // verify steps in a row with every draft rejected
	skip        int // steps left without drafting (back-off)
	pause       int // the next back-off's length; doubles while drafts keep failing

	accepted, rejected int // draft tokens kept in the output, and not
}

// The acceptance estimate: counts decay by specVerifyDecay at each verify
// step and by specIdleDecay at each step a sequence could have drafted and
// did not, so that the estimate of a sequence that stopped drafting
// returns to the prior and it is tried again where the prior pays.
const (
	specVerifyDecay = 0.8
	specIdleDecay   = 0.8
	// specPrior is the acceptance assumed without evidence, worth one
	// observation.
	specPrior = 0.5
)

// alpha is the estimated chance that a draft is right given that the
// drafts before it were.
func (st *specState) alpha() float64 {
	return (st.hits + specPrior) / (st.hits + st.fails + 1)
}

// Back-off: after specMissLimit verify steps in a row that kept no draft,
// a sequence stops drafting for a back-off of specMinPause steps, doubling
// up to specMaxPause while its drafts keep failing. On random text a
// sequence then spends at most specMissLimit verify steps in every
// specMaxPause+specMissLimit, which keeps the cost of wrong drafts (and of
// the lookups) within a few percent.
const (
	specMissLimit = 2
	specMinPause  = 8
	specMaxPause  = 256
)

// feedback takes a verify step that kept accepted of proposed drafts.
func (st *specState) feedback(proposed, accepted int) {
	st.hits = specVerifyDecay*st.hits + float64(accepted)
	st.fails *= specVerifyDecay
	if accepted < proposed {
		st.fails++ // the first wrong draft; those after it are not evidence
	}
	if accepted > 0 {
		st.misses, st.pause = 0, 0
		return
	}
	st.misses++
	if st.misses >= specMissLimit {
		st.pause = min(max(specMinPause, 2*st.pause), specMaxPause)
		st.skip, st.misses = st.pause, 0
	}
}

// wantDrafts is the most drafts s may verify this step (0: plain decode):
// the configured k, capped so that the last draft stays within max_tokens
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
	k := min(sc.specK, s.job.p.maxTokens-(len(s.tokens)-s.promptLen)-1)
	if sc.ctxLen > 0 {
		k = min(k, sc.ctxLen-len(s.tokens))
	}
	return max(k, 0)
}

// draftSlot is one draft token proposeDrafts may give a sequence: the
// j-th (from 1) of decodes[seq], worth alpha^j expected tokens.
type draftSlot struct {
	seq   int
	value float64
}

// specMinGain is how much more expected tokens per second drafting must
// promise than plain decoding: the estimates are noisy (the machine's
// load, acceptance), and a batch whose sequences draft unevenly ends with
// a tail of fewer sequences, which costs what a step's estimate does not
// see.
const specMinGain = 1.1

// Probing: the costs of shapes a step never took are the line's guess,
// and a sequence's acceptance is its prior until it drafts, so a policy
// that only takes what its estimates favour can stay undecided forever
// (at eight sequences a draft row's cost is never measured when only
// decodes and prefills have run). So every specProbeEvery allocations
// that draft nothing, the best allocation is taken anyway when its
// expected rate is at least specProbeFloor of plain decoding's: that
// step measures a cost and feeds acceptance back, for at most
// (1-specProbeFloor)/specProbeEvery of the time.
const (
	specProbeEvery = 32
	specProbeFloor = 0.8
)

// allocDrafts decides how many drafts each of the decoding sequences
// verifies this step (ks[i] for decodes[i], at most caps[i], spare in
// all), by expected tokens per second of the step. The j-th draft of a
// sequence is worth alpha^j tokens (it counts only if the ones before it
// were right); the step costs sc.cost.at(rows). The best m slots are
// taken for the m that gives the most expected tokens, T + Σ value, per
// cost of len(decodes)+m rows. (Measured costs are not linear in rows:
// matmul tiles are 4 rows, so a step may take 12 rows rather than 10.)
func (sc *scheduler) allocDrafts(decodes []*seq, caps, ks []int, spare int) {
	tokens, rows := float64(len(decodes)), len(decodes)
	slots := sc.specSlots[:0]
	for i, s := range decodes {
		ks[i] = 0
		if caps[i] <= 0 {
			continue
		}
		a := s.spec.alpha()
		v := a
		for range caps[i] {
			slots = append(slots, draftSlot{i, v})
			v *= a
		}
	}
	sc.specSlots = slots
	if len(slots) == 0 || spare <= 0 {
		return
	}
	// Best first; among equals the older sequence, and a sequence's
	// earlier slot (worth at least its later ones) before its later.
	slices.SortStableFunc(slots, func(x, y draftSlot) int { return cmp.Compare(y.value, x.value) })
	seqs := len(decodes)
	plain := tokens / sc.cost.at(seqs, rows)
	best, bestRate := 0, plain*specMinGain
	probe, probeRate := 0, 0.0
	sum := tokens
	for m, sl := range slots[:min(len(slots), spare)] {
		sum += sl.value
		rate := sum / sc.cost.at(seqs, rows+m+1)
		if rate > bestRate {
			best, bestRate = m+1, rate
		}
		if rate > probeRate {
			probe, probeRate = m+1, rate
		}
	}
	if best == 0 {
		sc.specIdle++
		if sc.specIdle%specProbeEvery == 0 && probeRate >= specProbeFloor*plain {
			best = probe
		}
	}
	for _, sl := range slots[:best] {
		ks[sl.seq]++
	}
}

// cheapDrafter is a drafter whose drafts cost next to nothing (prompt
// lookup): it is asked for the most drafts first, so that the slots are
// allocated over drafts that exist, and the allocation then cuts them.
type cheapDrafter interface {
	drafter
	cheap()
}

// proposeDrafts sets s.draft for the decoding sequences that speculate,
// within spare tokens of the step's budget (allocDrafts): a cheap drafter
// drafts before the allocation, any other after it, each asked once for
// all its sequences.
func (sc *scheduler) proposeDrafts(decodes []*seq, spare int) {
	caps := sc.specCaps[:0]
	for _, s := range decodes {
		caps = append(caps, sc.wantDrafts(s))
	}
	for m := range specMethods {
		if _, ok := sc.drafters[m].(cheapDrafter); ok {
			sc.propose(m, decodes, caps)
			for i, s := range decodes {
				if s.spec.method == m {
					caps[i] = len(s.draft)
				}
			}
		}
	}
	ks := sc.specAlloc[:0]
	ks = append(ks, caps...)
	sc.allocDrafts(decodes, caps, ks, spare)
	sc.specCaps, sc.specAlloc = caps, ks
	for i, s := range decodes {
		if caps[i] > 0 && ks[i] == 0 {
			s.spec.hits *= specIdleDecay
			s.spec.fails *= specIdleDecay
		}
		if s.draft != nil {
			s.draft = s.draft[:ks[i]:ks[i]]
			if ks[i] == 0 {
				s.draft = nil
			}
		}
	}
	for m := range specMethods {
		if _, ok := sc.drafters[m].(cheapDrafter); !ok {
			sc.propose(m, decodes, ks)
		}
	}
}

// propose asks method m's drafter (if any) for up to k[i] drafts for
// each of decodes that uses it, and sets their s.draft.
func (sc *scheduler) propose(m specMethod, decodes []*seq, k []int) {
	d := sc.drafters[m]
	if d == nil {
		return
	}
	sc.specSeqs, sc.specKs = sc.specSeqs[:0], sc.specKs[:0]
	for i, s := range decodes {
		if s.spec.method == m && k[i] > 0 {
			sc.specSeqs = append(sc.specSeqs, s)
			sc.specKs = append(sc.specKs, k[i])
		}
	}
	if len(sc.specSeqs) == 0 {
		return
	}
	drafts := d.propose(sc.specSeqs, sc.specKs)
	for i, s := range sc.specSeqs {
		if k := sc.specKs[i]; len(drafts[i]) > k {
			drafts[i] = drafts[i][:k]
		}
		s.draft = drafts[i]
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
	s.spec.feedback(len(d), kept)
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

// stepCost is what a step of the model costs by sequences and rows
// computed, from the steps the runner times. The cost is not linear in
// rows (matmuls go 4 rows at a time, attention runs per sequence, a
// verify row costs more than a decode row), so it keeps three estimates,
// each over decaying sums: a least-squares line F + R·rows over all
// steps; one for each number of sequences up to stepCostSeqs (its slope
// is what a draft row costs among that many sequences; with one row count
// seen so far, the first line's slope stands in); and each pair of
// sequences and rows up to stepCostRows keeps its mean, blended with the
// line of its sequences by how much evidence it has. Without observations
// the first line is the prior, priorF + priorR·rows (default 8 + rows); a
// test sets the prior and observes nothing.
type stepCost struct {
	priorF, priorR float64
	// pinned: observe ignores steps and the prior stands (tests, which
	// must not depend on the machine's timing).
	pinned bool
	all    costLine
	steps  int // observations so far
	// by sequences, and by sequences and rows (allocated on the first
	// observation)
	bySeqs  *[stepCostSeqs + 1]costLine
	byShape *[stepCostSeqs + 1][stepCostRows + 1]rowCost
}

// costLine is a decaying least-squares fit of seconds against rows.
type costLine struct {
	w, x, y, xx, xy float64 // weight, rows, seconds, rows², rows·seconds
}

func (l *costLine) observe(x, y float64) {
	l.w = stepCostDecay*l.w + 1
	l.x = stepCostDecay*l.x + x
	l.y = stepCostDecay*l.y + y
	l.xx = stepCostDecay*l.xx + x*x
	l.xy = stepCostDecay*l.xy + x*y
}

// fit is the line's mean rows and seconds and its slope (ok false: the
// rows never varied, no slope). Between two row counts the slope is the
// difference of their means however little weight one has left, so a
// cost measured once is remembered while other steps are all decodes.
// Noise (other processes) can tilt the fit, so the slope is kept between
// 1% of the mean cost per row and all of it: neither part of F + R·rows
// below 0.
func (l *costLine) fit() (mx, my, slope float64, ok bool) {
	mx, my = l.x/l.w, l.y/l.w
	varx := l.xx/l.w - mx*mx
	if varx < 1e-6 {
		return mx, my, 0, false
	}
	slope = (l.xy/l.w - mx*my) / varx
	return mx, my, min(max(slope, 0.01*my/mx), my/mx), true
}

// rowCost is one shape's decaying mean step time.
type rowCost struct {
	w, mean float64
	at      int // steps when w was last brought up to date
}

const (
	// stepCostDecay weighs the past: an observation counts half after
	// about 35 observations.
	stepCostDecay = 0.98
	stepCostRows  = 64
	stepCostSeqs  = 32
)

// observe takes one step's sequences, rows and time in seconds.
func (c *stepCost) observe(seqs, rows int, sec float64) {
	if c.pinned || rows <= 0 || sec <= 0 {
		return
	}
	c.all.observe(float64(rows), sec)
	c.steps++
	if seqs > stepCostSeqs || rows > stepCostRows {
		return
	}
	if c.byShape == nil {
		c.bySeqs = new([stepCostSeqs + 1]costLine)
		c.byShape = new([stepCostSeqs + 1][stepCostRows + 1]rowCost)
	}
	c.bySeqs[seqs].observe(float64(rows), sec)
	b := &c.byShape[seqs][rows]
	b.w = b.w*math.Pow(stepCostDecay, float64(c.steps-b.at)) + 1
	b.mean += (sec - b.mean) / b.w
	b.at = c.steps
}

// at is the estimated cost of a step of rows rows for seqs sequences.
func (c *stepCost) at(seqs, rows int) float64 {
	F, R := c.estimate()
	line := F + R*float64(rows)
	if c.byShape == nil || seqs > stepCostSeqs || rows > stepCostRows {
		return line
	}
	if l := &c.bySeqs[seqs]; l.w >= 1 {
		mx, my, slope, ok := l.fit()
		if !ok {
			slope = R
		}
		line = my + slope*(float64(rows)-mx)
	}
	b := c.byShape[seqs][rows]
	w := b.w * math.Pow(stepCostDecay, float64(c.steps-b.at))
	return (w*b.mean + line) / (w + 1)
}

// estimate is the line over all steps, F and R (same unit as observe's
// seconds, or the prior's).
func (c *stepCost) estimate() (F, R float64) {
	pf, pr := c.priorF, c.priorR
	if pf <= 0 && pr <= 0 {
		pf, pr = 8, 1
	}
	if c.all.w < 1 {
		return pf, pr
	}
	mx, my, R, ok := c.all.fit()
	if !ok {
		// Rows hardly varied: keep the prior's shape, scaled to the data.
		R = my / (mx + pf/pr)
	}
	return my - R*mx, R
}
