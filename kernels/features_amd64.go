package kernels

import "golang.org/x/sys/cpu"

// cpuid executes CPUID with EAX=leaf, ECX=sub (cpuid_amd64.s).
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

var cpuFeatures = amd64Features()

func amd64Features() []string {
	x := cpu.X86
	_, _, ecx1, _ := cpuid(1, 0)
	f16c := x.HasAVX && ecx1&(1<<29) != 0 // usable only with the OS saving YMM state, as HasAVX checks
	var out []string
	for _, f := range []struct {
		name string
		has  bool
	}{
		{"sse4_2", x.HasSSE42}, {"avx", x.HasAVX}, {"avx2", x.HasAVX2}, {"fma", x.HasFMA}, {"f16c", f16c},
		{"avx_vnni", x.HasAVXVNNI},
		{"avx512f", x.HasAVX512F}, {"avx512bw", x.HasAVX512BW}, {"avx512dq", x.HasAVX512DQ},
		{"avx512vl", x.HasAVX512VL}, {"avx512_vnni", x.HasAVX512VNNI}, {"avx512_bf16", x.HasAVX512BF16},
	} {
		if f.has {
			out = append(out, f.name)
		}
	}
	return out
}
