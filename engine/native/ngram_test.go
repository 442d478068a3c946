package native

import (
	"slices"
	"testing"
)

func TestNgramDrafterProposes(t *testing.T) {
	tests := []struct {
		name     string
		tokens   []int32
		min, max int
		k        int
		want     []int32
	}{
		{"copies what followed the last match", []int32{1, 2, 3, 4, 5, 9, 2, 3}, 1, 3, 3, []int32{4, 5, 9}},
		{"caps at k", []int32{1, 2, 3, 4, 5, 9, 2, 3}, 1, 3, 1, []int32{4}},
		// Past the sequence's end the loop goes on: 7 8 7 | 8 7 8 7.
		{"continues a loop past the sequence's end", []int32{7, 8, 7}, 1, 3, 4, []int32{8, 7, 8, 7}},
		{"continues a longer loop", []int32{1, 2, 3, 1, 2, 3}, 1, 3, 5, []int32{1, 2, 3, 1, 2}},
		{"no match", []int32{1, 2, 3, 4}, 1, 3, 4, nil},
		{"below ngram_min", []int32{1, 2, 5, 3, 2}, 2, 3, 4, nil},
		// 2,3 occurs at 1..2 (followed by 4) and 5 ends a later one-token
		// match (3 at 6, followed by 8): the longer match wins.
		{"longer match wins over more recent", []int32{1, 2, 3, 4, 0, 9, 3, 8, 2, 3}, 1, 3, 2, []int32{4, 0}},
		// Two matches of the same length: the most recent wins.
		{"most recent of equal length", []int32{5, 6, 1, 5, 6, 2, 5, 6}, 1, 2, 1, []int32{2}},
		{"k zero", []int32{1, 2, 1}, 1, 3, 0, nil},
		{"one token", []int32{1}, 1, 3, 4, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newNgramDrafter(tt.min, tt.max)
			s := &seq{tokens: tt.tokens}
			got := d.propose([]*seq{s}, []int{tt.k})
			if len(got) != 1 || !slices.Equal(got[0], tt.want) {
				t.Fatalf("propose(%v, k=%d) = %v, want %v", tt.tokens, tt.k, got, tt.want)
			}
		})
	}
}

func TestNgramDrafterBatchAndWindow(t *testing.T) {
	d := newNgramDrafter(1, 3)
	a := &seq{tokens: []int32{1, 2, 3, 1, 2}}
	b := &seq{tokens: []int32{4, 5, 6}}
	c := &seq{tokens: []int32{9, 8, 7, 9}}
	got := d.propose([]*seq{a, b, c}, []int{2, 2, 2})
	if !slices.Equal(got[0], []int32{3, 1}) || got[1] != nil || !slices.Equal(got[2], []int32{8, 7}) {
		t.Fatalf("batch drafts %v", got)
	}
	// Appending to one draft must not overwrite the next.
	_ = append(got[0], 99)
	if !slices.Equal(got[2], []int32{8, 7}) {
		t.Fatalf("drafts share storage: %v", got)
	}
	// A match older than the window is not found.
	d.window = 2
	if got := d.propose([]*seq{c}, []int{2}); got[0] != nil {
		t.Fatalf("found a match outside the window: %v", got[0])
	}
}

func BenchmarkNgramDrafter(b *testing.B) {
	tokens := make([]int32, 4096)
	x := uint32(1)
	for i := range tokens {
		x = x*1664525 + 1013904223
		tokens[i] = int32(x >> 20)
	}
	d := newNgramDrafter(1, 3)
	seqs := []*seq{{tokens: tokens}}
	k := []int{4}
	b.ReportAllocs()
	for b.Loop() {
		d.propose(seqs, k)
	}
}
