package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchd/batchd/internal/formatdocs"
)

// Every request example of BatchGen's and Doubleword's format descriptions
// is a valid batch line to batchd, as written.
func TestFormatExamplesValidate(t *testing.T) {
	for _, tc := range []struct {
		file     string
		examples int
	}{
		{formatdocs.BatchGen, 10},
		{formatdocs.Doubleword, 3},
	} {
		t.Run(tc.file, func(t *testing.T) {
			lines := formatdocs.BatchLines(t, formatdocs.Path(t, tc.file))
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
