package filecontract

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheckName(t *testing.T) {
	for _, tt := range []struct{ name, code string }{
		{"plain", ""},
		{"ünïcödé name", ""},
		{strings.Repeat("a", MaxNameBytes), ""},
		{strings.Repeat("a", MaxNameBytes+1), CodeNameTooLong},
		{strings.Repeat("a", 240), CodeNameTooLong},
		{"new\nline", CodeInvalidName},
		{"del\x7f", CodeInvalidName},
		{"c1\u0085", CodeInvalidName},
		{"bad\xff", CodeInvalidName},
		{"nested/name", CodeInvalidName},
		{"../up", CodeInvalidName},
		{"/rooted", CodeInvalidName},
	} {
		if code, msg := CheckName(tt.name); code != tt.code || (code != "") != (msg != "") {
			t.Errorf("CheckName(%q) = %q, %q; want code %q", tt.name, code, msg, tt.code)
		}
	}
}

// Every name batchd derives from the longest usable name, temporaries
// included, fits the file-name limit.
func TestMaxNameBytesFitsDerivedNames(t *testing.T) {
	name := strings.Repeat("a", MaxNameBytes)
	for _, s := range derivedSuffixes {
		for _, derived := range []string{name + s, "." + name + s + ".tmp", "." + name + s + ".part",
			"." + name + s + "-4294967295.tmp"} {
			if len(derived) > maxFileName {
				t.Errorf("%d bytes: %s", len(derived), derived)
			}
		}
	}
}

func FuzzSafeName(f *testing.F) {
	for _, s := range []string{"ok", strings.Repeat("x", 300), "a\nb", "\xff\xfe", "..x\x00", "", "a/../../b", "/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if strings.HasPrefix(name, ".") {
			return // no source yields such a name (a bucket's nested key is a/.b: a dot-name, ignored)
		}
		safe := SafeName(name)
		if code, msg := CheckName(safe); code != "" {
			t.Fatalf("SafeName(%q) = %q, refused: %s", name, safe, msg)
		}
		if code, _ := CheckName(name); code == "" && safe != name {
			t.Fatalf("SafeName changed the usable name %q to %q", name, safe)
		}
		if got, _, ok := ParseInbox(safe + SuffixJSONL); safe != "" && (!ok || got != safe) {
			t.Fatalf("SafeName(%q) = %q, not a batch name of its own", name, safe)
		}
		if !utf8.ValidString(safe) {
			t.Fatalf("SafeName(%q) = %q, not UTF-8", name, safe)
		}
	})
}
