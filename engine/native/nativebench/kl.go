package nativebench

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/native/gguf"
)

// KLText is the text KL divergences are measured over by default: plain
// prose of several registers, a few hundred tokens.
const KLText = `The library opens at nine in the morning and closes at six in the evening, except on Sundays.
Most visitors come for the reading room on the second floor, where the windows face the river and the light is good all day.
In 1887 the town council voted to build it with money left by a merchant who had never learned to read.
He wrote in his will that no child in the town should grow up as he had, and the council took him at his word.
Today the building holds about forty thousand books, a collection of maps, and a small museum of printing presses.
To compute the area of a circle, multiply the square of its radius by pi: a circle of radius 3 has an area of about 28.27.
The recipe calls for two cups of flour, one egg, a pinch of salt and enough milk to make a smooth batter.
Stir it well, let it rest for ten minutes, then pour a thin layer into a hot pan and turn it once.
"Where are you going?" she asked. "To the station," he said, "the last train leaves at a quarter past eleven."
The committee will meet again next week to review the budget, the schedule and the remaining questions.
`

// KLOptions configures KL divergence measurements.
type KLOptions struct {
	Device  string // native.device ("": auto)
	Threads int
	Kernels string
	Text    string // the text whose every position is compared ("": KLText)
	// MaxTokens caps the text's tokens (0: all of them).
	MaxTokens int
}

// KLRef is a reference model's next-token distribution at every position
// of a text, which other models of the same vocabulary are compared to.
type KLRef struct {
	Path   string
	Tokens []int32
	vocab  int
	logp   []float32 // [len(Tokens)][vocab] log-probabilities
	o      KLOptions
}

// KLResult compares a model's next-token distributions with a reference's
// over every position of the text: KL(P_ref || P_model) in nats.
type KLResult struct {
	Model         string  // the model's path
	Label         string  // its name in the table (the type; "": the file name)
	BitsPerWeight float64 // of all its tensors; 0 if unknown
	Positions     int
	Mean, P99     float64
	Max           float64
	// Top1 is the fraction of positions where both models' most likely
	// next token is the same.
	Top1 float64
}

// klChunk is the positions computed per forward pass.
const klChunk = 128

// NewKLRef runs the reference model at path over o's text and keeps its
// log-probabilities.
func NewKLRef(path string, o KLOptions) (*KLRef, error) {
	r := &KLRef{Path: path, o: o}
	text := o.Text
	if text == "" {
		text = KLText
	}
	// A byte-level or byte-fallback tokenizer makes at most a token of
	// each byte, and a few special ones.
	most := len(text) + 4
	if o.MaxTokens > 0 {
		most = min(most, o.MaxTokens)
	}
	err := forwardAll(path, o, most, func(p *native.ComputeProbe) ([]int32, error) {
		toks, err := p.Encode(text)
		if err != nil {
			return nil, err
		}
		if o.MaxTokens > 0 && len(toks) > o.MaxTokens {
			toks = toks[:o.MaxTokens]
		}
		if len(toks) < 2 {
			return nil, fmt.Errorf("bench: kl: the text is %d tokens, too few to compare", len(toks))
		}
		r.Tokens, r.vocab = toks, p.VocabSize()
		r.logp = make([]float32, 0, len(toks)*r.vocab)
		return toks, nil
	}, func(_ int, logits []float32) {
		r.logp = logSoftmax(r.logp, logits)
	})
	if err != nil {
		return nil, fmt.Errorf("reference %s: %w", path, err)
	}
	return r, nil
}

// Compare runs the model at path over the reference's tokens and measures
// how far its distributions are from the reference's.
func (r *KLRef) Compare(path string) (*KLResult, error) {
	kls := make([]float64, 0, len(r.Tokens))
	agree := 0
	var row []float32
	err := forwardAll(path, r.o, len(r.Tokens), func(p *native.ComputeProbe) ([]int32, error) {
		if p.VocabSize() != r.vocab {
			return nil, fmt.Errorf("its vocabulary has %d tokens, the reference's %d", p.VocabSize(), r.vocab)
		}
		return r.Tokens, nil
	}, func(pos int, logits []float32) {
		row = logSoftmax(row[:0], logits)
		ref := r.logp[pos*r.vocab : (pos+1)*r.vocab]
		kls = append(kls, klDiv(ref, row))
		if argmax(ref) == argmax(row) {
			agree++
		}
	})
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	res := &KLResult{Model: path, Positions: len(kls), Top1: float64(agree) / float64(len(kls))}
	for _, k := range kls {
		res.Mean += k
	}
	res.Mean /= float64(len(kls))
	slices.Sort(kls)
	res.Max = kls[len(kls)-1]
	res.P99 = kls[max(0, int(math.Ceil(0.99*float64(len(kls))))-1)]
	res.BitsPerWeight, err = fileBitsPerWeight(path)
	return res, err
}

// forwardAll loads the model at path with a KV pool of most positions,
// asks tokens for the tokens to run (it may check the probe), and calls
// row with each position's logits in order.
func forwardAll(path string, o KLOptions, most int, tokens func(*native.ComputeProbe) ([]int32, error), row func(pos int, logits []float32)) error {
	const bs = 32 // the engine's block size; checked below
	blocks := (most + bs - 1) / bs
	p, err := native.OpenComputeProbe(path, o.Device, o.Threads, o.Kernels, blocks)
	if err != nil {
		return err
	}
	defer p.Close()
	if p.BlockSize() != bs {
		return fmt.Errorf("bench: the engine's block size is %d, not %d", p.BlockSize(), bs)
	}
	toks, err := tokens(p)
	if err != nil {
		return err
	}
	if len(toks) > most {
		return fmt.Errorf("bench: kl: %d tokens, more than the %d the KV pool holds", len(toks), most)
	}
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32(i)
	}
	vocab := p.VocabSize()
	for start := 0; start < len(toks); start += klChunk {
		chunk := toks[start:min(start+klChunk, len(toks))]
		logits := p.Forward([]native.ProbeSeq{{Table: table, Start: start, Tokens: chunk, AllLogits: true}})
		for i := range chunk {
			row(start+i, logits[i*vocab:(i+1)*vocab])
		}
	}
	return nil
}

// logSoftmax appends the log-probabilities of logits to dst, computed in
// float64 and stored as float32: the same logits give the same bits.
func logSoftmax(dst, logits []float32) []float32 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(sum)
	for _, v := range logits {
		dst = append(dst, float32(float64(v)-lse))
	}
	return dst
}

// klDiv is KL(P || Q) of two log-probability rows, in nats; rounding's
// slightly negative sums count as 0.
func klDiv(p, q []float32) float64 {
	var kl float64
	for i, lp := range p {
		if lp > -80 { // a probability below e^-80 adds nothing a float64 sum keeps
			kl += math.Exp(float64(lp)) * (float64(lp) - float64(q[i]))
		}
	}
	return max(kl, 0)
}

// fileBitsPerWeight is the bits per value of a GGUF file's tensors (all of
// them, as llama.cpp counts); 0 for a file that is not GGUF.
func fileBitsPerWeight(path string) (float64, error) {
	if !strings.HasSuffix(path, ".gguf") {
		return 0, nil
	}
	f, err := gguf.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var bytes, n uint64
	for _, t := range f.Tensors() {
		bytes += uint64(len(t.Data))
		n += t.Elements()
	}
	if n == 0 {
		return 0, nil
	}
	return float64(8*bytes) / float64(n), nil
}

// KLTable is KL results against one reference, printed as a table.
type KLTable struct {
	Ref     string
	Kernels string
	Rows    []*KLResult
}

func (t *KLTable) String() string {
	var b strings.Builder
	positions := 0
	if len(t.Rows) > 0 {
		positions = t.Rows[0].Positions
	}
	fmt.Fprintf(&b, "KL(P_ref || P_model) of the next-token distribution over %d positions, in nats; reference %s\n", positions, t.Ref)
	fmt.Fprintf(&b, "%-24s %8s %11s %11s %11s %9s\n", "model", "bits/w", "mean KL", "p99 KL", "max KL", "top-1")
	for _, r := range t.Rows {
		label := r.Label
		if label == "" {
			label = r.Model[strings.LastIndexByte(r.Model, '/')+1:]
		}
		bpw := "-"
		if r.BitsPerWeight > 0 {
			bpw = fmt.Sprintf("%.2f", r.BitsPerWeight)
		}
		fmt.Fprintf(&b, "%-24s %8s %11.3e %11.3e %11.3e %8.2f%%\n", label, bpw, r.Mean, r.P99, r.Max, 100*r.Top1)
	}
	return b.String()
}
