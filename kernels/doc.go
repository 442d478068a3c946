// Package kernels will hold the numeric kernels the native engine runs on
// (matmul per weight type, RMSNorm, RoPE, attention over paged KV,
// softmax/top-k) behind one interface, with a portable Go implementation, a
// SIMD fast path and, later, a GPU one. It arrives with the native engine
// (issue 3); until then batchd runs requests on a remote engine
// (engine/openai). It must import no other batchd package.
package kernels
