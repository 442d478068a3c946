package nativebench

import "testing"

// BenchLoRA loads its two written adapters and measures every case it
// promises: prefill without and with one adapter, decode of each count in
// all three cases but the mixed one for a single sequence.
func TestBenchLoRACases(t *testing.T) {
	path := tinyModel(t)
	res, err := BenchLoRA(path, LoRABenchOptions{BenchOptions: BenchOptions{Threads: 1, PromptTokens: 16, DecodeSteps: 2, Seqs: []int{1, 4}}, Rank: 2, Rounds: 2})
	if err != nil {
		t.Fatal(err)
	}
	for c := range loraCases {
		if want := map[bool]int{true: 2, false: 0}[c < 2]; len(res.Prefill[c]) != want {
			t.Errorf("case %s: %d prefill figures, want %d", loraCases[c], len(res.Prefill[c]), want)
		}
		for _, n := range []int{1, 4} {
			want := 2
			if c == 2 && n == 1 {
				want = 0
			}
			if len(res.Decode[n][c]) != want {
				t.Errorf("case %s, %d seqs: %d decode figures, want %d", loraCases[c], n, len(res.Decode[n][c]), want)
			}
			for _, x := range res.Decode[n][c] {
				if !(x > 0) {
					t.Errorf("case %s, %d seqs: %g tok/s", loraCases[c], n, x)
				}
			}
		}
	}
	if _, err := BenchLoRA(path, LoRABenchOptions{BenchOptions: BenchOptions{Seqs: []int{1}}}); err == nil {
		t.Error("rank 0 was accepted")
	}
}
