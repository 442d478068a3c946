package native

import (
	"github.com/batchd/batchd/engine/native/demomodel"
	"math"
	"slices"
	"testing"
)

// randRow is a deterministic row of logits; quant > 0 rounds them to
// multiples of quant so that ties occur.
func randRow(n int, seed uint64, scale float64, quant float64) []float32 {
	x := make([]float32, n)
	rng := demomodel.Rand(seed)
	for i := range x {
		v := float64(rng.Normal()) * scale
		if quant > 0 {
			v = math.Round(v/quant) * quant
		}
		x[i] = float32(v)
	}
	return x
}

// refProbs is the sampling pipeline's distribution written the plain way:
// sort the whole vocabulary, cut by top_k, top_p, min_p, normalize.
func refProbs(x []float32, p sampling) []float64 {
	out := make([]float64, len(x))
	if p.greedy() {
		out[argmax(x)] = 1
		return out
	}
	order := make([]candidate, len(x))
	for i, v := range x {
		order[i] = candidate{int32(i), v}
	}
	slices.SortFunc(order, compareCands)
	if p.topK > 0 && p.topK < len(order) {
		order = order[:p.topK]
	}
	w := make([]float64, len(order))
	var total float64
	for i, c := range order {
		w[i] = math.Exp((float64(c.logit) - float64(order[0].logit)) / p.temperature)
		total += w[i]
	}
	n := len(order)
	if p.topP > 0 && p.topP < 1 {
		var acc float64
		for i := range n {
			acc += w[i] / total
			if acc >= p.topP {
				n = i + 1
				break
			}
		}
	}
	for i := 1; i < n; i++ {
		if w[i] < p.minP*w[0] {
			n = i
			break
		}
	}
	var sum float64
	for i := range n {
		sum += w[i]
	}
	for i := range n {
		out[order[i].id] = w[i] / sum
	}
	return out
}

// drawn is how often choose picks each token over a grid of n draws.
func drawn(sc *sampler, x []float32, p sampling, n int) []float64 {
	freq := make([]float64, len(x))
	for i := range n {
		tok := sc.choose(x, &p, (float64(i)+0.5)/float64(n))
		freq[tok] += 1 / float64(n)
	}
	return freq
}

// Every path of choose (plain temperature, top_k's partial selection, top_p
// alone with its gathering, min_p) draws each token with exactly the
// probability the plain full-sort pipeline gives it.
func TestChooseMatchesReference(t *testing.T) {
	cases := []struct {
		name string
		n    int
		p    sampling
	}{
		{"temperature", 50, sampling{temperature: 0.8, topP: 1}},
		{"top_k", 50, sampling{temperature: 1.3, topP: 1, topK: 7}},
		{"top_k ties", 50, sampling{temperature: 1, topP: 1, topK: 4}},
		{"top_p", 50, sampling{temperature: 1, topP: 0.7}},
		{"top_p wide", 3000, sampling{temperature: 2, topP: 0.95}},
		{"top_p peaked", 3000, sampling{temperature: 0.3, topP: 0.5}},
		{"min_p", 50, sampling{temperature: 1, topP: 1, minP: 0.3}},
		{"top_k top_p min_p", 50, sampling{temperature: 0.9, topP: 0.8, topK: 10, minP: 0.05}},
		{"top_p min_p", 50, sampling{temperature: 1.1, topP: 0.9, minP: 0.2}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			quant := 0.0
			if c.name == "top_k ties" {
				quant = 0.5
			}
			x := randRow(c.n, uint64(i+1), 2, quant)
			want := refProbs(x, c.p)
			var sc sampler
			draws := 10000
			if c.n > 1000 {
				draws = 2000 // the support is what matters there
			}
			got := drawn(&sc, x, c.p, draws)
			for id := range x {
				if want[id] == 0 && got[id] != 0 {
					t.Fatalf("token %d drawn %.4f of the time, but the reference excludes it", id, got[id])
				}
				if d := math.Abs(got[id] - want[id]); d > 2.0/float64(draws) {
					t.Fatalf("token %d: drawn %.5f, want %.5f", id, got[id], want[id])
				}
			}
		})
	}
}

func TestChooseGreedyTopK1AndMinP1(t *testing.T) {
	var sc sampler
	for seed := range uint64(20) {
		x := randRow(1000, seed+100, 3, 0)
		best := int32(argmax(x))
		if got := sc.choose(x, &sampling{topP: 1}, 0.5); got != best {
			t.Fatalf("greedy: %d, want %d", got, best)
		}
		for _, u := range []float64{0, 0.3, 0.999} {
			if got := sc.choose(x, &sampling{temperature: 1.5, topP: 1, topK: 1}, u); got != best {
				t.Fatalf("top_k 1 at u=%v: %d, want %d", u, got, best)
			}
			if got := sc.choose(x, &sampling{temperature: 1.5, topP: 1, minP: 1}, u); got != best {
				t.Fatalf("min_p 1 at u=%v: %d, want %d", u, got, best)
			}
		}
	}
	// Ties: greedy and top_k 1 both take the lowest id.
	x := []float32{0, 3, 1, 3, 2}
	if sc.choose(x, &sampling{topP: 1}, 0) != 1 || sc.choose(x, &sampling{temperature: 1, topP: 1, topK: 1}, 0.9) != 1 {
		t.Fatal("ties must go to the lowest id")
	}
}

// A masked (-Inf) token is never drawn, whatever u.
func TestChooseNeverDrawsMasked(t *testing.T) {
	var sc sampler
	x := randRow(64, 7, 1, 0)
	for _, id := range []int{3, 17, 40} {
		x[id] = float32(math.Inf(-1))
	}
	for _, p := range []sampling{{temperature: 1, topP: 1}, {temperature: 1, topP: 1, topK: 64 - 1}, {temperature: 1, topP: 0.9999}} {
		for i := range 2000 {
			u := float64(i) / 2000
			if i == 1999 {
				u = math.Nextafter(1, 0)
			}
			if tok := sc.choose(x, &p, u); math.IsInf(float64(x[tok]), -1) {
				t.Fatalf("%+v: drew masked token %d at u=%v", p, tok, u)
			}
		}
	}
}

func TestTopCandidatesMatchesSort(t *testing.T) {
	for _, n := range []int{1, 7, 1000} {
		x := randRow(n, uint64(n), 1, 0.25) // ties on purpose
		all := make([]candidate, n)
		for i, v := range x {
			all[i] = candidate{int32(i), v}
		}
		slices.SortFunc(all, compareCands)
		for _, k := range []int{1, 2, 5, 50, n - 1, n, n + 3} {
			if k < 1 {
				continue
			}
			got := topCandidates(x, k, nil)
			want := all[:min(k, n)]
			if !slices.Equal(got, want) {
				t.Fatalf("n=%d k=%d:\ngot  %v\nwant %v", n, k, got, want)
			}
		}
	}
}

func TestBiasAndPenalties(t *testing.T) {
	x := []float32{1, 2, -2, 4, 0.5, -1}
	applyBias(x, []logitBias{{0, -100}, {4, 100}, {9, 5}}) // id 9 is outside: ignored
	if x[0] != -99 || x[4] != 100.5 || x[1] != 2 {
		t.Fatalf("bias: %v", x)
	}
	// Prompt [1 2 2], generated [2 3 3 5].
	tokens := []int32{1, 2, 2, 2, 3, 3, 5}
	p := sampling{repetition: 2, frequency: 0.5, presence: 1}
	var h history
	h.absorb(tokens[:4], 3, true) // as the tokens arrive
	h.absorb(tokens, 3, true)
	x = []float32{1, 2, -2, 4, 0.5, -1}
	applyPenalties(x, &h, &p)
	want := []float32{
		1,              // never seen
		1,              // prompt only: 2/2, no frequency or presence
		-4 - 0.5*1 - 1, // prompt and generated once: -2·2, then the penalties
		2 - 0.5*2 - 1,  // generated twice: 4/2 - 0.5·2 - 1
		0.5,            // never seen
		-2 - 0.5*1 - 1, // generated once: -1·2 - 0.5 - 1
	}
	if !slices.Equal(x, want) {
		t.Fatalf("penalties:\ngot  %v\nwant %v", x, want)
	}
	// Without the repetition penalty the prompt is not looked at.
	var h2 history
	h2.absorb(tokens, 3, false)
	if slices.Contains(h2.ids, 1) || len(h2.ids) != 3 {
		t.Fatalf("history without prompt: %v", h2.ids)
	}
	x = []float32{1, 2, -2, 4, 0.5, -1}
	p = sampling{presence: 0.5, repetition: 1}
	applyPenalties(x, &h2, &p)
	if !slices.Equal(x, []float32{1, 2, -2.5, 3.5, 0.5, -1.5}) {
		t.Fatalf("presence only: %v", x)
	}
}

func TestLogSumExp(t *testing.T) {
	x := randRow(151936, 3, 4, 0)
	var s float64
	m := float64(x[argmax(x)])
	for _, v := range x {
		s += math.Exp(float64(v) - m)
	}
	want := m + math.Log(s)
	if got := logSumExp(nil, x); math.Abs(got-want) > 1e-12 {
		t.Fatalf("logSumExp = %v, want %v", got, want)
	}
}

func TestFindStop(t *testing.T) {
	cases := []struct {
		text  string
		from  int
		stops []string
		want  int
	}{
		{"hello world", 0, []string{"wor"}, 6},
		{"hello world", 7, []string{"wor"}, 6},        // spans the old/new boundary
		{"hello world", 9, []string{"wor"}, -1},       // ended in text already searched
		{"hello world", 11, []string{"d"}, -1},        // nothing new
		{"hello world", 6, []string{"rld", "o w"}, 4}, // the earliest wins, not the first listed
		{"abc", 0, []string{""}, -1},
	}
	for _, c := range cases {
		if got := findStop(c.text, c.from, c.stops); got != c.want {
			t.Errorf("findStop(%q, %d, %q) = %d, want %d", c.text, c.from, c.stops, got, c.want)
		}
	}
}

func BenchmarkSample151936(b *testing.B) {
	x := randRow(151936, 1, 3, 0)
	for _, c := range []struct {
		name string
		p    sampling
	}{
		{"greedy", sampling{topP: 1}},
		{"temperature", sampling{temperature: 0.7, topP: 1}},
		{"top_k50", sampling{temperature: 0.7, topP: 1, topK: 50}},
		{"top_p0.9", sampling{temperature: 0.7, topP: 0.9}},
		{"min_p0.05", sampling{temperature: 0.7, topP: 1, minP: 0.05}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var sc sampler
			i := 0
			for b.Loop() {
				sc.choose(x, &c.p, counterUniform(1, i))
				i++
			}
		})
	}
	b.Run("logprobs_top20", func(b *testing.B) {
		var top []candidate
		for b.Loop() {
			logSumExp(nil, x)
			top = topCandidates(x, 20, top[:0])
		}
	})
}
