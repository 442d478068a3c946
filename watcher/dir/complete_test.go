package dir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/watcher"
)

func TestEndsComplete(t *testing.T) {
	tests := []struct {
		name    string
		format  string
		content string
		want    bool
	}{
		{"jsonl empty", filecontract.FormatJSONL, "", true},
		{"jsonl newline", filecontract.FormatJSONL, "{\"a\":1}\n", true},
		{"jsonl lines", filecontract.FormatJSONL, "{}\n{}\n", true},
		{"jsonl unterminated", filecontract.FormatJSONL, "{}\n{\"a\":", false},
		{"jsonl no newline", filecontract.FormatJSONL, "{\"a\":1}", false},
		{"jsonl trailing space", filecontract.FormatJSONL, "{}\n ", false},
		{"json object", filecontract.FormatJSON, `{"requests":[]}`, true},
		{"json trailing whitespace", filecontract.FormatJSON, "{\"requests\":[]}\n\t \r\n", true},
		{"json unterminated", filecontract.FormatJSON, `{"requests":[`, false},
		{"json empty", filecontract.FormatJSON, "", false},
		{"json only whitespace", filecontract.FormatJSON, " \n\n ", false},
		{"json array", filecontract.FormatJSON, `[]`, false},
		{"json long whitespace tail", filecontract.FormatJSON, "{}" + strings.Repeat(" ", 3*tailChunk+7), true},
		{"json long whitespace tail, no object", filecontract.FormatJSON, "x" + strings.Repeat("\n", 2*tailChunk), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := strings.NewReader(tt.content)
			got, err := endsComplete(r, int64(len(tt.content)), tt.format)
			if err != nil {
				t.Fatalf("endsComplete: %v", err)
			}
			if got != tt.want {
				t.Errorf("endsComplete(%q) = %v, want %v", tt.content, got, tt.want)
			}
		})
	}
}

// TestObserveSettleRule drives the completion rule with made-up observation
// times, so that it does not depend on the scheduler.
func TestObserveSettleRule(t *testing.T) {
	const settle = time.Second
	inbox := t.TempDir()
	w := New(Config{Dir: inbox, Settle: settle, Logger: testLogger(t)})
	base := "b.jsonl"
	path := filepath.Join(inbox, base)
	c, _ := classify(base)
	mtime := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

	write := func(content string, mtime time.Time) os.FileInfo {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	observe := func(info os.FileInfo, at time.Duration, want bool) {
		t.Helper()
		it, ok := w.observe(base, c, info, t0.Add(at), 0)
		if ok != want {
			t.Fatalf("observe at %v: ready = %v, want %v", at, ok, want)
		}
		if ok && (it.ev != watcher.Event{Kind: watcher.Input, Name: "b", Path: path, Format: "jsonl"}) {
			t.Fatalf("observe at %v: event %+v", at, it.ev)
		}
	}

	info := write("{}\n", mtime)
	observe(info, 0, false)
	observe(info, settle-time.Nanosecond, false)
	// The file grows: the Settle period starts again.
	info = write("{}\n{}\n", mtime.Add(time.Second))
	observe(info, settle, false)
	observe(info, 2*settle-time.Nanosecond, false)
	observe(info, 2*settle, true)
	// Delivered once per version.
	observe(info, 3*settle, false)
	observe(info, 9*settle, false)

	// Forget: the same version is a candidate again, after Settle.
	w.Forget(path)
	observe(info, 10*settle, false)
	observe(info, 11*settle, true)

	// A new version after delivery is delivered again once it is complete.
	info = write("{}\n{}\n{\"a\"", mtime.Add(2*time.Second))
	observe(info, 20*settle, false)
	observe(info, 21*settle, false) // stable but unterminated
	if p := w.pending[base]; p == nil || !p.parked {
		t.Fatalf("an unterminated stable file should be parked, got %+v", p)
	}
	if ready := w.checkDue(t0.Add(30 * settle)); len(ready) != 0 {
		t.Fatalf("checkDue delivered a parked file: %+v", ready)
	}
	info = write("{}\n{}\n{\"a\":1}\n", mtime.Add(3*time.Second))
	observe(info, 22*settle, false)
	observe(info, 23*settle, true)

	// A cancel is delivered at its first observation, once.
	cbase := "b.cancel"
	cpath := filepath.Join(inbox, cbase)
	if err := os.WriteFile(cpath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cinfo, err := os.Stat(cpath)
	if err != nil {
		t.Fatal(err)
	}
	cc, _ := classify(cbase)
	if it, ok := w.observe(cbase, cc, cinfo, t0, 0); !ok || it.ev.Kind != watcher.Cancel || it.ev.Name != "b" {
		t.Fatalf("cancel: got %+v, %v", it.ev, ok)
	}
	if err := os.WriteFile(cpath, []byte("because"), 0o644); err != nil {
		t.Fatal(err)
	}
	if cinfo, err = os.Stat(cpath); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.observe(cbase, cc, cinfo, t0.Add(settle), 0); ok {
		t.Fatal("a rewritten cancel was delivered twice")
	}
}

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
