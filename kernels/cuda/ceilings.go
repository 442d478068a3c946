package cuda

import (
	"fmt"
	"strings"
	"time"
)

// CeilingOptions sizes MeasureCeilings.
type CeilingOptions struct {
	Bytes int64    // copy buffer size (default 1 GiB)
	Reps  int      // repetitions of each measurement, best taken (default 5)
	Gemms [][3]int // GEMM shapes M, N, K (default: square 8192, and decode-like ones)
	Type  ElemType // GEMM operand type (default bf16)
}

// Ceilings is what the GPU can do at best, to read engine figures against:
// copy bandwidths and GEMM throughput.
type Ceilings struct {
	Device           string
	HtoD, DtoH, DtoD float64 // GB/s (DtoD counts bytes read plus written)
	Gemm             []GemmCeiling
	Options          CeilingOptions
}

// GemmCeiling is one GEMM shape's best time.
type GemmCeiling struct {
	M, N, K int
	Seconds float64
	TFLOPS  float64
}

// MeasureCeilings times copies and GEMMs on drv (wall clock around a
// synchronized run, best of Reps).
func MeasureCeilings(drv Driver, o CeilingOptions) (*Ceilings, error) {
	if o.Bytes <= 0 {
		o.Bytes = 1 << 30
	}
	o.Bytes = o.Bytes / 16 * 16
	if o.Reps <= 0 {
		o.Reps = 5
	}
	if o.Gemms == nil {
		o.Gemms = [][3]int{{8192, 8192, 8192}, {1, 4096, 4096}, {256, 4096, 4096}, {256, 14336, 4096}}
	}
	if o.Type == 0 {
		o.Type = ElemBF16
	}
	c := &Ceilings{Device: drv.Name(), Options: o}
	a, err := drv.Alloc(o.Bytes)
	if err != nil {
		return nil, fmt.Errorf("ceilings: %w", err)
	}
	defer drv.Free(a)
	b, err := drv.Alloc(o.Bytes)
	if err != nil {
		return nil, fmt.Errorf("ceilings: %w", err)
	}
	defer drv.Free(b)
	host := make([]byte, o.Bytes)
	best := func(run func() error) (float64, error) {
		t := 0.0
		for r := range o.Reps {
			if err := drv.Sync(); err != nil {
				return 0, err
			}
			start := time.Now()
			if err := run(); err != nil {
				return 0, err
			}
			if err := drv.Sync(); err != nil {
				return 0, err
			}
			if s := time.Since(start).Seconds(); r == 0 || s < t {
				t = s
			}
		}
		return t, nil
	}
	gb := float64(o.Bytes) / 1e9
	t, err := best(func() error { return drv.CopyIn(a, host) })
	if err != nil {
		return nil, fmt.Errorf("ceilings: host to device: %w", err)
	}
	c.HtoD = gb / t
	if t, err = best(func() error { return drv.CopyOut(host, a) }); err != nil {
		return nil, fmt.Errorf("ceilings: device to host: %w", err)
	}
	c.DtoH = gb / t
	n := o.Bytes / 4
	if t, err = best(func() error {
		return drv.Launch("copy_f32", grid1D(n/4), Dim3{256, 1, 1}, 0, Ptr(b), Ptr(a), I64(n))
	}); err != nil {
		return nil, fmt.Errorf("ceilings: device copy: %w", err)
	}
	c.DtoD = 2 * gb / t
	for _, s := range o.Gemms {
		m, nn, k := s[0], s[1], s[2]
		wBytes := (int64(nn)*int64(k)*int64(o.Type.Size()) + 255) / 256 * 256
		if wBytes+int64(m)*int64(k)*int64(o.Type.Size()) > o.Bytes || int64(m)*int64(nn)*4 > o.Bytes {
			return nil, fmt.Errorf("ceilings: GEMM %dx%dx%d does not fit in %d-byte buffers", m, nn, k, o.Bytes)
		}
		g := Gemm{M: m, N: nn, K: k, Type: o.Type, W: a, X: a + DevPtr(wBytes), Out: b}
		t, err := best(func() error { return drv.Gemm(g) })
		if err != nil {
			return nil, fmt.Errorf("ceilings: GEMM %dx%dx%d: %w", m, nn, k, err)
		}
		c.Gemm = append(c.Gemm, GemmCeiling{M: m, N: nn, K: k, Seconds: t, TFLOPS: 2 * float64(m) * float64(nn) * float64(k) / t / 1e12})
	}
	return c, nil
}

func (c *Ceilings) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "device %s (buffers of %d MiB, best of %d)\n", c.Device, c.Options.Bytes>>20, c.Options.Reps)
	fmt.Fprintf(&b, "  copy: host→device %.1f GB/s, device→host %.1f GB/s, device→device %.1f GB/s (read+write)\n", c.HtoD, c.DtoH, c.DtoD)
	for _, g := range c.Gemm {
		fmt.Fprintf(&b, "  gemm %s %dx%dx%d: %.3f ms, %.1f TFLOPS\n", c.Options.Type, g.M, g.N, g.K, 1e3*g.Seconds, g.TFLOPS)
	}
	return b.String()
}
