package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/openai/openaitest"
)

// tailBuffer keeps the last limit bytes written: the log of a daemon that
// serves millions of fuzz requests.
type tailBuffer struct {
	mu    sync.Mutex
	b     []byte
	limit int
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > w.limit {
		w.b = append(w.b[:0], w.b[len(w.b)-w.limit/2:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}

// The fuzzed routes; body is the request body, or the query or id for GETs.
var fuzzRoutes = []string{
	"POST /v1/batches",
	"POST /v1/files",
	"POST /v1/chat/completions",
	"POST /v1/completions",
	"POST /v1/embeddings",
	"GET /v1/batches?",
	"GET /v1/files/",
	"GET /v1/batches/",
	"POST /v1/responses",
	"POST /v1/messages",
}

// fuzzBoundary is the multipart boundary of POST /v1/files bodies.
const fuzzBoundary = "fuzzboundary"

// maxFuzzBatches bounds the batches one fuzz process creates: each runs
// in the background and stays in the ledger. Past it, "$FILE" in a body is
// left as it is (a 404).
const maxFuzzBatches = 64

// FuzzAPI sends arbitrary bodies (and queries and ids) to the daemon's API
// over loopback HTTP, with the OpenAI stand-in as the engine: every answer
// is a status below 500, or a 503 engine_unavailable, with an OpenAI error
// body when it is not a 200; never a dropped connection (a handler panic),
// never another 5xx. "$FILE" in a POST /v1/batches body stands for an
// uploaded input file's id.
func FuzzAPI(f *testing.F) {
	mp := func(purpose, name, content string) string {
		return "--" + fuzzBoundary + "\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n" + purpose +
			"\r\n--" + fuzzBoundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" + name +
			"\"\r\nContent-Type: application/jsonl\r\n\r\n" + content + "\r\n--" + fuzzBoundary + "--\r\n"
	}
	line := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}}` + "\n"
	seeds := []struct {
		route int
		body  string
	}{
		{0, `{"input_file_id":"$FILE","endpoint":"/v1/chat/completions","completion_window":"24h","metadata":{"k":"v"}}`},
		{0, `{"input_file_id":"$FILE","endpoint":"/v1/embeddings","on_invalid":"reject","max_tokens":5,"temperature":0.5}`},
		{0, `{"input_file_id":"file-nope","endpoint":"/v1/completions"}`},
		{0, `{"input_file_id":"../../etc/passwd","endpoint":"/v1/chat/completions"}`},
		{0, `{"input_file_id":"$FILE","endpoint":"/v1/responses"}`},
		{0, `{"input_file_id":"$FILE","endpoint":"/v1/chat/completions","completion_window":"-1h","temperature":"hot"}`},
		{0, `{"input_file_id":"$FILE","endpoint":"/v1/chat/completions","unknown":1}`},
		{0, `[]`}, {0, `{`}, {0, ``},
		{1, mp("batch", "in.jsonl", line)},
		{1, mp("batch", "../x.jsonl", "not json\n")},
		{1, mp("fine-tune", "", "")},
		{1, mp("batch", "a", strings.Repeat("x", 70000))},
		{1, "--" + fuzzBoundary + "--\r\n"}, {1, "garbage"},
		{2, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`},
		{2, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`},
		{2, `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"n":2,"logprobs":true,"top_logprobs":2,"logit_bias":{"1":5}}`},
		{2, `{"messages":[]}`}, {2, `{"stream":"yes"}`},
		{3, `{"prompt":"Once upon","max_tokens":2,"echo":true}`},
		{3, `{"prompt":[1,2,3],"max_tokens":2,"stream":true}`},
		{4, `{"input":["a","b"],"dimensions":8,"encoding_format":"base64"}`},
		{4, `{"input":"a","stream":true}`}, {4, `{"input":[[1,2]]}`},
		{5, `limit=2&after=batch_x`}, {5, `limit=-1`}, {5, `limit=99999999999999999999`}, {5, `after=%zz`},
		{6, `file-nope`}, {6, `file-o0123`}, {6, `../ledger.db`},
		{7, `batch_nope`}, {7, ``},
		{8, `{"input":"hi","instructions":"Be brief.","max_output_tokens":4}`},
		{8, `{"input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"max_output_tokens":4,"stream":true}`},
		{8, `{"input":"hi","tools":[{"type":"web_search"}]}`}, {8, `{"input":"hi","text":{"format":{"type":"json_schema"}}}`},
		{9, `{"max_tokens":4,"system":"Be brief.","messages":[{"role":"user","content":"hi"}],"stop_sequences":["x"]}`},
		{9, `{"max_tokens":4,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stream":true}`},
		{9, `{"messages":[{"role":"user","content":"hi"}]}`}, {9, `{"max_tokens":4,"messages":[{"role":"tool","content":"x"}]}`},
	}
	for _, s := range seeds {
		f.Add(uint8(s.route), []byte(s.body))
	}

	logs := &tailBuffer{limit: 1 << 20}
	srv := openaitest.NewServer(openaitest.Options{})
	if err := srv.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(srv.Close)
	cfg := daemon.DefaultConfig()
	cfg.Data = filepath.Join(f.TempDir(), "data")
	cfg.Listen = "127.0.0.1:0"
	cfg.Engine = "openai"
	cfg.OpenAI.URLs = []string{srv.URL()}
	cfg.OpenAI.RetryWaitMin, cfg.OpenAI.RetryWaitMax, cfg.OpenAI.MaxRetries = 5*time.Millisecond, 50*time.Millisecond, 2
	cfg.Pipeline.CommitInterval = 20 * time.Millisecond
	cfg.Watcher.Settle, cfg.Watcher.Rescan = 50*time.Millisecond, time.Second
	cfg.API.Keys = []string{"sk-fuzz"}
	cfg.API.MaxUploadBytes = 64 << 10
	cfg.Log.Level = "warn"
	d := daemon.New(cfg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err := d.Open(context.Background()); err != nil {
		f.Fatalf("open daemon: %v", err)
	}
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			f.Errorf("close daemon: %v", err)
		}
	})
	base := "http://" + d.HTTPAddr()
	client := &http.Client{Timeout: 2 * time.Minute}

	// send makes one request; it returns the status, the content type and
	// the body, or fails the test when no answer came.
	send := func(t *testing.T, method, u, contentType string, body []byte) (int, string, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, u, bytes.NewReader(body))
		if err != nil {
			return -1, "", nil // not a request a client can send
		}
		req.Header.Set("Authorization", "Bearer sk-fuzz")
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := client.Do(req)
		if err != nil {
			if strings.Contains(err.Error(), "invalid") && strings.Contains(err.Error(), "URL") {
				return -1, "", nil
			}
			t.Fatalf("%s %s %q: no answer (a panic in a handler drops the connection): %v\ndaemon log:\n%s", method, u, body, err, logs)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s %q: reading the answer: %v\ndaemon log:\n%s", method, u, body, err, logs)
		}
		return resp.StatusCode, resp.Header.Get("Content-Type"), raw
	}

	up, _, raw := sendOnce(f, client, base, mp("batch", "in.jsonl", line))
	if up != 200 {
		f.Fatalf("upload the input file: %d %s", up, raw)
	}
	var fo struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &fo); err != nil || fo.ID == "" {
		f.Fatalf("upload answer %s: %v", raw, err)
	}
	fileID := fo.ID
	created := 0

	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := fuzzRoutes[int(route)%len(fuzzRoutes)]
		method, path, _ := strings.Cut(r, " ")
		var status int
		var ctype string
		var out []byte
		switch r {
		case "POST /v1/batches":
			if created < maxFuzzBatches {
				body = bytes.ReplaceAll(body, []byte("$FILE"), []byte(fileID))
			}
			status, ctype, out = send(t, method, base+path, "application/json", body)
			if status == 200 {
				created++
			}
		case "POST /v1/files":
			status, ctype, out = send(t, method, base+path, "multipart/form-data; boundary="+fuzzBoundary, body)
			if status == 200 {
				// Uploads stay until deleted: delete each, so that a
				// long run does not fill the disk.
				var o struct {
					ID string `json:"id"`
				}
				if err := json.Unmarshal(out, &o); err != nil || o.ID == "" {
					t.Fatalf("upload %q: 200 without a file id: %s", body, out)
				}
				if st, _, raw := send(t, "DELETE", base+path+"/"+o.ID, "", nil); st != 200 {
					t.Fatalf("delete upload %s: %d %s", o.ID, st, raw)
				}
			}
		case "GET /v1/batches?":
			status, ctype, out = send(t, method, base+path+requestTarget(body), "", nil)
		case "GET /v1/files/":
			status, ctype, out = send(t, method, base+path+url.PathEscape(string(body))+"/content", "", nil)
		case "GET /v1/batches/":
			status, ctype, out = send(t, method, base+path+url.PathEscape(string(body)), "", nil)
		default:
			status, ctype, out = send(t, method, base+path, "application/json", body)
		}
		if status == -1 {
			return
		}
		checkAPIAnswer(t, r, body, status, ctype, out, logs)
	})
}

// requestTarget escapes the bytes a request line cannot carry (spaces,
// controls, non-ASCII), which net/http's server refuses before any handler
// runs, and leaves the rest, % escapes included, to the daemon.
func requestTarget(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || c == '#' {
			fmt.Fprintf(&s, "%%%02X", c)
		} else {
			s.WriteByte(c)
		}
	}
	return s.String()
}

// sendOnce uploads content as an input file, for the fuzz target's setup.
func sendOnce(f *testing.F, client *http.Client, base, content string) (int, string, []byte) {
	req, err := http.NewRequest("POST", base+"/v1/files", strings.NewReader(content))
	if err != nil {
		f.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk-fuzz")
	req.Header.Set("Content-Type", "multipart/form-data; boundary="+fuzzBoundary)
	resp, err := client.Do(req)
	if err != nil {
		f.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), raw
}

// checkAPIAnswer fails unless the answer is a success or a client error
// with OpenAI's error body, or a 503 engine_unavailable.
func checkAPIAnswer(t *testing.T, route string, body []byte, status int, ctype string, out []byte, logs *tailBuffer) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s %q: %d %s: "+format+"\ndaemon log:\n%s", append(append([]any{route, body, status, out}, args...), logs)...)
	}
	if strings.HasPrefix(ctype, "text/event-stream") {
		if status != 200 {
			fail("an event stream with a status other than 200")
		}
		// Chat and completion chunks are data lines alone; the Responses
		// API's and Anthropic's events are "event: NAME" then "data: ...".
		for _, block := range strings.Split(strings.TrimSpace(string(out)), "\n\n") {
			var name, data string
			var hasData bool
			for _, line := range strings.Split(block, "\n") {
				switch k, v, _ := strings.Cut(line, ": "); k {
				case "event":
					name = v
				case "data":
					data, hasData = v, true
				default:
					fail("an event line that is neither event: nor data: %q", line)
				}
			}
			if !hasData {
				fail("an event without data: %q", block)
			}
			if data == "[DONE]" {
				continue
			}
			var ev struct {
				Type string `json:"type"`
			}
			if json.Unmarshal([]byte(data), &ev) != nil {
				fail("an event that is not a JSON object: %s", data)
			}
			if name != "" && ev.Type != name {
				fail("event %q carries type %q", name, ev.Type)
			}
			if strings.Contains(data, `"server_error"`) || strings.Contains(data, `"api_error"`) || name == "response.failed" {
				fail("the stream ends in a server error")
			}
		}
		return
	}
	if status == 200 && route == "GET /v1/files/" {
		return // a file's content, as stored
	}
	var e struct {
		Error *struct {
			Message string  `json:"message"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(out, &e); err != nil {
		fail("the answer is not JSON: %v", err)
	}
	switch {
	case status == 200:
		if e.Error != nil {
			fail("a 200 with an error body")
		}
	case status == http.StatusServiceUnavailable:
		if e.Error == nil || e.Error.Code == nil || *e.Error.Code != "engine_unavailable" {
			fail("a 503 other than engine_unavailable")
		}
	case status >= 500 || status < 400:
		fail("want 200, a 4xx or a 503 engine_unavailable")
	default:
		if e.Error == nil || e.Error.Message == "" {
			fail("an error status without an error message")
		}
	}
}

// FuzzLoadConfig: whatever the bytes of a config file, LoadFile and
// Validate return a config or an error that names the file or the field;
// never a panic. ${VAR} references expand as they do at start-up.
func FuzzLoadConfig(f *testing.F) {
	example, err := os.ReadFile("../deploy/config.example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	for _, s := range []string{
		"", "data: /tmp/x\nengine: openai\nopenai:\n  urls: [http://127.0.0.1:1/v1]\n",
		"api:\n  keys: [${FUZZ_UNSET_VARIABLE}]\n", "api:\n  keys: [\"${FUZZ_SET_VARIABLE}x${FUZZ_UNSET_VARIABLE}\"]\n",
		"api: {keys: ${FUZZ_SET_VARIABLE}}\n", "listen: 0.0.0.0:80\napi:\n  open: true\n",
		"native:\n  models: [{path: a}, {path: b, name: a}]\n", "native:\n  models:\n    - {path: m.gguf, pooling: max}\n",
		"pipeline:\n  max_line_bytes: -1\n  commit_interval: 1ns\n", "batch:\n  on_invalid: skip\n  completion_window: 1y\n",
		"batch:\n  temperature: 9\n  stop: [a, b]\n", "retention: -1s\n", "source: s3://b/p\ns3:\n  endpoint: h:1\n  lease_ttl: 0s\n",
		"webhooks:\n  urls: [ftp://x]\n", "log: {level: loud}\n", "unknown: 1\n", "data: [1, 2]\n",
		"a: &a [*a, *a]\n", "- 1\n- 2\n", "data: x\n---\ndata: y\n", "\t", ": :", "${}", "$${FUZZ_SET_VARIABLE}",
	} {
		f.Add([]byte(s))
	}
	os.Setenv("FUZZ_SET_VARIABLE", "value")
	os.Unsetenv("FUZZ_UNSET_VARIABLE")
	path := filepath.Join(f.TempDir(), "batchd.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := daemon.LoadFile(path)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("the error does not name the file: %v", err)
			}
			return
		}
		if err := daemon.ApplyEnv(&cfg, func(string) string { return "" }); err != nil {
			t.Fatalf("ApplyEnv with no variables: %v", err)
		}
		if err := cfg.Validate(); err != nil {
			if msg := err.Error(); !strings.Contains(msg, ":") && !strings.Contains(msg, "api.") {
				t.Fatalf("the error names no field: %v", err)
			}
			return
		}
		_ = daemon.New(cfg, slog.New(slog.DiscardHandler)) // New does no I/O
	})
}
