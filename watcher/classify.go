package watcher

import (
	"github.com/batchd/batchd/filecontract"
)

// Classify tells what the inbox entry base is (filecontract.ParseInbox):
// an input (with its batch name and format) or a cancel request (with its
// batch name). It reports ok=false for anything a source must ignore.
func Classify(base string) (kind Kind, name, format string, ok bool) {
	name, suffix, ok := filecontract.ParseInbox(base)
	switch {
	case !ok:
		return 0, "", "", false
	case suffix == filecontract.SuffixCancel:
		return Cancel, name, "", true
	case suffix == filecontract.SuffixJSON:
		return Input, name, filecontract.FormatJSON, true
	}
	return Input, name, filecontract.FormatJSONL, true
}
