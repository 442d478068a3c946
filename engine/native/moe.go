package native

import (
	"math"

	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// Mixture of experts (qwen3moe, Mixtral, gpt-oss, glm4moe, qwen2moe): a
// layer's FFN is Experts SwiGLU FFNs of which a router picks ExpertsUsed
// per token (gating: by softmax or, GLM's, by sigmoid plus a selection
// bias; gpt-oss: the router and the experts with biases, the SwiGLU
// clamped), plus, where the family has one, a shared expert every row
// takes (Qwen2-MoE's gated per row). The experts run grouped by
// expert: each expert's rows are gathered, its three matrices multiply all
// of them in one call each (its weights stream once per step however many
// tokens chose it), and its outputs are added into their rows weighted by
// the router's probabilities. A row's sum is taken in expert order, so what
// a row gets never depends on which other rows share its batch (the
// matrices' products are batch-invariant, kernels/doc.go); an expert no row
// chose costs nothing.
//
// The router's choices and the weighted sums are taken on the host: on the
// CPU device that is its buffers themselves, on the reference device a
// download and an upload. A device that captures a pass as one graph (the
// CUDA device) would have to stop at every layer's routing: it refuses MoE
// models at load until its own kernels route.

// swiGLUAlpha is gpt-oss's SwiGLU slope (its clamp is Config.SwiGLULimit).
const swiGLUAlpha = 1.702

// moeScratch is the MoE buffers of a forward pass, reused across layers
// and steps.
type moeScratch struct {
	router, x, gate, up, y kernels.Buf
	routes                 routes
	// host copies of router, y, out and h on a device without a host view
	logits, yh, acc, hh []float32
	// rows counts, per layer and expert, the rows the last pass sent it.
	rows [][]int
}

// routes is a batch's routing: per expert, the rows that chose it (in row
// order) and each one's weight.
type routes struct {
	rows   [][]int32
	weight [][]float32
	probs  []float64 // one row's softmax, reused
	taken  []bool    // one row's chosen experts, reused
	pick   []int
}

// gating is how a family turns router logits into experts and weights.
type gating struct {
	used int
	// norm renormalizes the chosen experts' weights to sum to 1.
	norm bool
	// sigmoid: each expert's probability is its logit's sigmoid (GLM-4.5,
	// DeepSeek V3); otherwise the softmax over all experts.
	sigmoid bool
	// selBias (one per expert, or nil) is added to the probabilities to
	// choose by; the weights are the probabilities themselves.
	selBias []float32
	// scale > 0 multiplies the weights last.
	scale float32
}

// gatingOf is layer L's gating under c.
func gatingOf(c *weights.Config, L *layer) gating {
	return gating{used: c.ExpertsUsed, norm: c.ExpertNormTopK, sigmoid: c.ExpertSigmoid, selBias: L.selBias, scale: c.ExpertScale}
}

// route fills r from router logits [T][experts] as llama.cpp does: the
// probabilities (softmax over all experts, or each one's sigmoid), the
// g.used ones with the highest probability plus selection bias (the lower
// index first on a tie), weighted by their probabilities, renormalized to
// sum to 1 when g.norm (a sigmoid sum no smaller than 2⁻¹⁴, llama.cpp's
// clamp), times g.scale.
func (r *routes) route(logits []float32, T, experts int, g gating) {
	if cap(r.rows) < experts {
		r.rows, r.weight = make([][]int32, experts), make([][]float32, experts)
	}
	r.rows, r.weight = r.rows[:experts], r.weight[:experts]
	for e := range experts {
		r.rows[e], r.weight[e] = r.rows[e][:0], r.weight[e][:0]
	}
	if cap(r.probs) < experts {
		r.probs, r.taken = make([]float64, experts), make([]bool, experts)
	}
	p, taken := r.probs[:experts], r.taken[:experts]
	for t := range T {
		row := logits[t*experts : (t+1)*experts]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = max(mx, float64(v))
		}
		sum := 1.0 // sigmoid: the probabilities as they are
		if g.sigmoid {
			for e, v := range row {
				p[e] = 1 / (1 + math.Exp(-float64(v)))
			}
		} else {
			sum = 0
			for e, v := range row {
				p[e] = math.Exp(float64(v) - mx)
				sum += p[e]
			}
		}
		sel := func(e int) float64 {
			if g.selBias != nil {
				return p[e] + float64(g.selBias[e])
			}
			return p[e]
		}
		clear(taken)
		r.pick = r.pick[:0]
		var chosen float64
		for range g.used {
			best := -1
			for e := range p {
				if !taken[e] && (best < 0 || sel(e) > sel(best)) {
					best = e
				}
			}
			taken[best] = true
			r.pick = append(r.pick, best)
			chosen += p[best] / sum
		}
		if g.sigmoid {
			chosen = max(chosen, 1.0/(1<<14))
		}
		for _, e := range r.pick {
			w := p[e] / sum
			if g.norm {
				w /= chosen
			}
			if g.scale > 0 {
				w *= float64(g.scale)
			}
			r.rows[e] = append(r.rows[e], int32(t))
			r.weight[e] = append(r.weight[e], float32(w))
		}
	}
}

// moe computes layer li's mixture of experts of h [T][dim] into out [T][dim].
func (m *Model) moe(li int, h, out kernels.Buf, T int, s *scratch) {
	c, dev, ms, L := m.cfg, m.dev, &s.moe, &m.layers[li]
	hv, _ := dev.(hostView)
	host := func(b kernels.Buf, into *[]float32) []float32 {
		if hv != nil {
			return hv.Host(b)
		}
		*into = grow(*into, b.Len())
		dev.Download(*into, b)
		return *into
	}
	dim, ff := c.Dim, c.ExpertFFNDim
	router := m.buf(&ms.router, T*c.Experts)
	dev.MatMul(router, h, T, L.router)
	if L.routerB.Len() > 0 {
		dev.AddBias(router, L.routerB, T, c.Experts)
	}
	ms.routes.route(host(router, &ms.logits), T, c.Experts, gatingOf(&c, L))
	var o []float32
	if hv != nil {
		o = hv.Host(out)
	} else {
		ms.acc = grow(ms.acc, T*dim)
		o = ms.acc
	}
	clear(o)
	if len(ms.rows) != len(m.layers) {
		ms.rows = make([][]int, len(m.layers))
	}
	ms.rows[li] = ms.rows[li][:0]
	for e, rows := range ms.routes.rows {
		n := len(rows)
		ms.rows[li] = append(ms.rows[li], n)
		if n == 0 {
			continue
		}
		x := m.buf(&ms.x, n*dim)
		gate, up := m.buf(&ms.gate, n*ff), m.buf(&ms.up, n*ff)
		y := m.buf(&ms.y, n*dim)
		dev.CopyRows(x, h, dim, rows)
		dev.MatMul(gate, x, n, L.gateE[e])
		dev.MatMul(up, x, n, L.upE[e])
		if L.gateEB.Len() > 0 {
			dev.AddBias(gate, L.gateEB.Slice(e*ff, ff), n, ff)
			dev.AddBias(up, L.upEB.Slice(e*ff, ff), n, ff)
		}
		if c.SwiGLULimit > 0 {
			m.fam.SwiGLUOAI(gate, up, swiGLUAlpha, c.SwiGLULimit)
		} else {
			dev.SiLUMul(gate, up)
		}
		dev.MatMul(y, gate, n, L.downE[e])
		if L.downEB.Len() > 0 {
			dev.AddBias(y, L.downEB.Slice(e*dim, dim), n, dim)
		}
		yh := host(y, &ms.yh)
		for i, r := range rows {
			w := ms.routes.weight[e][i]
			dst, src := o[int(r)*dim:][:dim], yh[i*dim:][:dim]
			for j := range dst {
				dst[j] += w * src[j]
			}
		}
	}
	if hv == nil {
		dev.Upload(out, o)
	}
	if L.gateShared != nil {
		// The shared expert, on every row, added to the routed sum.
		sff := c.SharedFFNDim
		gate, up, y := m.buf(&ms.gate, T*sff), m.buf(&ms.up, T*sff), m.buf(&ms.y, T*dim)
		dev.MatMul(gate, h, T, L.gateShared)
		dev.MatMul(up, h, T, L.upShared)
		dev.SiLUMul(gate, up)
		dev.MatMul(y, gate, T, L.downShared)
		if g := L.sharedGate; g != nil {
			// Qwen2-MoE's: each row's shared output times σ(h·g).
			hh := host(h, &ms.hh)
			yh := host(y, &ms.yh)
			for t := range T {
				var dot float64
				for j, v := range hh[t*dim : (t+1)*dim] {
					dot += float64(v) * float64(g[j])
				}
				s := float32(1 / (1 + math.Exp(-dot)))
				for j := range yh[t*dim : (t+1)*dim] {
					yh[t*dim+j] *= s
				}
			}
			if hv == nil {
				dev.Upload(y, yh)
			}
		}
		dev.Add(out, y)
	}
}
