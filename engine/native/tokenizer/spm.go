package tokenizer

import (
	"sync"
	"unicode/utf8"
)

// SentencePiece-style encoding as llama.cpp does it: split the text into
// UTF-8 characters, then repeatedly merge the adjacent pair whose
// concatenation is the vocabulary token with the highest score (leftmost on
// ties); whatever is not a token at the end falls back to byte tokens.

type spmSymbol struct {
	start, n   int32 // bytes of the escaped text
	prev, next int32 // neighbours in the chain, -1 at the ends
}

type spmBigram struct {
	score       float32
	left, right int32
	size        int32 // left.n + right.n when queued; a mismatch later means it is stale
}

// spmHeap is a max-heap on score, then min on left.
type spmHeap []spmBigram

func (h spmHeap) before(i, j int) bool {
	if h[i].score != h[j].score {
		return h[i].score > h[j].score
	}
	return h[i].left < h[j].left
}

func (h *spmHeap) push(b spmBigram) { heapPush((*[]spmBigram)(h), b, spmHeap.before) }

func (h *spmHeap) pop() spmBigram { return heapPop((*[]spmBigram)(h), spmHeap.before) }

type spmScratch struct {
	buf  []byte
	syms []spmSymbol
	heap spmHeap
}

var spmPool = sync.Pool{New: func() any { return new(spmScratch) }}

// spmLookup finds the token a merged symbol forms. Control, unknown and byte
// tokens are never formed from text (llama.cpp would; SentencePiece does not).
func (t *Tokenizer) spmLookup(piece []byte) (int32, bool) {
	id, ok := t.textID[string(piece)]
	if !ok {
		return -1, false
	}
	switch t.types[id] {
	case TypeControl, TypeUnknown, TypeByte:
		return -1, false
	}
	return id, true
}

func (t *Tokenizer) spmEncode(out []int32, text string, prefixSpace bool) []int32 {
	sc := spmPool.Get().(*spmScratch)
	defer spmPool.Put(sc)

	// Escape: " " → "▁", with a leading "▁" when asked.
	buf := sc.buf[:0]
	if prefixSpace {
		buf = append(buf, "▁"...)
	}
	for i := 0; i < len(text); i++ {
		if text[i] == ' ' {
			buf = append(buf, "▁"...)
		} else {
			buf = append(buf, text[i])
		}
	}
	sc.buf = buf
	if len(buf) == 0 {
		return out
	}

	syms := sc.syms[:0]
	for off := 0; off < len(buf); {
		_, w := utf8.DecodeRune(buf[off:])
		idx := int32(len(syms))
		next := idx + 1
		if off+w >= len(buf) {
			next = -1
		}
		syms = append(syms, spmSymbol{start: int32(off), n: int32(w), prev: idx - 1, next: next})
		off += w
	}

	h := sc.heap[:0]
	tryAdd := func(left, right int32) {
		if left < 0 || right < 0 {
			return
		}
		l, r := syms[left], syms[right]
		id, ok := t.spmLookup(buf[l.start : r.start+r.n])
		if !ok {
			return
		}
		h.push(spmBigram{score: t.scores[id], left: left, right: right, size: l.n + r.n})
	}
	for i := 1; i < len(syms); i++ {
		tryAdd(int32(i-1), int32(i))
	}
	for len(h) > 0 {
		bg := h.pop()
		l, r := &syms[bg.left], &syms[bg.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != bg.size {
			continue // one side was merged since this pair was queued
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = bg.left
		}
		tryAdd(l.prev, bg.left)
		tryAdd(bg.left, l.next)
	}
	sc.heap = h
	sc.syms = syms

	for i := int32(0); i != -1; i = syms[i].next {
		s := syms[i]
		piece := buf[s.start : s.start+s.n]
		if id, ok := t.spmLookup(piece); ok {
			out = append(out, id)
			continue
		}
		for _, b := range piece {
			id := t.byteTok[b]
			if id < 0 {
				id = t.unk
			}
			if id >= 0 {
				out = append(out, id)
			}
		}
	}
	return out
}
