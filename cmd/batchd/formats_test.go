package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// formatsDir is the published descriptions of the formats batchd's users
// come from (BATCHD_FORMATS, set by .ci/run to ../shared/formats).
func formatsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("BATCHD_FORMATS")
	if dir == "" {
		t.Skip("BATCHD_FORMATS is not set: the published format descriptions (../shared/formats) are not available")
	}
	return dir
}

// formatExamples returns every batch line a format description shows, as
// written: one-line examples ({"custom_id": ... on one line) and
// pretty-printed ones (an object over several lines with a custom_id),
// compacted to one line each.
func formatExamples(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var obj []string
	depth := 0
	for _, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if depth == 0 && strings.HasPrefix(trimmed, `{"custom_id"`) {
			out = append(out, trimmed)
			continue
		}
		if depth == 0 && trimmed != "{" {
			continue
		}
		obj = append(obj, line)
		depth += strings.Count(line, "{") - strings.Count(line, "}")
		if depth > 0 {
			continue
		}
		text := strings.Join(obj, "\n")
		obj, depth = nil, 0
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
	dir := formatsDir(t)
	for _, tc := range []struct {
		file     string
		examples int
	}{
		{"batchgen-input-format.txt", 10},
		{"doubleword-jsonl.txt", 3},
	} {
		t.Run(tc.file, func(t *testing.T) {
			lines := formatExamples(t, filepath.Join(dir, tc.file))
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
