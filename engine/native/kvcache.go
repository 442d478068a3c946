package native

import (
	"crypto/sha256"
	"encoding/binary"
	"os"
	"strconv"
	"strings"

	"github.com/batchd/batchd/kernels"
)

// The paged KV cache.
//
// Storage: per layer, one pool of K and one of V, each laid out
// [block][blockSize][kvHeads·headDim], so a block is a small contiguous cache
// and attention streams it exactly as it streams a contiguous cache
// (kernels.PagedAttention, bit-identical to kernels.Attention). A sequence owns a block table: position p
// lives in block table[p/blockSize], row p%blockSize, in every layer.
//
// Blocks are reference-counted. A block that is full is keyed by a chained
// hash of (its parent block's hash, the adapter, its tokens), so equal
// prefixes — a shared system prompt, the n choices of one request, a
// preempted sequence coming back — map to the same blocks: a sequence
// admitted later takes the longest chain of cached full blocks matching its
// tokens (refcount++) and computes only the rest. K/V rows are a pure
// function of the tokens up to their position and the forward pass is
// batch-invariant, so a cached block holds exactly what recomputing it
// would write.
//
// A block whose refcount drops to 0 goes to the tail of the free list but
// keeps its hash: it can still be reused by hash until a new block is
// needed, which takes the free list's head (least recently freed) and only
// then forgets the old hash. A finished sequence frees its blocks last to
// first, so its deeper blocks are evicted before the prefix they extend.

// kvBlockSize is the positions per block: a power of two of at least 4,
// as kernels.PagedAttention needs. 32 rather than vLLM's GPU default of 16:
// in the CPU kernel (BenchmarkPagedVsContiguous, 14/2 heads of 64, decode
// at 512 and 4K context, a 128-token prefill chunk) blocks of 16 cost
// 3-7% over contiguous attention in allocation order and 9-23% shuffled;
// blocks of 32 cost 0-2% in order and 4-11% shuffled. Prefix reuse at
// 32-token granularity loses little on real system prompts.
const kvBlockSize = 32

// kvStore holds one model's K/V blocks: a pool per layer on the model's
// device.
type kvStore struct {
	dev                kernels.Device
	bs, kvDim, nBlocks int
	layers             []kernels.KVPool
}

func newKVStore(dev kernels.Device, layers, kvDim, bs, nBlocks int) (*kvStore, error) {
	s := &kvStore{dev: dev, bs: bs, kvDim: kvDim, nBlocks: nBlocks, layers: make([]kernels.KVPool, layers)}
	for l := range layers {
		p, err := dev.AllocKV(nBlocks, bs, kvDim)
		if err != nil {
			s.free()
			return nil, err
		}
		s.layers[l] = p
	}
	return s, nil
}

// free releases the pools; the store must not be used after.
func (s *kvStore) free() {
	for _, p := range s.layers {
		if p.Blocks > 0 {
			s.dev.FreeKV(p)
		}
	}
	s.layers = nil
}

// blockBytes is the memory one block takes across all layers (K and V).
func blockBytes(layers, kvDim, bs int) int64 { return int64(layers) * 2 * int64(bs) * int64(kvDim) * 4 }

// blocksFor is the blocks that hold n positions.
func blocksFor(n, bs int) int { return (n + bs - 1) / bs }

// defaultKVCacheBytes is min(25% of physical memory, 4 GiB).
func defaultKVCacheBytes() int64 {
	const capBytes = 4 << 30
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 1 << 30
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil && kb > 0 {
				return min(kb<<10/4, capBytes)
			}
		}
	}
	return 1 << 30
}

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
	n       int
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

func newBlockManager(n int, noCache bool) *blockManager {
	m := &blockManager{n: n, noCache: noCache, ref: make([]int32, n), hash: make([]blockHash, n), hashed: make([]bool, n),
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
