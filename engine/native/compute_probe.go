package native

import (
	"fmt"

	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// ComputeProbe runs a model's forward pass alone, over sequences the
// caller lays out by hand: no scheduler, no sampler. It is what
// engine/native/nativebench measures the engine's compute with.
type ComputeProbe struct {
	w   *weights.Model
	cpu *kernels.CPU
	m   *Model
	kv  *kvStore
	s   scratch
	// adapters are the LoRA adapters LoadAdapter loaded, by name.
	adapters map[string]*adapter
}

// ProbeSeq is one sequence of a probe's forward pass: Tokens at positions
// Start.., whose K/V live in the blocks of Table (BlockSize positions
// each, numbered below the probe's block count).
type ProbeSeq struct {
	Table  []int32
	Start  int
	Tokens []int32
	// Adapter names a LoRA adapter LoadAdapter loaded; "": the base model.
	Adapter string
	// AllLogits computes logits for every token, as a step verifying
	// drafts does (otherwise only for the last, as a decode step).
	AllLogits bool
}

// OpenComputeProbe loads the model at path on device (native.device's
// names; "" is the default, auto) with a KV pool of blocks blocks; the CPU
// device runs threads threads of kernelsName (auto, amx, avx512, avx2, generic).
func OpenComputeProbe(path, device string, threads int, kernelsName string, blocks int) (*ComputeProbe, error) {
	w, err := weights.Load(path)
	if err != nil {
		return nil, err
	}
	cpu, err := kernels.NewCPUBackend(threads, kernelsName)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("kernels: %w", err)
	}
	if device == "" {
		device = defaultDevice
	}
	dev, err := openDevice(device, cpu, nil)
	if err != nil {
		cpu.Close()
		w.Close()
		return nil, err
	}
	m, err := NewModelOn(w, dev)
	if err != nil {
		dev.Close()
		cpu.Close()
		w.Close()
		return nil, err
	}
	return &ComputeProbe{w: w, cpu: cpu, m: m, kv: m.newKVStore(kvBlockSize, blocks), adapters: map[string]*adapter{}}, nil
}

// LoadAdapter loads the LoRA adapter at path (a PEFT directory or a
// .safetensors file) as name, for ProbeSeq.Adapter.
func (p *ComputeProbe) LoadAdapter(name, path string) error {
	a, err := p.m.loadAdapter(name, path)
	if err != nil {
		return err
	}
	p.adapters[name] = a
	return nil
}

// Kernels names the device: the CPU code path and threads, or the GPU.
func (p *ComputeProbe) Kernels() string {
	if _, ok := p.m.dev.(*kernels.CPUDevice); ok {
		return p.cpu.Name()
	}
	return p.m.dev.Name()
}

// VocabSize is the model's vocabulary size.
func (p *ComputeProbe) VocabSize() int { return p.m.cfg.VocabSize }

// Encode tokenizes text with the model's tokenizer, adding the special
// tokens its vocabulary asks for (a BOS) and reading none in the text.
func (p *ComputeProbe) Encode(text string) ([]int32, error) {
	tok, err := newTokenizer(p.w.Tokenizer, p.w.Config.EOSIDs)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return tok.Encode(text, true, false), nil
}

// BlockSize is the positions per KV block.
func (p *ComputeProbe) BlockSize() int { return kvBlockSize }

// WeightBytes is the bytes of weights read per token (the embedding table
// only when it is also the output matrix; of a mixture of experts, the
// ExpertsUsed experts a token runs, at their average size).
func (p *ComputeProbe) WeightBytes() int64 {
	var n int64
	for _, x := range p.w.Matrices {
		if x != p.w.Matrices["token_embd.weight"] || p.m.cfg.TiedEmbeddings {
			n += int64(len(x.Data))
		}
	}
	for _, exps := range p.w.Experts {
		var all int64
		for _, x := range exps {
			all += int64(len(x.Data))
		}
		n += all * int64(p.m.cfg.ExpertsUsed) / int64(len(exps))
	}
	return n
}

// Forward runs one forward pass over seqs and returns the logits of each
// one's last token (of every token with AllLogits), row after row, in a
// slice the next call reuses. It panics on an adapter LoadAdapter did not
// load.
func (p *ComputeProbe) Forward(seqs []ProbeSeq) []float32 {
	b := batch{kv: p.kv}
	for _, s := range seqs {
		f := len(b.tokens)
		b.tokens = append(b.tokens, s.Tokens...)
		for i := range s.Tokens {
			b.pos = append(b.pos, int32(s.Start+i))
		}
		var a *adapter
		if s.Adapter != "" {
			if a = p.adapters[s.Adapter]; a == nil {
				panic(fmt.Sprintf("native: probe: no adapter %q (load it with LoadAdapter)", s.Adapter))
			}
			b.lora = true
		}
		b.segs = append(b.segs, segment{blocks: s.Table, first: f, n: len(s.Tokens), start: s.Start, adapter: a})
		if s.AllLogits {
			for i := range s.Tokens {
				b.logitRows = append(b.logitRows, f+i)
			}
		} else {
			b.logitRows = append(b.logitRows, f+len(s.Tokens)-1)
		}
	}
	return p.m.forward(&b, &p.s)
}

// Close releases the model and the CPU.
func (p *ComputeProbe) Close() {
	p.kv.free()
	p.m.dev.Close()
	p.cpu.Close()
	p.w.Close()
}
