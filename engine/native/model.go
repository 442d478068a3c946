package native

import (
	"fmt"
	"math"
	"strconv"

	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// layer holds one decoder block's weights.
type layer struct {
	attnNorm, ffnNorm []float32
	wq, wk, wv, wo    *kernels.Matrix
	bq, bk, bv        []float32 // qwen2 biases (nil otherwise)
	qNorm, kNorm      []float32 // qwen3 per-head norms (nil otherwise)
	wGate, wUp, wDown *kernels.Matrix
}

// Model is a Llama-family decoder (llama, qwen2, qwen3) ready to run.
type Model struct {
	cfg     weights.Config
	cpu     *kernels.CPU
	embd    *kernels.Matrix
	out     *kernels.Matrix // output projection (token_embd when tied)
	norm    []float32
	layers  []layer
	invFreq []float32
	src     *weights.Model
}

// NewModel binds loaded weights to a device, checking every shape.
func NewModel(w *weights.Model, cpu *kernels.CPU) (*Model, error) {
	c := w.Config
	if c.Dim <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 || c.VocabSize <= 0 {
		return nil, fmt.Errorf("model config: non-positive dimension in %+v", c)
	}
	if c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("model config: %d heads is not a multiple of %d kv heads", c.Heads, c.KVHeads)
	}
	m := &Model{cfg: c, cpu: cpu, src: w}
	var err error
	mat := func(name string, rows, cols int) *kernels.Matrix {
		if err != nil {
			return nil
		}
		x, ok := w.Matrices[name]
		if !ok {
			err = fmt.Errorf("model: missing tensor %s", name)
			return nil
		}
		if x.Rows != rows || x.Cols != cols {
			err = fmt.Errorf("model: tensor %s is %dx%d, want %dx%d", name, x.Rows, x.Cols, rows, cols)
			return nil
		}
		return x
	}
	vec := func(name string, n int, optional bool) []float32 {
		if err != nil {
			return nil
		}
		x, ok := w.Vectors[name]
		if !ok {
			if !optional {
				err = fmt.Errorf("model: missing tensor %s", name)
			}
			return nil
		}
		if len(x) != n {
			err = fmt.Errorf("model: tensor %s has %d values, want %d", name, len(x), n)
			return nil
		}
		return x
	}
	qDim, kvDim := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	m.embd = mat("token_embd.weight", c.VocabSize, c.Dim)
	m.norm = vec("output_norm.weight", c.Dim, false)
	if c.TiedEmbeddings {
		m.out = m.embd
	} else {
		m.out = mat("output.weight", c.VocabSize, c.Dim)
	}
	for i := range c.Layers {
		p := "blk." + strconv.Itoa(i) + "."
		l := layer{
			attnNorm: vec(p+"attn_norm.weight", c.Dim, false),
			ffnNorm:  vec(p+"ffn_norm.weight", c.Dim, false),
			wq:       mat(p+"attn_q.weight", qDim, c.Dim),
			wk:       mat(p+"attn_k.weight", kvDim, c.Dim),
			wv:       mat(p+"attn_v.weight", kvDim, c.Dim),
			wo:       mat(p+"attn_output.weight", c.Dim, qDim),
			wGate:    mat(p+"ffn_gate.weight", c.FFNDim, c.Dim),
			wUp:      mat(p+"ffn_up.weight", c.FFNDim, c.Dim),
			wDown:    mat(p+"ffn_down.weight", c.Dim, c.FFNDim),
		}
		if c.QKVBias {
			l.bq = vec(p+"attn_q.bias", qDim, false)
			l.bk = vec(p+"attn_k.bias", kvDim, false)
			l.bv = vec(p+"attn_v.bias", kvDim, false)
		}
		if c.QKNorm {
			l.qNorm = vec(p+"attn_q_norm.weight", c.HeadDim, false)
			l.kNorm = vec(p+"attn_k_norm.weight", c.HeadDim, false)
		}
		m.layers = append(m.layers, l)
	}
	if err != nil {
		return nil, err
	}
	for _, f := range w.RopeFrequencies() {
		m.invFreq = append(m.invFreq, float32(f))
	}
	return m, nil
}

// Config returns the model's configuration.
func (m *Model) Config() weights.Config { return m.cfg }

// newKVStore returns K/V storage for this model: nBlocks blocks of bs
// positions.
func (m *Model) newKVStore(bs, nBlocks int) *kvStore {
	return newKVStore(len(m.layers), m.cfg.KVHeads*m.cfg.HeadDim, bs, nBlocks)
}

// scratchKV returns storage and a block table for one sequence of up to n
// positions, for passes that keep no cache (embeddings, tests).
func (m *Model) scratchKV(n int) (*kvStore, []int32) {
	nb := blocksFor(max(n, 1), kvBlockSize)
	table := make([]int32, nb)
	for i := range table {
		table[i] = int32(i)
	}
	return m.newKVStore(kvBlockSize, nb), table
}

// segment is a run of consecutive tokens of one sequence in a batch.
type segment struct {
	blocks []int32 // the sequence's block table, covering start+n positions
	first  int     // index of its first token in the batch
	n      int     // tokens
	start  int     // position of its first token
}

// batch is one forward pass: tokens of many sequences, each sequence's
// tokens contiguous and in position order.
type batch struct {
	kv     *kvStore
	tokens []int32
	pos    []int32
	segs   []segment
	// logitRows lists the batch rows whose logits are wanted.
	logitRows []int
}

// scratch holds a forward pass's buffers, reused across steps.
type scratch struct {
	x, h, q, k, v, att, o, gate, up, down []float32
	last                                  []float32
	logits                                []float32
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// forward runs one batch and returns the logits of b.logitRows, row-major
// [len(logitRows)][vocab]. The returned slice is reused by the next call.
func (m *Model) forward(b *batch, s *scratch) []float32 {
	m.hidden(b, s)
	c := m.cfg
	dim := c.Dim
	// Logits only for the rows that need them.
	n := len(b.logitRows)
	s.last = grow(s.last, n*dim)
	for i, r := range b.logitRows {
		copy(s.last[i*dim:(i+1)*dim], s.x[r*dim:(r+1)*dim])
	}
	m.cpu.RMSNorm(s.last, s.last, m.norm, dim, c.RMSEps)
	s.logits = grow(s.logits, n*c.VocabSize)
	m.cpu.MatMul(s.logits, s.last, n, m.out)
	return s.logits
}

// hidden runs the decoder blocks over a batch, leaving the last block's
// output (before the final norm) in s.x, [tokens][dim].
func (m *Model) hidden(b *batch, s *scratch) {
	c := m.cfg
	T := len(b.tokens)
	dim, qDim, kvDim := c.Dim, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	s.x = grow(s.x, T*dim)
	s.h = grow(s.h, T*dim)
	s.q = grow(s.q, T*qDim)
	s.k = grow(s.k, T*kvDim)
	s.v = grow(s.v, T*kvDim)
	s.att = grow(s.att, T*qDim)
	s.o = grow(s.o, T*dim)
	s.gate = grow(s.gate, T*c.FFNDim)
	s.up = grow(s.up, T*c.FFNDim)
	s.down = grow(s.down, T*dim)
	for t, tok := range b.tokens {
		m.embd.Row(int(tok), s.x[t*dim:(t+1)*dim])
	}
	kv := b.kv
	scale := float32(1 / math.Sqrt(float64(c.HeadDim)))
	cpu := m.cpu
	for li := range m.layers {
		L := &m.layers[li]
		cpu.RMSNorm(s.h, s.x, L.attnNorm, dim, c.RMSEps)
		cpu.MatMul(s.q, s.h, T, L.wq)
		cpu.MatMul(s.k, s.h, T, L.wk)
		cpu.MatMul(s.v, s.h, T, L.wv)
		if L.bq != nil {
			m.addBias(s.q, L.bq)
			m.addBias(s.k, L.bk)
			m.addBias(s.v, L.bv)
		}
		if L.qNorm != nil {
			cpu.RMSNorm(s.q, s.q, L.qNorm, c.HeadDim, c.RMSEps)
			cpu.RMSNorm(s.k, s.k, L.kNorm, c.HeadDim, c.RMSEps)
		}
		cpu.RoPE(s.q, T, c.Heads, c.HeadDim, b.pos, m.invFreq, c.RopeNeox)
		cpu.RoPE(s.k, T, c.KVHeads, c.HeadDim, b.pos, m.invFreq, c.RopeNeox)
		kp, vp := kv.k[li], kv.v[li]
		for _, sg := range b.segs {
			for i := range sg.n {
				off, t := kv.row(sg.blocks, sg.start+i), sg.first+i
				copy(kp[off:off+kvDim], s.k[t*kvDim:(t+1)*kvDim])
				copy(vp[off:off+kvDim], s.v[t*kvDim:(t+1)*kvDim])
			}
			cpu.PagedAttention(s.att[sg.first*qDim:(sg.first+sg.n)*qDim], s.q[sg.first*qDim:(sg.first+sg.n)*qDim],
				kp, vp, sg.blocks, kv.bs, sg.n, sg.start, c.Heads, c.KVHeads, c.HeadDim, scale)
		}
		cpu.MatMul(s.o, s.att, T, L.wo)
		m.cpu.Add(s.x, s.o)
		cpu.RMSNorm(s.h, s.x, L.ffnNorm, dim, c.RMSEps)
		cpu.MatMul(s.gate, s.h, T, L.wGate)
		cpu.MatMul(s.up, s.h, T, L.wUp)
		cpu.SiLUMul(s.gate, s.up)
		cpu.MatMul(s.down, s.gate, T, L.wDown)
		m.cpu.Add(s.x, s.down)
	}
}

// embed returns the final-normed hidden states of one sequence's tokens,
// [len(tokens)][dim], computed in one pass with a throwaway cache.
func (m *Model) embed(tokens []int32, s *scratch) []float32 {
	kv, table := m.scratchKV(len(tokens))
	b := batch{kv: kv, tokens: tokens, segs: []segment{{blocks: table, n: len(tokens)}}}
	for i := range tokens {
		b.pos = append(b.pos, int32(i))
	}
	m.hidden(&b, s)
	out := make([]float32, len(tokens)*m.cfg.Dim)
	m.cpu.RMSNorm(out, s.x[:len(out)], m.norm, m.cfg.Dim, m.cfg.RMSEps)
	return out
}

func (m *Model) addBias(x, bias []float32) {
	n := len(bias)
	for i := 0; i+n <= len(x); i += n {
		m.cpu.Add(x[i:i+n], bias)
	}
}
