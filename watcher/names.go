package watcher

import "strings"

// File name suffixes of the inbox contract (ARCHITECTURE.md §2); a bucket's
// inbox/ prefix follows the same contract.
const (
	SuffixJSONL   = ".jsonl"
	SuffixJSON    = ".json"
	SuffixOptions = ".options.json"
	SuffixCancel  = ".cancel"
	suffixTmp     = ".tmp"
	suffixPart    = ".part"
)

// Formats of input files, as in Event.Format.
const (
	FormatJSONL = "jsonl"
	FormatJSON  = "json"
)

// Classify tells what the inbox entry base is: an input (with its batch name
// and format) or a cancel request (with its batch name). It reports
// ok=false for anything a source must ignore: dot-names, *.tmp, *.part,
// NAME.options.json (the options of NAME, read by whoever runs NAME) and
// unknown suffixes.
func Classify(base string) (kind Kind, name, format string, ok bool) {
	if base == "" || strings.HasPrefix(base, ".") || strings.Contains(base, "/") ||
		strings.HasSuffix(base, suffixTmp) || strings.HasSuffix(base, suffixPart) ||
		strings.HasSuffix(base, SuffixOptions) {
		return 0, "", "", false
	}
	switch {
	case strings.HasSuffix(base, SuffixJSONL):
		kind, name, format = Input, strings.TrimSuffix(base, SuffixJSONL), FormatJSONL
	case strings.HasSuffix(base, SuffixJSON):
		kind, name, format = Input, strings.TrimSuffix(base, SuffixJSON), FormatJSON
	case strings.HasSuffix(base, SuffixCancel):
		kind, name = Cancel, strings.TrimSuffix(base, SuffixCancel)
	default:
		return 0, "", "", false
	}
	return kind, name, format, name != ""
}
