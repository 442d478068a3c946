//go:build goexperiment.simd && amd64

package kernels

import "unsafe"

// The amx backend is avx512 with the 32-value block formats' sums taken
// by the AMX tile unit (Sapphire Rapids and later) when a work item has 16
// tokens or more (quant_amx_amd64.s): 16 tokens × 16 rows × one block per
// TDPBSSD, where VNNI's VPDPBUSD takes one token. The tiles read the
// 16-row kernels' unpacked blocks as they are and yield the same exact
// integer sums, scaled by the same float operations in the same order, so
// amx computes bit for bit what avx512 does: the tokens past the last whole
// 16 of an item, and items under 16 tokens (decode), run avx512's kernels.
// The K formats the same per sub-block of 32 (16) values, the tile's sums
// then scaled by the sub-block scales in int32 as avx512's kernels do.

//go:noescape
func amxDotS(acc *float32, s *byte, x unsafe.Pointer, xs int, nt, n int, buf *byte)

//go:noescape
func amxDotM(acc *float32, s *byte, x unsafe.Pointer, xs int, nt, n int, buf *byte)

//go:noescape
func r16Sign(s *byte, n, o int)

//go:noescape
func kamxDot32(acc *float32, s *byte, x unsafe.Pointer, xs int, nt, n int, buf *byte)

//go:noescape
func kamxDot16(acc *float32, s *byte, x unsafe.Pointer, xs int, nt, n int, buf *byte)

const (
	amxTokens = 16   // tokens per A tile, the fewest an item needs for AMX
	amxBuf    = 4096 // the four C tiles, stored
	// amxItemToks: tokens per work item on amx. Unpacking a row group
	// costs as much as 50 tokens' AMX work: amortized over 64 tokens it
	// took a third of a prefill.
	amxItemToks = 256
)

// amxBE is the amx backend, built from avx512 once its quant kernels are
// installed (installAMX).
var amxBE = &backend{name: BackendAMX}

// installAMX makes amxBE avx512 with the AMX dot kernels.
func installAMX() {
	*amxBE = *avx512
	amxBE.name = BackendAMX
	amxBE.qItemToks = amxItemToks
	installR16(amxBE, true, true)
}

// amxDot runs k's dot over nt tokens: whole 16s on the tiles, the rest on
// the 16-row VNNI kernel, which reads the blocks unsigned and so goes
// first. Arguments as groupFmt.dot's; s is modified (r16Sign).
func (k *groupFmt) amxDot(acc []float32, s *byte, x unsafe.Pointer, xs int, c unsafe.Pointer, cs int, nt, n int, buf *byte) {
	na := nt &^ (amxTokens - 1)
	if na < nt {
		k.dot(&acc[na*r16Rows], s, unsafe.Add(x, na*xs), xs, unsafe.Add(c, na*cs), cs, nt-na, n)
	}
	if k.o != 0 {
		r16Sign(s, n, int(k.o))
	}
	k.amx(&acc[0], s, x, xs, na, n, buf)
}
