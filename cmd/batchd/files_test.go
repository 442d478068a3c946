package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const prepLines = `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"old","messages":[{"role":"user","content":"hi"}],"temperature":0.10000000000000001}}
not json

{"custom_id":"b","method":"POST","url":"/v1/embeddings","body":{"input":"x"}}
`

// prepare sets the model and body fields on every line, keeps everything
// else as written, copies a line it cannot read unchanged naming its line
// number (exit 1), and rewrites the file in place.
func TestPrepareRewritesEveryLine(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "batch.jsonl")
	writeFile(t, in, prepLines)
	code, _, stderr := cli(t, "prepare", in, "--model", "Qwen/Qwen3-VL-30B-A3B-Instruct-FP8",
		"--set", "body.max_tokens=512", "--set", `body.stop=["\n\n"]`, "--set", "body.user=alice", "--set", "body.note=12abc")
	if code != exitFailure || !strings.Contains(stderr, "line 2") || strings.Contains(stderr, "line 3") {
		t.Fatalf("exit %d, stderr %q: want 1 and line 2 (only) reported", code, stderr)
	}
	want := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"Qwen/Qwen3-VL-30B-A3B-Instruct-FP8","messages":[{"role":"user","content":"hi"}],"temperature":0.10000000000000001,"max_tokens":512,"stop":["\n\n"],"user":"alice","note":"12abc"}}
not json

{"custom_id":"b","method":"POST","url":"/v1/embeddings","body":{"input":"x","model":"Qwen/Qwen3-VL-30B-A3B-Instruct-FP8","max_tokens":512,"stop":["\n\n"],"user":"alice","note":"12abc"}}
`
	if got := readFile(t, in); got != want {
		t.Fatalf("rewritten file:\n%s\nwant:\n%s", got, want)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left %d files in the directory, want only the input", len(ents))
	}
}

// prepare -o writes another file and refuses to replace one; -o - writes to
// stdout; a bad --set is refused naming it, before anything is written.
func TestPrepareOutputAndRefusals(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "b.jsonl")
	line := `{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"prompt":"p"}}` + "\n"
	writeFile(t, in, line)
	out := filepath.Join(dir, "out.jsonl")
	if code, _, stderr := cli(t, "prepare", in, "--set", "body.seed=7", "-o", out); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got := readFile(t, out); got != `{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"prompt":"p","seed":7}}`+"\n" {
		t.Fatalf("-o file %q", got)
	}
	if readFile(t, in) != line {
		t.Fatal("prepare -o changed its input")
	}
	if code, _, stderr := cli(t, "prepare", in, "--model", "m", "-o", out); code != exitUsage || !strings.Contains(stderr, "exists") {
		t.Fatalf("-o onto an existing file: exit %d %q", code, stderr)
	}
	if code, stdout, _ := cli(t, "prepare", in, "--model", "m", "-o", "-"); code != exitOK || !strings.Contains(stdout, `"body":{"prompt":"p","model":"m"}`) {
		t.Fatalf("-o -: exit %d %q", code, stdout)
	}
	for _, bad := range []string{"model=x", "body.=1", "body.a.b=1", "body.max_tokens"} {
		code, _, stderr := cli(t, "prepare", in, "--set", bad)
		if code != exitUsage || !strings.Contains(stderr, bad) {
			t.Errorf("--set %q: exit %d %q, want 2 naming it", bad, code, stderr)
		}
	}
	if code, _, stderr := cli(t, "prepare", in); code != exitUsage || !strings.Contains(stderr, "--model") {
		t.Errorf("nothing to set: exit %d %q", code, stderr)
	}
	if readFile(t, in) != line {
		t.Fatal("a refused prepare changed its input")
	}
}

// stats counts lines, endpoints, models and invalid lines, and estimates
// prompt tokens with a model's tokenizer.
func TestStatsCountsAFile(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "s.jsonl")
	writeFile(t, in, `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m1","messages":[{"role":"user","content":"hello there"}]}}
{"custom_id":"b","method":"POST","url":"/v1/completions","body":{"model":"m1","prompt":"Once upon a time"}}
{"custom_id":"c","method":"POST","url":"/v1/embeddings","body":{"input":"a cat"}}
[1]
{"custom_id":"d","method":"POST","body":{}}
`)
	code, stdout, _ := cli(t, "stats", in)
	for _, want := range []string{"5 lines, 3 requests, 2 invalid", "/v1/chat/completions", "m1", "(none)", "line 4: not a JSON object", "line 5: no url", "give --model"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stats output lacks %q:\n%s", want, stdout)
		}
	}
	if code != exitFailure {
		t.Errorf("exit %d with invalid lines, want 1", code)
	}
	model := filepath.Join(dir, "demo.gguf")
	if code, _, stderr := cli(t, "demo-model", "--out", model); code != exitOK {
		t.Fatalf("demo-model: %s", stderr)
	}
	_, stdout, stderr := cli(t, "stats", in, "--model", model)
	if !strings.Contains(stdout, "over 3 of 3 requests") || strings.Contains(stdout, "prompt tokens: 0 ") {
		t.Fatalf("stats --model:\n%s\n%s", stdout, stderr)
	}
}

// split writes NAME.1.jsonl... of N lines each (and each part's options),
// and refuses to start when a part exists.
func TestSplitWritesPartsAndRefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "big.jsonl")
	var b strings.Builder
	for i := range 5 {
		b.WriteString(`{"custom_id":"` + string(rune('a'+i)) + `"}` + "\n")
		if i == 2 {
			b.WriteString("\n")
		}
	}
	writeFile(t, in, b.String())
	writeFile(t, filepath.Join(dir, "big.options.json"), `{"max_tokens":8}`)
	code, stdout, stderr := cli(t, "split", in, "--lines", "2")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	wants := []string{`{"custom_id":"a"}` + "\n" + `{"custom_id":"b"}` + "\n", `{"custom_id":"c"}` + "\n" + `{"custom_id":"d"}` + "\n", `{"custom_id":"e"}` + "\n"}
	for i, want := range wants {
		p := filepath.Join(dir, "big."+string(rune('1'+i))+".jsonl")
		if got := readFile(t, p); got != want {
			t.Errorf("%s: %q, want %q", p, got, want)
		}
		if !strings.Contains(stdout, p) {
			t.Errorf("stdout does not name %s: %q", p, stdout)
		}
		if got := readFile(t, filepath.Join(dir, "big."+string(rune('1'+i))+".options.json")); got != `{"max_tokens":8}` {
			t.Errorf("options of part %d: %q", i+1, got)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "big.4.jsonl")); !os.IsNotExist(err) {
		t.Error("a fourth part was written")
	}
	// Again: the parts exist, and nothing is written or changed.
	writeFile(t, filepath.Join(dir, "big.2.jsonl"), "mine\n")
	os.Remove(filepath.Join(dir, "big.1.jsonl"))
	code, _, stderr = cli(t, "split", in, "--lines", "2")
	if code != exitUsage || !strings.Contains(stderr, "big.1.options.json") && !strings.Contains(stderr, "big.2.jsonl") {
		t.Fatalf("split over existing parts: exit %d %q", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "big.1.jsonl")); !os.IsNotExist(err) || readFile(t, filepath.Join(dir, "big.2.jsonl")) != "mine\n" {
		t.Fatal("a refused split wrote files")
	}
	if code, _, _ := cli(t, "split", in, "--lines", "0"); code != exitUsage {
		t.Errorf("--lines 0: exit %d", code)
	}
}
