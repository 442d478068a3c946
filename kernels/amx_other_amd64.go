//go:build !linux

package kernels

import "errors"

// requestAMX: only Linux's way of enabling the tile state is built.
func requestAMX() error { return errors.New("AMX tiles are enabled on Linux only") }
