// Package formatdocs reads the published descriptions of the formats
// batchd's users come from (BATCHD_FORMATS, set by CI to ../shared/formats),
// so that tests run every example they show, as written.
//
// It is for tests only and imports nothing of batchd.
package formatdocs

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// EdgeLLM is TensorRT Edge-LLM's input JSON description: the requests
// document's format.
const EdgeLLM = "tensorrt-edge-llm-input-json.txt"

// BatchGen's and Doubleword's descriptions: OpenAI batch JSONL as each
// uses it.
const (
	BatchGen   = "batchgen-input-format.txt"
	Doubleword = "doubleword-jsonl.txt"
)

// Path returns the path of the description named file, and skips t when
// BATCHD_FORMATS is not set.
func Path(t testing.TB, file string) string {
	t.Helper()
	dir := os.Getenv("BATCHD_FORMATS")
	if dir == "" {
		t.Skip("BATCHD_FORMATS is not set: the published format descriptions (../shared/formats) are not available")
	}
	return filepath.Join(dir, file)
}

// Objects returns every JSON object the description at path shows at the
// top level of its text, in order and as written: a line that starts with
// "{" and closes on the same line, or a "{" line alone up to the line that
// closes it. The callers keep the ones they mean (a request line, a
// document) by their keys; a snippet that is not JSON is theirs to skip.
func Objects(t testing.TB, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out, obj []string
	depth := 0
	for _, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if depth == 0 && trimmed != "{" {
			if strings.HasPrefix(trimmed, "{") && braces(trimmed) == 0 {
				out = append(out, trimmed)
			}
			continue
		}
		obj = append(obj, line)
		depth += braces(line)
		if depth > 0 {
			continue
		}
		out = append(out, strings.Join(obj, "\n"))
		obj, depth = nil, 0
	}
	return out
}

// braces is how many more "{" than "}" line holds.
func braces(line string) int {
	return strings.Count(line, "{") - strings.Count(line, "}")
}

// BatchLines returns every batch line the description at path shows, as
// written: one-line examples ({"custom_id": ... on one line) and
// pretty-printed ones (an object over several lines with a custom_id and a
// method), compacted to one line each. Results examples are left out.
func BatchLines(t testing.TB, path string) []string {
	t.Helper()
	var out []string
	for _, text := range Objects(t, path) {
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
