package lazyfs

// spans is a set of byte ranges [start, end), sorted and merged.
type spans []span

type span struct{ start, end int64 }

// add inserts [start, end), merging what it touches.
func (s spans) add(start, end int64) spans {
	if start >= end {
		return s
	}
	out := make(spans, 0, len(s)+1)
	i := 0
	for ; i < len(s) && s[i].end < start; i++ {
		out = append(out, s[i])
	}
	for ; i < len(s) && s[i].start <= end; i++ {
		start, end = min(start, s[i].start), max(end, s[i].end)
	}
	out = append(out, span{start, end})
	return append(out, s[i:]...)
}

// pages returns the numbers of the size-byte pages the spans touch, in order.
func (s spans) pages(size int64) []int64 {
	var out []int64
	for _, sp := range s {
		first := sp.start / size
		if n := len(out); n > 0 && out[n-1] >= first {
			first = out[n-1] + 1
		}
		for p := first; p*size < sp.end; p++ {
			out = append(out, p)
		}
	}
	return out
}
