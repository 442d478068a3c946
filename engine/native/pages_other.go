//go:build !linux

package native

// releasePages: only Linux's MADV_PAGEOUT is used; elsewhere the pages stay
// until memory pressure reclaims them.
func releasePages([]byte) {}
