package cuda

import (
	"errors"
	"math"
)

// DevPtr is an address in a GPU's memory (CUdeviceptr). Zero is no memory.
type DevPtr uint64

// Dim3 is a grid or block shape of a kernel launch.
type Dim3 struct{ X, Y, Z uint32 }

// Arg is one kernel parameter as the kernel's C signature declares it: a
// 4-byte int/float or an 8-byte pointer/long. Build them with Ptr, I32, U32,
// I64, U64 and F32.
type Arg struct {
	Size uint8  // 4 or 8
	Bits uint64 // the value's bytes, little-endian in the low Size bytes
}

// Ptr is a pointer parameter.
func Ptr(p DevPtr) Arg { return Arg{Size: 8, Bits: uint64(p)} }

// I32 is an int parameter.
func I32(v int32) Arg { return Arg{Size: 4, Bits: uint64(uint32(v))} }

// U32 is an unsigned int parameter.
func U32(v uint32) Arg { return Arg{Size: 4, Bits: uint64(v)} }

// I64 is a long long parameter.
func I64(v int64) Arg { return Arg{Size: 8, Bits: uint64(v)} }

// U64 is an unsigned long long parameter.
func U64(v uint64) Arg { return Arg{Size: 8, Bits: v} }

// F32 is a float parameter.
func F32(v float32) Arg { return Arg{Size: 4, Bits: uint64(math.Float32bits(v))} }

// ElemType is the element type of a GEMM operand on the device.
type ElemType uint8

// The GEMM operand types.
const (
	ElemF32 ElemType = iota + 1
	ElemF16
	ElemBF16
)

// Size is the element's size in bytes.
func (e ElemType) Size() int {
	if e == ElemF32 {
		return 4
	}
	return 2
}

func (e ElemType) String() string {
	switch e {
	case ElemF32:
		return "f32"
	case ElemF16:
		return "f16"
	case ElemBF16:
		return "bf16"
	}
	return "elem?"
}

// Gemm is out[M][N] = x[M][K] · W[N][K]ᵀ, all row-major: x is M activation
// rows of K values, W the weight matrix of N rows of K values (as GGUF stores
// it), out M rows of N float32s, overwritten. X and W have the same element
// type; accumulation is in float32 (no TF32 for f32 operands).
type Gemm struct {
	M, N, K int
	W       DevPtr
	X       DevPtr
	Out     DevPtr
	Type    ElemType // of W and X
}

// Graph is a captured sequence of launches, replayed as one.
type Graph interface {
	// Destroy releases the graph.
	Destroy()
}

// Driver is what Device needs from a GPU: memory, copies, kernel launches by
// name from the embedded PTX module, GEMMs and graphs, all ordered on one
// stream. The real one loads libcuda and libcublasLt at run time (the
// "cuda" build tag, see driver_cuda.go); tests run Device on a host
// emulation of the same kernels (package kernels/cuda/emu), named as a
// double for the GPU they cannot have.
//
// Errors are the driver's (a CUDA error name and text, wrapped with the
// call). Calls come from one goroutine at a time (Device serializes them);
// the real driver pins itself to one OS thread owning the context.
type Driver interface {
	// Name describes the device: "NVIDIA H200 (sm_90, 139.8 GiB)".
	Name() string
	// Arch is the compute capability as major·10+minor (90 for sm_90).
	Arch() int
	// MemInfo is the device's free and total memory in bytes.
	MemInfo() (free, total int64, err error)

	// Alloc returns n bytes of device memory (uninitialised); Free
	// releases them.
	Alloc(n int64) (DevPtr, error)
	Free(p DevPtr)
	// Memset zeroes n bytes at p.
	Memset(p DevPtr, n int64) error
	// CopyIn copies src to dst in stream order; src may be reused when it
	// returns.
	CopyIn(dst DevPtr, src []byte) error
	// CopyOut copies len(dst) bytes from src once everything queued before
	// it is done, and returns when they are in dst.
	CopyOut(dst []byte, src DevPtr) error

	// Launch queues kernel name (an extern "C" __global__ of csrc/) on
	// grid×block threads with shared bytes of dynamic shared memory.
	Launch(name string, grid, block Dim3, shared uint32, args ...Arg) error
	// Gemm queues g.
	Gemm(g Gemm) error
	// Sync waits until everything queued is done.
	Sync() error

	// Capture records the launches and GEMMs that fn queues (without
	// running them) into a Graph that Replay runs again and again, reading
	// device memory as it is at replay: inputs travel through persistent
	// buffers filled with CopyIn before each Replay. fn may only Launch and
	// Gemm.
	Capture(fn func() error) (Graph, error)
	// Replay queues g.
	Replay(g Graph) error

	// Close releases the context and everything in it.
	Close()
}

// ErrNoDevice is what Open wraps when there is no usable NVIDIA GPU: no
// driver library, no device, or a binary built without CUDA support.
var ErrNoDevice = errors.New("no CUDA device")
