package native

import (
	"slices"
	"testing"
)

// The scheduler with speculation, no model: the test's model is
// nextToken's (a token per position), verified as the sampler verifies,
// and the drafter is scripted (a test double for a real drafter: it knows
// the model's answer and can be told to be wrong).

// scriptedDrafter drafts the test model's tokens, wrong from index wrongAt
// on (-1: never), and records what it was asked.
type scriptedDrafter struct {
	wrongAt  int
	calls    int
	released []*seq
}

func (d *scriptedDrafter) propose(seqs []*seq, k []int) [][]int32 {
	d.calls++
	out := make([][]int32, len(seqs))
	for i, s := range seqs {
		for j := range k[i] {
			t := int32(10 + (len(s.tokens)+j)%50)
			if d.wrongAt >= 0 && j >= d.wrongAt {
				t = 1
			}
			out[i] = append(out[i], t)
		}
	}
	return out
}

func (d *scriptedDrafter) release(s *seq) { d.released = append(d.released, s) }

// verifyTest is the sampler's verification against the test's model.
func verifyTest(s *seq) []int32 {
	var out []int32
	for i := 0; i <= len(s.draft); i++ {
		t := int32(10 + (len(s.tokens)+i)%50)
		out = append(out, t)
		if i == len(s.draft) || t != s.draft[i] {
			break
		}
	}
	return out
}

// runSpecStep runs one step, checking the plan's drafts and the KV
// bookkeeping after it.
func (sc *scheduler) runSpecStep(t *testing.T) plan {
	t.Helper()
	p := sc.schedule()
	if p.tokens > sc.maxBatchTokens {
		t.Fatalf("step of %d tokens over the budget %d", p.tokens, sc.maxBatchTokens)
	}
	tokens := make([][]int32, len(p.sample))
	for i, s := range p.sample {
		if len(s.draft) > 0 && s.chunk != 1+len(s.draft) {
			t.Fatalf("chunk %d for %d drafts", s.chunk, len(s.draft))
		}
		tokens[i] = verifyTest(s)
	}
	sc.postprocess(p, tokens)
	for _, s := range p.seqs {
		if s.draft != nil {
			t.Fatal("a draft outlived its step")
		}
		if !s.finished() && s.status == seqRunning && s.n > len(s.tokens) {
			t.Fatalf("s.n %d past %d tokens", s.n, len(s.tokens))
		}
	}
	return p
}

func newSpecScheduler(t *testing.T, blocks, budget int, d drafter) *scheduler {
	sc := newTestScheduler(t, blocks, budget, 8)
	sc.drafters[specNgram], sc.specK = d, 4
	return sc
}

func TestSpecSchedulerVerifiesAndMatchesPlainDecoding(t *testing.T) {
	for _, wrongAt := range []int{-1, 0, 2} {
		d := &scriptedDrafter{wrongAt: wrongAt}
		sc := newSpecScheduler(t, 64, 512, d)
		p := &params{n: 1, maxTokens: 37, ignoreEOS: true}
		s := sc.queueTest(promptOf(1, 20), p)
		s.spec.method = specNgram
		plainSeq := sc.queueTest(promptOf(1, 20), p) // speculation off
		verifySteps := 0
		for step := 0; !s.finished() || !plainSeq.finished(); step++ {
			if step > 200 {
				t.Fatal("the sequences did not finish")
			}
			pl := sc.runSpecStep(t)
			for _, x := range pl.seqs {
				if x.chunk == 0 && x == s && len(s.tokens)-s.promptLen > 0 && !s.finished() && s.n != len(s.tokens)-1 {
					t.Fatalf("after a step s.n = %d with %d tokens, want len-1", s.n, len(s.tokens))
				}
			}
			if d.calls > verifySteps {
				verifySteps = d.calls
			}
		}
		if !slices.Equal(s.tokens, plainSeq.tokens) || s.finish != "length" || len(s.tokens) != 20+37 {
			t.Fatalf("wrongAt %d: speculative %v (%s), plain %v", wrongAt, s.tokens, s.finish, plainSeq.tokens)
		}
		if d.calls == 0 {
			t.Fatalf("wrongAt %d: the drafter was never asked", wrongAt)
		}
		acc, rej := s.spec.accepted, s.spec.rejected
		switch wrongAt {
		case -1:
			// Every draft right: k grows to 4 and 36 tokens after the first
			// take far fewer steps than 36; max_tokens caps the last.
			if acc == 0 || rej != 0 {
				t.Fatalf("all drafts right: %d accepted, %d rejected", acc, rej)
			}
			if d.calls > 12 {
				t.Fatalf("%d verify steps for 36 tokens with every draft right", d.calls)
			}
		case 0:
			if acc != 0 || rej == 0 {
				t.Fatalf("all drafts wrong: %d accepted, %d rejected", acc, rej)
			}
		}
		if got, want := sc.stats.specAcceptedTokens.Load(), int64(acc); got != want {
			t.Fatalf("stats say %d accepted, the sequence %d", got, want)
		}
		if !slices.Contains(d.released, s) {
			t.Fatal("the drafter was not told the sequence finished")
		}
		if sc.bm.used() != 0 {
			t.Fatalf("%d blocks still used", sc.bm.used())
		}
	}
}

// Drafts never preempt: a sequence whose drafts need a block that is not
// free decodes one token instead, and nobody is preempted for it.
func TestSpecDraftsNeverPreempt(t *testing.T) {
	bs := kvBlockSize
	d := &scriptedDrafter{wrongAt: -1}
	// Two sequences of one block's prompt minus two, in 2 blocks: a decode
	// fits, a decode with 4 drafts would need a third block.
	sc := newSpecScheduler(t, 2, 512, d)
	q := &params{n: 1, maxTokens: 10, ignoreEOS: true}
	a := sc.queueTest(promptOf(1, bs-2), q)
	a.spec.method = specNgram
	b := sc.queueTest(promptOf(2, bs-2), q)
	sc.runSpecStep(t) // both prefill, one block each: the cache is full
	if a.status != seqRunning || b.status != seqRunning || sc.bm.numFree() != 0 {
		t.Fatalf("a %v, b %v, %d free blocks; want both running and none free", a.status, b.status, sc.bm.numFree())
	}
	pl := sc.schedule()
	if d.calls == 0 {
		t.Fatal("the drafter was not asked: the test proves nothing")
	}
	if a.chunk != 1 || len(a.draft) != 0 {
		t.Fatalf("a: chunk %d with %d drafts; want a plain decode when the drafts' block is not free", a.chunk, len(a.draft))
	}
	if n := sc.stats.preemptions.Load(); n != 0 {
		t.Fatalf("%d preemptions for a draft", n)
	}
	tokens := make([][]int32, len(pl.sample))
	for i, s := range pl.sample {
		tokens[i] = verifyTest(s)
	}
	sc.postprocess(pl, tokens)
}

// k stays within max_tokens (the token sampled after the drafts is the
// last one) and the step's budget, leaving one token for every decode.
func TestSpecDraftCaps(t *testing.T) {
	d := &scriptedDrafter{wrongAt: -1}
	sc := newSpecScheduler(t, 64, 512, d)
	p := &params{n: 1, maxTokens: 3, ignoreEOS: true}
	s := sc.queueTest(promptOf(1, 10), p)
	s.spec.method = specNgram
	sc.runSpecStep(t) // prefill: the first token
	sc.schedule()
	if len(s.draft) != 1 {
		t.Fatalf("%d drafts with 2 tokens left, want 1", len(s.draft))
	}

	// A budget of 6 and three decodes: 3 tokens spare for drafts, oldest first.
	sc = newSpecScheduler(t, 64, 6, d)
	q := &params{n: 1, maxTokens: 50, ignoreEOS: true}
	var seqs []*seq
	for i := range 3 {
		x := sc.queueTest(promptOf(i, 2), q)
		x.spec.method = specNgram
		seqs = append(seqs, x)
	}
	sc.runSpecStep(t)
	pl := sc.schedule()
	if pl.tokens != 6 || len(pl.seqs) != 3 || len(seqs[0].draft) != 3 || len(seqs[1].draft) != 0 {
		t.Fatalf("plan of %d tokens, %d sequences, drafts %d %d %d; want 6, 3, 3 0 0",
			pl.tokens, len(pl.seqs), len(seqs[0].draft), len(seqs[1].draft), len(seqs[2].draft))
	}
}

func TestSpecAdaptiveK(t *testing.T) {
	var st specState
	st.k = 4
	st.feedback(4, 4, 8)
	if st.k != 5 {
		t.Fatalf("all accepted: k %d, want 5", st.k)
	}
	st.feedback(5, 2, 8)
	if st.k != 3 {
		t.Fatalf("2 of 5 accepted: k %d, want 3", st.k)
	}
	// Drafts that keep failing shrink k, then back off for doubling pauses.
	pauses := []int{}
	for range 12 {
		st.feedback(st.k, 0, 8)
		if st.skip > 0 {
			pauses = append(pauses, st.skip)
			st.skip = 0
		}
	}
	if st.k != 1 || len(pauses) < 3 || pauses[0] != specMinPause || pauses[1] != 2*specMinPause || pauses[2] != 4*specMinPause {
		t.Fatalf("k %d, pauses %v; want k 1 and pauses doubling from %d", st.k, pauses, specMinPause)
	}
	st.feedback(1, 1, 8)
	if st.pause != 0 || st.k != 2 {
		t.Fatalf("an accepted draft: pause %d k %d, want 0 and 2", st.pause, st.k)
	}
}
