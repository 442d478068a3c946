package nativebench

import "testing"

// BenchSpec runs every case it is given for every sequence count and
// round, and reports the drafts of the speculating cases: a model drafting
// for itself under greedy decoding keeps every draft.
func TestBenchSpecCases(t *testing.T) {
	path := tinyModel(t)
	cases := []string{"off", "ngram", "draft"}
	for _, wl := range []string{SpecWorkloadRepetitive, SpecWorkloadRandom} {
		res, err := BenchSpec(path, SpecBenchOptions{Threads: 1, Cases: cases, K: 4, Seqs: []int{1, 3}, Rounds: 2, Workload: wl, OutputTokens: 24})
		if err != nil {
			t.Fatalf("%s: %v", wl, err)
		}
		for _, n := range []int{1, 3} {
			for c, name := range cases {
				if len(res.TPS[n][c]) != 2 {
					t.Errorf("%s x%d %s: %d figures, want 2", wl, n, name, len(res.TPS[n][c]))
				}
				for _, x := range res.TPS[n][c] {
					if !(x > 0) {
						t.Errorf("%s x%d %s: %g tok/s", wl, n, name, x)
					}
				}
				if want := int64(2 * n * 24); res.Tokens[n][c] != want {
					t.Errorf("%s x%d %s: %d completion tokens, want %d", wl, n, name, res.Tokens[n][c], want)
				}
			}
			if res.Drafts[n][0] != 0 {
				t.Errorf("%s x%d off: %d drafts", wl, n, res.Drafts[n][0])
			}
			// The engine drafts only where its own step timings say drafts
			// pay, so on a loaded machine it may decline (the engine's tests
			// pin the cost model to prove drafting); what it drafts for
			// itself under greedy decoding is always kept.
			if res.Drafts[n][2] == 0 {
				t.Logf("%s x%d draft: the engine's cost model declined to draft", wl, n)
			} else if wl == SpecWorkloadRepetitive && res.Acceptance(n, 2) != 1 {
				t.Errorf("%s x%d: self-draft acceptance %g, want 1 under greedy", wl, n, res.Acceptance(n, 2))
			}
			// Prompt lookup drafts only where the engine's timing says a
			// draft pays (on this random-weight model it may not), so the
			// n-gram case is held to what holds either way.
			if a := res.Accepted[n][1]; a < 0 || a > res.Drafts[n][1] {
				t.Errorf("%s x%d ngram: %d accepted of %d drafts", wl, n, a, res.Drafts[n][1])
			}
		}
		if res.String() == "" {
			t.Error("empty report")
		}
	}
	if _, err := BenchSpec(path, SpecBenchOptions{Cases: []string{"eagle"}, Seqs: []int{1}, Workload: SpecWorkloadRandom}); err == nil {
		t.Error("an unknown case was accepted")
	}
}
