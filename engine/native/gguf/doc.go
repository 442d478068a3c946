// Package gguf reads and writes GGUF files (versions 2 and 3, little-endian),
// the single-file model format of llama.cpp.
//
// It owns the byte format only: the header, the typed metadata key/value
// pairs, the tensor directory and the aligned data section. Open memory-maps
// the file read-only and hands out each tensor's bytes as a slice of that
// mapping (no copy); the slices are valid until Close. What the tensors mean
// (architectures, shapes, weight types a runner can use) belongs to package
// weights.
//
// Open treats every file as hostile: each count and length is checked against
// the bytes that are actually left before anything is allocated, so a corrupt
// or malicious file gives a *FormatError (matching ErrFormat), never a panic or
// an allocation larger than a small multiple of the file size.
//
// It must import no other batchd package.
package gguf
