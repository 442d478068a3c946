package ledger

import "sort"

// Bitmap is a set of 1-based input line numbers, kept in chunks so that a
// commit rewrites only the chunks changed since the last one. It is not safe
// for concurrent use.
type Bitmap struct {
	chunks map[int][]byte
	dirty  map[int]struct{}
	count  int
}

// NewBitmap returns an empty set.
func NewBitmap() *Bitmap {
	return &Bitmap{chunks: make(map[int][]byte), dirty: make(map[int]struct{})}
}

func split(line int) (chunk, byteIdx int, mask byte) {
	i := line - 1
	return i / linesPerChunk, (i % linesPerChunk) / 8, 1 << (i % 8)
}

// Has reports whether line is in the set.
func (b *Bitmap) Has(line int) bool {
	if line < 1 {
		return false
	}
	c, i, m := split(line)
	ch := b.chunks[c]
	return ch != nil && ch[i]&m != 0
}

// Set adds line to the set.
func (b *Bitmap) Set(line int) {
	c, i, m := split(line)
	ch := b.chunks[c]
	if ch == nil {
		ch = make([]byte, linesPerChunk/8)
		b.chunks[c] = ch
	}
	if ch[i]&m == 0 {
		ch[i] |= m
		b.count++
	}
	b.dirty[c] = struct{}{}
}

// Clear removes line from the set.
func (b *Bitmap) Clear(line int) {
	c, i, m := split(line)
	ch := b.chunks[c]
	if ch == nil || ch[i]&m == 0 {
		return
	}
	ch[i] &^= m
	b.count--
	b.dirty[c] = struct{}{}
}

// Len is the number of lines in the set.
func (b *Bitmap) Len() int { return b.count }

func (b *Bitmap) chunk(c int) []byte { return b.chunks[c] }

// takeDirty returns the chunks to write (all of them with all) and forgets
// that they were dirty.
func (b *Bitmap) takeDirty(all bool) []int {
	var out []int
	if all {
		for c := range b.chunks {
			out = append(out, c)
		}
	} else {
		for c := range b.dirty {
			out = append(out, c)
		}
	}
	clear(b.dirty)
	sort.Ints(out)
	return out
}

func (b *Bitmap) load(c int, v []byte) {
	ch := make([]byte, linesPerChunk/8)
	copy(ch, v)
	b.chunks[c] = ch
	for _, x := range ch {
		for ; x != 0; x &= x - 1 {
			b.count++
		}
	}
}
