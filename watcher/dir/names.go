package dir

import (
	"strings"

	"github.com/batchd/batchd/watcher"
)

// File name suffixes of the inbox contract (ARCHITECTURE.md §2).
const (
	suffixJSONL   = ".jsonl"
	suffixJSON    = ".json"
	suffixOptions = ".options.json"
	suffixCancel  = ".cancel"
	suffixTmp     = ".tmp"
	suffixPart    = ".part"
)

// Formats of input files, as in watcher.Event.Format.
const (
	formatJSONL = "jsonl"
	formatJSON  = "json"
)

// class is what a file name says a file is.
type class struct {
	kind   watcher.Kind
	name   string // batch name
	format string // formatJSONL or formatJSON for inputs, "" for cancels
}

// classify tells what the top-level inbox entry base is, or ok=false for
// anything the watcher must ignore: dot-files, *.tmp, *.part, NAME.options.json
// (the options of NAME, read by whoever handles NAME) and unknown suffixes.
func classify(base string) (c class, ok bool) {
	if base == "" || strings.HasPrefix(base, ".") ||
		strings.HasSuffix(base, suffixTmp) || strings.HasSuffix(base, suffixPart) ||
		strings.HasSuffix(base, suffixOptions) {
		return class{}, false
	}
	switch {
	case strings.HasSuffix(base, suffixJSONL):
		c = class{kind: watcher.Input, name: strings.TrimSuffix(base, suffixJSONL), format: formatJSONL}
	case strings.HasSuffix(base, suffixJSON):
		c = class{kind: watcher.Input, name: strings.TrimSuffix(base, suffixJSON), format: formatJSON}
	case strings.HasSuffix(base, suffixCancel):
		c = class{kind: watcher.Cancel, name: strings.TrimSuffix(base, suffixCancel)}
	default:
		return class{}, false
	}
	return c, c.name != ""
}
