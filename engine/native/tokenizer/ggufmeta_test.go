package tokenizer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
)

// readGGUFVocab is a test-only GGUF metadata reader: it walks the key/value
// section and keeps the tokenizer.ggml.* keys, enough to build a Spec without
// depending on package gguf.
func readGGUFVocab(path string) (Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Spec{}, err
	}
	r := &ggufReader{b: b}
	if string(r.take(4)) != "GGUF" {
		return Spec{}, errors.New("not a GGUF file")
	}
	if v := r.u32(); v < 2 || v > 3 {
		return Spec{}, fmt.Errorf("GGUF version %d", v)
	}
	r.u64() // tensor count
	nkv := r.u64()
	spec := Spec{BOS: -1, EOS: -1, UNK: -1, PAD: -1, AddBOS: true}
	id := func(v any) int {
		if u, ok := v.(uint64); ok && u < math.MaxInt32 {
			return int(u)
		}
		return -1
	}
	for i := uint64(0); i < nkv && r.err == nil; i++ {
		key := r.str()
		typ := r.u32()
		v := r.value(typ)
		if !strings.HasPrefix(key, "tokenizer.ggml.") {
			continue
		}
		switch strings.TrimPrefix(key, "tokenizer.ggml.") {
		case "model":
			spec.Model, _ = v.(string)
		case "pre":
			spec.Pre, _ = v.(string)
		case "tokens":
			for _, x := range v.([]any) {
				spec.Tokens = append(spec.Tokens, x.(string))
			}
		case "scores":
			for _, x := range v.([]any) {
				spec.Scores = append(spec.Scores, x.(float32))
			}
		case "token_type":
			for _, x := range v.([]any) {
				spec.Types = append(spec.Types, x.(int32))
			}
		case "merges":
			for _, x := range v.([]any) {
				spec.Merges = append(spec.Merges, x.(string))
			}
		case "bos_token_id":
			spec.BOS = id(v)
		case "eos_token_id":
			spec.EOS = id(v)
		case "unknown_token_id":
			spec.UNK = id(v)
		case "padding_token_id":
			spec.PAD = id(v)
		case "add_bos_token":
			spec.AddBOS, _ = v.(bool)
		case "add_eos_token":
			spec.AddEOS, _ = v.(bool)
		case "add_space_prefix":
			if b, ok := v.(bool); ok {
				spec.NoSpacePrefix = !b
			}
		}
	}
	return spec, r.err
}

type ggufReader struct {
	b   []byte
	off int
	err error
}

func (r *ggufReader) take(n uint64) []byte {
	if r.err != nil || n > uint64(len(r.b)-r.off) {
		if r.err == nil {
			r.err = errors.New("truncated GGUF")
		}
		return make([]byte, n%64)
	}
	p := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return p
}

func (r *ggufReader) u32() uint32 {
	p := r.take(4)
	if r.err != nil {
		return 0
	}
	return binary.LittleEndian.Uint32(p)
}

func (r *ggufReader) u64() uint64 {
	p := r.take(8)
	if r.err != nil {
		return 0
	}
	return binary.LittleEndian.Uint64(p)
}

func (r *ggufReader) str() string { return string(r.take(r.u64())) }

// value decodes one value of GGUF type typ; integers come back as uint64
// (unsigned) — except int32, kept for token types — and floats as float32/64.
func (r *ggufReader) value(typ uint32) any {
	switch typ {
	case 0, 1, 7: // u8, i8, bool
		p := r.take(1)
		if r.err != nil {
			return nil
		}
		if typ == 7 {
			return p[0] != 0
		}
		return uint64(p[0])
	case 2, 3:
		p := r.take(2)
		if r.err != nil {
			return nil
		}
		return uint64(binary.LittleEndian.Uint16(p))
	case 4:
		return uint64(r.u32())
	case 5:
		return int32(r.u32())
	case 6:
		return math.Float32frombits(r.u32())
	case 8:
		return r.str()
	case 9:
		et := r.u32()
		n := r.u64()
		if n > uint64(len(r.b)) {
			r.err = errors.New("GGUF array too long")
			return nil
		}
		out := make([]any, 0, n)
		for j := uint64(0); j < n && r.err == nil; j++ {
			out = append(out, r.value(et))
		}
		return out
	case 10, 11:
		return r.u64()
	case 12:
		return math.Float64frombits(r.u64())
	}
	r.err = fmt.Errorf("GGUF value type %d", typ)
	return nil
}
