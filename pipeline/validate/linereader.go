package validate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// LineSource yields raw input lines.
//
// Next returns the next non-blank input: its 1-based line number n (for a
// requests document: the 1-based index of the request in requests[]), its
// raw bytes, or tooLong=true (raw nil) when it exceeded the maximum size.
// It returns io.EOF at the end; other errors are I/O errors or (documents)
// structural errors, after which the LineSource is done. The returned raw
// slice is valid until the next call.
type LineSource interface {
	Next() (n int, raw []byte, tooLong bool, err error)
}

// DefaultMaxLineBytes is the line limit used when a reader is given none.
const DefaultMaxLineBytes = 8 << 20

// readBufferSize is the bufio buffer: lines up to this size are returned
// straight from it, longer ones are gathered in the reader's own buffer.
const readBufferSize = 64 << 10

var utf8BOM = []byte("\xEF\xBB\xBF")

// LineReader is the LineSource of an OpenAI batch file (JSONL).
//
// Lines end with \n; a trailing \r is stripped, as is a UTF-8 byte order mark
// at the start of the file. Blank (whitespace-only) lines are skipped but
// counted. A line longer than the maximum is reported tooLong without being
// buffered (the rest of it is read and discarded), and the next line still
// parses; a too-long line of only whitespace is skipped like any blank line.
// A final line without \n is still a line. Memory is bounded by the maximum
// plus the 64 KiB read buffer.
type LineReader struct {
	br  *bufio.Reader
	max int
	n   int
	buf []byte // gathers lines longer than the read buffer
	err error

	started bool
}

var _ LineSource = (*LineReader)(nil)

// NewLineReader returns a LineReader over r that accepts lines of at most
// maxLineBytes bytes, not counting the line ending (DefaultMaxLineBytes when
// maxLineBytes <= 0).
func NewLineReader(r io.Reader, maxLineBytes int) *LineReader {
	return newLineReaderSize(r, maxLineBytes, readBufferSize)
}

// newLineReaderSize lets tests use a small read buffer (at least 16 bytes).
func newLineReaderSize(r io.Reader, maxLineBytes, bufSize int) *LineReader {
	if maxLineBytes <= 0 {
		maxLineBytes = DefaultMaxLineBytes
	}
	return &LineReader{br: bufio.NewReaderSize(r, bufSize), max: maxLineBytes}
}

// Next implements LineSource.
func (l *LineReader) Next() (int, []byte, bool, error) {
	if !l.started {
		l.started = true
		l.skipBOM()
	}
	for l.err == nil {
		line, tooLong, blank, err := l.readLine()
		if err != nil {
			l.err = err
			break
		}
		l.n++
		if blank {
			continue
		}
		if tooLong {
			return l.n, nil, true, nil
		}
		return l.n, line, false, nil
	}
	return 0, nil, false, l.err
}

// readLine reads one line, without its ending. It returns io.EOF only when no
// byte is left.
func (l *LineReader) readLine() (line []byte, tooLong, blank bool, err error) {
	// Room for the content plus "\r\n": the limit is on the content.
	limit := l.max + 2
	l.buf = l.buf[:0]
	blank = true
	got := false
	for {
		chunk, rerr := l.br.ReadSlice('\n')
		if len(chunk) > 0 {
			got = true
		}
		switch {
		case tooLong:
			blank = blank && isBlank(chunk)
		case len(l.buf) == 0 && rerr != bufio.ErrBufferFull && len(chunk) <= limit:
			// The whole line is in the read buffer: no copy.
			line = chunk
		case len(l.buf)+len(chunk) <= limit:
			l.buf = append(l.buf, chunk...)
			line = l.buf
		default:
			tooLong = true
			blank = isBlank(l.buf) && isBlank(chunk)
			l.buf = l.buf[:0]
			line = nil
		}
		switch {
		case rerr == nil:
		case errors.Is(rerr, bufio.ErrBufferFull):
			continue
		case errors.Is(rerr, io.EOF):
			if !got {
				return nil, false, false, io.EOF
			}
		default:
			return nil, false, false, fmt.Errorf("read line %d: %w", l.n+1, rerr)
		}
		break
	}
	if tooLong {
		return nil, true, blank, nil
	}
	line = trimEOL(line)
	if len(line) > l.max {
		return nil, true, isBlank(line), nil
	}
	return line, false, isBlank(line), nil
}

// skipBOM drops a UTF-8 byte order mark at the start of the input.
func (l *LineReader) skipBOM() {
	b, err := l.br.Peek(len(utf8BOM))
	if bytes.Equal(b, utf8BOM) {
		l.br.Discard(len(utf8BOM))
		return
	}
	if err != nil && !errors.Is(err, io.EOF) {
		// Peek consumed the error; keep it.
		l.err = fmt.Errorf("read line 1: %w", err)
	}
}

func trimEOL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b
}

// isBlank reports whether b holds only JSON whitespace.
func isBlank(b []byte) bool {
	return skipSpace(b, 0) == len(b)
}
