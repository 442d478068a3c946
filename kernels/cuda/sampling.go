package cuda

// The sampling kernels of csrc/sampling.cu are staged, not wired: nothing
// in the daemon launches them. The native engine downloads every logits
// row and samples on the host (engine/native/sampler.go); these kernels
// compute the same tokens on the GPU, and sampling_test.go holds them to
// the CPU's on the emulation. What remains to wire them:
//   - a Device method (an optional kernels interface beside FusedDevice)
//     that launches them over the logits buffer and downloads one int32
//     per row instead of rows·vocab floats;
//   - the native engine calling it for the rows whose draw needs nothing
//     the kernels lack (top_k, top_p < 1, penalties, logit bias, logprobs
//     and the min_tokens mask stay on the host), with seeds[r] = the
//     request's seed + choice index and pos[r] = the tokens before the one
//     drawn, as sampler.go's pick passes them;
//   - a gpu-check step comparing its tokens with the CPU's on a GPU.
const (
	// KernelArgmaxRows is argmax_rows(int* out, const float* logits, int
	// vocab): out[r] = kernels.Argmax of logits row r; grid (rows), block
	// a multiple of 32 up to 1024. Staged (see above).
	KernelArgmaxRows = "argmax_rows"
	// KernelSampleRows is sample_rows(int* out, const float* logits, int
	// vocab, const unsigned long long* seeds, const int* pos, const float*
	// invTemp, const float* minP): sampler.go's seeded draw with top_k and
	// top_p off; grid (rows), block a multiple of 32 up to 1024. Staged
	// (see above).
	KernelSampleRows = "sample_rows"
)
