// Package watcher holds what every batch source delivers: events naming input
// files and cancel requests. Sources live in subpackages: watcher/dir (a
// folder) and watcher/s3 (a MinIO/S3 bucket). This package imports no other batchd
// package.
package watcher

// Kind tells what an Event is about.
type Kind int

const (
	// Input is a complete batch input file (NAME.jsonl or NAME.json).
	Input Kind = iota + 1
	// Cancel is a request to cancel batch NAME (NAME.cancel).
	Cancel
)

func (k Kind) String() string {
	switch k {
	case Input:
		return "input"
	case Cancel:
		return "cancel"
	}
	return "unknown"
}

// Event is one thing a source found.
type Event struct {
	Kind Kind
	// Name is the batch name: the file name without its .jsonl/.json/.cancel suffix.
	Name string
	// Path is where the file is.
	Path string
	// Format is "jsonl" (OpenAI batch lines) or "json" (a requests document);
	// empty for Cancel.
	Format string
	// Version identifies the content a bucket source saw (the object's
	// ETag); empty from the folder source.
	Version string
}
