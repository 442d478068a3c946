//go:build !linux

package kernels

// adviseHuge: transparent huge pages are asked for on Linux only.
func adviseHuge([]byte) {}
