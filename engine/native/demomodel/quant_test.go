package demomodel

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native/gguf"
	"github.com/batchd/batchd/kernels"
)

// kShape has rows of whole 256-value blocks, so K-quants need no fallback.
var kShape = Shape{Name: "k-test", Dim: 256, Layers: 8, Heads: 4, KVHeads: 2, FFNDim: 512, Context: 256}

// kSmall is kShape with the two layers the write tests need (and llama's
// separate output matrix), quick to quantize.
var kSmall = Shape{Name: "k-small", Arch: "llama", Dim: 256, Layers: 2, Heads: 4, KVHeads: 2, FFNDim: 512, Context: 256}

// Every kernels weight type parses by its name in any case, as do the
// mixtures; an unknown name's error lists what is accepted.
func TestParseDType(t *testing.T) {
	for _, dt := range singleTypes {
		for _, s := range []string{dt.String(), strings.ToLower(dt.String())} {
			q, err := ParseDType(s)
			if err != nil || q.Base != dt || q.mix != nil || q.Name != dt.String() {
				t.Errorf("ParseDType(%q) = %+v, %v", s, q, err)
			}
		}
	}
	if q, err := ParseDType("q8"); err != nil || q.Base != kernels.Q8_0 {
		t.Errorf("q8: %+v, %v", q, err)
	}
	for _, s := range []string{"q4_k_m", "Q4_K_S", "q5_K_m", "Q5_K_S", "q3_k_s", "Q3_K_M", "q3_k_l"} {
		q, err := ParseDType(s)
		if err != nil || q.mix == nil || q.Name != strings.ToUpper(s) {
			t.Errorf("ParseDType(%q) = %+v, %v", s, q, err)
		}
	}
	_, err := ParseDType("q4_k_x")
	if err == nil || !strings.Contains(err.Error(), "q4_k_x") || !strings.Contains(err.Error(), "iq4_xs") || !strings.Contains(err.Error(), "q4_k_m") {
		t.Errorf("unknown type: %v", err)
	}
}

// types maps Plan's tensors by name.
func types(t *testing.T, shape Shape, name string) map[string]kernels.DType {
	t.Helper()
	q, err := ParseDType(name)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Plan(shape, q)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]kernels.DType{}
	for _, p := range plan {
		m[p.Name] = p.Type
	}
	return m
}

// Q4_K_M chooses types as llama.cpp does: the tied embeddings Q6_K,
// attn_v and ffn_down Q6_K in llama.cpp's use_more_bits layers, the rest
// Q4_K, norms and biases F32.
func TestPlanQ4KM(t *testing.T) {
	m := types(t, kShape, "q4_k_m")
	if m["token_embd.weight"] != kernels.Q6_K {
		t.Errorf("tied token_embd: %v", m["token_embd.weight"])
	}
	more := map[int]bool{0: true, 3: true, 6: true, 7: true} // of 8 layers
	for l := range kShape.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		want := kernels.Q4_K
		if more[l] {
			want = kernels.Q6_K
		}
		for _, n := range []string{"attn_v.weight", "ffn_down.weight"} {
			if m[p+n] != want {
				t.Errorf("%s%s: %v, want %v", p, n, m[p+n], want)
			}
		}
		for _, n := range []string{"attn_q.weight", "attn_k.weight", "attn_output.weight", "ffn_gate.weight", "ffn_up.weight"} {
			if m[p+n] != kernels.Q4_K {
				t.Errorf("%s%s: %v", p, n, m[p+n])
			}
		}
		for _, n := range []string{"attn_norm.weight", "attn_q.bias"} {
			if m[p+n] != kernels.F32 {
				t.Errorf("%s%s: %v", p, n, m[p+n])
			}
		}
	}
	// Untied (llama): the embeddings take the base type, the output Q6_K.
	ll := kShape
	ll.Arch = "llama"
	m = types(t, ll, "Q4_K_M")
	if m["token_embd.weight"] != kernels.Q4_K || m["output.weight"] != kernels.Q6_K {
		t.Errorf("llama: token_embd %v, output %v", m["token_embd.weight"], m["output.weight"])
	}
	// Q4_K_S: attn_v Q5_K in the first 4 layers, ffn_down in the first eighth.
	m = types(t, kShape, "q4_k_s")
	if m["blk.3.attn_v.weight"] != kernels.Q5_K || m["blk.4.attn_v.weight"] != kernels.Q4_K ||
		m["blk.0.ffn_down.weight"] != kernels.Q5_K || m["blk.1.ffn_down.weight"] != kernels.Q4_K {
		t.Errorf("q4_k_s: %v", m)
	}
}

// Rows that are not whole blocks fall back as in llama.cpp; a single type
// is used pure, the output included.
func TestPlanFallback(t *testing.T) {
	tiny := Shapes["tiny"] // dim 128, ffn 352: no 256-value rows
	for name, want := range map[string]map[string]kernels.DType{
		"q4_k":   {"token_embd.weight": kernels.Q5_0, "blk.0.attn_q.weight": kernels.Q5_0, "blk.0.ffn_down.weight": kernels.Q5_0},
		"q5_k":   {"blk.0.attn_q.weight": kernels.Q5_1},
		"q6_k":   {"blk.0.attn_q.weight": kernels.Q8_0},
		"q2_k":   {"blk.0.attn_q.weight": kernels.Q4_0},
		"q3_k":   {"blk.0.attn_q.weight": kernels.Q4_0},
		"iq4_xs": {"blk.0.attn_q.weight": kernels.IQ4_NL},
		"q4_0":   {"token_embd.weight": kernels.Q4_0, "blk.0.ffn_down.weight": kernels.Q4_0},
		// A mixture's output layer with rows not whole base blocks: Q8_0.
		"q4_k_m": {"token_embd.weight": kernels.Q8_0, "blk.2.attn_v.weight": kernels.Q8_0, "blk.0.attn_v.weight": kernels.Q5_0},
	} {
		m := types(t, tiny, name)
		for tensor, w := range want {
			if m[tensor] != w {
				t.Errorf("%s: %s is %v, want %v", name, tensor, m[tensor], w)
			}
		}
	}
	m := types(t, kShape, "q4_k")
	for name, typ := range m {
		if typ != kernels.Q4_K && typ != kernels.F32 {
			t.Errorf("pure q4_k: %s is %v", name, typ)
		}
	}
	odd := Shape{Name: "odd", Dim: 128, Layers: 1, Heads: 4, KVHeads: 2, FFNDim: 200, Context: 64}
	if _, err := Plan(odd, Single(kernels.Q4_0)); err == nil || !strings.Contains(err.Error(), "ffn_down") {
		t.Errorf("rows of 200 values in Q4_0: %v", err)
	}
	if m := types(t, odd, "q4_k"); m["blk.0.ffn_down.weight"] != kernels.F16 {
		t.Errorf("rows of 200 values in Q4_K: %v, want F16", m["blk.0.ffn_down.weight"])
	}
}

// quantizable says whether kernels has t's quantizer, skipping the test
// when it does not.
func quantizable(t *testing.T, q Quant) {
	t.Helper()
	plan, err := Plan(kSmall, q)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plan {
		if p.Type.BlockSize() == 0 {
			t.Skipf("kernels has no %v quantizer registered yet (quant_legacy.go / quant_k.go)", p.Type)
		}
	}
}

// A model written in each type and mixture is a valid GGUF whose tensors
// have Plan's types and sizes.
func TestWriteTypes(t *testing.T) {
	for _, name := range TypeNames() {
		t.Run(name, func(t *testing.T) {
			q, _ := ParseDType(name)
			quantizable(t, q)
			path := filepath.Join(t.TempDir(), "m.gguf")
			if err := WriteQuantFile(path, kSmall, q, 2); err != nil {
				t.Fatal(err)
			}
			plan, _ := Plan(kSmall, q)
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got := f.Tensors()
			if len(got) != len(plan) {
				t.Fatalf("%d tensors, want %d", len(got), len(plan))
			}
			for i, p := range plan {
				g := got[i]
				want, _ := GGMLType(p.Type)
				if g.Name != p.Name || g.Type != want || int64(len(g.Data)) != p.Bytes() || g.Elements() != uint64(p.Rows*p.Cols) {
					t.Errorf("tensor %d: %s %v %d bytes, want %s %v %d bytes", i, g.Name, g.Type, len(g.Data), p.Name, want, p.Bytes())
				}
			}
			if bpw := BitsPerWeight(plan); bpw <= 0 || bpw > 32.01 {
				t.Errorf("%.2f bits per weight", bpw)
			}
		})
	}
}

// A dequantized model holds in F32 exactly the decoded values of the
// model in its type: the same weights, rounded the same way.
func TestWriteDequantized(t *testing.T) {
	for _, name := range []string{"q8_0", "q4_k_m"} {
		t.Run(name, func(t *testing.T) {
			q, _ := ParseDType(name)
			quantizable(t, q)
			dir := t.TempDir()
			typed, deq := filepath.Join(dir, "typed.gguf"), filepath.Join(dir, "deq.gguf")
			if err := WriteQuantFile(typed, kSmall, q, 4); err != nil {
				t.Fatal(err)
			}
			q.Dequantized = true
			if err := WriteQuantFile(deq, kSmall, q, 4); err != nil {
				t.Fatal(err)
			}
			a, err := gguf.Open(typed)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := gguf.Open(deq)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			for _, ta := range a.Tensors() {
				tb, _ := b.Tensor(ta.Name)
				if tb.Type != gguf.F32 {
					t.Fatalf("%s: %v in the dequantized model", ta.Name, tb.Type)
				}
				dt := kernels.F32
				for k, g := range ggmlTypes {
					if g == ta.Type {
						dt = k
					}
				}
				x := make([]float32, ta.Elements())
				if err := kernels.Dequantize(dt, x, ta.Data); err != nil {
					t.Fatal(err)
				}
				want, _, _ := Encode(x, kernels.F32)
				if !bytes.Equal(want, tb.Data) {
					t.Fatalf("%s: the dequantized model's values differ from the %v model's", ta.Name, ta.Type)
				}
			}
		})
	}
}

// The F32, F16, BF16 and Q8_0 models are the bytes they always were, the
// matrices drawn in parallel chunks included.
func TestWritePinned(t *testing.T) {
	big := Shape{Name: "bigish", Arch: "llama", Dim: 1024, Layers: 1, Heads: 8, KVHeads: 2, FFNDim: 1024, Context: 512}
	for _, c := range []struct {
		shape Shape
		dt    kernels.DType
		sum   string
	}{
		{Shapes["tiny"], kernels.F32, "eaa03a641c51215bc0b641ae36350fbde532605d5ca0762dd47732b6decaab22"},
		{Shapes["tiny"], kernels.F16, "1c409f1d487320524914b0c89d2dc1b3bbca91b4357a06d91379e40ff54ad8a5"},
		{Shapes["tiny"], kernels.BF16, "01528e76f93a78dc783fc0eb0087d8e4451ad9a52bc40f092f6c062185d8cb1f"},
		{Shapes["tiny"], kernels.Q8_0, "70dbc88bdf3606622561509dcae58eceaa523e8f06d69a2111fcf35ddb4e6352"},
		{Shapes["tiny-qwen3"], kernels.Q8_0, "a946b12d279a223386b453d688febd904862adc299cb6707f996ecec20147bcd"},
		{big, kernels.F32, "e874df0bf2616ef5c10da5b1b4886135ec86811c729bd18bc631de016b5a2903"},
		{big, kernels.Q8_0, "8553c66300b8a9cee25742e79db77aba0b27505423c3020fb867b85e7bd0ceba"},
	} {
		var b bytes.Buffer
		if err := Write(&b, c.shape, c.dt, 3); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%x", sha256.Sum256(b.Bytes())); got != c.sum {
			t.Errorf("%s %v: sha256 %s, want %s", c.shape.Name, c.dt, got, c.sum)
		}
	}
}

// A matrix drawn in parallel chunks holds, in a block type, the values of
// the same draw in F32 rounded block by block: every chunk lands at its
// whole blocks' offset.
func TestRandomParallelBlocks(t *testing.T) {
	const n = 3<<16 + 512 // three chunks and part of a fourth
	ref, _, err := randomParallel(n, kernels.F32, 9, false)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, n)
	if err := kernels.Dequantize(kernels.F32, want, ref); err != nil {
		t.Fatal(err)
	}
	for _, dt := range []kernels.DType{kernels.Q8_0, kernels.Q4_K, kernels.Q6_K, kernels.Q4_0} {
		if dt.BlockSize() == 0 {
			t.Logf("kernels has no %v quantizer registered yet", dt)
			continue
		}
		b, g, err := randomParallel(n, dt, 9, false)
		if err != nil {
			t.Fatal(err)
		}
		if wg, _ := GGMLType(dt); g != wg || uint64(len(b)) != n/g.BlockSize()*g.TypeSize() {
			t.Fatalf("%v: type %v, %d bytes", dt, g, len(b))
		}
		got := make([]float32, n)
		if err := kernels.Dequantize(dt, got, b); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			// 0.02·N(0,1) within 4-bit rounding: far below 0.02.
			if d := got[i] - want[i]; d > 0.012 || d < -0.012 {
				t.Fatalf("%v: value %d is %g, drawn %g", dt, i, got[i], want[i])
			}
		}
		deq, g, err := randomParallel(n, dt, 9, true)
		if err != nil || g != gguf.F32 {
			t.Fatalf("%v dequantized: %v %v", dt, g, err)
		}
		if enc, _, _ := Encode(got, kernels.F32); !bytes.Equal(enc, deq) {
			t.Errorf("%v dequantized: not the decoded %v values", dt, dt)
		}
	}
}
