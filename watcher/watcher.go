// Package watcher holds what every batch source delivers: events naming input
// files and cancel requests, and Classify, which tells them apart by the
// file contract's names (package filecontract). Sources live in
// subpackages: watcher/dir (a folder) and watcher/s3 (a MinIO/S3 bucket).
// This package imports no other batchd package but filecontract.
package watcher

// Kind tells what an Event is about.
type Kind int

const (
	// Input is a complete batch input file (NAME.jsonl or NAME.json).
	Input Kind = iota + 1
	// Cancel is a request to cancel batch NAME (NAME.cancel).
	Cancel
	// Refused is an input batchd will not run (a name it cannot use, a file
	// that is not a regular file, an input that never became complete): the
	// consumer fails it with Code and Message without reading it, and moves
	// it out of the inbox.
	Refused
)

func (k Kind) String() string {
	switch k {
	case Input:
		return "input"
	case Cancel:
		return "cancel"
	case Refused:
		return "refused"
	}
	return "unknown"
}

// Event is one thing a source found.
type Event struct {
	Kind Kind
	// Name is the batch name: the file name without its .jsonl/.json/.cancel
	// suffix. For Refused it is the name the failed batch's outputs take:
	// the batch name, or filecontract.SafeName of it when it cannot be used
	// as it is.
	Name string
	// Path is where the file is.
	Path string
	// Format is "jsonl" (OpenAI batch lines) or "json" (a requests document);
	// empty for Cancel.
	Format string
	// Version identifies the content a bucket source saw (the object's
	// ETag); empty from the folder source.
	Version string
	// Code and Message say why a Refused input is refused
	// (filecontract.Code* constants); empty for other kinds.
	Code, Message string
}
