// Package archtest holds batchd's architecture test: the import rules of
// every package, in one table (rules_test.go), checked against the source.
//
// The rules, in short: data flows source (watcher, store) → pipeline →
// engine, and daemon wires them together. wire (the OpenAI wire contract)
// and kernels import nothing of batchd; engine imports only wire; each
// engine implementation imports engine and its own subpackages, never the
// pipeline or a source; the pipeline never imports the daemon, a source
// or an engine implementation. A new package fails the test until it is
// given its line in the table.
//
// It has no code of its own.
package archtest
