package dir

import "github.com/batchd/batchd/watcher"

// class is what a file name says a file is.
type class struct {
	kind   watcher.Kind
	name   string // batch name
	format string // filecontract.FormatJSONL or FormatJSON for inputs, "" for cancels
}

// classify tells what the top-level inbox entry base is (watcher.Classify).
func classify(base string) (c class, ok bool) {
	kind, name, format, ok := watcher.Classify(base)
	return class{kind: kind, name: name, format: format}, ok
}
