// Package store is where the batch stores live: store/folder (the data
// directory) and store/bucket (a MinIO/S3 bucket) each implement
// pipeline.Store; store/storetest is the contract suite both pass. The
// names of a batch's files are the file contract's (package filecontract).
// This package holds no code.
package store
