package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/internal/formatdocs"
)

// formatExamples returns every batch line a format description shows, as
// written: one-line examples ({"custom_id": ... on one line) and
// pretty-printed ones (an object over several lines with a custom_id and a
// method), compacted to one line each.
func formatExamples(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, text := range formatdocs.Objects(t, path) {
		if !strings.Contains(text, "\n") {
			if strings.HasPrefix(text, `{"custom_id"`) {
				out = append(out, text)
			}
			continue
		}
		var probe struct {
			CustomID *string `json:"custom_id"`
			Method   *string `json:"method"`
		}
		if json.Unmarshal([]byte(text), &probe) != nil || probe.CustomID == nil || probe.Method == nil {
			continue // a results example, not a request
		}
		var b bytes.Buffer
		if err := json.Compact(&b, []byte(text)); err != nil {
			t.Fatalf("%s: example %q: %v", path, text, err)
		}
		out = append(out, b.String())
	}
	return out
}

// Every request example of BatchGen's and Doubleword's format descriptions
// is a valid batch line to batchd, as written.
func TestFormatExamplesValidate(t *testing.T) {
	for _, tc := range []struct {
		file     string
		examples int
	}{
		{"batchgen-input-format.txt", 10},
		{"doubleword-jsonl.txt", 3},
	} {
		t.Run(tc.file, func(t *testing.T) {
			lines := formatExamples(t, formatdocs.Path(t, tc.file))
			if len(lines) != tc.examples {
				t.Fatalf("found %d request examples in %s, want %d: %q", len(lines), tc.file, tc.examples, lines)
			}
			// Each example is its own file: two reuse the id req-1.
			for i, line := range lines {
				in := writeFile(t, filepath.Join(t.TempDir(), "example.jsonl"), line+"\n")
				code, stdout, stderr := cli(t, "validate", in)
				if code != exitOK || !strings.Contains(stdout, "1 requests, 1 valid, 0 invalid") {
					t.Errorf("example %d %s: validate: exit %d\n%s%s", i+1, line, code, stdout, stderr)
				}
			}
		})
	}
}
