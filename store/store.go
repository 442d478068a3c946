// Package store holds what the batch stores share: store/folder (the data
// directory) and store/bucket (a MinIO/S3 bucket) each implement
// pipeline.Store; store/storetest is the contract suite both pass. It
// imports no store implementation.
package store

import (
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/watcher"
)

// Files are the names the file contract (ARCHITECTURE.md §2) gives batch
// name's files, its input being named input (NAME.jsonl or NAME.json).
func Files(name, input string) pipeline.Files {
	return pipeline.Files{
		Input:   input,
		Options: name + watcher.SuffixOptions,
		Output:  name + watcher.SuffixOutput,
		Errors:  name + watcher.SuffixErrors,
	}
}
