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
	// Rows nearly free: every sequence drafts what it may (the cost model
	// has its own test).
	sc.cost = stepCost{priorF: 1e6, priorR: 1, pinned: true}
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
	// Two sequences of one block's prompt minus one, in 2 blocks: a decode
	// fits, a decode with a draft would need a third block.
	sc := newSpecScheduler(t, 2, 512, d)
	q := &params{n: 1, maxTokens: 10, ignoreEOS: true}
	a := sc.queueTest(promptOf(1, bs-1), q)
	a.spec.method = specNgram
	b := sc.queueTest(promptOf(2, bs-1), q)
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

	// A budget of 6 and three decodes: 3 tokens spare for drafts.
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
	// The three have the same acceptance estimate: each one's first draft
	// is worth more than anyone's second.
	if pl.tokens != 6 || len(pl.seqs) != 3 || len(seqs[0].draft) != 1 || len(seqs[1].draft) != 1 || len(seqs[2].draft) != 1 {
		t.Fatalf("plan of %d tokens, %d sequences, drafts %d %d %d; want 6, 3, 1 1 1",
			pl.tokens, len(pl.seqs), len(seqs[0].draft), len(seqs[1].draft), len(seqs[2].draft))
	}
}

func TestSpecAcceptanceAndBackOff(t *testing.T) {
	var st specState
	if a := st.alpha(); a != specPrior {
		t.Fatalf("no evidence: alpha %v, want the prior %v", a, specPrior)
	}
	for range 10 {
		st.feedback(4, 4)
	}
	if a := st.alpha(); a < 0.9 {
		t.Fatalf("every draft right: alpha %v, want above 0.9", a)
	}
	high := st.alpha()
	st.feedback(4, 1)
	if a := st.alpha(); a >= high {
		t.Fatalf("a wrong second draft: alpha %v, not below %v", a, high)
	}
	// Drafts that keep failing back off for doubling pauses.
	pauses := []int{}
	for range 12 {
		st.feedback(1, 0)
		if st.skip > 0 {
			pauses = append(pauses, st.skip)
			st.skip = 0
		}
	}
	if a := st.alpha(); a > 0.25 {
		t.Fatalf("every draft wrong: alpha %v, want below 0.25", a)
	}
	if len(pauses) < 3 || pauses[0] != specMinPause || pauses[1] != 2*specMinPause || pauses[2] != 4*specMinPause {
		t.Fatalf("pauses %v; want pauses doubling from %d", pauses, specMinPause)
	}
	st.feedback(1, 1)
	if st.pause != 0 || st.misses != 0 {
		t.Fatalf("an accepted draft: pause %d misses %d, want 0 and 0", st.pause, st.misses)
	}
}

// allocDrafts gives draft slots best first while they raise the step's
// expected tokens per second, (T + Σ alpha^j) / (F + R·rows).
func TestSpecAllocationFollowsTheCostModel(t *testing.T) {
	withAlpha := func(a float64) *seq {
		// hits and fails with alpha = (hits+prior)/(hits+fails+1) = a and
		// plenty of evidence (no probe).
		n := 100.0
		return &seq{spec: specState{method: specNgram, hits: a*(n+1) - specPrior, fails: n - (a*(n+1) - specPrior)}}
	}
	// expected replays the rule: all candidate values, best first, taken
	// while value·cost > R·tokens.
	tests := []struct {
		name   string
		F, R   float64
		alphas []float64
		caps   []int
		spare  int
		want   []int
	}{
		// One sequence, F=8, R=1: T=1, C=9. 0.9 > 1/9; then T=1.9, C=10:
		// 0.81 > 0.19; T=2.71, C=11: 0.729 > 0.246; T=3.439, C=12: 0.656 >
		// 0.287: all 4.
		{"one sequence drafts its cap", 8, 1, []float64{0.9}, []int{4}, 100, []int{4}},
		// Eight sequences, F=1, R=1 (rows cost as much as the step): T=8,
		// C=9: a slot needs value > 8/9; 0.95 passes (T=8.95, C=10: the
		// next 0.95 needs > 0.895, passes; T=9.9, C=11: needs > 0.9 ...),
		// alpha 0.5 never does.
		{"a costly row drafts only near-certain tokens", 1, 1,
			[]float64{0.95, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5}, []int{4, 4, 4, 4, 4, 4, 4, 4}, 100, nil},
		{"spare bounds the slots", 8, 1, []float64{0.9, 0.9}, []int{4, 4}, 3, []int{2, 1}},
		{"a capped sequence", 8, 1, []float64{0.9, 0.9}, []int{0, 2}, 100, []int{0, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := &scheduler{cost: stepCost{priorF: tt.F, priorR: tt.R}}
			var decodes []*seq
			for _, a := range tt.alphas {
				decodes = append(decodes, withAlpha(a))
			}
			ks := make([]int, len(decodes))
			sc.allocDrafts(decodes, tt.caps, ks, tt.spare)
			want := tt.want
			if want == nil {
				want = allocByFormula(decodes, tt.caps, tt.F, tt.R, tt.spare)
			}
			if !slices.Equal(ks, want) {
				t.Fatalf("allocation %v, want %v", ks, want)
			}
		})
	}
	// F=8, R=1, four sequences: plain decoding makes 4/12 tokens per unit
	// (0.4 counting specMinGain); the near-certain drafts raise it to
	// 7.9/16 = 0.49, and a draft worth 0.3 would lower it.
	sc := &scheduler{cost: stepCost{priorF: 8, priorR: 1}}
	decodes := []*seq{withAlpha(0.99), withAlpha(0.3), withAlpha(0.3), withAlpha(0.3)}
	ks := make([]int, 4)
	sc.allocDrafts(decodes, []int{4, 4, 4, 4}, ks, 100)
	if ks[0] != 4 || ks[1]+ks[2]+ks[3] != 0 {
		t.Fatalf("allocation %v: want drafts for the near-certain sequence only", ks)
	}
	// Without evidence a sequence counts as the prior's acceptance.
	fresh := &seq{spec: specState{method: specNgram}}
	sc.allocDrafts([]*seq{fresh}, []int{4}, ks[:1], 100)
	if want := allocByFormula([]*seq{fresh}, []int{4}, 8, 1, 100); ks[0] != want[0] {
		t.Fatalf("allocation %v without evidence, want %v", ks[:1], want)
	}
}

// allocByFormula is the allocation by brute force: every count vector
// within caps and spare, the one with the most expected tokens per cost,
// plain decoding counted specMinGain better than it is.
func allocByFormula(decodes []*seq, caps []int, F, R float64, spare int) []int {
	best, bestRate := make([]int, len(decodes)), -1.0
	cur := make([]int, len(decodes))
	var walk func(i, left int)
	walk = func(i, left int) {
		if i == len(decodes) {
			tokens, rows := float64(len(decodes)), float64(len(decodes))
			for s, k := range cur {
				a, v := decodes[s].spec.alpha(), 1.0
				for range k {
					v *= a
					tokens += v
					rows++
				}
			}
			rate := tokens / (F + R*rows)
			if rows == float64(len(decodes)) {
				rate *= specMinGain // drafting must beat plain decoding by this
			}
			if rate > bestRate+1e-12 {
				bestRate = rate
				copy(best, cur)
			}
			return
		}
		for k := 0; k <= min(caps[i], left); k++ {
			cur[i] = k
			walk(i+1, left-k)
		}
		cur[i] = 0
	}
	walk(0, spare)
	return best
}

// Probing: when the estimates favour no draft, every specProbeEvery-th
// allocation still takes the best one if its expected rate is within
// specProbeFloor of plain decoding's (so that an unmeasured cost and the
// prior's acceptance get measured); a clearly losing one is never taken.
func TestSpecAllocationProbes(t *testing.T) {
	// F=1, R=1, one sequence, alpha 0.5 (the prior): plain 1/2; one draft
	// (1.5)/3 = 0.5 = plain, below specMinGain but above the floor.
	sc := &scheduler{cost: stepCost{priorF: 1, priorR: 1}}
	fresh := &seq{spec: specState{method: specNgram}}
	ks := make([]int, 1)
	drafted := 0
	for i := 1; i <= 3*specProbeEvery; i++ {
		sc.allocDrafts([]*seq{fresh}, []int{4}, ks, 100)
		if ks[0] > 0 {
			drafted++
			if i%specProbeEvery != 0 {
				t.Fatalf("allocation %d drafted %d: only every %dth may probe", i, ks[0], specProbeEvery)
			}
		}
	}
	if drafted != 3 {
		t.Fatalf("%d probes in %d allocations, want 3", drafted, 3*specProbeEvery)
	}
	// A near-hopeless draft (alpha about 0): one draft's rate 1/3 is
	// 0.67 of plain, below the floor: never taken.
	hopeless := &seq{spec: specState{method: specNgram, fails: 1000}}
	for i := 1; i <= 2*specProbeEvery; i++ {
		sc.allocDrafts([]*seq{hopeless}, []int{4}, ks, 100)
		if ks[0] > 0 {
			t.Fatalf("allocation %d probed a draft worth %.3f", i, hopeless.spec.alpha())
		}
	}
}
