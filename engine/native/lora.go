package native

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// LoRA adapters are applied per row, never merged into the weights, so one
// forward pass can serve sequences of different adapters (and none): after
// out = x·Wᵀ, the rows of adapter a get out += (x·Aᵀ)·(scale·B)ᵀ, two small
// F32 matmuls on the device. A batch whose segments have no adapter does no
// extra work.
//
// Small matmuls cost mostly their dispatch, not their FLOPs (rank 16 on
// Qwen2.5-0.5B is about 2% of the base's), so the work is cut to few calls:
// all rows of one adapter go through together, wherever their sequences sit
// in the batch (gathered with CopyRows, added back run by run), and the
// projections that share an input (q, k, v; gate, up) share one x·Aᵀ over
// their A matrices stacked. Every product is still row by row the one the
// unbatched form computes, so results do not change.

// The projections an adapter may change (the order of weights.LoRATargets).
const (
	loraQ = iota
	loraK
	loraV
	loraO
	loraGate
	loraUp
	loraDown
	loraTargets
)

// The groups of projections that share an input, in the decoder's order.
const (
	loraQKV = iota
	loraAttnOut
	loraGateUp
	loraFFNOut
	loraGroups
)

// loraGroupOf is the group of each projection.
var loraGroupOf = [loraTargets]int{loraQKV, loraQKV, loraQKV, loraAttnOut, loraGateUp, loraGateUp, loraFFNOut}

// loraStack is one group's update in one layer, on the device: a is the A
// matrices of the projections the adapter changes stacked (len(outs)·rank ×
// in); nil when it changes none.
type loraStack struct {
	a    kernels.Weight
	outs []loraOut
}

// loraOut is one projection of a stack: b is scale·B (dim×rank), target the
// projection's index within its group (the order applyLoRA's outs come in).
type loraOut struct {
	b      kernels.Weight
	target int
	dim    int
}

// adapter is a LoRA adapter uploaded to a model's device.
type adapter struct {
	name string
	// path is its file or directory, absolute with symlinks followed: one
	// name is one adapter (adapter_load.go).
	path   string
	rank   int
	layers [][loraGroups]loraStack
}

// loadAdapter loads the adapter at path for m and uploads it to m's device.
func (m *Model) loadAdapter(name, path string) (*adapter, error) {
	l, err := weights.LoadLoRA(path, m.src)
	if err != nil {
		return nil, err
	}
	return m.uploadAdapter(name, path, l)
}

// uploadAdapter uploads l, loaded from path, to m's device.
func (m *Model) uploadAdapter(name, path string, l *weights.LoRA) (*adapter, error) {
	var err error
	a := &adapter{name: name, rank: l.Rank, layers: make([][loraGroups]loraStack, m.cfg.Layers)}
	first := [loraGroups]int{}
	for t := loraTargets - 1; t >= 0; t-- {
		first[loraGroupOf[t]] = t
	}
	for li := range a.layers {
		var stacked [loraGroups][]float32
		cols := [loraGroups]int{}
		for ti, t := range weights.LoRATargets {
			canon := weights.BlockName(li, t.Suffix)
			p, ok := l.Pairs[canon]
			if !ok {
				continue
			}
			g, w := loraGroupOf[ti], m.src.Matrices[canon]
			stacked[g] = append(stacked[g], p.A...)
			cols[g] = w.Cols
			b, err := uploadF32(m.dev, p.B, w.Rows, l.Rank, float32(l.Scale))
			if err != nil {
				return nil, fmt.Errorf("lora adapter %s: upload %s: %w", path, canon, err)
			}
			a.layers[li][g].outs = append(a.layers[li][g].outs, loraOut{b: b, target: ti - first[g], dim: w.Rows})
		}
		for g := range stacked {
			if len(stacked[g]) == 0 {
				continue
			}
			if a.layers[li][g].a, err = uploadF32(m.dev, stacked[g], len(stacked[g])/cols[g], cols[g], 1); err != nil {
				return nil, fmt.Errorf("lora adapter %s: upload layer %d: %w", path, li, err)
			}
		}
	}
	return a, nil
}

// uploadF32 uploads v·scale as a rows×cols F32 weight.
func uploadF32(dev kernels.Device, v []float32, rows, cols int, scale float32) (kernels.Weight, error) {
	data := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x*scale))
	}
	mat, err := kernels.NewMatrix(kernels.F32, rows, cols, data)
	if err != nil {
		return nil, err
	}
	return dev.UploadMatrix(mat)
}

// loraRows is one adapter's rows of a batch: rows in batch order, runs
// the stretches of consecutive ones.
type loraRows struct {
	a    *adapter
	rows []int32
	runs []loraRun
}

type loraRun struct{ first, n int }

// planLoRA groups b's rows by adapter into s.lora, reusing its slices.
func planLoRA(b *batch, s *scratch) {
	for i := range s.lora {
		s.lora[i].a, s.lora[i].rows, s.lora[i].runs = nil, s.lora[i].rows[:0], s.lora[i].runs[:0]
	}
	groups := 0
	for _, sg := range b.segs {
		if sg.adapter == nil || sg.n == 0 {
			continue
		}
		gi := 0
		for gi < groups && s.lora[gi].a != sg.adapter {
			gi++
		}
		if gi == groups {
			if groups == len(s.lora) {
				s.lora = append(s.lora, loraRows{})
			}
			s.lora[gi].a = sg.adapter
			groups++
		}
		g := &s.lora[gi]
		for r := sg.first; r < sg.first+sg.n; r++ {
			g.rows = append(g.rows, int32(r))
		}
		if k := len(g.runs) - 1; k >= 0 && g.runs[k].first+g.runs[k].n == sg.first {
			g.runs[k].n += sg.n
		} else {
			g.runs = append(g.runs, loraRun{sg.first, sg.n})
		}
	}
	s.lora = s.lora[:groups]
}

// applyLoRA adds the adapters' updates of group g of layer li to outs (the
// group's projections in order, each [T][its dim]), whose input was x
// ([T][inDim]). planLoRA has grouped the batch's rows.
func (m *Model) applyLoRA(s *scratch, li, g int, x kernels.Buf, inDim int, outs ...kernels.Buf) {
	for gi := range s.lora {
		rg := &s.lora[gi]
		st := &rg.a.layers[li][g]
		if st.a == nil {
			continue
		}
		n, r, k := len(rg.rows), rg.a.rank, len(st.outs)
		xs := x.Slice(rg.runs[0].first*inDim, n*inDim)
		if len(rg.runs) > 1 {
			xs = m.buf(&s.loraIn, n*inDim)
			m.dev.CopyRows(xs, x, inDim, rg.rows)
		}
		mid := m.buf(&s.loraMid, n*k*r)
		m.dev.MatMul(mid, xs, n, st.a)
		for j, o := range st.outs {
			mj := mid
			switch {
			case k > 1 && n == 1:
				mj = mid.Slice(j*r, r)
			case k > 1:
				s.loraIdx = s.loraIdx[:0]
				for i := range n {
					s.loraIdx = append(s.loraIdx, int32(i*k+j))
				}
				mj = m.buf(&s.loraMidOne, n*r)
				m.dev.CopyRows(mj, mid, r, s.loraIdx)
			}
			d := m.buf(&s.loraOut, n*o.dim)
			m.dev.MatMul(d, mj, n, o.b)
			out, at := outs[o.target], 0
			for _, run := range rg.runs {
				m.dev.Add(out.Slice(run.first*o.dim, run.n*o.dim), d.Slice(at*o.dim, run.n*o.dim))
				at += run.n
			}
		}
	}
}

// adapterNames lists adapters' names, sorted, for messages.
func adapterNames(as map[string]*adapter) string {
	if len(as) == 0 {
		return "none (configure them in native.models[].adapters, or give lora_path with native.adapter_root set)"
	}
	names := make([]string, 0, len(as))
	for n := range as {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
