package native

import "sync"

// The model runner turns a step's plan into the model's batch (tokens,
// positions, one segment per sequence, the rows that need logits), runs
// the forward pass and returns the logits. It decides nothing: the
// scheduler chose the tokens, the sampler chooses from the logits.
type modelRunner struct {
	model   *Model
	kv      *kvStore
	compute *sync.Mutex // one forward pass at a time across models (Engine.compute)
	scratch scratch
	b       batch // reused from step to step
}

// run computes p and returns the logits of p.sample, in order, [rows][vocab]:
// one row for a sequence, or 1+len(s.draft) rows for one verifying drafts
// (its last token's, then each draft's).
func (mr *modelRunner) run(p plan) []float32 {
	b := &mr.b
	*b = batch{kv: mr.kv, tokens: b.tokens[:0], pos: b.pos[:0], segs: b.segs[:0], logitRows: b.logitRows[:0]}
	for _, s := range p.seqs {
		start, n := s.n, s.chunk
		first := len(b.tokens)
		b.tokens = append(b.tokens, s.tokens[start:start+n-len(s.draft)]...)
		b.tokens = append(b.tokens, s.draft...)
		for i := range n {
			b.pos = append(b.pos, int32(start+i))
		}
		a := s.adapter
		b.segs = append(b.segs, segment{blocks: s.blocks, first: first, n: n, start: start, adapter: a})
		b.lora = b.lora || a != nil
		if s.sampled() {
			for r := n - 1 - len(s.draft); r < n; r++ {
				b.logitRows = append(b.logitRows, first+r)
			}
		}
	}
	return mr.forward(b)
}

// forward runs the model on b under the engine's compute lock.
func (mr *modelRunner) forward(b *batch) []float32 {
	mr.compute.Lock()
	defer mr.compute.Unlock()
	if h := faultHook.Load(); h != nil {
		(*h)(b.tokens)
	}
	return mr.model.forward(b, &mr.scratch)
}
