package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/internal/syncbuf"
	"github.com/batchd/batchd/pipeline"
)

// cli runs batchd in-process with args and returns its exit code and output.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code = mainArgs(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// startDaemon runs a daemon in this process on data, against a fresh
// stand-in server; both stop when the test ends.
func startDaemon(t *testing.T, data string) *daemon.Daemon {
	t.Helper()
	return startDaemonWith(t, data, nil)
}

// startDaemonWith is startDaemon with the config adjusted by edit.
func startDaemonWith(t *testing.T, data string, edit func(*daemon.Config)) *daemon.Daemon {
	t.Helper()
	logs := new(syncbuf.Buffer)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs)
		}
	})
	srv := openaitest.NewServer(openaitest.Options{})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cfg := daemon.DefaultConfig()
	cfg.Data, cfg.Listen = data, ""
	cfg.Engine = "openai"
	cfg.OpenAI.URLs = []string{srv.URL()}
	cfg.OpenAI.RetryWaitMin, cfg.OpenAI.RetryWaitMax, cfg.OpenAI.MaxRetries = 5*time.Millisecond, 50*time.Millisecond, 2
	cfg.OpenAI.ProbeInterval = 20 * time.Millisecond
	cfg.Pipeline.CommitInterval = 20 * time.Millisecond
	cfg.Pipeline.ProgressInterval = 20 * time.Millisecond
	cfg.Watcher.Settle = 50 * time.Millisecond
	cfg.Watcher.Rescan = time.Second
	if edit != nil {
		edit(&cfg)
	}
	d := daemon.New(cfg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err := d.Open(context.Background()); err != nil {
		t.Fatalf("open daemon: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Errorf("close daemon: %v", err)
		}
	})
	return d
}

// chatBatch returns n valid chat lines with custom_ids prefix0..prefixN-1.
func chatBatch(n int, prefix string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"%s%d","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hello number %d"}],"max_tokens":5}}`+"\n", prefix, i, i)
	}
	return b.String()
}

// mixedBatch has valid lines 1, 2, 4 and 6, and invalid lines 3
// (not JSON), 5 (a duplicate custom_id) and 7 (temperature out of range).
const mixedBatch = `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"max_tokens":5}}
{"custom_id":"b","method":"POST","url":"/v1/completions","body":{"prompt":"hi there","max_tokens":5}}
{not json
{"custom_id":"c","method":"POST","url":"/v1/embeddings","body":{"input":"hi there"}}
{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"again"}],"max_tokens":5}}
{"custom_id":"d","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"max_tokens":5}}
{"custom_id":"e","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"temperature":9}}
`

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

func TestValidateExitCodes(t *testing.T) {
	dir := t.TempDir()
	valid := writeFile(t, filepath.Join(dir, "valid.jsonl"), chatBatch(3, "v"))
	mixed := writeFile(t, filepath.Join(dir, "mixed.jsonl"), mixedBatch)
	// max_tokens comes from the options file beside the input.
	defaulted := writeFile(t, filepath.Join(dir, "defaulted.jsonl"),
		`{"custom_id":"x","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}]}}`+"\n")
	writeFile(t, filepath.Join(dir, "defaulted.options.json"), `{"max_tokens": 7}`)
	badOpts := writeFile(t, filepath.Join(dir, "badopts.jsonl"), chatBatch(1, "o"))
	writeFile(t, filepath.Join(dir, "badopts.options.json"), `{"temperatur": 1}`)
	doc := writeFile(t, filepath.Join(dir, "doc.json"), `{"url":"/v1/chat/completions","defaults":{"max_tokens":4},"requests":[
		{"custom_id":"a","messages":[{"role":"user","content":"one"}]},
		{"custom_id":"b","messages":[{"role":"user","content":"two"}]}]}`)
	txt := writeFile(t, filepath.Join(dir, "notes.txt"), "hello\n")
	// No output length: valid (until the context is full) unless the
	// batch asks to reject it.
	nomax := writeFile(t, filepath.Join(dir, "nomax.jsonl"),
		`{"custom_id":"x","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}]}}`+"\n")
	strict := writeFile(t, filepath.Join(dir, "strict.json"), `{"on_missing_max_tokens":"reject"}`)
	badMissing := writeFile(t, filepath.Join(dir, "badmissing.json"), `{"on_missing_max_tokens":"refuse"}`)
	// lora_name is forwarded to a remote engine, refused by the native one.
	lora := writeFile(t, filepath.Join(dir, "lora.jsonl"),
		`{"custom_id":"l","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"lora_name":"sql","max_tokens":3}}`+"\n"+
			`{"custom_id":"r","method":"POST","url":"/v1/completions","body":{"prompt":"hi","response_format":{"type":"json_object"}}}`+"\n"+
			`{"custom_id":"n","method":"POST","url":"/v1/completions","body":{"prompt":"hi","num_logprobs":2}}`+"\n")
	// Media parts are forwarded to a remote engine, refused by the native one.
	media := writeFile(t, filepath.Join(dir, "media.jsonl"),
		`{"custom_id":"i","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":[{"type":"text","text":"what?"},{"type":"image_url","image_url":{"url":"https://x/cat.png"}}]}],"max_tokens":3}}`+"\n"+
			`{"custom_id":"t","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":3}}`+"\n")

	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   []string // each must appear in stdout
		stdoutN  int      // lines of stdout, when not zero
		stderr   string   // must appear in stderr
		noStdout string   // must not appear in stdout
	}{
		{name: "all valid", args: []string{valid}, code: exitOK,
			stdout: []string{valid + ": 3 requests, 3 valid, 0 invalid"}, stdoutN: 1},
		{name: "some invalid", args: []string{mixed}, code: exitFailure,
			stdout: []string{
				"line 3: invalid_json_line: ",
				`line 5: custom_id "a": duplicate_custom_id: `,
				`line 7: custom_id "e": body.temperature: must be between 0 and 2`,
				mixed + ": 7 requests, 4 valid, 3 invalid",
			}, stdoutN: 4, noStdout: "line 1:"},
		{name: "quiet prints the summary only", args: []string{"-q", mixed}, code: exitFailure,
			stdout: []string{mixed + ": 7 requests, 4 valid, 3 invalid"}, stdoutN: 1},
		{name: "options beside the file apply", args: []string{defaulted}, code: exitOK,
			stdout: []string{"1 requests, 1 valid, 0 invalid"}},
		{name: "an explicit options file wins", args: []string{"--options", filepath.Join(dir, "defaulted.options.json"), badOpts}, code: exitOK,
			stdout: []string{"1 requests, 1 valid, 0 invalid"}},
		{name: "requests document", args: []string{doc}, code: exitOK,
			stdout: []string{doc + ": 2 requests, 2 valid, 0 invalid"}},
		{name: "missing file", args: []string{filepath.Join(dir, "nope.jsonl")}, code: exitUsage,
			stderr: "no such file"},
		{name: "invalid options file", args: []string{badOpts}, code: exitUsage, stderr: "options:"},
		{name: "not a batch file name", args: []string{txt}, code: exitUsage, stderr: "must end in .jsonl"},
		{name: "an options file is not an input", args: []string{filepath.Join(dir, "defaulted.options.json")}, code: exitUsage,
			stderr: "is an options file"},
		{name: "no file", args: nil, code: exitUsage, stderr: "usage: batchd validate"},
		{name: "no max_tokens is valid", args: []string{nomax}, code: exitOK,
			stdout: []string{"1 requests, 1 valid, 0 invalid"}},
		{name: "on_missing_max_tokens reject", args: []string{"--options", strict, nomax}, code: exitFailure,
			stdout: []string{`custom_id "x": body.max_tokens: max_tokens is required by the batch option on_missing_max_tokens: reject`}},
		{name: "on_missing_max_tokens unknown value", args: []string{"--options", badMissing, nomax}, code: exitUsage,
			stderr: `on_missing_max_tokens: must be "reject"`},
		{name: "without --model, engine fields pass", args: []string{lora}, code: exitFailure,
			stdout: []string{`custom_id "n": body.num_logprobs: is a requests-document name`, "3 requests, 2 valid, 1 invalid"}},
		{name: "--model checks as the native engine", args: []string{"--model", "demo", lora}, code: exitFailure,
			stdout: []string{
				`custom_id "r": body.response_format: is not supported by the native engine`,
				`custom_id "n": body.num_logprobs: is a requests-document name`,
				"3 requests, 1 valid, 2 invalid",
			}},
		{name: "without --model, media parts pass", args: []string{media}, code: exitOK,
			stdout: []string{"2 requests, 2 valid, 0 invalid"}},
		{name: "--model refuses media parts as the native engine", args: []string{"--model", "demo", media}, code: exitFailure,
			stdout: []string{
				`custom_id "i": body.messages[0].content[1]: content part type "image_url" is not supported: the native engine is text only`,
				"2 requests, 1 valid, 1 invalid",
			}, stdoutN: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := cli(t, append([]string{"validate"}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout)
				}
			}
			if tc.stdoutN != 0 && len(nonEmptyLines(stdout)) != tc.stdoutN {
				t.Errorf("stdout has %d lines, want %d:\n%s", len(nonEmptyLines(stdout)), tc.stdoutN, stdout)
			}
			if tc.noStdout != "" && strings.Contains(stdout, tc.noStdout) {
				t.Errorf("stdout has %q:\n%s", tc.noStdout, stdout)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, stderr)
			}
		})
	}
}

func TestSubmitPlacesTheFileAtomically(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	inbox := filepath.Join(data, "inbox")
	// Big enough that a plain copy into place would be seen half written.
	content := chatBatch(40000, "big")
	src := writeFile(t, filepath.Join(dir, "big.jsonl"), content)
	opts := writeFile(t, filepath.Join(dir, "opts.json"), `{"max_tokens": 9}`)
	if err := os.MkdirAll(inbox, 0o755); err != nil {
		t.Fatal(err)
	}

	// A reader polling the inbox must never see big.jsonl shorter than the
	// whole file, nor it before its options file.
	var torn, early atomic.Value
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if st, err := os.Stat(filepath.Join(inbox, "big.jsonl")); err == nil {
				if st.Size() != int64(len(content)) {
					torn.Store(st.Size())
				}
				if _, err := os.Stat(filepath.Join(inbox, "big.options.json")); err != nil {
					early.Store(true)
				}
			}
		}
	}()
	code, stdout, stderr := cli(t, "submit", src, "--data", data, "--options", opts)
	close(stop)
	<-watched
	if code != exitOK {
		t.Fatalf("submit: exit %d\n%s%s", code, stdout, stderr)
	}
	if v := torn.Load(); v != nil {
		t.Errorf("the inbox showed big.jsonl with %d of %d bytes", v, len(content))
	}
	if early.Load() != nil {
		t.Error("big.jsonl appeared in the inbox before big.options.json")
	}
	if want := fmt.Sprintf("as batch %q (%s)", "big", filepath.Join(inbox, "big.jsonl")); !strings.Contains(stdout, want) {
		t.Errorf("stdout lacks %q: %s", want, stdout)
	}
	if got, err := os.ReadFile(filepath.Join(inbox, "big.jsonl")); err != nil || string(got) != content {
		t.Errorf("inbox/big.jsonl: %v (same content: %v)", err, string(got) == content)
	}
	if got, err := os.ReadFile(filepath.Join(inbox, "big.options.json")); err != nil || string(got) != `{"max_tokens": 9}` {
		t.Errorf("inbox/big.options.json: %q %v", got, err)
	}

	// --name chooses the batch name.
	if code, stdout, stderr := cli(t, "submit", "--data", data, "--name", "renamed", src); code != exitOK {
		t.Fatalf("submit --name: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(inbox, "renamed.jsonl")); err != nil {
		t.Errorf("submit --name: %v", err)
	}
	if bad := leftovers(t, inbox); len(bad) > 0 {
		t.Errorf("temporary files left in the inbox: %v", bad)
	}

	// Refusals leave nothing behind.
	for _, args := range [][]string{
		{"submit", "--data", data, filepath.Join(dir, "missing.jsonl")},
		{"submit", "--data", data, writeFile(t, filepath.Join(dir, "x.txt"), "x")},
		{"submit", "--data", data},
	} {
		if code, _, _ := cli(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
	ents, _ := os.ReadDir(inbox)
	if len(ents) != 3 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("inbox holds %v, want big.jsonl, big.options.json, renamed.jsonl", names)
	}
}

// writeObject writes outbox/NAME.batch.json.
func writeObject(t *testing.T, outbox string, o pipeline.BatchObject) {
	t.Helper()
	raw, err := json.MarshalIndent(o, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(outbox, o.Batchd.Name+".batch.json"), string(raw))
}

func TestStatusListsBatchesAndQueuedInputs(t *testing.T) {
	data := t.TempDir()
	dirs := daemon.DataDirs(data)
	started := int64(1700000100)
	writeObject(t, dirs.Outbox, pipeline.BatchObject{
		ID: "batch_a", Object: "batch", Status: pipeline.StatusCompleted, CreatedAt: 1700000000, InProgressAt: &started,
		RequestCounts: pipeline.RequestCounts{Total: 10, Completed: 9, Failed: 1},
		Batchd:        pipeline.BatchdInfo{Name: "alpha", Rate: 12.5},
	})
	writeObject(t, dirs.Outbox, pipeline.BatchObject{
		ID: "batch_b", Object: "batch", Status: pipeline.StatusInProgress, CreatedAt: 1700000050, InProgressAt: &started,
		RequestCounts: pipeline.RequestCounts{Total: 10, Completed: 2, Failed: 1},
		Batchd:        pipeline.BatchdInfo{Name: "beta", Paused: true},
	})
	writeFile(t, filepath.Join(dirs.Inbox, "beta.jsonl"), chatBatch(1, "b")) // has an object: listed once
	writeFile(t, filepath.Join(dirs.Inbox, "gamma.jsonl"), chatBatch(1, "g"))
	writeFile(t, filepath.Join(dirs.Inbox, "delta.json"), `{"requests":[]}`)
	for _, ignored := range []string{".hidden.jsonl", "gamma.options.json", "notes.txt", "gamma.cancel"} {
		writeFile(t, filepath.Join(dirs.Inbox, ignored), "{}")
	}
	// Entries the daemon refuses or leaves alone are not queued inputs.
	if err := os.Mkdir(filepath.Join(dirs.Inbox, "dir.jsonl"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(dirs.Inbox, "link.jsonl")); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := cli(t, "status", "--data", data)
	if code != exitOK {
		t.Fatalf("status: exit %d\n%s%s", code, stdout, stderr)
	}
	lines := nonEmptyLines(stdout)
	if len(lines) != 5 {
		t.Fatalf("status printed %d lines, want a header and 4 rows:\n%s", len(lines), stdout)
	}
	want := [][]string{
		{"NAME", "STATUS", "DONE/TOTAL", "FAILED", "STARTED", "RATE"},
		{"alpha", "completed", "10/10", "1"},
		{"beta", "in_progress (engine paused)", "3/10", "1"},
	}
	for i, fields := range want {
		for _, f := range fields {
			if !strings.Contains(lines[i], f) {
				t.Errorf("line %d lacks %q: %q", i+1, f, lines[i])
			}
		}
	}
	if !strings.Contains(lines[1], "12.5/s") {
		t.Errorf("alpha's rate missing: %q", lines[1])
	}
	queued := map[string]bool{}
	for _, l := range lines[3:] {
		f := strings.Fields(l)
		if len(f) < 2 || f[1] != "queued" {
			t.Errorf("want a queued row, got %q", l)
			continue
		}
		queued[f[0]] = true
	}
	if !queued["gamma"] || !queued["delta"] {
		t.Errorf("queued rows %v, want gamma and delta", queued)
	}
	if strings.Contains(stdout, "hidden") || strings.Contains(stdout, "notes") {
		t.Errorf("status lists ignored inbox files:\n%s", stdout)
	}

	// One batch by name.
	code, stdout, _ = cli(t, "status", "--data", data, "beta")
	if lines := nonEmptyLines(stdout); code != exitOK || len(lines) != 2 || !strings.HasPrefix(lines[1], "beta") {
		t.Errorf("status beta: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = cli(t, "status", "gamma", "--data", data)
	if lines := nonEmptyLines(stdout); code != exitOK || len(lines) != 2 || !strings.Contains(lines[1], "queued") {
		t.Errorf("status gamma: exit %d\n%s", code, stdout)
	}
	if code, _, stderr := cli(t, "status", "--data", data, "nope"); code != exitFailure || !strings.Contains(stderr, `no batch named "nope"`) {
		t.Errorf("status nope: exit %d, stderr %q", code, stderr)
	}
	// An empty data directory lists nothing, without error.
	if code, stdout, _ := cli(t, "status", "--data", t.TempDir()); code != exitOK || len(nonEmptyLines(stdout)) != 1 {
		t.Errorf("empty status: exit %d\n%s", code, stdout)
	}
}

// replaceLine returns lines joined, with line i replaced by line.
func replaceLine(lines []string, i int, line string) string {
	out := slices.Clone(lines)
	out[i] = line
	return strings.Join(out, "")
}

// withResponseBody returns result line line, its newline kept, with
// response.body replaced by body.
func withResponseBody(t *testing.T, line, body string) string {
	t.Helper()
	var l map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &l); err != nil {
		t.Fatal(err)
	}
	var resp map[string]json.RawMessage
	if err := json.Unmarshal(l["response"], &resp); err != nil {
		t.Fatal(err)
	}
	resp["body"] = json.RawMessage(body)
	var err error
	if l["response"], err = json.Marshal(resp); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

// waitFinished waits until batch name is completed and its input is in done/.
func waitFinished(t *testing.T, data, name, format string) {
	t.Helper()
	waitFor(t, 60*time.Second, "batch "+name+" to finish", func() bool { return finished(data, name, format) })
}

func TestCheckDetectsTamperedOutputs(t *testing.T) {
	data := t.TempDir()
	startDaemon(t, data)
	dirs := daemon.DataDirs(data)
	placeInput(t, dirs.Inbox, "tamper.jsonl", []byte(chatBatch(20, "t")+mixedBatch))
	waitFinished(t, data, "tamper", "jsonl")

	code, stdout, stderr := cli(t, "check", "--data", data, "tamper")
	if code != exitOK || !strings.Contains(stdout, "OK tamper (completed): 27 requests, each exactly once (24 output lines, 3 error lines)") {
		t.Fatalf("check intact: exit %d\n%s%s", code, stdout, stderr)
	}

	outPath := filepath.Join(dirs.Outbox, "tamper.output.jsonl")
	errPath := filepath.Join(dirs.Outbox, "tamper.errors.jsonl")
	intact, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	intactErrs, err := os.ReadFile(errPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(intact), "\n")
	errLines := strings.SplitAfter(string(intactErrs), "\n")
	// A chat answer's line (lines are in the order answers came, so the
	// batch's completions and embeddings may come first).
	chatLine := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, `"content":"`) })
	if chatLine < 0 {
		t.Fatalf("no chat answer among the output lines:\n%s", intact)
	}
	var victim struct {
		CustomID string `json:"custom_id"`
	}
	if err := json.Unmarshal([]byte(lines[4]), &victim); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name          string
		output, errs  string
		want          []string
		wantInSummary string
	}{
		{name: "a line deleted", output: strings.Join(append(append([]string{}, lines[:4]...), lines[5:]...), ""), errs: string(intactErrs),
			want: []string{fmt.Sprintf("(custom_id %q): no result line", victim.CustomID), "request_counts.completed 24, but the output file has 23 lines"}},
		{name: "a line duplicated", output: string(intact) + lines[4], errs: string(intactErrs),
			want: []string{fmt.Sprintf("(custom_id %q): 2 result lines", victim.CustomID)}},
		{name: "an error line deleted", output: string(intact), errs: strings.Join(errLines[1:], ""),
			want: []string{"no result line", "request_counts.failed 3, but the errors file has 2 lines"}},
		{name: "a success line in the errors file", output: strings.Join(lines[1:], ""), errs: string(intactErrs) + lines[0],
			want: []string{"a success line in the wrong file"}},
		{name: "a torn last line", output: string(intact[:len(intact)-10]), errs: string(intactErrs),
			want: []string{"torn line"}},
		{name: "invalid UTF-8 in a line", output: replaceLine(lines, chatLine, strings.Replace(lines[chatLine], `"content":"`, "\"content\":\"\xff", 1)), errs: string(intactErrs),
			want: []string{fmt.Sprintf("tamper.output.jsonl:%d: not valid UTF-8 (at byte", chatLine+1)}},
		{name: "a body that is not an object", output: replaceLine(lines, 3, withResponseBody(t, lines[3], `["not","an","object"]`)), errs: string(intactErrs),
			want: []string{"tamper.output.jsonl:4: response.body is an array, not a JSON object"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			writeFile(t, outPath, tc.output)
			writeFile(t, errPath, tc.errs)
			code, stdout, stderr := cli(t, "check", "--data", data, "tamper")
			if code != exitFailure {
				t.Errorf("exit %d, want %d\n%s%s", code, exitFailure, stdout, stderr)
			}
			for _, w := range append(tc.want, "FAIL tamper (completed)") {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
		})
	}

	// Restored, it passes again.
	writeFile(t, outPath, string(intact))
	writeFile(t, errPath, string(intactErrs))
	if code, stdout, _ := cli(t, "check", "tamper", "--data", data); code != exitOK {
		t.Errorf("check restored: exit %d\n%s", code, stdout)
	}
	// A batch that does not exist, or has no results yet.
	if code, _, stderr := cli(t, "check", "--data", data, "nope"); code != exitUsage || !strings.Contains(stderr, `no input for batch "nope"`) {
		t.Errorf("check nope: exit %d, stderr %q", code, stderr)
	}
	other := t.TempDir()
	writeFile(t, filepath.Join(other, "inbox", "pending.jsonl"), chatBatch(1, "p"))
	if code, _, stderr := cli(t, "check", "--data", other, "pending"); code != exitUsage || !strings.Contains(stderr, "has no results yet") {
		t.Errorf("check pending: exit %d, stderr %q", code, stderr)
	}
}

func TestSubmitWaitPrintsWhereResultsAre(t *testing.T) {
	data := t.TempDir()
	startDaemon(t, data)
	dirs := daemon.DataDirs(data)
	src := writeFile(t, filepath.Join(t.TempDir(), "waited.jsonl"), chatBatch(30, "w")+mixedBatch)

	code, stdout, stderr := cli(t, "submit", "--wait", "--data", data, src)
	if code != exitOK {
		t.Fatalf("submit --wait: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		`batch "waited" completed: 34 completed, 3 failed`,
		"results: " + filepath.Join(dirs.Outbox, "waited.output.jsonl"),
		"errors:  " + filepath.Join(dirs.Outbox, "waited.errors.jsonl"),
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if got := len(fileLines(t, filepath.Join(dirs.Outbox, "waited.output.jsonl"))); got != 34 {
		t.Errorf("output has %d lines, want 34", got)
	}

	// A batch that fails (invalid options) ends --wait with exit 1 and its errors.
	opts := writeFile(t, filepath.Join(t.TempDir(), "o.json"), `{"on_invalid":"reject"}`)
	src2 := writeFile(t, filepath.Join(t.TempDir(), "rejected.jsonl"), mixedBatch)
	code, stdout, stderr = cli(t, "submit", src2, "--wait", "--data", data, "--options", opts)
	if code != exitFailure {
		t.Fatalf("submit --wait of a rejected batch: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{`batch "rejected" failed`, "line 3: invalid_json_line"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}

func TestUnknownCommandAndHelp(t *testing.T) {
	if code, _, stderr := cli(t, "frobnicate"); code != exitUsage || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := cli(t); code != exitUsage || !strings.Contains(stderr, "usage: batchd COMMAND") {
		t.Errorf("no command: exit %d, stderr %q", code, stderr)
	}
	code, stdout, _ := cli(t, "help")
	if code != exitOK {
		t.Errorf("help: exit %d", code)
	}
	for _, c := range []string{"run", "validate", "submit", "status", "check", "ledger", "bench", "echo-server"} {
		if !strings.Contains(stdout, "  "+c+" ") {
			t.Errorf("help lacks %s:\n%s", c, stdout)
		}
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, filepath.Join(dir, "bad.yaml"), "pipeline:\n  max_concurent_batches: 2\n")
	code, _, stderr := cli(t, "run", "--config", cfg, "--data", filepath.Join(dir, "data"))
	if code != exitUsage || !strings.Contains(stderr, "max_concurent_batches") {
		t.Errorf("run with an unknown key: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = cli(t, "run", "--data", filepath.Join(dir, "data"), "--engine", "nope")
	if code != exitUsage || !strings.Contains(stderr, "engine") {
		t.Errorf("run with an unknown engine: exit %d, stderr %q", code, stderr)
	}
}

func TestSecondBatchdProcessFailsFast(t *testing.T) {
	first := startBinDaemon(t)
	code, out := first.runAgain(t)
	if code != exitFailure {
		t.Fatalf("second batchd: exit %d, want %d\n%s", code, exitFailure, out)
	}
	if want := fmt.Sprintf("in use by another batchd (pid %d)", first.p.cmd.Process.Pid); !strings.Contains(out, want) {
		t.Errorf("second batchd said %q, want it to contain %q", out, want)
	}
	first.p.signal(t, syscall.SIGTERM)
	if first.p.err != nil {
		t.Errorf("first batchd after SIGTERM: %v\n%s", first.p.err, logTail(first.p.log))
	}
}

func TestValidateWithAMissingOptionsFile(t *testing.T) {
	dir := t.TempDir()
	src := writeFile(t, filepath.Join(dir, "x.jsonl"), chatBatch(2, "x"))
	code, stdout, stderr := cli(t, "validate", "--options", filepath.Join(dir, "typo.json"), src)
	if code == exitOK {
		t.Fatalf("regression (fixed bug): `batchd validate --options MISSING FILE` exits 0 and validates without options (stdout %q). "+
			"cmd/batchd/tools.go cmdValidate passes the path to pipeline.ReadOptionsFile, which treats a missing "+
			"file as no options (right for the implicit NAME.options.json beside FILE, wrong for an explicit "+
			"--options). `submit --options MISSING` fails with exit 2. Fix: when --options is given, os.Stat it "+
			"first and return exitUsage if it cannot be read.", stdout)
	}
	if code != exitUsage || !strings.Contains(stderr, "typo.json") {
		t.Errorf("exit %d, stderr %q; want exit %d naming the file", code, stderr, exitUsage)
	}
}

// bench engine --rows times a forward pass per shape and what an extra row
// costs; it refuses a bad list and the modes it does not combine with.
func TestBenchEngineRows(t *testing.T) {
	model := filepath.Join(t.TempDir(), "demo.gguf")
	if code, _, stderr := cli(t, "demo-model", "--shape", "tiny", "--out", model); code != exitOK {
		t.Fatalf("demo-model: %s", stderr)
	}
	code, stdout, stderr := cli(t, "bench", "engine", "--model", model, "--threads", "1", "--rows", "1,3", "--seqs", "1,2", "--prompt", "20", "--steps", "2")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"after 20 positions", "x1   seqs,  3 row(s) each", "x2   seqs,  1 row(s) each"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if n := strings.Count(stdout, "per extra row"); n != 2 {
		t.Errorf("%d lines with an extra row's cost, want 2:\n%s", n, stdout)
	}
	for _, args := range [][]string{{"--rows", "1,x"}, {"--rows", "0"}, {"--rows", "1,2", "--speculative", "off,ngram"}} {
		code, _, stderr := cli(t, append([]string{"bench", "engine", "--model", model}, args...)...)
		if code != exitUsage || !strings.Contains(stderr, "--rows") {
			t.Errorf("%v: exit %d, stderr %q; want a usage error naming --rows", args, code, stderr)
		}
	}
}

// bench engine --speculative runs each case through the engine and prints
// its figures and, for a speculating case, its acceptance; a bad case is
// refused by name.
func TestBenchEngineSpeculative(t *testing.T) {
	model := filepath.Join(t.TempDir(), "demo.gguf")
	if code, _, stderr := cli(t, "demo-model", "--out", model); code != exitOK {
		t.Fatalf("demo-model: %s", stderr)
	}
	code, stdout, stderr := cli(t, "bench", "engine", "--model", model, "--threads", "1", "--speculative", "off,draft",
		"--seqs", "1,2", "--rounds", "1", "--output", "8")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"x1   off", "x2   draft"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	// A model drafting for itself under greedy decoding keeps every draft
	// it makes (the engine may make none where its timings say drafts do
	// not pay).
	for _, line := range strings.Split(stdout, "\n") {
		if strings.Contains(line, "acceptance") && !strings.Contains(line, "acceptance 100.0%") && !strings.Contains(line, "drafts kept / drafted") {
			t.Errorf("self-drafting kept less than every draft: %s", line)
		}
	}
	code, _, stderr = cli(t, "bench", "engine", "--model", model, "--speculative", "off,eagle", "--seqs", "1")
	if code != exitFailure || !strings.Contains(stderr, `"eagle"`) {
		t.Errorf("an unknown case: exit %d, stderr %q", code, stderr)
	}
}

// bench engine --online runs online requests under a batch with online
// priority and without, and prints the latency of each.
func TestBenchEngineOnline(t *testing.T) {
	model := filepath.Join(t.TempDir(), "demo.gguf")
	if code, _, stderr := cli(t, "demo-model", "--shape", "tiny", "--out", model); code != exitOK {
		t.Fatalf("demo-model: %s", stderr)
	}
	code, stdout, stderr := cli(t, "bench", "engine", "--model", model, "--threads", "1", "--online", "3", "--prompt", "16",
		"--output", "4", "--online-prompt", "8", "--online-output", "2", "--max-seqs", "2")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"3 online requests", "online priority on : online latency p50", "online priority off: online latency p50"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}

// bench pipeline runs a generated batch through the whole pipeline on
// either engine, reports the rate and CPU time, and writes a CPU profile
// of the run when asked.
func TestBenchPipeline(t *testing.T) {
	for _, eng := range []string{"instant", "remote"} {
		prof := filepath.Join(t.TempDir(), "cpu.prof")
		code, stdout, stderr := cli(t, "bench", "pipeline", "--lines", "300", "--engine", eng, "--cpuprofile", prof)
		if code != exitOK {
			t.Fatalf("%s: exit %d: %s", eng, code, stderr)
		}
		for _, want := range []string{"pipeline bench: 300 requests, engine " + eng, "requests/s", "µs a request", "peak RSS"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%s: output lacks %q:\n%s", eng, want, stdout)
			}
		}
		if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
			t.Errorf("%s: no CPU profile: %v", eng, err)
		}
	}
	if code, _, stderr := cli(t, "bench", "pipeline", "--lines", "10", "--cpuprofile", filepath.Join(t.TempDir(), "no", "such", "dir")); code != exitFailure || !strings.Contains(stderr, "cpu profile") {
		t.Errorf("an unwritable profile: exit %d, stderr %q", code, stderr)
	}
}

// bench kl writes the demo model in F32 and each type and prints a row per
// type; a type against itself is at 0 and always agrees; model files
// compare with --ref; bad arguments are refused by name.
func TestBenchKL(t *testing.T) {
	data := t.TempDir()
	code, stdout, stderr := cli(t, "bench", "kl", "--data", data, "--shape", "tiny", "--types", "f32,Q8_0", "--threads", "1", "--tokens", "40")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"over 40 positions", "demo-tiny-f32.gguf", "0.000e+00   0.000e+00   0.000e+00   100.00%", "Q8_0                         8.5"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	ref := filepath.Join(data, "models", "demo-tiny-f32.gguf")
	toks := filepath.Join(data, "tokens.json")
	code, stdout, stderr = cli(t, "bench", "kl", "--model", ref, "--ref", ref, "--threads", "1", "--tokens", "10", "--tokens-out", toks)
	if code != exitOK || !strings.Contains(stdout, "demo-tiny-f32.gguf          32.00   0.000e+00") {
		t.Errorf("--model --ref: exit %d, stderr %s, stdout:\n%s", code, stderr, stdout)
	}
	var ids []int32
	if b, err := os.ReadFile(toks); err != nil {
		t.Errorf("--tokens-out: %v", err)
	} else if err := json.Unmarshal(b, &ids); err != nil || len(ids) != 10 {
		t.Errorf("--tokens-out wrote %q (%v): want the 10 token ids compared", b, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", ref}, "--ref"},
		{[]string{"--data", data, "--shape", "tiny", "--types", "q4_k_x"}, "q4_k_m"},
		{[]string{"--data", data, "--shape", "nope"}, `"nope"`},
	} {
		code, _, stderr := cli(t, append([]string{"bench", "kl"}, c.args...)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want a usage error naming %s", c.args, code, stderr, c.want)
		}
	}
	if code, _, stderr := cli(t, "demo-model", "--data", data, "--type", "q9_k"); code != exitUsage || !strings.Contains(stderr, "iq4_xs") {
		t.Errorf("demo-model --type q9_k: exit %d, stderr %q", code, stderr)
	}
}

// demo-model --format hf writes a Hugging Face directory the engine runs
// (bench engine loads it), says where on a second call without rewriting
// it, and refuses a type or format it does not write by name.
func TestDemoModelHF(t *testing.T) {
	data := t.TempDir()
	code, stdout, stderr := cli(t, "demo-model", "--data", data, "--shape", "tiny-gemma3", "--type", "bf16", "--format", "hf")
	dir := strings.TrimSpace(stdout)
	if code != exitOK || dir != filepath.Join(data, "models", "demo-tiny-gemma3-bf16-hf") {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the directory lacks %s: %v", f, err)
		}
	}
	st, err := os.Stat(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if code, again, _ := cli(t, "demo-model", "--data", data, "--shape", "tiny-gemma3", "--type", "bf16", "--format", "hf"); code != exitOK || again != stdout {
		t.Errorf("second call: exit %d, stdout %q", code, again)
	}
	if st2, err := os.Stat(filepath.Join(dir, "model.safetensors")); err != nil || !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("the second call rewrote the directory: %v", err)
	}
	if code, out, stderr := cli(t, "bench", "engine", "--model", dir, "--threads", "1", "--seqs", "1", "--prompt", "8", "--steps", "2"); code != exitOK {
		t.Errorf("bench engine on the directory: exit %d, %s %s", code, out, stderr)
	}
	for _, c := range []struct{ args, want string }{{"--type q4_k_m", "not Q4_K_M"}, {"--dequantized", "not"}, {"--format onnx", `"onnx"`}} {
		args := append([]string{"demo-model", "--data", data, "--format", "hf"}, strings.Fields(c.args)...)
		if code, _, stderr := cli(t, args...); code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want a usage error with %q", c.args, code, stderr, c.want)
		}
	}
}
