// Package wire owns batchd's OpenAI-compatible wire contract: the shapes
// requests and answers take on the wire (the error object, chat and text
// completions, embeddings lists, usage, logprobs, model lists) and the
// numeric limits of a request body.
//
// It is the one home of that contract: the validator (pipeline/validate),
// both engines, the daemon's API and the test servers build and read these
// shapes here, and the validator and the native engine check a body's
// limits with the same rules (Rules), so neither a shape nor a limit can
// drift between them.
//
// This package imports nothing of batchd: everything else may import it.
package wire
