package dir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/batchd/batchd/filecontract"
)

// version identifies one version of a file. Two observations with the same
// version are taken to have seen the same content.
type version struct {
	size  int64
	mtime int64 // UnixNano
}

func versionOf(info os.FileInfo) version {
	return version{size: info.Size(), mtime: info.ModTime().UnixNano()}
}

// tailChunk is how much of a file's end is read at a time by tailComplete.
const tailChunk = 4096

// tailComplete reports whether the file at path, expected at version want,
// ends the way a complete input of format does: a .jsonl is empty or ends
// with '\n'; a .json's last non-whitespace byte is '}'. It returns the version
// it found (from the open file), so a caller can tell when the file changed
// since it was stat'ed; the tail is only read when that version is want.
//
// It never follows a symbolic link nor blocks on a FIFO that took the file's
// place since it was stat'ed: such a file is an error.
func tailComplete(path, format string, want version) (ok bool, got version, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, version{}, fmt.Errorf("open input: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return false, version{}, fmt.Errorf("stat input: %w", err)
	}
	if !info.Mode().IsRegular() {
		return false, version{}, fmt.Errorf("open input: %s is not a regular file", path)
	}
	got = versionOf(info)
	if got != want {
		return false, got, nil
	}
	ok, err = endsComplete(f, got.size, format)
	if errors.Is(err, io.EOF) {
		// Truncated since the Stat: not complete; the next observation sees
		// the new version.
		return false, got, nil
	}
	if err != nil {
		return false, got, fmt.Errorf("read input tail: %w", err)
	}
	return ok, got, nil
}

// endsComplete applies the completion rule of format to the first size bytes
// of r.
func endsComplete(r io.ReaderAt, size int64, format string) (bool, error) {
	if format == filecontract.FormatJSONL {
		if size == 0 {
			return true, nil
		}
		var b [1]byte
		if _, err := r.ReadAt(b[:], size-1); err != nil {
			return false, err
		}
		return b[0] == '\n', nil
	}
	// JSON: walk back over trailing whitespace, a chunk at a time.
	buf := make([]byte, tailChunk)
	for end := size; end > 0; {
		start := max(end-tailChunk, 0)
		chunk := buf[:end-start]
		if _, err := r.ReadAt(chunk, start); err != nil {
			return false, err
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			switch chunk[i] {
			case ' ', '\t', '\r', '\n':
				continue
			}
			return chunk[i] == '}', nil
		}
		end = start
	}
	return false, nil // empty or all whitespace
}
