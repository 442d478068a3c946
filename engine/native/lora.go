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
// out = x·Wᵀ, each run of consecutive rows with adapter a gets
// out += (x·Aᵀ)·(scale·B)ᵀ, two small F32 matmuls on the device. A batch
// whose segments have no adapter does no extra work.

// The projections an adapter may change, as indices into adapter.layers'
// arrays (the order of weights.LoRATargets).
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

// loraPair is one projection's update on the device: a is A (rank×in), b
// is scale·B (out×rank); nil when the adapter leaves it alone.
type loraPair struct {
	a, b kernels.Weight
}

// adapter is a LoRA adapter uploaded to a model's device.
type adapter struct {
	name string
	// path is its file or directory, absolute with symlinks followed: one
	// name is one adapter (adapter_load.go).
	path   string
	rank   int
	layers [][loraTargets]loraPair
}

// loadAdapter loads the adapter at path for m and uploads it to m's device.
func (m *Model) loadAdapter(name, path string) (*adapter, error) {
	l, err := weights.LoadLoRA(path, m.src)
	if err != nil {
		return nil, err
	}
	a := &adapter{name: name, rank: l.Rank, layers: make([][loraTargets]loraPair, m.cfg.Layers)}
	for li := range a.layers {
		for ti, t := range weights.LoRATargets {
			canon := weights.BlockName(li, t.Suffix)
			p, ok := l.Pairs[canon]
			if !ok {
				continue
			}
			w := m.src.Matrices[canon]
			if a.layers[li][ti].a, err = uploadF32(m.dev, p.A, l.Rank, w.Cols, 1); err != nil {
				return nil, fmt.Errorf("lora adapter %s: upload %s: %w", path, canon, err)
			}
			if a.layers[li][ti].b, err = uploadF32(m.dev, p.B, w.Rows, l.Rank, float32(l.Scale)); err != nil {
				return nil, fmt.Errorf("lora adapter %s: upload %s: %w", path, canon, err)
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

// applyLoRA adds the adapters' updates of projection t of layer li to out
// ([T][outDim]), whose input was x ([T][inDim]).
func (m *Model) applyLoRA(out, x kernels.Buf, outDim, inDim, li, t int, b *batch, s *scratch) {
	for i := 0; i < len(b.segs); {
		a, first, n := b.segs[i].adapter, b.segs[i].first, b.segs[i].n
		for i++; i < len(b.segs) && b.segs[i].adapter == a && b.segs[i].first == first+n; i++ {
			n += b.segs[i].n
		}
		if a == nil || a.layers[li][t].a == nil {
			continue
		}
		p := a.layers[li][t]
		mid := m.buf(&s.loraMid, n*a.rank)
		m.dev.MatMul(mid, x.Slice(first*inDim, n*inDim), n, p.a)
		d := m.buf(&s.loraOut, n*outDim)
		m.dev.MatMul(d, mid, n, p.b)
		m.dev.Add(out.Slice(first*outDim, n*outDim), d)
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
