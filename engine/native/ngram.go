package native

// ngramDrafter is prompt lookup: it drafts by finding the sequence's last
// tokens earlier in the sequence (the prompt and the text generated so far)
// and proposing what followed them there. Outputs that copy their inputs
// (extraction, quotes, code edits, JSON echoing field names) repeat long
// runs of earlier tokens, so the guess is often right, and it costs no
// model: one bounded backward scan per sequence per step.
type ngramDrafter struct {
	min, max int // n-gram lengths matched: the longest from max down to min wins
	// window bounds the scan: only the last window tokens are searched.
	window int
	out    [][]int32 // propose's result, reused
	buf    []int32   // its drafts, back to back, reused
}

// ngramWindow is how far back prompt lookup searches: long enough for
// prompts of several thousand tokens, short enough that a step's scan stays
// far below one forward pass.
const ngramWindow = 8192

var _ cheapDrafter = (*ngramDrafter)(nil)

func newNgramDrafter(nmin, nmax int) *ngramDrafter {
	return &ngramDrafter{min: nmin, max: nmax, window: ngramWindow}
}

// propose drafts for each sequence from its own tokens. The returned
// slices are valid until the next call.
func (d *ngramDrafter) propose(seqs []*seq, k []int) [][]int32 {
	total := 0
	for _, n := range k {
		total += max(n, 0)
	}
	if cap(d.buf) < total {
		d.buf = make([]int32, 0, total)
	}
	d.buf = d.buf[:0]
	d.out = d.out[:0]
	for i, s := range seqs {
		at, n := d.match(s.tokens)
		if n == 0 || k[i] <= 0 {
			d.out = append(d.out, nil)
			continue
		}
		// What followed the match, and past the sequence's end what
		// follows with the draft appended: the match then recurs one
		// period later, so a loop drafts k tokens, not just the rest of
		// its last turn.
		start := len(d.buf)
		for j := range k[i] {
			if p := at + 1 + j; p < len(s.tokens) {
				d.buf = append(d.buf, s.tokens[p])
			} else {
				d.buf = append(d.buf, d.buf[start+p-len(s.tokens)])
			}
		}
		d.out = append(d.out, d.buf[start:len(d.buf):len(d.buf)])
	}
	return d.out
}

// match finds the most recent earlier occurrence of tokens' last n tokens,
// for the largest n in [min, max] that has one, and returns the index of
// the occurrence's last token and n (0: none). An occurrence ending at the
// last token itself does not count: nothing follows it.
func (d *ngramDrafter) match(tokens []int32) (at, n int) {
	last := len(tokens) - 1
	if last < 1 || d.min < 1 {
		return 0, 0
	}
	lo := max(0, last-d.window)
	for i := last - 1; i >= lo; i-- {
		if tokens[i] != tokens[last] {
			continue
		}
		m := 1
		for m < d.max && i-m >= 0 && tokens[i-m] == tokens[last-m] {
			m++
		}
		if m > n && m >= d.min {
			at, n = i, m
			if n == d.max {
				break // the longest wanted, and the most recent such
			}
		}
	}
	return at, n
}

// cheap: a lookup costs next to nothing, so the scheduler drafts before it
// decides how many drafts to verify.
func (d *ngramDrafter) cheap() {}

// release: prompt lookup keeps no state per sequence.
func (d *ngramDrafter) release(*seq) {}
