package tokenizer

// heapPush and heapPop keep *h a binary heap in which before(s, i, j)
// reports whether element i comes out before element j. Both merge loops
// (SentencePiece bigrams, BPE pairs) use them; unlike container/heap they
// neither box elements nor allocate.
func heapPush[S ~[]E, E any](h *[]E, x E, before func(s S, i, j int) bool) {
	*h = append(*h, x)
	s := S(*h)
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !before(s, i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func heapPop[S ~[]E, E any](h *[]E, before func(s S, i, j int) bool) E {
	s := S(*h)
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && before(s, l, m) {
			m = l
		}
		if r < len(s) && before(s, r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = []E(s)
	return top
}
