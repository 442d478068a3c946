package gguf

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrFormat is matched (errors.Is) by every error that reports a malformed
// file: truncated, inconsistent, or with counts and offsets that do not fit.
var ErrFormat = errors.New("malformed GGUF")

// ErrUnsupported is matched by errors for well-formed files this package does
// not read: GGUF version 1, big-endian files.
var ErrUnsupported = errors.New("unsupported GGUF")

// FormatError reports a malformed file and the byte offset where reading
// stopped, which is what one needs to look at a hostile file in a hex dump.
type FormatError struct {
	Offset int64
	Msg    string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("malformed GGUF at byte %d: %s", e.Offset, e.Msg)
}

// Is lets errors.Is(err, ErrFormat) match.
func (e *FormatError) Is(target error) bool { return target == ErrFormat }

// GGMLType is ggml's tensor element type id as stored in the tensor directory.
type GGMLType uint32

// The ggml type ids. Only F32, F16, BF16 and Q8_0 are loadable as weights
// today; the others are known so that their sizes can be checked and their
// names reported.
const (
	F32     GGMLType = 0
	F16     GGMLType = 1
	Q4_0    GGMLType = 2
	Q4_1    GGMLType = 3
	Q5_0    GGMLType = 6
	Q5_1    GGMLType = 7
	Q8_0    GGMLType = 8
	Q8_1    GGMLType = 9
	Q2_K    GGMLType = 10
	Q3_K    GGMLType = 11
	Q4_K    GGMLType = 12
	Q5_K    GGMLType = 13
	Q6_K    GGMLType = 14
	Q8_K    GGMLType = 15
	IQ2_XXS GGMLType = 16
	IQ2_XS  GGMLType = 17
	IQ3_XXS GGMLType = 18
	IQ1_S   GGMLType = 19
	IQ4_NL  GGMLType = 20
	IQ3_S   GGMLType = 21
	IQ2_S   GGMLType = 22
	IQ4_XS  GGMLType = 23
	I8      GGMLType = 24
	I16     GGMLType = 25
	I32     GGMLType = 26
	I64     GGMLType = 27
	F64     GGMLType = 28
	IQ1_M   GGMLType = 29
	BF16    GGMLType = 30
	TQ1_0   GGMLType = 34
	TQ2_0   GGMLType = 35
	MXFP4   GGMLType = 39
)

type typeTraits struct {
	name      string
	blockSize uint64 // elements per block
	typeSize  uint64 // bytes per block
}

// Block geometry from ggml's block structs (QK_K = 256 for the K and IQ
// families). Ids 31-33 and 36-38 were removed from ggml and stay unknown.
var ggmlTypes = map[GGMLType]typeTraits{
	F32:     {"F32", 1, 4},
	F16:     {"F16", 1, 2},
	Q4_0:    {"Q4_0", 32, 18},
	Q4_1:    {"Q4_1", 32, 20},
	Q5_0:    {"Q5_0", 32, 22},
	Q5_1:    {"Q5_1", 32, 24},
	Q8_0:    {"Q8_0", 32, 34},
	Q8_1:    {"Q8_1", 32, 36},
	Q2_K:    {"Q2_K", 256, 84},
	Q3_K:    {"Q3_K", 256, 110},
	Q4_K:    {"Q4_K", 256, 144},
	Q5_K:    {"Q5_K", 256, 176},
	Q6_K:    {"Q6_K", 256, 210},
	Q8_K:    {"Q8_K", 256, 292},
	IQ2_XXS: {"IQ2_XXS", 256, 66},
	IQ2_XS:  {"IQ2_XS", 256, 74},
	IQ3_XXS: {"IQ3_XXS", 256, 98},
	IQ1_S:   {"IQ1_S", 256, 50},
	IQ4_NL:  {"IQ4_NL", 32, 18},
	IQ3_S:   {"IQ3_S", 256, 110},
	IQ2_S:   {"IQ2_S", 256, 82},
	IQ4_XS:  {"IQ4_XS", 256, 136},
	I8:      {"I8", 1, 1},
	I16:     {"I16", 1, 2},
	I32:     {"I32", 1, 4},
	I64:     {"I64", 1, 8},
	F64:     {"F64", 1, 8},
	IQ1_M:   {"IQ1_M", 256, 56},
	BF16:    {"BF16", 1, 2},
	TQ1_0:   {"TQ1_0", 256, 54},
	TQ2_0:   {"TQ2_0", 256, 66},
	MXFP4:   {"MXFP4", 32, 17},
}

// Known reports whether t is a ggml type id this package knows the size of.
func (t GGMLType) Known() bool { _, ok := ggmlTypes[t]; return ok }

// BlockSize is the number of elements per block (1 for plain types), 0 if
// the type is unknown.
func (t GGMLType) BlockSize() uint64 { return ggmlTypes[t].blockSize }

// TypeSize is the number of bytes per block, 0 if the type is unknown.
func (t GGMLType) TypeSize() uint64 { return ggmlTypes[t].typeSize }

func (t GGMLType) String() string {
	if tr, ok := ggmlTypes[t]; ok {
		return tr.name
	}
	return "type(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// ValueType is the type tag of a metadata value.
type ValueType uint32

// GGUF metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return "value_type(" + strconv.FormatUint(uint64(t), 10) + ")"
}

func (t ValueType) valid() bool { return t <= TypeFloat64 }

// fixedSize is the encoded size of a scalar of type t, 0 for strings and arrays.
func (t ValueType) fixedSize() uint64 {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// minEncodedSize is the fewest bytes one value of type t can take, used to
// bound array counts before allocating.
func (t ValueType) minEncodedSize() uint64 {
	switch t {
	case TypeString:
		return 8 // length prefix
	case TypeArray:
		return 12 // element type + count
	}
	return t.fixedSize()
}

// KV is one metadata pair, in file order.
type KV struct {
	Key   string
	Value Value
}

// Value is one typed metadata value. The zero Value is invalid; build values
// with ValueOf or MustValue.
//
// Interface returns the Go value: uint8, int8, uint16, int16, uint32, int32,
// float32, bool, string, uint64, int64, float64 for scalars; for arrays a
// slice of the element's Go type ([]string, []float32, []int32, ...), or
// []Value for arrays of arrays.
type Value struct {
	typ  ValueType
	elem ValueType // element type when typ == TypeArray
	x    any
}

// ValueOf wraps a Go value of one of the types listed on Value.
func ValueOf(x any) (Value, error) {
	switch v := x.(type) {
	case uint8:
		return Value{typ: TypeUint8, x: v}, nil
	case int8:
		return Value{typ: TypeInt8, x: v}, nil
	case uint16:
		return Value{typ: TypeUint16, x: v}, nil
	case int16:
		return Value{typ: TypeInt16, x: v}, nil
	case uint32:
		return Value{typ: TypeUint32, x: v}, nil
	case int32:
		return Value{typ: TypeInt32, x: v}, nil
	case float32:
		return Value{typ: TypeFloat32, x: v}, nil
	case bool:
		return Value{typ: TypeBool, x: v}, nil
	case string:
		return Value{typ: TypeString, x: v}, nil
	case uint64:
		return Value{typ: TypeUint64, x: v}, nil
	case int64:
		return Value{typ: TypeInt64, x: v}, nil
	case float64:
		return Value{typ: TypeFloat64, x: v}, nil
	case []uint8:
		return arrayValue(TypeUint8, v), nil
	case []int8:
		return arrayValue(TypeInt8, v), nil
	case []uint16:
		return arrayValue(TypeUint16, v), nil
	case []int16:
		return arrayValue(TypeInt16, v), nil
	case []uint32:
		return arrayValue(TypeUint32, v), nil
	case []int32:
		return arrayValue(TypeInt32, v), nil
	case []float32:
		return arrayValue(TypeFloat32, v), nil
	case []bool:
		return arrayValue(TypeBool, v), nil
	case []string:
		return arrayValue(TypeString, v), nil
	case []uint64:
		return arrayValue(TypeUint64, v), nil
	case []int64:
		return arrayValue(TypeInt64, v), nil
	case []float64:
		return arrayValue(TypeFloat64, v), nil
	case []Value:
		for i, e := range v {
			if e.typ != TypeArray || e.x == nil {
				return Value{}, fmt.Errorf("gguf: value of []Value: element %d is %s, want array", i, e.typ)
			}
		}
		return arrayValue(TypeArray, v), nil
	case Value:
		if v.x == nil {
			return Value{}, errors.New("gguf: zero Value")
		}
		return v, nil
	}
	return Value{}, fmt.Errorf("gguf: no GGUF value type for Go type %T", x)
}

func arrayValue(elem ValueType, x any) Value { return Value{typ: TypeArray, elem: elem, x: x} }

// MustValue is ValueOf for values known to be valid (literals in tools and
// tests); it panics on a Go type GGUF cannot hold.
func MustValue(x any) Value {
	v, err := ValueOf(x)
	if err != nil {
		panic(err)
	}
	return v
}

// Type is the value's type tag.
func (v Value) Type() ValueType { return v.typ }

// ElemType is the element type of an array value.
func (v Value) ElemType() ValueType { return v.elem }

// Interface returns the Go value (see Value).
func (v Value) Interface() any { return v.x }

// Len is the element count of an array value, 0 for scalars.
func (v Value) Len() int {
	if v.typ != TypeArray {
		return 0
	}
	switch a := v.x.(type) {
	case []uint8:
		return len(a)
	case []int8:
		return len(a)
	case []uint16:
		return len(a)
	case []int16:
		return len(a)
	case []uint32:
		return len(a)
	case []int32:
		return len(a)
	case []float32:
		return len(a)
	case []bool:
		return len(a)
	case []string:
		return len(a)
	case []uint64:
		return len(a)
	case []int64:
		return len(a)
	case []float64:
		return len(a)
	case []Value:
		return len(a)
	}
	return 0
}

// String formats the value for listings; long arrays are abbreviated.
func (v Value) String() string {
	if v.typ == TypeArray {
		return fmt.Sprintf("[%s × %d]", v.elem, v.Len())
	}
	if s, ok := v.x.(string); ok {
		if len(s) > 80 {
			s = s[:80] + "…"
		}
		return strconv.Quote(s)
	}
	return fmt.Sprint(v.x)
}

func (v Value) typeName() string {
	if v.typ == TypeArray {
		return "array of " + v.elem.String()
	}
	return v.typ.String()
}

// TypeError is returned by the typed accessors when a key holds a value of
// another type.
type TypeError struct {
	Key  string
	Want string
	Got  string
}

func (e *TypeError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("gguf: value is %s, want %s", e.Got, e.Want)
	}
	return fmt.Sprintf("gguf: metadata %q is %s, want %s", e.Key, e.Got, e.Want)
}

// AsString returns a string value.
func (v Value) AsString() (string, error) {
	if s, ok := v.x.(string); ok && v.typ == TypeString {
		return s, nil
	}
	return "", &TypeError{Want: "string", Got: v.typeName()}
}

// AsBool returns a bool value.
func (v Value) AsBool() (bool, error) {
	if b, ok := v.x.(bool); ok && v.typ == TypeBool {
		return b, nil
	}
	return false, &TypeError{Want: "bool", Got: v.typeName()}
}

// AsUint returns any integer value that is not negative.
func (v Value) AsUint() (uint64, error) {
	switch x := v.x.(type) {
	case uint8:
		return uint64(x), nil
	case uint16:
		return uint64(x), nil
	case uint32:
		return uint64(x), nil
	case uint64:
		return x, nil
	case int8, int16, int32, int64:
		i, _ := v.AsInt()
		if i < 0 {
			return 0, fmt.Errorf("value %d is negative, want unsigned", i)
		}
		return uint64(i), nil
	}
	return 0, &TypeError{Want: "integer", Got: v.typeName()}
}

// AsInt returns any integer value that fits in an int64.
func (v Value) AsInt() (int64, error) {
	switch x := v.x.(type) {
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		if x > 1<<63-1 {
			return 0, fmt.Errorf("value %d overflows int64", x)
		}
		return int64(x), nil
	}
	return 0, &TypeError{Want: "integer", Got: v.typeName()}
}

// AsFloat returns a float32 or float64 value; integers are accepted too,
// since converters disagree on how to store values like rope.freq_base.
func (v Value) AsFloat() (float64, error) {
	switch x := v.x.(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	}
	if i, err := v.AsInt(); err == nil {
		return float64(i), nil
	}
	return 0, &TypeError{Want: "float", Got: v.typeName()}
}

// AsStrings returns an array of strings. The slice is shared: do not modify.
func (v Value) AsStrings() ([]string, error) {
	if a, ok := v.x.([]string); ok && v.typ == TypeArray {
		return a, nil
	}
	return nil, &TypeError{Want: "array of string", Got: v.typeName()}
}

// AsFloat32s returns an array of float32 (float64 arrays are converted). The
// slice may be shared: do not modify.
func (v Value) AsFloat32s() ([]float32, error) {
	switch a := v.x.(type) {
	case []float32:
		return a, nil
	case []float64:
		out := make([]float32, len(a))
		for i, f := range a {
			out[i] = float32(f)
		}
		return out, nil
	}
	return nil, &TypeError{Want: "array of float32", Got: v.typeName()}
}

// AsInt32s returns an array of any integer type whose elements all fit in an
// int32. The slice may be shared: do not modify.
func (v Value) AsInt32s() ([]int32, error) {
	if a, ok := v.x.([]int32); ok {
		return a, nil
	}
	if v.typ != TypeArray {
		return nil, &TypeError{Want: "array of int32", Got: v.typeName()}
	}
	var out []int32
	fail := func(i int, x any) ([]int32, error) {
		return nil, fmt.Errorf("array element %d (%v) does not fit in int32", i, x)
	}
	switch a := v.x.(type) {
	case []int8:
		out = make([]int32, len(a))
		for i, x := range a {
			out[i] = int32(x)
		}
	case []uint8:
		out = make([]int32, len(a))
		for i, x := range a {
			out[i] = int32(x)
		}
	case []int16:
		out = make([]int32, len(a))
		for i, x := range a {
			out[i] = int32(x)
		}
	case []uint16:
		out = make([]int32, len(a))
		for i, x := range a {
			out[i] = int32(x)
		}
	case []uint32:
		out = make([]int32, len(a))
		for i, x := range a {
			if x > 1<<31-1 {
				return fail(i, x)
			}
			out[i] = int32(x)
		}
	case []int64:
		out = make([]int32, len(a))
		for i, x := range a {
			if x > 1<<31-1 || x < -1<<31 {
				return fail(i, x)
			}
			out[i] = int32(x)
		}
	case []uint64:
		out = make([]int32, len(a))
		for i, x := range a {
			if x > 1<<31-1 {
				return fail(i, x)
			}
			out[i] = int32(x)
		}
	default:
		return nil, &TypeError{Want: "array of int32", Got: v.typeName()}
	}
	return out, nil
}
