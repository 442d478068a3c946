package native

import (
	"os"
	"syscall"
	"unsafe"
)

// madvPageout is MADV_PAGEOUT (Linux 5.4): reclaim the range's pages now.
// It never changes contents: a clean file page is dropped and read again on
// the next touch, an anonymous one swapped out or kept.
const madvPageout = 21

// releasePages asks the kernel to reclaim the whole pages inside b, which
// the process no longer expects to read soon. A kernel without
// MADV_PAGEOUT refuses it (EINVAL): the pages then stay until memory
// pressure reclaims them, as before.
func releasePages(b []byte) {
	page := uintptr(os.Getpagesize())
	if len(b) == 0 {
		return
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo, hi := (start+page-1)&^(page-1), (start+uintptr(len(b)))&^(page-1)
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(b[lo-start:hi-start], madvPageout)
}
