package native

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/tokenizer"
	"github.com/batchd/batchd/engine/native/weights"
)

// The scheduler alone: these tests drive schedule() and postprocess() with
// no model. The "model" is the test: it answers each sampled sequence with
// a token that depends only on the sequence's position, as a greedy model
// would, so a preempted sequence recomputes to the same output.

var (
	demoTokOnce sync.Once
	demoTok     *tokenizer.Tokenizer
	demoTokErr  error
)

// testTokenizer is the demo model's tokenizer (its weights are not used).
func testTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	path := demoPath(t)
	demoTokOnce.Do(func() {
		w, err := weights.Load(path)
		if err != nil {
			demoTokErr = err
			return
		}
		defer w.Close()
		demoTok, demoTokErr = newTokenizer(w.Tokenizer, w.Config.EOSIDs)
	})
	if demoTokErr != nil {
		t.Fatal(demoTokErr)
	}
	return demoTok
}

func newTestScheduler(t *testing.T, blocks, budget, maxSeqs int) *scheduler {
	return &scheduler{maxBatchTokens: budget, maxSeqs: maxSeqs, bm: newBlockManager(blocks, kvBlockSize, false),
		tok: testTokenizer(t), stats: &cacheCounters{}}
}

// queue submits one request of one sequence with prompt.
func (sc *scheduler) queueTest(prompt []int32, p *params) *seq {
	j := &job{p: p}
	s := &seq{job: j, promptLen: len(prompt), tokens: slices.Clone(prompt), dec: sc.tok.NewDecoder()}
	s.dec.Prime(prompt)
	j.seqs = []*seq{s}
	j.remaining = 1
	sc.submit(j)
	return s
}

// nextToken is the test's model: a token that depends on the position.
func nextToken(s *seq) int32 { return int32(10 + len(s.tokens)%50) }

// runStep runs one step with the test's model and returns its plan.
func (sc *scheduler) runStep() plan {
	p := sc.schedule()
	tokens := make([][]int32, len(p.sample))
	for i, s := range p.sample {
		tokens[i] = []int32{nextToken(s)}
	}
	sc.postprocess(p, tokens)
	return p
}

func promptOf(seed, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(3 + (seed*7919+i*31)%200)
	}
	return out
}

func TestScheduleAdmitsUnderTokenBudgetAndMaxSeqs(t *testing.T) {
	sc := newTestScheduler(t, 64, 64, 3)
	p := &params{n: 1, maxTokens: 4, ignoreEOS: true}
	var seqs []*seq
	for i := range 4 {
		seqs = append(seqs, sc.queueTest(promptOf(i, 40), p))
	}
	pl := sc.schedule()
	if pl.tokens != 64 || len(pl.seqs) != 2 || pl.seqs[0] != seqs[0] || pl.seqs[1] != seqs[1] {
		t.Fatalf("first step: %d tokens over %d sequences, want 64 over the first 2", pl.tokens, len(pl.seqs))
	}
	if seqs[0].chunk != 40 || seqs[1].chunk != 24 {
		t.Fatalf("chunks %d, %d; want 40 (whole prompt) and 24 (what the budget left)", seqs[0].chunk, seqs[1].chunk)
	}
	if len(pl.sample) != 1 || pl.sample[0] != seqs[0] {
		t.Fatalf("only the sequence whose prompt is complete gets logits: %d rows", len(pl.sample))
	}
	sc.postprocess(pl, [][]int32{{nextToken(seqs[0])}})
	// Next step: a decode, the rest of the second prompt, and the third
	// sequence (max_seqs 3); never the fourth.
	pl = sc.schedule()
	if len(sc.running) != 3 || seqs[3].status != seqWaiting {
		t.Fatalf("%d running, fourth %v; want 3 running (max_seqs) and the fourth waiting", len(sc.running), seqs[3].status)
	}
	if pl.tokens > 64 {
		t.Fatalf("step of %d tokens over the budget of 64", pl.tokens)
	}
	sc.postprocess(pl, make([][]int32, len(pl.sample)))
}

func TestSchedulePreemptsWhenBlocksRunOutAndTheVictimReturns(t *testing.T) {
	bs := kvBlockSize
	// 4 blocks: two prompts of 2 blocks each fill the cache; the first
	// decode past them needs a fifth.
	sc := newTestScheduler(t, 4, 512, 8)
	p := &params{n: 1, maxTokens: 2*bs - 60 + 10, ignoreEOS: true}
	a := sc.queueTest(promptOf(1, 60), p)
	b := sc.queueTest(promptOf(2, 60), p)
	sawPreempted := false
	for step := 0; !a.finished() || !b.finished(); step++ {
		if step > 1000 {
			t.Fatal("the sequences did not finish")
		}
		sc.runStep()
		if b.status == seqPreempted {
			sawPreempted = true
		}
	}
	if !sawPreempted || sc.stats.preemptions.Load() == 0 {
		t.Fatal("no preemption, though both sequences could not grow in 4 blocks")
	}
	for _, s := range []*seq{a, b} {
		if s.finish != "length" || len(s.tokens) != 60+p.maxTokens {
			t.Fatalf("finish %q with %d tokens, want length with %d", s.finish, len(s.tokens), 60+p.maxTokens)
		}
		for i := 60; i < len(s.tokens); i++ {
			if want := int32(10 + i%50); s.tokens[i] != want {
				t.Fatalf("token %d is %d, want %d: a preempted sequence must recompute to the same output", i, s.tokens[i], want)
			}
		}
	}
	if sc.bm.used() != 0 || len(sc.running) != 0 || len(sc.waiting) != 0 || sc.inFlight() != 0 {
		t.Fatalf("after both finished: %d blocks used, %d running, %d waiting, %d in flight", sc.bm.used(), len(sc.running), len(sc.waiting), sc.inFlight())
	}
}

func TestScheduleRunsCachedPrefixesFirst(t *testing.T) {
	bs := kvBlockSize
	sc := newTestScheduler(t, 64, 512, 1)
	p := &params{n: 1, maxTokens: 1, ignoreEOS: true}
	system := promptOf(9, 2*bs)
	shared := func(i int) []int32 { return append(slices.Clone(system), promptOf(100+i, 5)...) }
	first := sc.queueTest(shared(0), p)
	x := sc.queueTest(promptOf(50, 2*bs+5), p)
	y := sc.queueTest(promptOf(51, 2*bs+5), p)
	s1 := sc.queueTest(shared(1), p)
	s2 := sc.queueTest(shared(2), p)
	var order []*seq
	for step := 0; len(order) < 5; step++ {
		if step > 100 {
			t.Fatal("the sequences did not finish")
		}
		pl := sc.runStep()
		for _, s := range pl.seqs {
			if !slices.Contains(order, s) {
				order = append(order, s)
			}
		}
	}
	if want := []*seq{first, s1, s2, x, y}; !slices.Equal(order, want) {
		t.Fatalf("admission order %v, want the shared prompt's requests together first", order)
	}
	if got, want := sc.stats.cachedTokens.Load(), int64(2*2*bs); got != want {
		t.Fatalf("%d prompt tokens from the cache, want %d", got, want)
	}
}

func TestPostprocessTakesSeveralTokensPerSequence(t *testing.T) {
	cases := []struct {
		name       string
		p          params
		tokens     []int32
		wantTokens []int32
		finish     string
	}{
		{"all accepted", params{n: 1, maxTokens: 10}, []int32{20, 21, 22}, []int32{20, 21, 22}, ""},
		{"stop token inside", params{n: 1, maxTokens: 10, stopIDs: []int32{21}}, []int32{20, 21, 22}, []int32{20}, "stop"},
		{"max_tokens cut", params{n: 1, maxTokens: 2}, []int32{20, 21, 22}, []int32{20, 21}, "length"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc := newTestScheduler(t, 16, 512, 4)
			prompt := promptOf(3, 10)
			var completed int
			s := sc.queueTest(prompt, &c.p)
			s.job.complete = func(*job) { completed++ }
			pl := sc.schedule()
			sc.postprocess(pl, [][]int32{c.tokens})
			if got := s.tokens[len(prompt):]; !slices.Equal(got, c.wantTokens) || s.finish != c.finish {
				t.Fatalf("tokens %v finish %q, want %v %q", got, s.finish, c.wantTokens, c.finish)
			}
			if c.finish != "" && (completed != 1 || len(sc.running) != 0 || sc.bm.used() != 0) {
				t.Fatalf("finished: completed %d times, %d running, %d blocks used; want retired", completed, len(sc.running), sc.bm.used())
			}
			if c.finish == "" {
				// The extra tokens are computed in the next step.
				if pl = sc.schedule(); len(pl.seqs) != 1 || s.chunk != 3 {
					t.Fatalf("next step: %d sequences, chunk %d; want the 3 new tokens", len(pl.seqs), s.chunk)
				}
			}
		})
	}
}

// admittedOrder runs steps of one admission each (prompts of budget tokens,
// max_tokens 1), calling before ahead of each step, and returns the names
// of the sequences in the order they were admitted.
func admittedOrder(sc *scheduler, steps int, names map[*seq]string, before func(step int)) []string {
	var order []string
	for step := range steps {
		before(step)
		for _, s := range sc.runStep().seqs {
			order = append(order, names[s])
		}
	}
	return order
}

func TestScheduleAdmitsHigherPriorityFirst(t *testing.T) {
	sc := newTestScheduler(t, 64, 40, 8)
	p := &params{n: 1, maxTokens: 1, ignoreEOS: true}
	names := map[*seq]string{}
	queue := func(name string, seed int, prio engine.Priority) {
		s := sc.queueTest(promptOf(seed, 40), p)
		s.job.prio = prio
		names[s] = name
	}
	queue("low", 1, engine.PriorityLow)
	queue("normal", 2, engine.PriorityNormal)
	queue("high", 3, engine.PriorityHigh)
	queue("normal2", 4, engine.PriorityNormal)
	queue("online", 5, engine.PriorityOnline)
	got := admittedOrder(sc, 5, names, func(int) {})
	want := []string{"online", "high", "normal", "normal2", "low"}
	if !slices.Equal(got, want) {
		t.Fatalf("admitted %v, want %v (priority, then arrival)", got, want)
	}
}

func TestSchedulePriorityLeavesBatchesAShare(t *testing.T) {
	sc := newTestScheduler(t, 64, 40, 8)
	p := &params{n: 1, maxTokens: 1, ignoreEOS: true}
	names := map[*seq]string{}
	for i := range 3 {
		s := sc.queueTest(promptOf(100+i, 40), p)
		names[s] = fmt.Sprintf("batch%d", i)
	}
	// A steady stream of online requests: one arrives before every step,
	// so one always waits.
	got := admittedOrder(sc, 16, names, func(step int) {
		s := sc.queueTest(promptOf(step, 40), p)
		s.job.prio = engine.PriorityOnline
		names[s] = "online"
	})
	var batchAt []int
	for i, name := range got {
		if name != "online" {
			batchAt = append(batchAt, i)
			if want := fmt.Sprintf("batch%d", len(batchAt)-1); name != want {
				t.Fatalf("admission %d is %s, want %s (batch lines keep their order)", i, name, want)
			}
		}
	}
	share := engine.PriorityShare
	if want := []int{share, 2*share + 1, 3*share + 2}; !slices.Equal(batchAt, want) {
		t.Fatalf("batch lines admitted at %v of %v, want at %v: one in %d admissions", batchAt, got, want, share+1)
	}
}
