package tokenizer

import (
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"unicode/utf8"
)

// Byte-level BPE (GPT-2 family): every byte of the text is one symbol
// (written in the vocabulary as a printable stand-in character), the text is
// cut into words by the pre-tokenizer, and within each word the adjacent pair
// with the lowest merge rank is merged until no pair has a rank.

// byteRune maps each byte to GPT-2's printable stand-in; runeByte inverts it.
var (
	byteRune    [256]rune
	byteRuneStr [256]string
	runeByte    [256 + 68]int16
)

func init() {
	for i := range runeByte {
		runeByte[i] = -1
	}
	extra := 0
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteRune[b] = rune(b)
		} else {
			byteRune[b] = rune(256 + extra)
			extra++
		}
		byteRuneStr[b] = string(byteRune[b])
		runeByte[byteRune[b]] = int16(b)
	}
}

// appendByteLevelDecoded appends the bytes a byte-level token text stands
// for; characters outside the mapping are kept as their UTF-8.
func appendByteLevelDecoded(dst []byte, s string) []byte {
	for _, r := range s {
		if r >= 0 && int(r) < len(runeByte) && runeByte[r] >= 0 {
			dst = append(dst, byte(runeByte[r]))
		} else {
			dst = utf8.AppendRune(dst, r)
		}
	}
	return dst
}

// appendByteLevelEncoded appends the byte-level text of raw bytes s.
func appendByteLevelEncoded(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		dst = append(dst, byteRuneStr[s[i]]...)
	}
	return dst
}

type bpeMerge struct{ rank, id int32 }

type bpeModel struct {
	pre          pipeline
	ignoreMerges bool // a word that is itself a token is not merged (Llama 3)
	prefixSpace  bool // tokenizer.json ByteLevel add_prefix_space
	byteID       [256]int32
	merges       map[uint64]bpeMerge // (left id, right id) → rank and result id
	cache        wordCache
}

func mergeKey(l, r int32) uint64 { return uint64(uint32(l))<<32 | uint64(uint32(r)) }

func (m *bpeModel) init(t *Tokenizer, merges [][2]string) error {
	missing := 0
	for b := range m.byteID {
		id, ok := t.textID[byteRuneStr[b]]
		if !ok {
			id = -1
			missing++
		}
		m.byteID[b] = id
	}
	if missing == 256 {
		return fmt.Errorf("%w: no byte-level single-byte tokens (is this really a gpt2 vocabulary?)", ErrInvalidSpec)
	}
	m.merges = make(map[uint64]bpeMerge, len(merges))
	for rank, mg := range merges {
		l, ok1 := t.textID[mg[0]]
		r, ok2 := t.textID[mg[1]]
		res, ok3 := t.textID[mg[0]+mg[1]]
		if !ok1 || !ok2 || !ok3 {
			// A merge whose parts or result are not tokens can never fire
			// usefully; Hugging Face refuses such files, llama.cpp ignores them.
			continue
		}
		k := mergeKey(l, r)
		if _, dup := m.merges[k]; !dup {
			m.merges[k] = bpeMerge{rank: int32(rank), id: res}
		}
	}
	m.cache.init()
	return nil
}

type bpeSym struct{ id, prev, next int32 }

// bpePair is a queued merge candidate; lid/rid let a popped pair be checked
// against the current symbols (ids only change by merging, and a merged id
// never equals either part).
type bpePair struct{ rank, left, lid, rid, res int32 }

type bpeHeap []bpePair

func (h bpeHeap) before(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].left < h[j].left
}

func (h *bpeHeap) push(p bpePair) { heapPush((*[]bpePair)(h), p, bpeHeap.before) }

func (h *bpeHeap) pop() bpePair { return heapPop((*[]bpePair)(h), bpeHeap.before) }

type bpeScratch struct {
	words, tmp []string
	syms       []bpeSym
	heap       bpeHeap
	bl         []byte
}

var bpePool = sync.Pool{New: func() any { return new(bpeScratch) }}

func (m *bpeModel) encode(t *Tokenizer, out []int32, text string) []int32 {
	if m.prefixSpace && !strings.HasPrefix(text, " ") {
		text = " " + text
	}
	sc := bpePool.Get().(*bpeScratch)
	defer bpePool.Put(sc)
	sc.words, sc.tmp = m.pre.split(text, sc.words, sc.tmp)
	for _, w := range sc.words {
		out = m.encodeWord(t, out, w, sc)
	}
	return out
}

// maxCachedWord bounds the words kept in the cache; longer ones are rare and
// would let one odd input fill it.
const maxCachedWord = 64

func (m *bpeModel) encodeWord(t *Tokenizer, out []int32, w string, sc *bpeScratch) []int32 {
	if len(w) == 1 {
		if id := m.byteID[w[0]]; id >= 0 {
			out = append(out, id)
		}
		return out
	}
	cacheable := len(w) <= maxCachedWord
	if cacheable {
		if ids, ok := m.cache.get(w); ok {
			return append(out, ids...)
		}
	}
	start := len(out)
	out = m.mergeWord(t, out, w, sc)
	if cacheable {
		m.cache.put(w, out[start:])
	}
	return out
}

func (m *bpeModel) mergeWord(t *Tokenizer, out []int32, w string, sc *bpeScratch) []int32 {
	if m.ignoreMerges {
		sc.bl = appendByteLevelEncoded(sc.bl[:0], w)
		if id, ok := t.textID[string(sc.bl)]; ok && t.types[id] == TypeNormal {
			return append(out, id)
		}
	}
	syms := sc.syms[:0]
	for i := 0; i < len(w); i++ {
		syms = append(syms, bpeSym{id: m.byteID[w[i]], prev: int32(i - 1), next: int32(i + 1)})
	}
	syms[len(syms)-1].next = -1
	h := sc.heap[:0]
	add := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		lid, rid := syms[l].id, syms[r].id
		if lid < 0 || rid < 0 {
			return
		}
		if mg, ok := m.merges[mergeKey(lid, rid)]; ok {
			h.push(bpePair{rank: mg.rank, left: l, lid: lid, rid: rid, res: mg.id})
		}
	}
	for i := 1; i < len(syms); i++ {
		add(int32(i-1), int32(i))
	}
	for len(h) > 0 {
		p := h.pop()
		l := &syms[p.left]
		if l.id != p.lid || l.next < 0 || syms[l.next].id != p.rid {
			continue // stale
		}
		r := l.next
		l.id = p.res
		syms[r].id = -2 // dead
		l.next = syms[r].next
		if l.next >= 0 {
			syms[l.next].prev = p.left
		}
		add(l.prev, p.left)
		add(p.left, l.next)
	}
	for i := int32(0); i != -1; i = syms[i].next {
		if id := syms[i].id; id >= 0 {
			out = append(out, id) // a byte with no token (id -1) is dropped, as Hugging Face does without unk
		}
	}
	sc.syms, sc.heap = syms, h
	return out
}

// wordCache remembers the ids of short words. It is sharded so that
// concurrent encoders rarely contend, and each shard is simply emptied when
// full (cheap, and the common words come straight back).
type wordCache struct {
	seed   maphash.Seed
	shards [16]cacheShard
}

type cacheShard struct {
	mu sync.Mutex
	m  map[string][]int32
}

const cacheShardMax = 4096

func (c *wordCache) init() {
	c.seed = maphash.MakeSeed()
	for i := range c.shards {
		c.shards[i].m = make(map[string][]int32)
	}
}

func (c *wordCache) shard(w string) *cacheShard {
	return &c.shards[maphash.String(c.seed, w)&uint64(len(c.shards)-1)]
}

func (c *wordCache) get(w string) ([]int32, bool) {
	s := c.shard(w)
	s.mu.Lock()
	ids, ok := s.m[w]
	s.mu.Unlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int32) {
	cp := append([]int32(nil), ids...)
	s := c.shard(w)
	s.mu.Lock()
	if len(s.m) >= cacheShardMax {
		clear(s.m)
	}
	s.m[strings.Clone(w)] = cp
	s.mu.Unlock()
}
