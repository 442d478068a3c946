package validate

import (
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// item is what a LineSource yielded: a line, or a too-long marker.
type item struct {
	n       int
	raw     string
	tooLong bool
}

// drain reads src to the end.
func drain(t *testing.T, src LineSource) ([]item, error) {
	t.Helper()
	var got []item
	for {
		n, raw, tooLong, err := src.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return got, nil
			}
			return got, err
		}
		if tooLong && raw != nil {
			t.Fatalf("line %d: tooLong with raw bytes", n)
		}
		got = append(got, item{n, string(raw), tooLong})
	}
}

func TestLineReader(t *testing.T) {
	const kib = 1 << 10
	big := strings.Repeat("a", 100*kib)
	tests := []struct {
		name  string
		input string
		max   int
		want  []item
	}{
		{"empty", "", 0, nil},
		{"lines", "{\"a\":1}\n{\"b\":2}\n", 0, []item{{1, `{"a":1}`, false}, {2, `{"b":2}`, false}}},
		{"crlf", "a\r\nb\r\n", 0, []item{{1, "a", false}, {2, "b", false}}},
		{"bare cr kept inside", "a\rb\n", 0, []item{{1, "a\rb", false}}},
		{"final line without newline", "a\nb", 0, []item{{1, "a", false}, {2, "b", false}}},
		{"final line with cr only", "a\nb\r", 0, []item{{1, "a", false}, {2, "b", false}}},
		{"blank lines skipped but counted", "\n  \n\t\r\na\n\n\nb\n \n", 0, []item{{4, "a", false}, {7, "b", false}}},
		{"only blank", "\n\n \n", 0, nil},
		{"bom stripped on the first line", "\xEF\xBB\xBFa\n\xEF\xBB\xBFb\n", 0, []item{{1, "a", false}, {2, "\xEF\xBB\xBFb", false}}},
		{"exactly max", "12345\n123456\n", 5, []item{{1, "12345", false}, {2, "", true}}},
		{"exactly max with crlf", "12345\r\n", 5, []item{{1, "12345", false}}},
		{"max plus cr is too long", "123456\r\nx\n", 5, []item{{1, "", true}, {2, "x", false}}},
		{"exactly max at eof", "12345", 5, []item{{1, "12345", false}}},
		{"too long at eof", "123456", 5, []item{{1, "", true}}},
		{"100 KiB line with a 64 KiB max", "a\n" + big + "\n{\"next\":1}\n", 64 * kib, []item{{1, "a", false}, {2, "", true}, {3, `{"next":1}`, false}}},
		{"100 KiB line accepted with a 100 KiB max", big + "\nb", 100 * kib, []item{{1, big, false}, {2, "b", false}}},
		{"64 KiB plus one, several buffers", strings.Repeat("b", 64*kib+1) + "\nc\n", 200 * kib, []item{{1, strings.Repeat("b", 64*kib+1), false}, {2, "c", false}}},
		{"long blank line skipped", strings.Repeat(" ", 100*kib) + "\nz\n", 10, []item{{2, "z", false}}},
		{"long line of spaces then text is too long", strings.Repeat(" ", 100*kib) + "x\nz\n", 10, []item{{1, "", true}, {2, "z", false}}},
		{"default max", big + "\n", 0, []item{{1, big, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, mode := range []string{"whole", "one byte at a time"} {
				var r io.Reader = strings.NewReader(tt.input)
				if mode != "whole" {
					r = iotest.OneByteReader(r)
				}
				got, err := drain(t, NewLineReader(r, tt.max))
				if err != nil {
					t.Fatalf("%s: %v", mode, err)
				}
				if !equalItems(got, tt.want) {
					t.Fatalf("%s: got %s, want %s", mode, showItems(got), showItems(tt.want))
				}
			}
		})
	}
}

func TestLineReaderError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("a\nb"), iotest.ErrReader(boom))
	lr := NewLineReader(r, 0)
	if n, raw, _, err := lr.Next(); err != nil || n != 1 || string(raw) != "a" {
		t.Fatalf("Next() = %d, %q, %v", n, raw, err)
	}
	for range 2 { // the error sticks
		if _, _, _, err := lr.Next(); !errors.Is(err, boom) || !strings.Contains(err.Error(), "read line 2") {
			t.Fatalf("Next() error = %v, want boom with context", err)
		}
	}
}

func TestLineReaderEOFSticks(t *testing.T) {
	lr := NewLineReader(strings.NewReader("a"), 0)
	lr.Next()
	for range 2 {
		if _, _, _, err := lr.Next(); err != io.EOF {
			t.Fatalf("err = %v, want io.EOF", err)
		}
	}
}

func equalItems(a, b []item) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func showItems(items []item) string {
	var b strings.Builder
	for _, it := range items {
		raw := it.raw
		if len(raw) > 40 {
			raw = raw[:40] + "…"
		}
		b.WriteString("[" + strconv.Itoa(it.n) + " " + raw)
		if it.tooLong {
			b.WriteString(" TOO LONG")
		}
		b.WriteString("] ")
	}
	return b.String()
}
