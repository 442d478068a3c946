package demomodel

import (
	"fmt"
	"sort"
	"strings"

	"github.com/batchd/batchd/engine/native/gguf"
	"github.com/batchd/batchd/kernels"
)

// Quant is how a demo model stores its weight matrices: one type for every
// matrix (as llama.cpp's quantize --pure), or one of llama.cpp's mixtures
// (Q4_K_M …), which give some matrices more bits. Either way a matrix whose
// rows are not whole blocks of its type falls back to a type whose are, as
// llama.cpp does. Norm vectors and biases are always F32.
type Quant struct {
	// Name is the canonical name: a type's ("Q4_K") or a mixture's
	// ("Q4_K_M").
	Name string
	// Base is the type of the matrices the mixture does not single out.
	Base kernels.DType
	mix  *mixture // nil: Base everywhere
	// Dequantized writes every matrix as F32 holding its quantized values
	// decoded: the same model's weight rounding error alone, loadable by
	// an engine that cannot run the type itself.
	Dequantized bool
	// ExpertType, when set, stores the experts' matrices of a mixture of
	// experts in that type whatever the rest takes (gpt-oss's MXFP4
	// experts beside F16 or BF16 attention).
	ExpertType kernels.DType
}

// Single is Quant of one type for every matrix.
func Single(t kernels.DType) Quant { return Quant{Name: t.String(), Base: t} }

func (q Quant) String() string {
	if q.Dequantized {
		return q.Name + " (dequantized to F32)"
	}
	return q.Name
}

// role is what a weight matrix does, which is what a mixture chooses its
// type by.
type role uint8

const (
	roleEmbd role = iota
	roleOutput
	roleAttnQ
	roleAttnK
	roleAttnV
	roleAttnOut
	roleFFNGate
	roleFFNUp
	roleFFNDown
)

// mixture is one of llama.cpp's quantization mixtures (its "ftypes"), as
// its llama_tensor_get_type chooses types for a dense model without an
// importance matrix: the output matrix (and the token embeddings when they
// are tied to it) Q6_K, some layers' attn_v and ffn_down more bits.
type mixture struct {
	base kernels.DType
	// attnV, ffnDown and attnOut give layer l of n its type; 0 keeps base.
	attnV, ffnDown, attnOut func(l, n int) kernels.DType
}

// moreBits is llama.cpp's use_more_bits: the first and last eighth of the
// layers and every third one between.
func moreBits(l, n int) bool { return l < n/8 || l >= 7*n/8 || (l-n/8)%3 == 2 }

func when(cond bool, t kernels.DType) kernels.DType {
	if cond {
		return t
	}
	return 0
}

// mixtures are the mixtures by name. Q6_K as a mixture is the single type
// (its output is Q6_K anyway) and is not listed.
var mixtures = map[string]*mixture{
	"Q3_K_S": {base: kernels.Q3_K},
	"Q3_K_M": {
		base:    kernels.Q3_K,
		attnV:   func(l, n int) kernels.DType { return pick(l < 2, kernels.Q5_K, kernels.Q4_K) },
		ffnDown: func(l, n int) kernels.DType { return pick(l < n/16, kernels.Q5_K, kernels.Q4_K) },
		attnOut: func(int, int) kernels.DType { return kernels.Q4_K },
	},
	"Q3_K_L": {
		base:    kernels.Q3_K,
		attnV:   func(int, int) kernels.DType { return kernels.Q5_K },
		ffnDown: func(int, int) kernels.DType { return kernels.Q5_K },
		attnOut: func(int, int) kernels.DType { return kernels.Q5_K },
	},
	"Q4_K_S": {
		base:    kernels.Q4_K,
		attnV:   func(l, n int) kernels.DType { return when(l < 4, kernels.Q5_K) },
		ffnDown: func(l, n int) kernels.DType { return when(l < n/8, kernels.Q5_K) },
	},
	"Q4_K_M": {
		base:    kernels.Q4_K,
		attnV:   func(l, n int) kernels.DType { return when(moreBits(l, n), kernels.Q6_K) },
		ffnDown: func(l, n int) kernels.DType { return when(moreBits(l, n), kernels.Q6_K) },
	},
	"Q5_K_S": {base: kernels.Q5_K},
	"Q5_K_M": {
		base:    kernels.Q5_K,
		attnV:   func(l, n int) kernels.DType { return when(moreBits(l, n), kernels.Q6_K) },
		ffnDown: func(l, n int) kernels.DType { return when(moreBits(l, n), kernels.Q6_K) },
	},
}

func pick(cond bool, a, b kernels.DType) kernels.DType {
	if cond {
		return a
	}
	return b
}

// singleTypes are the types a demo model can be written in whole.
var singleTypes = []kernels.DType{kernels.F32, kernels.F16, kernels.BF16, kernels.Q8_0,
	kernels.Q4_0, kernels.Q4_1, kernels.Q5_0, kernels.Q5_1, kernels.Q2_K, kernels.Q3_K, kernels.Q4_K,
	kernels.Q5_K, kernels.Q6_K, kernels.IQ4_NL, kernels.IQ4_XS, kernels.MXFP4}

// ggmlTypes are the GGUF tensor types of singleTypes.
var ggmlTypes = map[kernels.DType]gguf.GGMLType{
	kernels.F32: gguf.F32, kernels.F16: gguf.F16, kernels.BF16: gguf.BF16, kernels.Q8_0: gguf.Q8_0,
	kernels.Q4_0: gguf.Q4_0, kernels.Q4_1: gguf.Q4_1, kernels.Q5_0: gguf.Q5_0, kernels.Q5_1: gguf.Q5_1,
	kernels.Q2_K: gguf.Q2_K, kernels.Q3_K: gguf.Q3_K, kernels.Q4_K: gguf.Q4_K, kernels.Q5_K: gguf.Q5_K,
	kernels.Q6_K: gguf.Q6_K, kernels.IQ4_NL: gguf.IQ4_NL, kernels.IQ4_XS: gguf.IQ4_XS, kernels.MXFP4: gguf.MXFP4,
}

// GGMLType is the GGUF tensor type of t, false for a type demo models do
// not write.
func GGMLType(t kernels.DType) (gguf.GGMLType, bool) {
	g, ok := ggmlTypes[t]
	return g, ok
}

// TypeNames lists the names ParseDType accepts, lower case: the single
// types, then the mixtures.
func TypeNames() []string {
	var out []string
	for _, t := range singleTypes {
		out = append(out, strings.ToLower(t.String()))
	}
	var mixes []string
	for name := range mixtures {
		mixes = append(mixes, strings.ToLower(name))
	}
	sort.Strings(mixes)
	return append(out, mixes...)
}

// ParseDType reads a weight type or mixture name, in any case: f32, f16,
// bf16, q8_0 (or q8), every other block type of the kernels (q4_0 …
// mxfp4) and llama.cpp's mixtures (q3_k_s … q5_k_m).
func ParseDType(s string) (Quant, error) {
	if strings.EqualFold(s, "q8") {
		return Single(kernels.Q8_0), nil
	}
	if m, ok := mixtures[strings.ToUpper(s)]; ok {
		return Quant{Name: strings.ToUpper(s), Base: m.base, mix: m}, nil
	}
	if t, err := kernels.ParseDType(s); err == nil {
		if _, ok := ggmlTypes[t]; ok {
			return Single(t), nil
		}
	}
	return Quant{}, fmt.Errorf("unknown weight type %q (%s)", s, strings.Join(TypeNames(), ", "))
}

// blockSize is t's values per block from the GGUF geometry, which does not
// depend on a quantizer being registered.
func blockSize(t kernels.DType) int { return int(ggmlTypes[t].BlockSize()) }

// rowFallback is the type llama.cpp stores a matrix of cols columns in when
// they are not whole blocks of t: a 32-value type of about as many bits, F16
// when even that does not fit. 32-value types have no fallback.
func rowFallback(t kernels.DType, cols int) (kernels.DType, error) {
	if cols%blockSize(t) == 0 {
		return t, nil
	}
	var f kernels.DType
	switch t {
	case kernels.Q2_K, kernels.Q3_K:
		f = kernels.Q4_0
	case kernels.Q4_K:
		f = kernels.Q5_0
	case kernels.Q5_K:
		f = kernels.Q5_1
	case kernels.Q6_K:
		f = kernels.Q8_0
	case kernels.IQ4_XS:
		f = kernels.IQ4_NL
	default:
		return 0, fmt.Errorf("rows of %d values are not whole %v blocks of %d", cols, t, blockSize(t))
	}
	if cols%blockSize(f) != 0 {
		return kernels.F16, nil
	}
	return f, nil
}

// typeOf is the type of a matrix of cols columns with role r in layer l of
// n (tied: the token embeddings are also the output matrix).
func (q Quant) typeOf(r role, l, n, cols int, tied bool) (kernels.DType, error) {
	t := q.Base
	if m := q.mix; m != nil {
		var rule func(l, n int) kernels.DType
		switch {
		case r == roleOutput || r == roleEmbd && tied:
			// llama.cpp keeps the output layer at Q6_K in every K mixture,
			// and at Q8_0 when its rows are not whole blocks of the base.
			if cols%blockSize(m.base) != 0 {
				return kernels.Q8_0, nil
			}
			t = kernels.Q6_K
		case r == roleAttnV:
			rule = m.attnV
		case r == roleFFNDown:
			rule = m.ffnDown
		case r == roleAttnOut:
			rule = m.attnOut
		}
		if rule != nil {
			if x := rule(l, n); x != 0 {
				t = x
			}
		}
	}
	return rowFallback(t, cols)
}

// Tensor is one tensor of a demo model as Plan lays it out.
type Tensor struct {
	Name string
	// Type is the stored type: a matrix's by the Quant, F32 for vectors.
	Type       kernels.DType
	Rows, Cols int // a vector has one row; a tensor of experts all their rows
	// Experts > 0: the tensor is Experts matrices of Rows/Experts × Cols,
	// stored as one 3-D tensor (a mixture of experts' FFN).
	Experts int
}

// Bytes is the tensor's size in the file.
func (t Tensor) Bytes() int64 {
	g := ggmlTypes[t.Type]
	return int64(t.Rows) * int64(t.Cols) / int64(g.BlockSize()) * int64(g.TypeSize())
}

// BitsPerWeight is the bits per value of a model's tensors, all of them
// (norms included, as llama.cpp counts).
func BitsPerWeight(tensors []Tensor) float64 {
	var bytes, n int64
	for _, t := range tensors {
		bytes += t.Bytes()
		n += int64(t.Rows) * int64(t.Cols)
	}
	if n == 0 {
		return 0
	}
	return float64(8*bytes) / float64(n)
}
