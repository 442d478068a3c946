package cuda

import (
	"fmt"
	"unsafe"
)

// maxLaunchArgs bounds a kernel's parameter count; the widest kernel of
// csrc/ (qkv_post) has 21.
const maxLaunchArgs = 64

// launchParams is one launch's kernel parameters laid out as
// cuLaunchKernel's kernelParams reads them: ptrs[i] points at the i-th
// value, whose low Size bytes (little-endian, as on every host CUDA runs
// on) are the C parameter. The driver copies the values during the call, so
// one launchParams, owned by the Driver and pinned for its life, serves
// every launch.
type launchParams struct {
	vals [maxLaunchArgs]uint64
	ptrs [maxLaunchArgs]unsafe.Pointer
}

// pack fills p from args and returns the kernelParams array (nil for a
// kernel without parameters).
func (p *launchParams) pack(args []Arg) (unsafe.Pointer, error) {
	if len(args) > maxLaunchArgs {
		return nil, fmt.Errorf("%d kernel arguments, at most %d", len(args), maxLaunchArgs)
	}
	for i, a := range args {
		switch a.Size {
		case 4:
			if a.Bits>>32 != 0 {
				return nil, fmt.Errorf("kernel argument %d: a 4-byte value with bits above 32 (%#x)", i, a.Bits)
			}
		case 8:
		default:
			return nil, fmt.Errorf("kernel argument %d: size %d, want 4 or 8", i, a.Size)
		}
		p.vals[i] = a.Bits
		p.ptrs[i] = unsafe.Pointer(&p.vals[i])
	}
	if len(args) == 0 {
		return nil, nil
	}
	return unsafe.Pointer(&p.ptrs[0]), nil
}
