package native

import (
	"bytes"
	"fmt"
)

// The draft-model drafter: a smaller model with the target's tokenizer
// (native.models[].draft) guesses the next k tokens greedily, and the
// target verifies them in one pass (drafter.go). It has its own paged KV
// cache and block manager, sized apart from the target's, and no prefix
// cache: its blocks hold one sequence's positions each, from 0.
//
// Per sequence it remembers the tokens whose K/V its cache holds (fed).
// On propose it keeps the longest prefix of fed that s.tokens still has
// (drafts the target rejected fall beyond it; their K/V rows are simply
// overwritten when those positions are fed again), feeds the rest of
// s.tokens (the first time: the whole prompt, in chunks of the step's
// token budget, many sequences per pass), then runs k greedy steps, one
// forward pass per step for all its sequences. Draft K/V are a pure
// function of the tokens before them and the forward pass is batch
// invariant, so a sequence's drafts do not depend on its batch. The draft
// runs without LoRA adapters: a sequence with one is drafted for by the
// base draft model (verification keeps the output exact; fewer drafts may
// be accepted).
type draftModel struct {
	name   string // the draft model's name, for logs and errors
	model  *Model
	argmax func([]float32) int // the sampler's greedy pick (kernels.CPU.Argmax)
	bm     *blockManager
	mr     modelRunner // its own K/V store and scratch; forward takes the engine's compute lock
	// maxBatchTokens bounds the tokens of one draft pass (catch-up chunks).
	maxBatchTokens int
	// seqs is each sequence's draft state: a shadow sequence whose tokens
	// are what was fed, n of them, into its blocks.
	seqs map[*seq]*seq
	// draftEOG: a draft token that ends generation ends the draft.
	draftEOG func(int32) bool
}

var _ drafter = (*draftModel)(nil)

// draftKVFraction is the default draft KV budget: this fraction of the
// target's KV cache bytes.
const draftKVFraction = 4

// newDraftModel makes draft's runner model draft for target's: both must
// have the same tokenizer (vocabulary size, every token's bytes, the
// tokens that end generation). budget is the draft's KV cache in bytes (0:
// a quarter of the target's); its blocks never hold more positions than
// the target's cache.
func newDraftModel(target, draft *runner, budget int64) (*draftModel, error) {
	if err := sameTokenizer(target, draft); err != nil {
		return nil, err
	}
	if budget <= 0 {
		budget = int64(target.mr.kv.nBlocks) * blockBytes(len(target.model.layers), target.model.cfg.KVHeads*target.model.cfg.HeadDim, target.mr.kv.bs) / draftKVFraction
	}
	c := draft.model.cfg
	n := int(budget / blockBytes(len(draft.model.layers), c.KVHeads*c.HeadDim, kvBlockSize))
	n = min(n, target.mr.kv.nBlocks)
	if n < 1 {
		return nil, fmt.Errorf("draft model %s for %s: a KV budget of %d bytes holds no block of %d positions", draft.name, target.name, budget, kvBlockSize)
	}
	d := &draftModel{name: draft.name, model: draft.model, argmax: target.e.cpu.Argmax, bm: newBlockManager(n, kvBlockSize, true),
		maxBatchTokens: max(target.e.cfg.MaxBatchTokens, 1), seqs: map[*seq]*seq{}, draftEOG: draft.tok.IsEOG}
	kv, err := newKVStore(draft.model.dev, len(draft.model.layers), c.KVHeads*c.HeadDim, kvBlockSize, n)
	if err != nil {
		return nil, fmt.Errorf("draft model %s for %s: a KV cache of %d blocks on %s: %w", draft.name, target.name, n, draft.model.dev.Name(), err)
	}
	d.mr.model, d.mr.compute, d.mr.kv = draft.model, &target.e.compute, kv
	return d, nil
}

// sameTokenizer refuses a draft whose tokens mean something else than the
// target's: its drafts would be verified as other text.
func sameTokenizer(target, draft *runner) error {
	fail := func(what string) error {
		return fmt.Errorf("draft model %s cannot draft for %s: %s; a draft model must have the same tokenizer as the model it drafts for",
			draft.name, target.name, what)
	}
	tv, dv := target.model.cfg.VocabSize, draft.model.cfg.VocabSize
	if tv != dv {
		return fail(fmt.Sprintf("vocabulary sizes differ (%d and %d)", tv, dv))
	}
	tt, dt := target.tok, draft.tok
	if tt.VocabSize() != dt.VocabSize() {
		return fail(fmt.Sprintf("tokenizer sizes differ (%d and %d)", tt.VocabSize(), dt.VocabSize()))
	}
	if tt.EOS() != dt.EOS() {
		return fail(fmt.Sprintf("end-of-sequence ids differ (%d and %d)", tt.EOS(), dt.EOS()))
	}
	for id := range int32(tt.VocabSize()) {
		if !bytes.Equal(tt.TokenBytes(id), dt.TokenBytes(id)) {
			return fail(fmt.Sprintf("token %d is %q in %s and %q in %s", id, tt.TokenBytes(id), target.name, dt.TokenBytes(id), draft.name))
		}
		if tt.IsEOG(id) != dt.IsEOG(id) {
			return fail(fmt.Sprintf("token %d ends generation in one and not the other", id))
		}
	}
	return nil
}

// draftJob is one sequence's work in a propose call.
type draftJob struct {
	i     int  // index in propose's seqs
	sh    *seq // the draft state
	want  int  // drafts to make
	fed   int  // catch-up tokens fed so far (sh.tokens grows as they are)
	until int  // len(s.tokens): the catch-up target
}

// propose returns up to k[i] greedy draft tokens for seqs[i]. A sequence
// whose draft cannot get KV blocks gets no draft and loses its draft
// state; nothing fails.
func (d *draftModel) propose(seqs []*seq, k []int) [][]int32 {
	out := make([][]int32, len(seqs))
	var jobs []*draftJob
	for i, s := range seqs {
		if k[i] <= 0 || len(s.tokens) == 0 {
			continue
		}
		sh := d.seqs[s]
		if sh == nil {
			sh = &seq{}
			d.seqs[s] = sh
		}
		// Keep what still matches; the last token is always fed again or
		// for the first time, to give the first draft's logits.
		p := 0
		for p < len(sh.tokens) && p < len(s.tokens)-1 && sh.tokens[p] == s.tokens[p] {
			p++
		}
		sh.tokens, sh.n = sh.tokens[:p], p
		// The draft feeds s.tokens and all but the last draft: positions
		// up to len(s.tokens)+want-2.
		want := k[i]
		if ctx := d.model.cfg.ContextLength; ctx > 0 {
			want = min(want, ctx-len(s.tokens)+1)
		}
		room := (len(sh.blocks)+d.bm.numFree())*d.bm.bs - len(s.tokens) + 1
		want = min(want, room)
		if want < 1 {
			d.release(s)
			continue
		}
		d.bm.appendSlots(sh, len(s.tokens)+want-1-sh.n)
		jobs = append(jobs, &draftJob{i: i, sh: sh, want: want, fed: p, until: len(s.tokens)})
	}
	if len(jobs) == 0 {
		return out
	}
	// A pass that panics (fault.go fails the culprit's request) leaves
	// its sequences' draft state claiming positions never computed: the
	// sequences that go on start their drafts afresh.
	ok := false
	defer func() {
		if !ok {
			for _, j := range jobs {
				d.release(seqs[j.i])
			}
		}
	}()
	d.catchUp(seqs, jobs, out)
	// Greedy steps: each job with fewer drafts than it wants feeds its
	// last draft and takes the argmax.
	for {
		b := d.newBatch()
		var step []*draftJob
		for _, j := range jobs {
			o := out[j.i]
			if len(o) == 0 || len(o) >= j.want || d.draftEOG(o[len(o)-1]) {
				continue
			}
			t := o[len(o)-1]
			d.addSegment(b, j.sh, []int32{t}, true)
			step = append(step, j)
		}
		if len(step) == 0 {
			ok = true
			return out
		}
		logits := d.mr.forward(b)
		vocab := d.model.cfg.VocabSize
		for r, j := range step {
			out[j.i] = append(out[j.i], int32(d.argmax(logits[r*vocab:(r+1)*vocab])))
		}
	}
}

// catchUp feeds each job's tokens that the draft cache lacks, in passes of
// at most maxBatchTokens, and sets out[j.i] to its first draft.
func (d *draftModel) catchUp(seqs []*seq, jobs []*draftJob, out [][]int32) {
	vocab := d.model.cfg.VocabSize
	for {
		b := d.newBatch()
		var last []*draftJob // jobs whose last catch-up token is in b, in logit-row order
		budget := d.maxBatchTokens
		for _, j := range jobs {
			if j.fed == j.until || budget == 0 {
				continue
			}
			n := min(j.until-j.fed, budget)
			budget -= n
			done := j.fed+n == j.until
			d.addSegment(b, j.sh, seqs[j.i].tokens[j.fed:j.fed+n], done)
			j.fed += n
			if done {
				last = append(last, j)
			}
		}
		if len(b.tokens) == 0 {
			return
		}
		logits := d.mr.forward(b)
		for r, j := range last {
			out[j.i] = []int32{int32(d.argmax(logits[r*vocab : (r+1)*vocab]))}
		}
	}
}

func (d *draftModel) newBatch() *batch {
	b := &d.mr.b
	*b = batch{kv: d.mr.kv, tokens: b.tokens[:0], pos: b.pos[:0], segs: b.segs[:0], logitRows: b.logitRows[:0]}
	return b
}

// addSegment appends toks, fed to sh at its next positions, to b; logits
// asks for the last one's logits.
func (d *draftModel) addSegment(b *batch, sh *seq, toks []int32, logits bool) {
	first := len(b.tokens)
	b.tokens = append(b.tokens, toks...)
	for i := range toks {
		b.pos = append(b.pos, int32(sh.n+i))
	}
	b.segs = append(b.segs, segment{blocks: sh.blocks, first: first, n: len(toks), start: sh.n})
	if logits {
		b.logitRows = append(b.logitRows, first+len(toks)-1)
	}
	sh.tokens = append(sh.tokens, toks...)
	sh.n += len(toks)
}

// release frees s's draft blocks and state.
func (d *draftModel) release(s *seq) {
	sh := d.seqs[s]
	if sh == nil {
		return
	}
	d.bm.deallocate(sh)
	delete(d.seqs, s)
}
