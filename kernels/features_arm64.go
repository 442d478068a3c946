package kernels

import "golang.org/x/sys/cpu"

var cpuFeatures = arm64Features()

func arm64Features() []string {
	x := cpu.ARM64
	var out []string
	for _, f := range []struct {
		name string
		has  bool
	}{
		{"asimd", x.HasASIMD}, {"asimdhp", x.HasASIMDHP}, {"asimddp", x.HasASIMDDP}, {"i8mm", x.HasI8MM},
		{"sve", x.HasSVE}, {"sve2", x.HasSVE2},
	} {
		if f.has {
			out = append(out, f.name)
		}
	}
	return out
}
