package kernels

import (
	"syscall"
	"unsafe"
)

// madvHugepage is MADV_HUGEPAGE: back the range with 2 MiB pages where the
// kernel can (transparent huge pages in "madvise" mode, the common
// default).
const madvHugepage = 14

// adviseHuge asks for huge pages over the whole 2 MiB pages inside b, before
// b is first written. Where THP is off or refuses, nothing changes.
func adviseHuge(b []byte) {
	const huge = 2 << 20
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo, hi := (start+huge-1)&^(huge-1), (start+uintptr(len(b)))&^(huge-1)
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(b[lo-start:hi-start], madvHugepage)
}
