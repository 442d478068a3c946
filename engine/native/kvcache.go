package native

import (
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

// deviceKVBudget is the default KV cache of a model on a device with its
// own memory: 90% of what is free there once the model's weights are in,
// less the workspace a step of maxBatchTokens tokens grows to (activations,
// logits, GEMM scratch) and a fixed reserve for the driver and libraries,
// split evenly among the share models still to be sized.
func deviceKVBudget(dm deviceMemory, m *Model, maxBatchTokens int, share float64) int64 {
	const reserve = 512 << 20
	free, _, err := dm.MemInfo()
	if err != nil || free <= 0 {
		return defaultKVCacheBytes()
	}
	c := m.cfg
	perToken := int64(4*c.Dim+3*c.Heads*c.HeadDim+2*c.KVHeads*c.HeadDim+3*c.FFNDim+c.VocabSize) * 4
	work := int64(maxBatchTokens)*perToken + reserve
	b := int64(float64(free*9/10-work) / max(share, 1))
	return max(b, 1<<20)
}
