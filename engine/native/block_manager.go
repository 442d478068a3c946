package native

import (
	"crypto/sha256"
	"encoding/binary"
)

// The block manager: which KV blocks are free, who references each, and
// which full blocks hold which prefix. The mechanism (reference counts,
// chained hashes, the LRU free list) comes first; the allocation policy the
// scheduler asks it for (can a sequence be admitted, may it grow, which of
// its blocks are cached) follows, next to it. See kvcache.go for how the
// blocks are stored and why they are shared.

// blockHash keys a full block: the hash of its whole prefix.
type blockHash [32]byte

// chainHash is the hash of a full block after parent (zero for the first).
func chainHash(parent blockHash, adapter string, tokens []int32) blockHash {
	h := sha256.New()
	h.Write(parent[:])
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(adapter)))
	h.Write(n[:])
	h.Write([]byte(adapter))
	buf := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(t))
	}
	h.Write(buf)
	var out blockHash
	h.Sum(out[:0])
	return out
}

// blockManager tracks the blocks' reference counts, hashes and free list.
// It is used by the scheduler goroutine only.
type blockManager struct {
	n, bs   int // blocks, positions per block
	noCache bool
	ref     []int32
	hash    []blockHash
	hashed  []bool
	byHash  map[blockHash]int32
	// The free list (blocks with ref 0) in LRU order, head first; -1 ends.
	prev, next []int32
	inFree     []bool
	head, tail int32
	free       int
}

func newBlockManager(n, bs int, noCache bool) *blockManager {
	m := &blockManager{n: n, bs: bs, noCache: noCache, ref: make([]int32, n), hash: make([]blockHash, n), hashed: make([]bool, n),
		byHash: map[blockHash]int32{}, prev: make([]int32, n), next: make([]int32, n), inFree: make([]bool, n), head: -1, tail: -1}
	for b := range n {
		m.pushTail(int32(b))
	}
	return m
}

func (m *blockManager) pushTail(b int32) {
	m.prev[b], m.next[b] = m.tail, -1
	if m.tail >= 0 {
		m.next[m.tail] = b
	} else {
		m.head = b
	}
	m.tail = b
	m.inFree[b] = true
	m.free++
}

func (m *blockManager) unlink(b int32) {
	if m.prev[b] >= 0 {
		m.next[m.prev[b]] = m.next[b]
	} else {
		m.head = m.next[b]
	}
	if m.next[b] >= 0 {
		m.prev[m.next[b]] = m.prev[b]
	} else {
		m.tail = m.prev[b]
	}
	m.inFree[b] = false
	m.free--
}

// numFree is the blocks that can be allocated now (never used, or cached
// with no reference).
func (m *blockManager) numFree() int { return m.free }

// used is the blocks referenced by some sequence.
func (m *blockManager) used() int { return m.n - m.free }

// alloc takes the least recently freed block, evicting its hash; -1 when
// none is free.
func (m *blockManager) alloc() int32 {
	b := m.head
	if b < 0 {
		return -1
	}
	m.unlink(b)
	if m.hashed[b] {
		if m.byHash[m.hash[b]] == b {
			delete(m.byHash, m.hash[b])
		}
		m.hashed[b] = false
	}
	m.ref[b] = 1
	return b
}

// lookup finds the cached block with hash h.
func (m *blockManager) lookup(h blockHash) (int32, bool) {
	if m.noCache {
		return -1, false
	}
	b, ok := m.byHash[h]
	return b, ok
}

// acquire adds a reference to a block found by lookup.
func (m *blockManager) acquire(b int32) {
	if m.ref[b] == 0 {
		m.unlink(b)
	}
	m.ref[b]++
}

// release drops a reference; at 0 the block is free but keeps its hash.
func (m *blockManager) release(b int32) {
	m.ref[b]--
	if m.ref[b] == 0 {
		m.pushTail(b)
	}
}

// register records that full block b holds the block with hash h. If
// another block already holds h (two sequences computed the same prefix at
// once), b stays unhashed and is simply freed when its owner lets go.
func (m *blockManager) register(b int32, h blockHash) {
	if m.noCache || m.hashed[b] {
		return
	}
	if _, ok := m.byHash[h]; ok {
		return
	}
	m.byHash[h] = b
	m.hash[b], m.hashed[b] = h, true
}

// cachedFree is the free blocks that still hold a reusable hash.
func (m *blockManager) cachedFree() int {
	n := 0
	for b := m.head; b >= 0; b = m.next[b] {
		if m.hashed[b] {
			n++
		}
	}
	return n
}

// The policy: what the scheduler asks of the blocks of a sequence.

// cachedPrefix is the leading full blocks of s's tokens that the prefix
// cache holds (never the block of its last token, which is always computed
// to give its logits), and how many of them no sequence references now.
func (m *blockManager) cachedPrefix(s *seq) (hits []int32, unreferenced int) {
	for bi := range (len(s.tokens) - 1) / m.bs {
		b, ok := m.lookup(s.hashAt(bi, m.bs))
		if !ok {
			break
		}
		hits = append(hits, b)
		if m.ref[b] == 0 {
			unreferenced++
		}
	}
	return hits, unreferenced
}

// cachedBlocks is len(cachedPrefix(s)) without taking anything.
func (m *blockManager) cachedBlocks(s *seq) int {
	n := 0
	for bi := range (len(s.tokens) - 1) / m.bs {
		if _, ok := m.lookup(s.hashAt(bi, m.bs)); !ok {
			break
		}
		n++
	}
	return n
}

// firstMiss is the hash of s's first full block the prefix cache lacks.
func (m *blockManager) firstMiss(s *seq) (blockHash, bool) {
	for bi := range (len(s.tokens) - 1) / m.bs {
		h := s.hashAt(bi, m.bs)
		if _, ok := m.lookup(h); !ok {
			return h, true
		}
	}
	return blockHash{}, false
}

// canAllocate says how many of waiting s's tokens, at most budget, can get
// blocks now after its cached prefix hits, keeping reserve blocks free for
// others (0: s cannot be admitted).
func (m *blockManager) canAllocate(s *seq, budget, reserve int) (hits []int32, k int) {
	hits, unreferenced := m.cachedPrefix(s)
	avail := m.numFree() - unreferenced - reserve
	k = min(len(s.tokens)-len(hits)*m.bs, budget, avail*m.bs)
	return hits, max(k, 0)
}

// allocate gives s the cached blocks hits and new blocks for its next k
// tokens after them, as canAllocate allowed.
func (m *blockManager) allocate(s *seq, hits []int32, k int) {
	for _, b := range hits {
		m.acquire(b)
	}
	s.blocks = append(s.blocks[:0], hits...)
	hitTok := len(hits) * m.bs
	for range blocksFor(hitTok+k, m.bs) - len(hits) {
		s.blocks = append(s.blocks, m.alloc())
	}
	s.n, s.registered = hitTok, len(hits)
}

// mayAppend is how many of the next want positions of running s can get
// blocks now: want or 0, or with shrink (a prompt chunk) as many as the
// free blocks hold.
func (m *blockManager) mayAppend(s *seq, want int, shrink bool) int {
	free := m.numFree()
	need := blocksFor(s.n+want, m.bs) - len(s.blocks)
	if need > free && shrink {
		if c := (len(s.blocks)+free)*m.bs - s.n; c > 0 {
			want = c
			need = blocksFor(s.n+want, m.bs) - len(s.blocks)
		}
	}
	if need <= free {
		return want
	}
	return 0
}

// appendSlots gives s blocks for its next n positions (mayAppend allowed
// them).
func (m *blockManager) appendSlots(s *seq, n int) {
	for range blocksFor(s.n+n, m.bs) - len(s.blocks) {
		s.blocks = append(s.blocks, m.alloc())
	}
}

// deallocate drops s's blocks, last first, so that a prefix outlives the blocks
// that extend it in the LRU order.
func (m *blockManager) deallocate(s *seq) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		m.release(s.blocks[i])
	}
	s.blocks, s.n, s.registered = s.blocks[:0], 0, 0
}

// hashBlocks enters s's newly computed full blocks in the prefix cache.
func (m *blockManager) hashBlocks(s *seq) {
	for ; (s.registered+1)*m.bs <= s.n; s.registered++ {
		m.register(s.blocks[s.registered], s.hashAt(s.registered, m.bs))
	}
}
