package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/batchd/batchd/kernels"
)

// FP8 checkpoints (Qwen's and DeepSeek's "-FP8" releases): linear weights
// stored as float8_e4m3fn (safetensors dtype F8_E4M3), each with a float32
// (or BF16) tensor NAME_scale_inv beside it holding one scale per block of
// quantization_config.weight_block_size values (128×128 in every release
// so far; a single scale when the block is the whole matrix). The value is
// fp8 × scale_inv. They are dequantized to BF16 at load, on the heap: a
// BF16 copy twice the FP8 file's size, which every device then runs as it
// runs a BF16 checkpoint (the CPU kernels, the CUDA device's BF16 GEMMs).

// hfQuantConfig is config.json's quantization_config.
type hfQuantConfig struct {
	QuantMethod      string `json:"quant_method"`
	Fmt              string `json:"fmt"`
	ActivationScheme string `json:"activation_scheme"`
	WeightBlockSize  []int  `json:"weight_block_size"`
}

// fp8Blocks reads quantization_config: nil when there is none, the
// weight block (rows, cols) for quant_method fp8, else an error naming
// what is not read.
// quantMethod is quantization_config's quant_method, "" when there is none.
func quantMethod(raw json.RawMessage) string {
	var q hfQuantConfig
	if json.Unmarshal(raw, &q) != nil {
		return ""
	}
	return q.QuantMethod
}

func fp8Blocks(raw json.RawMessage) (*[2]int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var q hfQuantConfig
	if err := json.Unmarshal(raw, &q); err != nil {
		return nil, invalid("quantization_config: %v", err)
	}
	if q.QuantMethod != "fp8" {
		return nil, unsupported("quantization_config.quant_method %q is not supported (batchd reads fp8 checkpoints with block scales, and unquantized F32/F16/BF16 ones)", q.QuantMethod)
	}
	if q.Fmt != "" && q.Fmt != "e4m3" {
		return nil, unsupported("quantization_config.fmt %q is not supported (want e4m3)", q.Fmt)
	}
	if q.ActivationScheme != "" && q.ActivationScheme != "dynamic" {
		// Static activation scales are per-tensor input scales the
		// dequantized model has no use for, but a checkpoint that needs
		// them was calibrated for FP8 activations: refuse rather than run
		// it otherwise.
		return nil, unsupported("quantization_config.activation_scheme %q is not supported (want dynamic)", q.ActivationScheme)
	}
	switch len(q.WeightBlockSize) {
	case 0:
		return &[2]int{0, 0}, nil // one scale per tensor
	case 2:
		if q.WeightBlockSize[0] <= 0 || q.WeightBlockSize[1] <= 0 || q.WeightBlockSize[0] > maxDimension || q.WeightBlockSize[1] > maxDimension {
			return nil, invalid("quantization_config.weight_block_size %v: want two positive sizes", q.WeightBlockSize)
		}
		return &[2]int{q.WeightBlockSize[0], q.WeightBlockSize[1]}, nil
	}
	return nil, invalid("quantization_config.weight_block_size %v: want [rows, cols]", q.WeightBlockSize)
}

// fp8Table is every float8_e4m3fn byte's value: sign, 4 exponent bits
// (bias 7), 3 mantissa bits; exponent 0 is subnormal (m/8 · 2^-6); S.1111.111
// is NaN and there are no infinities.
var fp8Table = func() (t [256]float32) {
	for b := range t {
		e, m := (b>>3)&15, b&7
		var v float64
		switch {
		case e == 15 && m == 7:
			v = math.NaN()
		case e == 0:
			v = math.Ldexp(float64(m)/8, -6)
		default:
			v = math.Ldexp(1+float64(m)/8, e-7)
		}
		if b&0x80 != 0 {
			v = -v
		}
		t[b] = float32(v)
	}
	return t
}()

// FP8E4M3ToF32 is the value of a float8_e4m3fn byte.
func FP8E4M3ToF32(b byte) float32 { return fp8Table[b] }

// dequantFP8 replaces every F8_E4M3 tensor in raw that has a NAME_scale_inv
// beside it with its BF16 dequantization (block (rows, cols) per scale;
// {0, 0}: one scale), marking the scale used. An FP8 tensor without its
// scale, a scale without its tensor, or shapes that do not fit are errors.
func dequantFP8(raw map[string]*rawTensor, block [2]int) error {
	bySource := make(map[string]*rawTensor, len(raw))
	for _, r := range raw {
		bySource[r.source] = r
	}
	for _, r := range raw {
		if !strings.HasSuffix(r.source, "_scale_inv") {
			continue
		}
		w, ok := bySource[strings.TrimSuffix(r.source, "_scale_inv")]
		if !ok || w.typeName != "F8_E4M3" {
			return invalid("tensor %q: a block scale without an F8_E4M3 tensor %q beside it", r.source, strings.TrimSuffix(r.source, "_scale_inv"))
		}
	}
	for _, w := range raw {
		if w.typeName != "F8_E4M3" {
			continue
		}
		s, ok := bySource[w.source+"_scale_inv"]
		if !ok {
			return invalid("tensor %q is F8_E4M3 but has no %q beside it", w.source, w.source+"_scale_inv")
		}
		if len(w.shape) != 2 {
			return invalid("tensor %q: F8_E4M3 with shape %v: want a matrix", w.source, w.shape)
		}
		if w.shape[0] > maxDimension || w.shape[1] > maxDimension {
			return invalid("tensor %q: shape %v is too large", w.source, w.shape)
		}
		rows, cols := int(w.shape[0]), int(w.shape[1])
		br, bc := block[0], block[1]
		if br == 0 {
			br, bc = rows, cols
		}
		sr, sc := (rows+br-1)/br, (cols+bc-1)/bc
		if !shapeIs(s.shape, sr, sc) && !(sr*sc == 1 && (len(s.shape) == 0 || shapeIs(s.shape, 1, 0))) {
			return invalid("tensor %q: shape %s for %s in blocks of %d×%d: want %s", s.source, fmtRaw(s.shape), fmtRaw(w.shape), br, bc, fmtShape(sr, sc))
		}
		if !s.ok || (s.dtype != kernels.F32 && s.dtype != kernels.BF16) {
			return unsupported("tensor %q: type %s is not supported (want F32 or BF16 scales)", s.source, s.typeName)
		}
		scales, err := toFloat32(s.dtype, s.data, sr*sc)
		if err != nil {
			return fmt.Errorf("tensor %q: %w", s.source, err)
		}
		if len(w.data) != rows*cols {
			return invalid("tensor %q: %d bytes for %d F8_E4M3 values", w.source, len(w.data), rows*cols)
		}
		out := make([]byte, 2*rows*cols)
		for r := range rows {
			src := w.data[r*cols : (r+1)*cols]
			dst := out[2*r*cols : 2*(r+1)*cols]
			sRow := scales[(r/br)*sc : (r/br+1)*sc]
			for c, b := range src {
				binary.LittleEndian.PutUint16(dst[2*c:], kernels.F32ToBF16(fp8Table[b]*sRow[c/bc]))
			}
		}
		w.data, w.dtype, w.ok, w.typeName = out, kernels.BF16, true, "F8_E4M3 (dequantized to BF16)"
		s.used = true
	}
	return nil
}
