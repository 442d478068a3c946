// Package tokenizer turns text into token ids and back for the native engine.
//
// It owns two tokenizer families, both built from in-memory vocabularies:
//
//   - "llama": SentencePiece-style BPE with scores and byte fallback, encoded
//     with llama.cpp's SPM algorithm (spaces become "▁", a leading "▁" is
//     added, adjacent symbols are merged greedily by the score of the vocab
//     token they form, characters outside the vocab fall back to <0xNN>).
//   - "gpt2": byte-level BPE (GPT-2's bytes-to-unicode mapping, a
//     pre-tokenizer chosen by tokenizer.ggml.pre or tokenizer.json, merges
//     applied by rank).
//
// New builds a Tokenizer from a GGUF-style Spec; FromHF builds one from a
// Hugging Face tokenizer.json (+ tokenizer_config.json). A Tokenizer is
// immutable after construction and safe for concurrent use; a Decoder is not
// (one per stream).
//
// The pre-tokenizer regexes of Qwen2, Llama 3 and GPT-2 use a lookahead that
// Go's regexp lacks, so they are implemented as hand-written scanners that
// are tested against an equivalent regexp-based splitter. Unicode categories
// come from package unicode.
//
// Gap: tokenizer.json normalizers are not applied; "NFC" (Qwen) is accepted
// and treated as the identity (exact for text that is already NFC, which is
// nearly all text). Implementing it needs golang.org/x/text/unicode/norm.
//
// The package does no I/O and must import no other batchd package.
package tokenizer
