// Package filecontract is the file contract of ARCHITECTURE.md §2, spelled
// in one place: the folders (bucket prefixes) of a data directory, the
// suffixes of a batch's files in them, the formats of inputs, which inbox
// entries name batches, and which batch names batchd can use (CheckName,
// SafeName, with the codes a refused input fails with). The folder and
// bucket sources and stores, the daemon and the CLI all import it; it
// imports no batchd package.
package filecontract

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// File name suffixes of the file contract (ARCHITECTURE.md §2), spelled
// here only: a bucket's inbox/, outbox/ and done/ prefixes follow the same
// contract.
const (
	// In the inbox (and done/ once the batch retired).
	SuffixJSONL   = ".jsonl"
	SuffixJSON    = ".json"
	SuffixOptions = ".options.json"
	SuffixCancel  = ".cancel"
	// SuffixRetry marks an input moved back from done/ to run its failed
	// requests again (POST /v1/batches/{id}/retry).
	SuffixRetry = ".retry"
	// In the outbox.
	SuffixOutput  = ".output.jsonl"
	SuffixErrors  = ".errors.jsonl"
	SuffixBatch   = ".batch.json"
	SuffixResults = ".results.json"

	// Temporaries: a source ignores *.tmp and *.part (and dot-names), so
	// producers and batchd itself write under them and rename into place.
	SuffixTmp  = ".tmp"
	SuffixPart = ".part"
)

// Folders (bucket prefixes) of the file contract.
const (
	DirInbox  = "inbox"
	DirOutbox = "outbox"
	DirDone   = "done"
	// DirRejected holds inputs refused without being read.
	DirRejected = "rejected"
	// DirState holds the ledger (a data directory's only; a bucket keeps
	// its state under .batchd/).
	DirState = "state"
)

// Formats of input files, as in watcher.Event.Format.
const (
	FormatJSONL = "jsonl"
	FormatJSON  = "json"
)

// ParseInbox tells what the inbox entry base names, by its suffix: the
// input of batch name (suffix SuffixJSONL or SuffixJSON) or a request to
// cancel it (SuffixCancel). It reports ok=false for anything a source must
// ignore: dot-names, *.tmp, *.part, NAME.options.json (the options of
// NAME, read by whoever runs NAME), names holding a '/' and unknown
// suffixes.
func ParseInbox(base string) (name, suffix string, ok bool) {
	if base == "" || strings.HasPrefix(base, ".") || strings.Contains(base, "/") ||
		strings.HasSuffix(base, SuffixTmp) || strings.HasSuffix(base, SuffixPart) ||
		strings.HasSuffix(base, SuffixOptions) {
		return "", "", false
	}
	for _, suffix := range []string{SuffixJSONL, SuffixJSON, SuffixCancel} {
		if name, ok := strings.CutSuffix(base, suffix); ok {
			return name, suffix, name != ""
		}
	}
	return "", "", false
}

// Codes of refused inputs (watcher.Refused events): the code of the failed
// batch's error.
const (
	// CodeNameTooLong: a file name batchd derives from NAME would exceed
	// the file-name limit.
	CodeNameTooLong = "name_too_long"
	// CodeInvalidName: NAME is not valid UTF-8 or holds control characters.
	CodeInvalidName = "invalid_name"
	// CodeNotRegular: the input is a symbolic link, FIFO, socket or device.
	CodeNotRegular = "not_a_regular_file"
	// CodeIncomplete: the input did not end completely (a final newline, a
	// closing '}') within the grace period.
	CodeIncomplete = "input_incomplete"
)

// maxFileName is the longest file name (one path element, in bytes) the
// common Linux filesystems accept.
const maxFileName = 255

// derivedSuffixes are the suffixes batchd appends to NAME for files in the
// inbox, outbox and done folders (ARCHITECTURE.md §2, plus NAME.retry).
var derivedSuffixes = []string{
	SuffixJSONL, SuffixJSON, SuffixOptions, SuffixCancel, SuffixRetry,
	SuffixOutput, SuffixErrors, SuffixBatch, SuffixResults,
}

// tempOverhead is what a temporary name adds around NAME+suffix: the
// longest is fsx.WriteFile's ".NAME.SUFFIX-<up to 10 digits>.tmp"; the
// pipeline's ".NAME.SUFFIX.tmp" and the CLI's ".NAME.SUFFIX.part" are shorter.
const tempOverhead = len(".") + len("-4294967295") + len(SuffixTmp)

// MaxNameBytes is the longest batch name (in bytes) whose every derived file
// name, temporaries included, fits the file-name limit.
var MaxNameBytes = func() int {
	longest := 0
	for _, s := range derivedSuffixes {
		longest = max(longest, len(s))
	}
	return maxFileName - longest - tempOverhead
}()

// CheckName reports why batch name cannot be used to name batchd's files:
// a derived name too long (CodeNameTooLong), or a name that is not valid
// UTF-8, holds control characters such as a newline, or a '/' (a bucket
// key in a nested prefix) (CodeInvalidName).
// It returns "" for a usable name.
func CheckName(name string) (code, message string) {
	switch {
	case !utf8.ValidString(name):
		return CodeInvalidName, fmt.Sprintf("the name %q is not valid UTF-8; rename the file", name)
	case strings.ContainsFunc(name, unicode.IsControl):
		return CodeInvalidName, fmt.Sprintf("the name %q holds control characters (a newline, a tab, ...); rename the file", name)
	case strings.Contains(name, "/"):
		// Only a bucket key can hold one: inbox/a/b.jsonl, inbox//b.jsonl,
		// inbox/../b.jsonl. Batch names are flat, so that no derived key
		// leaves the outbox, done/ or rejected/ prefix.
		return CodeInvalidName, fmt.Sprintf("the name %q holds a '/': batch inputs go directly under inbox/, not in nested prefixes; move the object", name)
	case len(name) > MaxNameBytes:
		return CodeNameTooLong, fmt.Sprintf("the name is %d bytes long; batch names may have at most %d bytes, so that every file batchd derives from it (NAME.batch.json and its temporaries) fits the %d-byte file-name limit; rename the file",
			len(name), MaxNameBytes, maxFileName)
	}
	return "", ""
}

// safePrefixBytes bounds the part of a refused name kept in SafeName.
const safePrefixBytes = 200

// SafeName is the name the outputs of a refused batch take: name itself
// when CheckName accepts it; otherwise its first bytes (at most 200, cut at
// a character boundary, invalid UTF-8 dropped, control characters and '/'
// as '_', leading dots dropped),
// "~", and the first 8 hex digits of name's SHA-256, so that different
// names keep different outputs.
func SafeName(name string) string {
	if code, _ := CheckName(name); code == "" {
		return name
	}
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(name, "") {
		if unicode.IsControl(r) || r == '/' {
			r = '_'
		}
		if b.Len()+utf8.RuneLen(r) > safePrefixBytes {
			break
		}
		b.WriteRune(r)
	}
	sum := sha256.Sum256([]byte(name))
	// A leading dot would hide the outputs (and make them dot-files the
	// watcher ignores).
	return strings.TrimLeft(b.String(), ".") + "~" + hex.EncodeToString(sum[:4])
}

// Files are the names the file contract gives a batch's files (without
// folders). They have the fields of pipeline.Files, which a store converts
// them to: pipeline.Files(FilesOf(name, input)).
type Files struct {
	Input, Options, Output, Errors string
}

// FilesOf is the Files of batch name, its input being named input
// (NAME.jsonl or NAME.json).
func FilesOf(name, input string) Files {
	return Files{
		Input:   input,
		Options: name + SuffixOptions,
		Output:  name + SuffixOutput,
		Errors:  name + SuffixErrors,
	}
}
