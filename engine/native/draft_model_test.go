package native

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/kernels"
)

// engineGreedy decodes n tokens greedily from prompt through r's engine
// loop (scheduler, model runner, sampler: plain decoding, no drafts) and
// returns them.
func engineGreedy(t *testing.T, r *runner, prompt []int32, n int) []int32 {
	t.Helper()
	ids, _ := json.Marshal(prompt)
	req := &engine.Request{CustomID: "greedy", Endpoint: engine.EndpointCompletions,
		Body: json.RawMessage(fmt.Sprintf(`{"prompt":%s,"max_tokens":%d,"temperature":0,"ignore_eos":true}`, ids, n))}
	p, resp := parseRequest(req)
	if resp != nil {
		t.Fatalf("parse: %s", resp.Body)
	}
	j, resp := r.newJob(req, p)
	if resp != nil {
		t.Fatalf("new job: %s", resp.Body)
	}
	got := make(chan []int32, 1)
	j.complete = func(j *job) { got <- slices.Clone(j.seqs[0].tokens[len(prompt):]) }
	r.submit(j)
	select {
	case out := <-got:
		if len(out) != n {
			t.Fatalf("engine decoded %d tokens, want %d", len(out), n)
		}
		return out
	case <-time.After(5 * time.Minute):
		t.Fatal("engine did not finish a greedy decode in 5 minutes")
	}
	return nil
}

// wantDrafts is what a perfect greedy drafter proposes given the target's
// greedy continuation: its first k tokens, up to the first that ends
// generation.
func wantDrafts(r *runner, cont []int32, k int) []int32 {
	out := cont[:k]
	for i, t := range out {
		if r.tok.IsEOG(t) {
			return out[:i+1]
		}
	}
	return out
}

// storiesSelfDraft opens an engine on stories260K and makes the model a
// draft for itself.
func storiesSelfDraft(t testing.TB) (*runner, *draftModel) {
	t.Helper()
	e := openEngine(t, ModelConfig{Path: storiesPath(t)})
	r := e.runners[e.order[0]]
	d, err := newDraftModel(r, r, 0)
	if err != nil {
		t.Fatal(err)
	}
	return r, d
}

func propose1(d *draftModel, s *seq, k int) []int32 { return d.propose([]*seq{s}, []int{k})[0] }

// A draft model proposes exactly its own greedy continuation (so a model
// drafting for itself would have every draft accepted), also after drafts
// were partly rejected and the sequence went another way. draftPath ""
// makes the target draft for itself.
func testDraftIsGreedy(t *testing.T, targetPath, draftPath, text string) {
	models := []ModelConfig{{Path: targetPath}}
	if draftPath != "" {
		models = append(models, ModelConfig{Path: draftPath})
	}
	e := openEngine(t, models...)
	r, dr := e.runners[e.order[0]], e.runners[e.order[len(e.order)-1]]
	d, err := newDraftModel(r, dr, 0)
	if err != nil {
		t.Fatal(err)
	}
	const k = 4
	s := &seq{tokens: r.tok.Encode(text, true, false)}
	for round := range 8 {
		cont := engineGreedy(t, dr, s.tokens, k+1)
		got := propose1(d, s, k)
		if want := wantDrafts(dr, cont, k); !slices.Equal(got, want) {
			t.Fatalf("round %d: drafts %v, want the draft model's greedy continuation %v", round, got, want)
		}
		v := int32(r.model.cfg.VocabSize)
		switch round % 4 {
		case 0: // all accepted, plus the target's next token
			s.tokens = append(s.tokens, cont[:k+1]...)
		case 1: // 2 of 4 accepted, then a token the draft did not guess
			other := (cont[2] + 7) % v
			for r.tok.IsEOG(other) || other == cont[2] {
				other = (other + 1) % v
			}
			s.tokens = append(s.tokens, cont[0], cont[1], other)
		case 2: // none accepted
			s.tokens = append(s.tokens, (cont[0]+3)%v)
		case 3: // two plain decode steps with no drafting between: the
			// draft cache holds drafts at positions the sequence now has
			// other tokens at
			s.tokens = append(s.tokens, (cont[0]+5)%v, (cont[1]+9)%v)
		}
	}
	d.release(s)
	if d.bm.numFree() != d.bm.n || len(d.seqs) != 0 {
		t.Fatalf("after release: %d of %d blocks free, %d sequences kept", d.bm.numFree(), d.bm.n, len(d.seqs))
	}
}

func TestDraftSelfIsGreedyStories(t *testing.T) {
	testDraftIsGreedy(t, storiesPath(t), "", "Once upon a time there was a little girl named Lily. She")
}

func TestDraftSelfIsGreedyDemo(t *testing.T) {
	testDraftIsGreedy(t, demoPath(t), "", "Hello, world! How are you today?")
}

// Another model with the same tokenizer and other shapes (layers, KV
// heads, architecture) drafts from a cache of its own shape.
func TestDraftOtherModelIsGreedy(t *testing.T) {
	path := writeDemo(t, demomodel.Shapes["tiny-llama"])
	testDraftIsGreedy(t, demoPath(t), path, "Once upon a time, there was a little girl named Lily.")
}

// writeDemo writes a demo model of shape (the demo tokenizer) in a
// temporary directory.
func writeDemo(t *testing.T, shape demomodel.Shape) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), shape.Name+".gguf")
	if err := demomodel.WriteFile(path, shape, kernels.F32, 5); err != nil {
		t.Fatal(err)
	}
	return path
}

// A draft model with a shorter context than its target's drafts only up
// to its own context length, and not at all beyond it.
func TestDraftShortContext(t *testing.T) {
	shape := demomodel.Shapes["tiny-llama"]
	shape.Name, shape.Context = "short", 64
	e := openEngine(t, ModelConfig{Path: demoPath(t)}, ModelConfig{Path: writeDemo(t, shape)})
	d, err := newDraftModel(e.runners["demo-tiny"], e.runners["short"], 0)
	if err != nil {
		t.Fatal(err)
	}
	tok := e.runners["demo-tiny"].tok
	fits := &seq{tokens: tok.Encode(strings.Repeat("red ", 200), true, false)[:61]}
	over := &seq{tokens: tok.Encode(strings.Repeat("red ", 200), true, false)[:65]}
	got := d.propose([]*seq{fits, over}, []int{8, 8})
	if len(got[0]) == 0 || len(got[0]) > 4 {
		t.Fatalf("61 tokens in a context of 64: %d drafts, want 1 to 4 (positions up to 63)", len(got[0]))
	}
	if len(got[1]) != 0 {
		t.Fatalf("65 tokens in a context of 64: drafts %v", got[1])
	}
}

// Eight sequences drafted together, with catch-up chunks that mix them,
// get exactly the drafts each gets alone; releasing them frees every
// block.
func TestDraftBatchedEqualsAlone(t *testing.T) {
	r, batched := storiesSelfDraft(t)
	batched.maxBatchTokens = 7 // catch-up passes split prompts and mix sequences
	animals := []string{"cat", "dog", "girl", "boy", "bird", "tree", "king", "frog"}
	var seqs, alone []*seq
	var ks []int
	for i, a := range animals {
		p := r.tok.Encode("Once upon a time there was a "+strings.Repeat("big ", i)+a, true, false)
		seqs = append(seqs, &seq{tokens: slices.Clone(p)})
		alone = append(alone, &seq{tokens: slices.Clone(p)})
		ks = append(ks, 1+i%5)
	}
	solo := make([]*draftModel, len(seqs))
	// Each alone in a cache of its own, small: eight default-sized ones do
	// not fit a device with memory of its own (the emulated GPU's 1 GiB).
	c := r.model.cfg
	soloBudget := 64 * blockBytes(len(r.model.layers), c.KVHeads*c.HeadDim, kvBlockSize)
	for i := range solo {
		var err error
		if solo[i], err = newDraftModel(r, r, soloBudget); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 4 {
		got := batched.propose(seqs, ks)
		for i := range seqs {
			want := propose1(solo[i], alone[i], ks[i])
			if !slices.Equal(got[i], want) {
				t.Fatalf("round %d seq %d: batched drafts %v, alone %v", round, i, got[i], want)
			}
			if len(want) == 0 {
				t.Fatalf("round %d seq %d: no drafts", round, i)
			}
			// Accept a different number of drafts per sequence, then a
			// token of the sequence's own.
			acc := append(slices.Clone(want[:(i+round)%(len(want)+1)]), int32(3+i))
			seqs[i].tokens = append(seqs[i].tokens, acc...)
			alone[i].tokens = append(alone[i].tokens, acc...)
		}
	}
	for _, s := range seqs {
		batched.release(s)
	}
	if batched.bm.numFree() != batched.bm.n || len(batched.seqs) != 0 {
		t.Fatalf("after release: %d of %d blocks free, %d sequences kept", batched.bm.numFree(), batched.bm.n, len(batched.seqs))
	}
}

// A draft cache too small for a sequence gives it no drafts, not an error;
// a sequence that fits still gets its drafts.
func TestDraftFullCacheGivesNoDrafts(t *testing.T) {
	e := openEngine(t, ModelConfig{Path: storiesPath(t)})
	r := e.runners[e.order[0]]
	c := r.model.cfg
	d, err := newDraftModel(r, r, 2*blockBytes(c.Layers, c.KVHeads*c.HeadDim, kvBlockSize))
	if err != nil {
		t.Fatal(err)
	}
	if d.bm.n != 2 {
		t.Fatalf("draft cache of %d blocks, want 2", d.bm.n)
	}
	long := &seq{tokens: r.tok.Encode(strings.Repeat("Once upon a time there was a cat. ", 12), true, false)}
	if len(long.tokens) <= 2*kvBlockSize {
		t.Fatalf("prompt of %d tokens fits the draft cache", len(long.tokens))
	}
	short := &seq{tokens: r.tok.Encode("Once upon a time", true, false)}
	got := d.propose([]*seq{long, short}, []int{4, 4})
	if len(got[0]) != 0 {
		t.Fatalf("a sequence that does not fit the draft cache got drafts %v", got[0])
	}
	if want := wantDrafts(r, engineGreedy(t, r, short.tokens, 4), 4); !slices.Equal(got[1], want) {
		t.Fatalf("short sequence: drafts %v, want %v", got[1], want)
	}
	if _, kept := d.seqs[long]; kept {
		t.Fatal("the sequence without drafts keeps draft state")
	}
	// Near the end of the cache the drafts shrink to what fits.
	edge := &seq{tokens: short.tokens}
	for len(edge.tokens) < 2*kvBlockSize-1 {
		edge.tokens = append(edge.tokens, 100)
	}
	d.release(short)
	if got := propose1(d, edge, 4); len(got) != 2 {
		t.Fatalf("with room for %d positions and %d tokens, got %d drafts, want 2", 2*kvBlockSize, len(edge.tokens), len(got))
	}
	d.release(edge)
	if d.bm.numFree() != 2 {
		t.Fatalf("%d blocks free after release, want 2", d.bm.numFree())
	}
}

// A draft model with another tokenizer is refused, naming both models,
// both when built and through native.models[].draft at Open.
func TestDraftOtherTokenizerRefused(t *testing.T) {
	stories, demo := storiesPath(t), demoPath(t)
	e := openEngine(t, ModelConfig{Path: stories}, ModelConfig{Path: demo})
	_, err := newDraftModel(e.runners["stories260K"], e.runners["demo-tiny"], 0)
	if err == nil || !strings.Contains(err.Error(), "demo-tiny cannot draft for stories260K") || !strings.Contains(err.Error(), "same tokenizer") {
		t.Fatalf("got %v, want a refusal naming both models", err)
	}

	cfg := DefaultConfig()
	cfg.Models = []ModelConfig{{Path: stories, Draft: "demo-tiny"}, {Path: demo}}
	e2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = e2.Open(context.Background())
	if err == nil {
		e2.Close(context.Background())
		t.Fatal("Open accepted a draft model with another tokenizer")
	}
	if !strings.Contains(err.Error(), "native.models[0].draft") || !strings.Contains(err.Error(), "demo-tiny cannot draft for stories260K") {
		t.Fatalf("Open: %v", err)
	}
}

// native.models[].draft must name a model of native.models; a model may
// name itself; Open gives the runner its drafter.
func TestDraftConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Models = []ModelConfig{{Path: "a.gguf", Draft: "b"}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `native.models[0].draft: "b" is not the name of a model`) {
		t.Fatalf("Validate: %v", err)
	}
	cfg.Models = []ModelConfig{{Path: "a.gguf", Adapters: map[string]string{"b": "x"}, Draft: "b"}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "native.models[0].draft") {
		t.Fatalf("Validate accepted an adapter as the draft: %v", err)
	}
	cfg.Models = []ModelConfig{{Path: "a.gguf", Draft: "a"}}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("a model drafting for itself: %v", err)
	}

	e := openEngine(t, ModelConfig{Path: demoPath(t), Draft: "demo-tiny"})
	r := e.runners["demo-tiny"]
	d, ok := r.sched.drafters[specDraft].(*draftModel)
	if !ok || d.model != r.model {
		t.Fatalf("runner's drafter is %T, want the demo model drafting for itself", r.sched.drafters[specDraft])
	}
	if want := r.mr.kv.nBlocks / draftKVFraction; d.bm.n != want {
		t.Fatalf("draft cache of %d blocks, want a quarter of the target's %d", d.bm.n, r.mr.kv.nBlocks)
	}
	s := &seq{tokens: r.tok.Encode("Hello, world!", true, false)}
	if got, want := propose1(d, s, 3), wantDrafts(r, engineGreedy(t, r, s.tokens, 3), 3); !slices.Equal(got, want) {
		t.Fatalf("drafts %v, want %v", got, want)
	}
}

// BenchmarkDraftPropose measures one drafting step of eight sequences
// (k=4) in steady state: each step's drafts were all accepted, so the
// draft catches up two tokens and runs four greedy passes.
func BenchmarkDraftPropose(b *testing.B) {
	r, d := storiesSelfDraft(b)
	var seqs []*seq
	ks := make([]int, 8)
	for i := range ks {
		seqs = append(seqs, &seq{tokens: r.tok.Encode(fmt.Sprintf("Once upon a time there were %d cats", i), true, false)})
		ks[i] = 4
	}
	for b.Loop() {
		for i, dr := range d.propose(seqs, ks) {
			seqs[i].tokens = append(seqs[i].tokens, append(dr, 1)...)
			if len(seqs[i].tokens) > 400 {
				d.release(seqs[i])
				seqs[i].tokens = seqs[i].tokens[:10]
			}
		}
	}
}

// A draft pass that panics (a bug in the model code: fault.go fails the
// step's culprit) drops the draft state of the sequences in it, so that
// those that go on draft from a cache that holds what it claims.
func TestDraftPanicDropsState(t *testing.T) {
	r, d := storiesSelfDraft(t)
	a := &seq{tokens: r.tok.Encode("Once upon a time there was a cat", true, false)}
	b := &seq{tokens: r.tok.Encode("Once upon a time there was a dog", true, false)}
	first := d.propose([]*seq{a, b}, []int{4, 4})
	var armed atomic.Bool
	setFaultHook(t, func([]int32) {
		if armed.CompareAndSwap(true, false) {
			panic("model bug")
		}
	})
	a.tokens = append(a.tokens, first[0]...)
	b.tokens = append(b.tokens, first[1][0], 7)
	armed.Store(true)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the draft pass's panic did not come through propose")
			}
		}()
		d.propose([]*seq{a, b}, []int{4, 4})
	}()
	if d.bm.numFree() != d.bm.n || len(d.seqs) != 0 {
		t.Fatalf("after a panic: %d of %d blocks free, %d sequences kept", d.bm.numFree(), d.bm.n, len(d.seqs))
	}
	for _, s := range []*seq{a, b} {
		if got, want := propose1(d, s, 4), wantDrafts(r, engineGreedy(t, r, s.tokens, 4), 4); !slices.Equal(got, want) {
			t.Fatalf("after a panic: drafts %v, want %v", got, want)
		}
	}
}
