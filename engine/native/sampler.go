package native

import (
	"cmp"
	"math"
	"slices"
	"unsafe"

	"github.com/batchd/batchd/engine/native/tokenizer"
	"github.com/batchd/batchd/kernels"
)

// sampling holds one request's sampling parameters.
//
// A row of logits goes through them in vLLM's order: logit_bias, then the
// penalties (repetition, frequency, presence), then the min_tokens mask,
// then greedy or temperature, then top_k, top_p and min_p, then the draw.
type sampling struct {
	temperature float64 // below samplingEps: greedy
	topP        float64 // 1 (or ≤ 0): off
	topK        int     // ≤ 0: off
	minP        float64 // 0: off
	// presence and frequency are OpenAI's penalties over the tokens
	// generated so far: logit -= frequency·count + presence·(count > 0).
	presence, frequency float64
	// repetition is vLLM's and Hugging Face's penalty over the prompt and
	// the generated tokens: a positive logit is divided by it, a negative
	// one multiplied. 1: off.
	repetition float64
	bias       []logitBias // sorted by id
	seed       uint64
}

// logitBias is one logit_bias entry.
type logitBias struct {
	id int32
	v  float32
}

// samplingEps is the temperature below which sampling is greedy (vLLM's).
const samplingEps = 1e-5

func (p *sampling) greedy() bool { return p.temperature < samplingEps }

func (p *sampling) penalized() bool {
	return p.presence != 0 || p.frequency != 0 || p.repeats()
}

func (p *sampling) repeats() bool { return p.repetition > 0 && p.repetition != 1 }

// counterUniform returns a uniform draw in [0,1) that depends only on the
// request's seed and the position being sampled: the same seed gives the
// same draws whatever else runs in the batch, and after a restart.
func counterUniform(seed uint64, pos int) float64 {
	x := seed ^ (uint64(pos)+1)*0x9e3779b97f4a7c15
	// splitmix64 finalizer, twice, for a well-mixed 64-bit value.
	for range 2 {
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		x ^= x >> 31
	}
	return float64(x>>11) / (1 << 53)
}

// candidate is a token and its (processed) logit.
type candidate struct {
	id    int32
	logit float32
}

// better orders candidates: higher logit first, ties by lower id, so the
// order is total and greedy, top_k and sorting agree on ties.
func better(a, b candidate) bool {
	return a.logit > b.logit || (a.logit == b.logit && a.id < b.id)
}

func compareCands(a, b candidate) int {
	if a.logit != b.logit {
		if a.logit > b.logit {
			return -1
		}
		return 1
	}
	return cmp.Compare(a.id, b.id)
}

// sampler chooses each sequence's next token from its logits row with the
// request's parameters, and holds the buffers it reuses from row to row;
// one per runner, used by its loop goroutine only.
type sampler struct {
	cpu   *kernels.CPU         // the engine's code path (nil: the best one)
	tok   *tokenizer.Tokenizer // end-of-generation ids (min_tokens)
	next  [][]int32            // sample's result, reused
	flat  []int32
	cands []candidate
	top   []candidate
	w     []float64
	probs []float32
	raw   []float32
	eog   []int32 // the tokenizer's end-of-generation ids
	eogOK bool
	// nonFinite is the sequences of the last sample whose logits held a
	// NaN or an infinity: they got no token, and their requests fail.
	nonFinite []*seq
}

// history is what the penalties need of one sequence: the distinct tokens
// seen (prompt ones only when the repetition penalty needs them) and how
// often each was generated. It follows the sequence's tokens as they grow.
type history struct {
	seen int // tokens of the sequence absorbed
	ids  []int32
	out  []float64 // parallel to ids: times generated
	at   map[int32]int32
}

// absorb takes in the tokens added since the last call.
func (h *history) absorb(tokens []int32, promptLen int, withPrompt bool) {
	if h.at == nil {
		h.at = map[int32]int32{}
	}
	if !withPrompt && h.seen < promptLen {
		h.seen = min(promptLen, len(tokens))
	}
	for i := h.seen; i < len(tokens); i++ {
		id := tokens[i]
		j, ok := h.at[id]
		if !ok {
			j = int32(len(h.ids))
			h.at[id] = j
			h.ids = append(h.ids, id)
			h.out = append(h.out, 0)
		}
		if i >= promptLen {
			h.out[j]++
		}
	}
	h.seen = len(tokens)
}

// applyBias adds logit_bias to the row.
func applyBias(x []float32, bias []logitBias) {
	for _, b := range bias {
		if int(b.id) < len(x) {
			x[b.id] += b.v
		}
	}
}

// applyPenalties applies the repetition, frequency and presence penalties
// to the tokens h has seen, and to no other.
func applyPenalties(x []float32, h *history, p *sampling) {
	rep := p.repeats()
	r := float32(p.repetition)
	for j, id := range h.ids {
		if int(id) >= len(x) {
			continue
		}
		v := x[id]
		if rep {
			if v > 0 {
				v /= r
			} else {
				v *= r
			}
		}
		if c := h.out[j]; c > 0 {
			v = float32(float64(v) - p.frequency*c - p.presence)
		}
		x[id] = v
	}
}

// choose picks a token from processed logits: the first maximum when
// greedy, else a draw at u ∈ [0,1) from softmax(x/temperature) cut by top_k,
// then top_p, then min_p. It does not modify x; a -Inf logit (masked) is
// never drawn.
func (sc *sampler) choose(x []float32, p *sampling, u float64) int32 {
	best := sc.cpu.Argmax(x)
	if p.greedy() || p.topK == 1 {
		return int32(best)
	}
	kernels.AfterSIMD()
	if m := float64(x[best]); math.IsInf(m, 0) || math.IsNaN(m) {
		return int32(best)
	}
	invT := 1 / p.temperature
	topP := p.topP
	if topP <= 0 || topP >= 1 {
		topP = 1
	}
	k := p.topK
	if k <= 0 || k >= len(x) {
		k = 0
	}
	var cands []candidate
	var w []float64
	var total float64 // the mass top_p is a fraction of
	if k == 0 {
		// The whole vocabulary's probabilities, with the SIMD softmax.
		probs := sc.softmax(x, invT)
		pmax := probs[best]
		if topP == 1 {
			// No ordering needed: min_p is a threshold, the draw goes over
			// ids in order.
			thr := float32(p.minP) * pmax
			var sum float64
			for i, q := range probs {
				if q >= thr && !isNegInf(x[i]) {
					sum += float64(q)
				}
			}
			target := u * sum
			last := best
			for i, q := range probs {
				if q < thr || q == 0 || isNegInf(x[i]) {
					continue
				}
				last = i
				target -= float64(q)
				if target < 0 {
					return int32(i)
				}
			}
			return int32(last)
		}
		// top_p: gather the tokens above a probability threshold, lowering
		// it until they hold the nucleus, and sort only those.
		for i, q := range probs {
			if !isNegInf(x[i]) {
				total += float64(q)
			}
		}
		for _, cut := range [...]float32{1e-3, 1e-6, 1e-10, 0} {
			cands = sc.cands[:0]
			var mass float64
			thr := cut * pmax
			for i, q := range probs {
				if q >= thr && (cut == 0 || q > 0) && !isNegInf(x[i]) {
					cands = append(cands, candidate{id: int32(i), logit: x[i]})
					mass += float64(q)
				}
			}
			sc.cands = cands
			if cut == 0 || mass >= total*(topP+1e-6) {
				break
			}
		}
		slices.SortFunc(cands, compareCands)
		w = growF64(&sc.w, len(cands))
		for i, c := range cands {
			w[i] = float64(probs[c.id])
		}
	} else {
		// top_k: partial selection of the k best, sorted.
		cands = topCandidates(x, k, sc.cands[:0])
		sc.cands = cands
		w = growF64(&sc.w, len(cands))
		m := float64(cands[0].logit)
		for i, c := range cands {
			w[i] = math.Exp((float64(c.logit) - m) * invT)
			total += w[i]
		}
	}
	n := len(cands)
	if topP < 1 {
		var acc float64
		for i := range n {
			acc += w[i] / total
			if acc >= topP {
				n = i + 1
				break
			}
		}
	}
	if p.minP > 0 {
		// Sorted: min_p keeps a prefix.
		for i := 1; i < n; i++ {
			if w[i] < p.minP*w[0] {
				n = i
				break
			}
		}
	}
	for n > 1 && (w[n-1] == 0 || isNegInf(cands[n-1].logit)) {
		n-- // masked (-Inf) tokens are never drawn
	}
	var sum float64
	for i := range n {
		sum += w[i]
	}
	target := u * sum
	for i := range n {
		target -= w[i]
		if target < 0 {
			return cands[i].id
		}
	}
	return cands[n-1].id
}

// softmax returns softmax(x·invT) in a buffer of sc.
func (sc *sampler) softmax(x []float32, invT float64) []float32 {
	sc.probs = append(sc.probs[:0], x...)
	if invT != 1 {
		f := float32(invT)
		for i := range sc.probs {
			sc.probs[i] *= f
		}
	}
	sc.cpu.Softmax(sc.probs)
	kernels.AfterSIMD()
	return sc.probs
}

func isNegInf(v float32) bool { return math.IsInf(float64(v), -1) }

// topCandidates returns the k best entries of x (k ≥ 1), best first, in
// O(len(x)·log k) with a bounded heap whose root is the worst kept.
func topCandidates(x []float32, k int, dst []candidate) []candidate {
	h := dst[:0]
	k = min(k, len(x))
	for i, v := range x {
		c := candidate{id: int32(i), logit: v}
		if len(h) < k {
			h = append(h, c)
			for j := len(h) - 1; j > 0; {
				parent := (j - 1) / 2
				if !better(h[parent], h[j]) {
					break
				}
				h[parent], h[j] = h[j], h[parent]
				j = parent
			}
			continue
		}
		// Later ids lose ties, so only a strictly higher logit gets in.
		if !(v > h[0].logit) {
			continue
		}
		h[0] = c
		for j := 0; ; {
			l, r, worst := 2*j+1, 2*j+2, j
			if l < len(h) && better(h[worst], h[l]) {
				worst = l
			}
			if r < len(h) && better(h[worst], h[r]) {
				worst = r
			}
			if worst == j {
				break
			}
			h[j], h[worst] = h[worst], h[j]
			j = worst
		}
	}
	slices.SortFunc(h, compareCands)
	return h
}

func growF64(b *[]float64, n int) []float64 {
	if cap(*b) < n {
		*b = make([]float64, n)
	}
	*b = (*b)[:n]
	return *b
}

// seqSampling is one sequence's sampling and logprobs state.
type seqSampling struct {
	hist *history // nil unless the request has penalties
	mask []int32  // ids min_tokens masks (nil until needed)
	// pending is the logprobs of the tokens just sampled for the sequence,
	// in order (several when drafts were verified); advance appends them
	// one by one and noteToken keeps each one's entry from pendingAt on (an
	// EOS or stop token is not part of the output).
	pending   []tokenLogprob
	pendingAt int
	lp        []tokenLogprob
}

// sample chooses the next token of each of p.sample from logits (rows it
// may modify), in order: one row and one token for a sequence, or for one
// verifying drafts 1+len(s.draft) rows and the drafts kept then the token
// sampled after them (verify).
func (sc *sampler) sample(p plan, logits []float32, vocab int) (next [][]int32) {
	rows := 0
	for _, s := range p.sample {
		rows += 1 + len(s.draft)
	}
	sc.flat = slices.Grow(sc.flat[:0], rows)
	sc.next = sc.next[:0]
	sc.nonFinite = sc.nonFinite[:0]
	row := 0
	for _, s := range p.sample {
		st := s.samp
		if st == nil {
			st = &seqSampling{}
			s.samp = st
		}
		clear(st.pending)
		st.pending, st.pendingAt = st.pending[:0], 0
		first := len(sc.flat)
		if n := 1 + len(s.draft); !allFinite(logits[row*vocab : (row+n)*vocab]) {
			// A model or adapter that computes NaN or an infinity has
			// no next token to give: the sequence gets none (the
			// runner fails its request), the others go on.
			sc.nonFinite = append(sc.nonFinite, s)
			row += n
		} else if len(s.draft) == 0 {
			sc.flat = append(sc.flat, sc.pick(s, s.tokens, logits[row*vocab:(row+1)*vocab]))
			row++
		} else {
			sc.verify(s, logits[row*vocab:], vocab)
			row += 1 + len(s.draft)
		}
		sc.next = append(sc.next, sc.flat[first:len(sc.flat):len(sc.flat)])
	}
	return sc.next
}

// verify samples s's rows as plain decoding would sample each position,
// with the sequence's tokens extended by the drafts before it, and appends
// to sc.flat the drafts up to the first one that differs from the token
// sampled at its position, then that token (or, all kept, the token
// sampled after the last draft). It stops at a token that ends s.
func (sc *sampler) verify(s *seq, logits []float32, vocab int) {
	d := s.draft
	// The view writes the drafts into s.tokens' spare capacity, past its
	// length, where nothing reads: no copy of the sequence per step.
	view := s.tokens
	for i := 0; i <= len(d); i++ {
		t := sc.pick(s, view, logits[i*vocab:(i+1)*vocab])
		sc.flat = append(sc.flat, t)
		if i == len(d) || t != d[i] || endsSeq(s, t, sc.tok.IsEOG) {
			return
		}
		view = append(view, t)
	}
}

// pick chooses the token after tokens (s's tokens, or them and the drafts
// before the row) from row, its raw logits (which it may modify), and
// queues the token's raw logprobs when the request asks.
func (sc *sampler) pick(s *seq, tokens []int32, row []float32) int32 {
	kernels.AfterSIMD() // the forward pass's vector code ran last
	p := s.job.p
	sp := &p.sampling
	st := s.samp
	generated := len(tokens) - s.promptLen
	var mask []int32
	if generated < p.minTokens {
		mask = sc.minTokensMask(st, p, len(row))
	}
	modifies := len(sp.bias) > 0 || sp.penalized() || len(mask) > 0
	raw := row
	var lse float64
	var entry tokenLogprob
	if p.logprobs {
		if modifies {
			sc.raw = append(sc.raw[:0], row...)
			raw = sc.raw
		}
		lse = logSumExp(sc.cpu, raw)
		if p.topLogprobs > 0 {
			sc.top = topCandidates(raw, p.topLogprobs, sc.top[:0])
			entry.top = make([]idLogprob, len(sc.top))
			for i, c := range sc.top {
				entry.top[i] = idLogprob{id: c.id, logprob: float64(c.logit) - lse}
			}
		}
	}
	applyBias(row, sp.bias)
	if sp.penalized() {
		if st.hist == nil {
			st.hist = &history{}
		}
		st.hist.absorb(tokens, s.promptLen, sp.repeats())
		applyPenalties(row, st.hist, sp)
	}
	for _, id := range mask {
		row[id] = float32(math.Inf(-1))
	}
	var u float64
	if !sp.greedy() {
		// Each of the n choices has its own stream: seed + choice (vLLM's).
		u = counterUniform(sp.seed+uint64(s.index%p.n), len(tokens))
	}
	tok := sc.choose(row, sp, u)
	if p.logprobs {
		entry.id = tok
		entry.logprob = float64(raw[tok]) - lse
		st.pending = append(st.pending, entry)
	}
	return tok
}

// minTokensMask lists the ids that cannot be sampled before min_tokens:
// the end-of-generation tokens (unless ignore_eos) and the stop_token_ids.
func (sc *sampler) minTokensMask(st *seqSampling, p *params, vocab int) []int32 {
	if st.mask != nil {
		return st.mask
	}
	if !sc.eogOK {
		for id := range int32(sc.tok.VocabSize()) {
			if sc.tok.IsEOG(id) {
				sc.eog = append(sc.eog, id)
			}
		}
		sc.eogOK = true
	}
	mask := make([]int32, 0, len(sc.eog)+len(p.stopIDs))
	if !p.ignoreEOS {
		mask = append(mask, sc.eog...)
	}
	mask = append(mask, p.stopIDs...)
	st.mask = slices.DeleteFunc(mask, func(id int32) bool { return int(id) >= vocab })
	return st.mask
}

// allFinite reports whether x holds neither NaN nor an infinity: the
// floats whose exponent bits are all ones. Adding 1 to the exponent field
// carries into the sign bit exactly for those, so OR-ing the sums of two
// floats at a time (a uint64 holds two; the low one's carry stays in its
// half) and looking at the sign bits tells. About 0.3 ns a value: tens of
// microseconds for a 150k vocabulary, beside milliseconds for the forward
// pass that made it.
func allFinite(x []float32) bool {
	const exp, one, sign = 0x7f800000_7f800000, 0x00800000_00800000, 0x80000000_80000000
	var a, b, c, d uint64
	one1 := func(v float32) uint64 { return uint64(math.Float32bits(v)&0x7f800000 + 0x00800000) }
	if len(x) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(x)))%8 != 0 {
		a, x = one1(x[0]), x[1:] // the uint64s must be aligned
	}
	var w []uint64
	if len(x) >= 2 {
		w = unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(x))), len(x)/2)
	}
	i := 0
	for ; i+4 <= len(w); i += 4 {
		a |= w[i]&exp + one
		b |= w[i+1]&exp + one
		c |= w[i+2]&exp + one
		d |= w[i+3]&exp + one
	}
	for ; i < len(w); i++ {
		a |= w[i]&exp + one
	}
	if len(x)%2 == 1 {
		a |= one1(x[len(x)-1])
	}
	return (a|b|c|d)&sign == 0
}

// argmax is the first index of the largest value, in plain Go: the
// reference the tests compare the kernels' Argmax and greedy decoding to.
func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
