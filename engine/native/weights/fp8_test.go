package weights

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/batchd/batchd/kernels"
)

// The float8_e4m3fn values at the format's landmarks: zero, the smallest
// subnormal and normal, one, the largest finite value, NaN, the sign.
func TestFP8E4M3Values(t *testing.T) {
	for _, c := range []struct {
		b    byte
		want float64
	}{
		{0x00, 0}, {0x01, math.Ldexp(1, -9)}, {0x07, 7 * math.Ldexp(1, -9)}, {0x08, math.Ldexp(1, -6)},
		{0x38, 1}, {0x3c, 1.5}, {0x40, 2}, {0x7e, 448}, {0xb8, -1}, {0xfe, -448},
	} {
		if got := FP8E4M3ToF32(c.b); float64(got) != c.want {
			t.Errorf("%#02x: %g, want %g", c.b, got, c.want)
		}
	}
	for _, b := range []byte{0x7f, 0xff} {
		if got := FP8E4M3ToF32(b); !math.IsNaN(float64(got)) {
			t.Errorf("%#02x: %g, want NaN", b, got)
		}
	}
	if got := FP8E4M3ToF32(0x80); got != 0 || !math.Signbit(float64(got)) {
		t.Errorf("0x80: %g, want -0", got)
	}
	// Every finite code is distinct and ordered within its sign.
	for b := 1; b < 0x7f; b++ {
		if !(FP8E4M3ToF32(byte(b)) > FP8E4M3ToF32(byte(b-1))) {
			t.Fatalf("%#02x is not above %#02x", b, b-1)
		}
	}
}

// fp8Tensors builds c's tensors as an FP8 checkpoint does: every linear
// weight F8_E4M3 with a float32 NAME_scale_inv per block of br×bc, the
// embeddings and norms BF16; want is each matrix's dequantized BF16 bytes.
func fp8Tensors(c tiny, br, bc int) (tensors map[string]SafeTensor, want map[string][]byte) {
	r := rand.New(rand.NewPCG(8, 4))
	tensors, want = map[string]SafeTensor{}, map[string][]byte{}
	for canon, shape := range c.tensorShapes() {
		name := hfNameOf(canon)
		if len(shape) == 1 || canon == nameTokenEmbd || canon == nameOutput {
			tensors[name] = SafeTensor{DType: "BF16", Shape: shape, Data: encBF16(values(product(shape), seedOf(canon)))}
			continue
		}
		rows, cols := shape[0], shape[1]
		sr, sc := (rows+br-1)/br, (cols+bc-1)/bc
		q := make([]byte, rows*cols)
		for i := range q {
			q[i] = byte(r.IntN(256))
			if q[i]&0x7f == 0x7f {
				q[i] = 0x42 // no NaN in the weights
			}
		}
		scales := make([]float32, sr*sc)
		for i := range scales {
			scales[i] = float32(r.Float64()*0.01 + 1e-4)
		}
		w := make([]byte, 2*rows*cols)
		for i, b := range q {
			s := scales[(i/cols/br)*sc+(i%cols)/bc]
			binary.LittleEndian.PutUint16(w[2*i:], kernels.F32ToBF16(FP8E4M3ToF32(b)*s))
		}
		tensors[name] = SafeTensor{DType: "F8_E4M3", Shape: shape, Data: q}
		tensors[name+"_scale_inv"] = SafeTensor{DType: "F32", Shape: []int{sr, sc}, Data: encF32(scales)}
		want[canon] = w
	}
	return tensors, want
}

// An FP8 checkpoint with block scales (blocks that do not divide the
// matrices, so the edge blocks are partial) loads as BF16 matrices equal to
// fp8 × scale_inv rounded once; the scales are consumed, not refused as
// unused tensors.
func TestHFFP8(t *testing.T) {
	c := tiny{arch: "qwen3", vocab: 48, dim: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffn: 72}
	fp8 := map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": []int{24, 20}}
	tensors, want := fp8Tensors(c, 24, 20)
	dir := writeHF(t, c, map[string]any{"quantization_config": fp8}, tensors)
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for canon, w := range want {
		x := m.Matrices[canon]
		if x == nil || x.Type != kernels.BF16 {
			t.Fatalf("%s: %+v, want a BF16 matrix", canon, x)
		}
		if string(x.Data) != string(w) {
			t.Fatalf("%s: the dequantized weights differ from fp8 × scale_inv", canon)
		}
	}
	if x := m.Matrices[nameTokenEmbd]; x.Type != kernels.BF16 {
		t.Errorf("embeddings: %v, want BF16 as stored", x.Type)
	}
	if !strings.Contains(m.WeightTypes(), "BF16") {
		t.Errorf("weight types %q", m.WeightTypes())
	}
}

// One scale for the whole matrix when weight_block_size is absent.
func TestHFFP8PerTensor(t *testing.T) {
	c := tiny{arch: "llama", vocab: 48, dim: 32, layers: 1, heads: 4, kvHeads: 2, headDim: 8, ffn: 64}
	tensors, want := fp8Tensors(c, 1<<20, 1<<20)
	for name, st := range tensors {
		if strings.HasSuffix(name, "_scale_inv") {
			st.Shape = []int{} // a scalar, as per-tensor checkpoints store it
			tensors[name] = st
		}
	}
	dir := writeHF(t, c, map[string]any{"quantization_config": map[string]any{"quant_method": "fp8"}}, tensors)
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for canon, w := range want {
		if string(m.Matrices[canon].Data) != string(w) {
			t.Fatalf("%s: differs", canon)
		}
	}
}

// What is not an FP8 checkpoint batchd reads is refused, naming it.
func TestHFFP8Rejects(t *testing.T) {
	c := tiny{arch: "llama", vocab: 48, dim: 32, layers: 1, heads: 4, kvHeads: 2, headDim: 8, ffn: 64}
	fp8 := map[string]any{"quant_method": "fp8", "weight_block_size": []int{16, 16}}
	q := "model.layers.0.self_attn.q_proj.weight"
	for _, tc := range []struct {
		name  string
		extra map[string]any
		edit  func(map[string]SafeTensor)
		want  []string
	}{
		{"another method", map[string]any{"quantization_config": map[string]any{"quant_method": "gptq"}}, nil, []string{`quant_method "gptq"`, "fp8"}},
		{"static activations", map[string]any{"quantization_config": map[string]any{"quant_method": "fp8", "activation_scheme": "static"}}, nil, []string{`activation_scheme "static"`}},
		{"e5m2", map[string]any{"quantization_config": map[string]any{"quant_method": "fp8", "fmt": "e5m2"}}, nil, []string{`fmt "e5m2"`}},
		{"bad block", map[string]any{"quantization_config": map[string]any{"quant_method": "fp8", "weight_block_size": []int{0, 16}}}, nil, []string{"weight_block_size"}},
		{"no scale", map[string]any{"quantization_config": fp8}, func(ts map[string]SafeTensor) { delete(ts, q+"_scale_inv") }, []string{q, "_scale_inv"}},
		{"scale shape", map[string]any{"quantization_config": fp8}, func(ts map[string]SafeTensor) {
			st := ts[q+"_scale_inv"]
			ts[q+"_scale_inv"] = SafeTensor{DType: "F32", Shape: []int{1, 4}, Data: st.Data[:16]}
		}, []string{q + "_scale_inv", "want [2 2]"}},
		{"stray scale", map[string]any{"quantization_config": fp8}, func(ts map[string]SafeTensor) {
			ts["model.norm.weight_scale_inv"] = SafeTensor{DType: "F32", Shape: []int{1, 1}, Data: encF32([]float32{1})}
		}, []string{"model.norm.weight_scale_inv", "without an F8_E4M3"}},
		{"no config", nil, nil, []string{"F8_E4M3", "quantization_config"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tensors, _ := fp8Tensors(c, 16, 16)
			if tc.edit != nil {
				tc.edit(tensors)
			}
			_, err := Load(writeHF(t, c, tc.extra, tensors))
			wantErr(t, err, tc.want...)
		})
	}
}
