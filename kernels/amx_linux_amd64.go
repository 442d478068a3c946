package kernels

import (
	"fmt"
	"syscall"
)

// Linux hands out the AMX tile data state (XTILEDATA, 8 KiB per thread)
// only to a process that asks for it: until then the first tile
// instruction faults. The permission covers every thread of the process,
// and the kernel then saves the tiles across signals and context switches.
const (
	archReqXcompPerm  = 0x1023 // arch_prctl ARCH_REQ_XCOMP_PERM
	xfeatureXTileData = 18
)

// requestAMX asks the kernel for the tile data state.
func requestAMX() error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXTileData, 0); e != 0 {
		return fmt.Errorf("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): %w", e)
	}
	return nil
}
