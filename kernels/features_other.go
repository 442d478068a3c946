//go:build !amd64 && !arm64

package kernels

var cpuFeatures []string
