package native

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// layer holds one decoder block's weights, on the model's device.
type layer struct {
	attnNorm, ffnNorm kernels.Buf
	wq, wk, wv, wo    kernels.Weight
	bq, bk, bv        kernels.Buf // qwen2 biases (empty otherwise)
	qNorm, kNorm      kernels.Buf // qwen3 per-head norms (empty otherwise)
	wGate, wUp, wDown kernels.Weight
	// A mixture-of-experts layer has a router and per-expert FFNs instead
	// of wGate, wUp, wDown (moe.go).
	router            kernels.Weight
	gateE, upE, downE []kernels.Weight
	// GLM-4.5's: the experts' selection bias (host-side, as routing is)
	// and the shared expert every token takes (nil without one).
	selBias []float32
	// Qwen2-MoE's shared expert gate vector (host-side), nil without one.
	sharedGate                       []float32
	gateShared, upShared, downShared kernels.Weight
	// Gemma's norms of the attention and FFN outputs (empty otherwise).
	postAttnNorm, postFFNNorm kernels.Buf
	// attn is the layer's attention variant (its sliding window, the
	// soft cap); invFreq its RoPE frequencies (Gemma 3's local layers
	// have their own).
	attn    kernels.AttnOpts
	invFreq []float32
	// gpt-oss's biases: attn_output's, the router's and the experts'
	// (Experts × rows, flat); empty otherwise.
	bo, routerB, gateEB, upEB, downEB kernels.Buf
}

// Model is a Llama-family decoder (llama, qwen2, qwen3) ready to run. Its
// weights, its KV stores and its scratch activations live on its device;
// the host sees only the logits (forward) and embeddings (embed).
type Model struct {
	cfg     weights.Config
	dev     kernels.Device
	embd    kernels.Weight
	out     kernels.Weight // output projection (token_embd when tied)
	norm    kernels.Buf
	layers  []layer
	invFreq []float32
	src     *weights.Model
	// packed is the bytes of the device's packed copies of the weights
	// (kernels.WeightPacker).
	packed int64
	// fam is dev when the model needs a family's operations (Gemma's,
	// sliding windows), else nil.
	fam kernels.FamilyDevice
	// attnScale scales the attention scores.
	attnScale float32
}

// deviceLacksError is NewModelOn's error for a model its device does not
// run (yet): one the CPU would.
type deviceLacksError struct{ msg string }

func (e *deviceLacksError) Error() string { return e.msg }

// familyNeeds names what a config needs beyond Llama's decoder, which
// only a kernels.FamilyDevice runs; empty when nothing.
func familyNeeds(c weights.Config) []string {
	var out []string
	if c.SlidingWindow > 0 {
		out = append(out, "sliding-window attention")
	}
	if c.AttnSoftCap > 0 || c.FinalSoftCap > 0 {
		out = append(out, "soft-capping")
	}
	if c.GELU {
		out = append(out, "GeGLU")
	}
	if c.EmbedScale > 0 || c.PostNorms {
		out = append(out, "Gemma's embedding scale and post-norms")
	}
	if c.AttnSinks {
		out = append(out, "attention sinks")
	}
	if c.SwiGLULimit > 0 {
		out = append(out, "gpt-oss's clamped SwiGLU")
	}
	return out
}

// NewModel binds loaded weights to the default device over cpu (the CPU
// itself; tests may choose another, see defaultDevice).
func NewModel(w *weights.Model, cpu *kernels.CPU) (*Model, error) {
	dev, err := openDevice(defaultDevice, cpu, nil)
	if err != nil {
		return nil, err
	}
	return NewModelOn(w, dev)
}

// NewModelOn uploads loaded weights to dev, checking every shape, and lets a
// device with a layout of its own lay out the matrices it multiplies.
func NewModelOn(w *weights.Model, dev kernels.Device) (*Model, error) {
	return newModelOn(w, dev, true)
}

// newModelOn is NewModelOn; pack false keeps the weights as uploaded.
func newModelOn(w *weights.Model, dev kernels.Device, pack bool) (*Model, error) {
	c := w.Config
	if c.Dim <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 || c.VocabSize <= 0 {
		return nil, fmt.Errorf("model config: non-positive dimension in %+v", c)
	}
	if c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("model config: %d heads is not a multiple of %d kv heads", c.Heads, c.KVHeads)
	}
	m := &Model{cfg: c, dev: dev, src: w}
	var err error
	raw := map[kernels.Weight][]byte{} // each weight's bytes in the file
	mat := func(name string, rows, cols int) kernels.Weight {
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
		dw, uerr := dev.UploadMatrix(x)
		if uerr != nil {
			err = fmt.Errorf("model: upload %s to %s: %w", name, dev.Name(), uerr)
			return nil
		}
		raw[dw] = x.Data
		return dw
	}
	vec := func(name string, n int, optional bool) kernels.Buf {
		if err != nil {
			return kernels.Buf{}
		}
		x, ok := w.Vectors[name]
		if !ok {
			if !optional {
				err = fmt.Errorf("model: missing tensor %s", name)
			}
			return kernels.Buf{}
		}
		if len(x) != n {
			err = fmt.Errorf("model: tensor %s has %d values, want %d", name, len(x), n)
			return kernels.Buf{}
		}
		b, aerr := dev.Alloc(n)
		if aerr != nil {
			err = fmt.Errorf("model: upload %s to %s: %w", name, dev.Name(), aerr)
			return kernels.Buf{}
		}
		dev.Upload(b, x)
		return b
	}
	experts := func(name string, rows, cols int) []kernels.Weight {
		xs := w.Experts[name]
		if len(xs) != c.Experts && err == nil {
			err = fmt.Errorf("model: tensor %s holds %d experts, want %d", name, len(xs), c.Experts)
		}
		out := make([]kernels.Weight, len(xs))
		for e, x := range xs {
			if err != nil {
				return nil
			}
			if x.Rows != rows || x.Cols != cols {
				err = fmt.Errorf("model: tensor %s expert %d is %dx%d, want %dx%d", name, e, x.Rows, x.Cols, rows, cols)
				return nil
			}
			dw, uerr := dev.UploadMatrix(x)
			if uerr != nil {
				err = fmt.Errorf("model: upload %s expert %d to %s: %w", name, e, dev.Name(), uerr)
				return nil
			}
			raw[dw] = x.Data
			out[e] = dw
		}
		return out
	}
	if _, graphs := dev.(kernels.PassDevice); c.Experts > 0 && graphs {
		return nil, &deviceLacksError{fmt.Sprintf("model: %s is a mixture of experts, which runs on the CPU and reference devices so far, not on %s", c.Arch, dev.Name())}
	}
	if needs := familyNeeds(c); len(needs) > 0 {
		fam, ok := dev.(kernels.FamilyDevice)
		if !ok {
			return nil, &deviceLacksError{fmt.Sprintf("model: %s needs %s, which run on the CPU and reference devices so far, not on %s", c.Arch, strings.Join(needs, ", "), dev.Name())}
		}
		m.fam = fam
	}
	m.attnScale = float32(1 / math.Sqrt(float64(c.HeadDim)))
	if c.AttnScale > 0 {
		m.attnScale = c.AttnScale
	}
	if mag := c.RopeMagnitude(); mag != 1 {
		// YaRN scales q and k by mag when it rotates them; the scores,
		// all they are used for, by mag².
		m.attnScale = float32(float64(m.attnScale) * mag * mag)
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
		}
		if c.OutBias {
			l.bo = vec(p+"attn_output.bias", c.Dim, false)
		}
		if c.AttnSinks {
			l.attn.Sinks = w.Vectors[p+"attn_sinks.weight"]
			if len(l.attn.Sinks) != c.Heads && err == nil {
				err = fmt.Errorf("model: tensor %sattn_sinks.weight has %d values, want %d", p, len(l.attn.Sinks), c.Heads)
			}
		}
		if c.RouterBias {
			l.routerB = vec(p+"ffn_gate_inp.bias", c.Experts, false)
		}
		if c.ExpertBias {
			l.gateEB = vec(p+"ffn_gate_exps.bias", c.Experts*c.ExpertFFNDim, false)
			l.upEB = vec(p+"ffn_up_exps.bias", c.Experts*c.ExpertFFNDim, false)
			l.downEB = vec(p+"ffn_down_exps.bias", c.Experts*c.Dim, false)
		}
		if c.MoELayer(i) {
			l.router = mat(p+"ffn_gate_inp.weight", c.Experts, c.Dim)
			l.gateE = experts(p+"ffn_gate_exps.weight", c.ExpertFFNDim, c.Dim)
			l.upE = experts(p+"ffn_up_exps.weight", c.ExpertFFNDim, c.Dim)
			l.downE = experts(p+"ffn_down_exps.weight", c.Dim, c.ExpertFFNDim)
			if c.ExpertSelBias {
				l.selBias = w.Vectors[p+"exp_probs_b.bias"]
				if len(l.selBias) != c.Experts && err == nil {
					err = fmt.Errorf("model: tensor %sexp_probs_b.bias has %d values, want %d", p, len(l.selBias), c.Experts)
				}
			}
			if sff := c.SharedFFNDim; sff > 0 {
				l.gateShared = mat(p+"ffn_gate_shexp.weight", sff, c.Dim)
				l.upShared = mat(p+"ffn_up_shexp.weight", sff, c.Dim)
				l.downShared = mat(p+"ffn_down_shexp.weight", c.Dim, sff)
				if c.SharedGate {
					l.sharedGate = w.Vectors[p+"ffn_gate_inp_shexp.weight"]
					if len(l.sharedGate) != c.Dim && err == nil {
						err = fmt.Errorf("model: tensor %sffn_gate_inp_shexp.weight has %d values, want %d", p, len(l.sharedGate), c.Dim)
					}
				}
			}
		} else {
			l.wGate = mat(p+"ffn_gate.weight", c.FFNDim, c.Dim)
			l.wUp = mat(p+"ffn_up.weight", c.FFNDim, c.Dim)
			l.wDown = mat(p+"ffn_down.weight", c.Dim, c.FFNDim)
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
		if c.PostNorms {
			l.postAttnNorm = vec(p+"post_attention_norm.weight", c.Dim, false)
			l.postFFNNorm = vec(p+"post_ffw_norm.weight", c.Dim, false)
		}
		l.attn.SoftCap = c.AttnSoftCap
		if c.Sliding(i) {
			l.attn.Window = c.SlidingWindow
		}
		m.layers = append(m.layers, l)
	}
	if err != nil {
		return nil, err
	}
	// A device with a layout of its own for the matrices it multiplies
	// (the CPU's packed block formats) lays them out now; the embedding
	// table, when only looked up, stays as it is. The file's pages of a
	// packed matrix are handed back to the kernel as it goes (they are
	// clean: a lookup of a tied embedding row reads it again), so memory
	// holds the packed copy, not both.
	if p, ok := dev.(kernels.WeightPacker); ok && pack {
		ws := []kernels.Weight{m.out}
		for _, l := range m.layers {
			ws = append(ws, l.wq, l.wk, l.wv, l.wo)
			if l.router != nil {
				ws = append(ws, l.router)
				ws = append(append(append(ws, l.gateE...), l.upE...), l.downE...)
			} else {
				ws = append(ws, l.wGate, l.wUp, l.wDown)
			}
		}
		for _, x := range ws {
			if n := p.PackWeight(x); n > 0 {
				m.packed += int64(n)
				releasePages(raw[x])
			}
		}
	}
	for _, f := range w.RopeFrequencies() {
		m.invFreq = append(m.invFreq, float32(f))
	}
	local := m.invFreq
	if c.RopeThetaLocal > 0 {
		local = nil
		for _, f := range w.LocalRopeFrequencies() {
			local = append(local, float32(f))
		}
	}
	for i := range m.layers {
		m.layers[i].invFreq = m.invFreq
		if c.Sliding(i) {
			m.layers[i].invFreq = local
		}
	}
	return m, nil
}

// Config returns the model's configuration.
func (m *Model) Config() weights.Config { return m.cfg }

// newKVStore returns K/V storage for this model on its device: nBlocks
// blocks of bs positions. A device without room panics (the caller sized
// the cache from the memory it was given).
func (m *Model) newKVStore(bs, nBlocks int) *kvStore {
	kv, err := newKVStore(m.dev, len(m.layers), m.cfg.KVHeads*m.cfg.HeadDim, bs, nBlocks)
	if err != nil {
		panic(fmt.Sprintf("native: KV cache of %d blocks on %s: %v", nBlocks, m.dev.Name(), err))
	}
	return kv
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
	// adapter is the sequence's LoRA adapter; nil: the base model.
	adapter *adapter
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
	// lora: some segment has an adapter (else no adapter work is done).
	lora bool
}

// scratch holds a forward pass's buffers, reused across steps: device
// allocations, grown on demand (views of them are what the pass uses), and
// the host side of the logits.
type scratch struct {
	x, h, q, k, v, att, o, gate, up, down kernels.Buf
	last, logitsDev                       kernels.Buf
	loraIn, loraMid, loraMidOne, loraOut  kernels.Buf // applyLoRA's gathered x, x·Aᵀ, one projection's part of it, its ·Bᵀ
	lora                                  []loraRows  // the batch's rows by adapter (planLoRA)
	loraIdx                               []int32
	rows                                  []int32 // b.logitRows
	moe                                   moeScratch
	segs                                  []kernels.Segment // b.segs, for a FusedDevice
	logits                                []float32
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// buf returns the first n floats of *b, reallocating it on the model's
// device when it is shorter.
func (m *Model) buf(b *kernels.Buf, n int) kernels.Buf {
	if b.Len() < n {
		m.dev.Free(*b)
		nb, err := m.dev.Alloc(n)
		if err != nil {
			panic(fmt.Sprintf("native: scratch of %d floats on %s: %v", n, m.dev.Name(), err))
		}
		*b = nb
	}
	return b.Slice(0, n)
}

// hostView is implemented by devices whose buffers are host memory
// (kernels.CPUDevice): forward then hands out the logits without a copy.
type hostView interface {
	Host(kernels.Buf) []float32
}

// forward runs one batch and returns the logits of b.logitRows, row-major
// [len(logitRows)][vocab], in host memory: the only rows downloaded. The
// returned slice is reused by the next call.
func (m *Model) forward(b *batch, s *scratch) []float32 {
	if pd, ok := m.dev.(kernels.PassDevice); ok {
		pd.BeginPass()
	}
	x := m.hidden(b, s)
	c := m.cfg
	dim := c.Dim
	// Logits only for the rows that need them.
	n := len(b.logitRows)
	s.rows = s.rows[:0]
	for _, r := range b.logitRows {
		s.rows = append(s.rows, int32(r))
	}
	last := m.buf(&s.last, n*dim)
	m.dev.CopyRows(last, x, dim, s.rows)
	m.dev.RMSNorm(last, last, m.norm, n, dim, c.RMSEps)
	logits := m.buf(&s.logitsDev, n*c.VocabSize)
	m.dev.MatMul(logits, last, n, m.out)
	if c.FinalSoftCap > 0 {
		m.fam.SoftCap(logits, c.FinalSoftCap)
	}
	if h, ok := m.dev.(hostView); ok {
		return h.Host(logits)
	}
	s.logits = grow(s.logits, n*c.VocabSize)
	m.dev.Download(s.logits, logits)
	return s.logits
}

// hidden runs the decoder blocks over a batch and returns the last block's
// output (before the final norm), [tokens][dim], a view of s.x.
func (m *Model) hidden(b *batch, s *scratch) kernels.Buf {
	c := m.cfg
	T := len(b.tokens)
	dim, qDim, kvDim := c.Dim, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	x := m.buf(&s.x, T*dim)
	h := m.buf(&s.h, T*dim)
	q := m.buf(&s.q, T*qDim)
	k := m.buf(&s.k, T*kvDim)
	v := m.buf(&s.v, T*kvDim)
	att := m.buf(&s.att, T*qDim)
	o := m.buf(&s.o, T*dim)
	gate := m.buf(&s.gate, T*c.FFNDim)
	up := m.buf(&s.up, T*c.FFNDim)
	down := m.buf(&s.down, T*dim)
	dev := m.dev
	kv := b.kv
	// A fused device takes the whole pass per layer: it gets the segments
	// once, first (they are its persistent inputs), and runs the QKV tail
	// (with the K/V writes), plain attention and the residual+norm pairs
	// as one call each.
	fused, _ := dev.(kernels.FusedDevice)
	if fused != nil {
		s.segs = s.segs[:0]
		for _, sg := range b.segs {
			s.segs = append(s.segs, kernels.Segment{First: sg.first, N: sg.n, Start: sg.start, Blocks: sg.blocks})
		}
		fused.SetSegments(s.segs, kv.bs)
	}
	dev.Embed(x, m.embd, b.tokens)
	if c.EmbedScale > 0 {
		m.fam.Scale(x, c.EmbedScale)
	}
	scale := m.attnScale
	if b.lora {
		planLoRA(b, s)
	}
	for li := range m.layers {
		L := &m.layers[li]
		if li == 0 || fused == nil {
			dev.RMSNorm(h, x, L.attnNorm, T, dim, c.RMSEps)
		} // else the previous layer's AddRMSNorm did it
		dev.MatMul(q, h, T, L.wq)
		dev.MatMul(k, h, T, L.wk)
		dev.MatMul(v, h, T, L.wv)
		if b.lora {
			m.applyLoRA(s, li, loraQKV, h, dim, q, k, v)
		}
		pool := kv.layers[li]
		if fused != nil {
			fused.QKVPost(q, k, v, T, L.bq, L.bk, L.bv, L.qNorm, L.kNorm, c.RMSEps, b.pos, L.invFreq, c.RopeNeox,
				c.Heads, c.KVHeads, c.HeadDim, pool)
		} else {
			if L.bq.Len() > 0 {
				dev.AddBias(q, L.bq, T, qDim)
				dev.AddBias(k, L.bk, T, kvDim)
				dev.AddBias(v, L.bv, T, kvDim)
			}
			if L.qNorm.Len() > 0 {
				dev.RMSNorm(q, q, L.qNorm, T*c.Heads, c.HeadDim, c.RMSEps)
				dev.RMSNorm(k, k, L.kNorm, T*c.KVHeads, c.HeadDim, c.RMSEps)
			}
			dev.RoPE(q, T, c.Heads, c.HeadDim, b.pos, L.invFreq, c.RopeNeox)
			dev.RoPE(k, T, c.KVHeads, c.HeadDim, b.pos, L.invFreq, c.RopeNeox)
		}
		switch {
		case fused != nil && L.attn.Plain():
			fused.PagedAttentionSegments(att, q, pool, c.Heads, c.KVHeads, c.HeadDim, scale)
		default:
			for _, sg := range b.segs {
				if fused == nil { // else QKVPost wrote them
					dev.WriteKV(pool, k.Slice(sg.first*kvDim, sg.n*kvDim), v.Slice(sg.first*kvDim, sg.n*kvDim), sg.blocks, sg.start, sg.n)
				}
				if L.attn.Plain() {
					dev.PagedAttention(att.Slice(sg.first*qDim, sg.n*qDim), q.Slice(sg.first*qDim, sg.n*qDim),
						pool, sg.blocks, sg.n, sg.start, c.Heads, c.KVHeads, c.HeadDim, scale)
				} else {
					m.fam.PagedAttentionOpts(att.Slice(sg.first*qDim, sg.n*qDim), q.Slice(sg.first*qDim, sg.n*qDim),
						pool, sg.blocks, sg.n, sg.start, c.Heads, c.KVHeads, c.HeadDim, scale, L.attn)
				}
			}
		}
		dev.MatMul(o, att, T, L.wo)
		if L.bo.Len() > 0 {
			dev.AddBias(o, L.bo, T, dim)
		}
		if b.lora {
			m.applyLoRA(s, li, loraAttnOut, att, qDim, o)
		}
		if c.PostNorms {
			dev.RMSNorm(o, o, L.postAttnNorm, T, dim, c.RMSEps)
		}
		if fused != nil {
			fused.AddRMSNorm(h, x, o, L.ffnNorm, T, dim, c.RMSEps)
		} else {
			dev.Add(x, o)
			dev.RMSNorm(h, x, L.ffnNorm, T, dim, c.RMSEps)
		}
		if L.router != nil {
			m.moe(li, h, down, T, s) // adapters have no target in it: LoadLoRA refuses FFN ones
		} else {
			dev.MatMul(gate, h, T, L.wGate)
			dev.MatMul(up, h, T, L.wUp)
			if b.lora {
				m.applyLoRA(s, li, loraGateUp, h, dim, gate, up)
			}
			if c.GELU {
				m.fam.GELUMul(gate, up)
			} else {
				dev.SiLUMul(gate, up)
			}
			dev.MatMul(down, gate, T, L.wDown)
			if b.lora {
				m.applyLoRA(s, li, loraFFNOut, gate, c.FFNDim, down)
			}
		}
		if c.PostNorms {
			dev.RMSNorm(down, down, L.postFFNNorm, T, dim, c.RMSEps)
		}
		if fused != nil && li+1 < len(m.layers) {
			fused.AddRMSNorm(h, x, down, m.layers[li+1].attnNorm, T, dim, c.RMSEps)
		} else {
			dev.Add(x, down)
		}
	}
	return x
}

// embed returns the final-normed hidden states of one sequence's tokens,
// [len(tokens)][dim], computed in one pass with a throwaway cache.
func (m *Model) embed(tokens []int32, s *scratch) []float32 {
	kv, table := m.scratchKV(len(tokens))
	defer kv.free()
	b := batch{kv: kv, tokens: tokens, segs: []segment{{blocks: table, n: len(tokens)}}}
	for i := range tokens {
		b.pos = append(b.pos, int32(i))
	}
	x := m.hidden(&b, s)
	n := len(tokens) * m.cfg.Dim
	h := m.buf(&s.h, n)
	m.dev.RMSNorm(h, x, m.norm, len(tokens), m.cfg.Dim, m.cfg.RMSEps)
	out := make([]float32, n)
	m.dev.Download(out, h)
	return out
}
