package dir

import (
	"strings"
	"testing"

	"github.com/batchd/batchd/watcher"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		base string
		ok   bool
		want class
	}{
		{base: "b1.jsonl", ok: true, want: class{kind: watcher.Input, name: "b1", format: "jsonl"}},
		{base: "b1.json", ok: true, want: class{kind: watcher.Input, name: "b1", format: "json"}},
		{base: "b1.cancel", ok: true, want: class{kind: watcher.Cancel, name: "b1"}},
		{base: "a.b.jsonl", ok: true, want: class{kind: watcher.Input, name: "a.b", format: "jsonl"}},
		{base: "x.options.jsonl", ok: true, want: class{kind: watcher.Input, name: "x.options", format: "jsonl"}},
		{base: "options.json", ok: true, want: class{kind: watcher.Input, name: "options", format: "json"}},
		{base: "b1.options.json"},
		{base: ".options.json"},
		{base: ".b1.jsonl"},
		{base: ".cancel"},
		{base: ".jsonl"},
		{base: "b1.jsonl.tmp"},
		{base: "b1.jsonl.part"},
		{base: "b1.tmp"},
		{base: "b1.part"},
		{base: "b1.txt"},
		{base: "b1.JSONL"},
		{base: "b1"},
		{base: ""},
	}
	for _, tt := range tests {
		got, ok := classify(tt.base)
		if ok != tt.ok || got != tt.want {
			t.Errorf("classify(%q) = %+v, %v; want %+v, %v", tt.base, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzClassify(f *testing.F) {
	for _, s := range []string{"b.jsonl", "b.json", "b.cancel", "b.options.json", ".b.jsonl", "b.tmp", "x.part", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, base string) {
		c, ok := classify(base)
		if !ok {
			return
		}
		if c.name == "" || strings.HasPrefix(base, ".") || strings.HasSuffix(base, ".options.json") ||
			strings.HasSuffix(base, ".tmp") || strings.HasSuffix(base, ".part") {
			t.Fatalf("classify(%q) accepted %+v", base, c)
		}
		var suffix string
		switch {
		case c.kind == watcher.Cancel && c.format == "":
			suffix = ".cancel"
		case c.kind == watcher.Input && c.format == "jsonl":
			suffix = ".jsonl"
		case c.kind == watcher.Input && c.format == "json":
			suffix = ".json"
		default:
			t.Fatalf("classify(%q) = inconsistent %+v", base, c)
		}
		if c.name+suffix != base {
			t.Fatalf("classify(%q) = %+v: name and suffix do not rebuild the base", base, c)
		}
	})
}
