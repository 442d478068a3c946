package daemon_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/daemon/webhook"
	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/pipeline"
)

// apiEnv is a daemon with its HTTP API on a loopback port.
type apiEnv struct {
	*env
	base string
	key  string
	d    *daemon.Daemon
}

func newAPIEnv(t *testing.T, opts openaitest.Options, set func(*daemon.Config)) *apiEnv {
	e := &apiEnv{env: newEnv(t, opts), key: "sk-test-key"}
	cfg := e.config()
	cfg.Listen = "127.0.0.1:0"
	cfg.API.Keys = []string{e.key}
	if set != nil {
		set(&cfg)
	}
	e.d = e.open(cfg)
	e.base = "http://" + e.d.HTTPAddr()
	return e
}

// call sends a request with the API key and decodes a JSON answer into out
// (when not nil); it returns the status.
func (e *apiEnv) call(method, path, contentType string, body io.Reader, out any) int {
	e.t.Helper()
	req, err := http.NewRequest(method, e.base+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.key)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			e.t.Fatalf("%s %s: %d, not JSON: %s", method, path, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode
}

func (e *apiEnv) postJSON(path string, v any, out any) int {
	data, _ := json.Marshal(v)
	return e.call("POST", path, "application/json", bytes.NewReader(data), out)
}

func (e *apiEnv) upload(purpose, name, content string) (int, map[string]any) {
	e.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	mw.WriteField("purpose", purpose)
	fw, _ := mw.CreateFormFile("file", name)
	fw.Write([]byte(content))
	mw.Close()
	var out map[string]any
	status := e.call("POST", "/v1/files", mw.FormDataContentType(), &buf, &out)
	return status, out
}

type apiErr struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func (e *apiEnv) waitBatch(id string, done func(o *pipeline.BatchObject) bool) *pipeline.BatchObject {
	e.t.Helper()
	var o pipeline.BatchObject
	waitFor(e.t, 60*time.Second, "batch "+id, func() bool {
		if st := e.call("GET", "/v1/batches/"+id, "", nil, &o); st != 200 {
			e.t.Fatalf("get batch: %d", st)
		}
		return done(&o)
	})
	return &o
}

func TestAPIBatchLifecycle(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	st, f := e.upload("batch", "in.jsonl", chatBatch(7, "api")+"not json\n")
	if st != 200 || f["object"] != "file" || f["purpose"] != "batch" || f["bytes"].(float64) == 0 {
		t.Fatalf("upload: %d %v", st, f)
	}
	fileID := f["id"].(string)
	var created pipeline.BatchObject
	if st := e.postJSON("/v1/batches", map[string]any{"input_file_id": fileID, "endpoint": "/v1/chat/completions",
		"completion_window": "24h", "metadata": map[string]string{"who": "test"}}, &created); st != 200 {
		t.Fatalf("create: %d", st)
	}
	if !strings.HasPrefix(created.ID, "batch_") || created.InputFileID != fileID || created.Object != "batch" {
		t.Fatalf("created %+v", created)
	}
	o := e.waitBatch(created.ID, func(o *pipeline.BatchObject) bool { return pipeline.Terminal(o.Status) })
	if o.Status != "completed" || o.RequestCounts.Total != 8 || o.RequestCounts.Completed != 7 || o.RequestCounts.Failed != 1 ||
		o.Metadata["who"] != "test" || o.OutputFileID == nil || o.ErrorFileID == nil || o.ID != created.ID {
		t.Fatalf("ended as %+v", o)
	}
	// Results as files.
	var fo map[string]any
	if st := e.call("GET", "/v1/files/"+*o.OutputFileID, "", nil, &fo); st != 200 || fo["purpose"] != "batch_output" {
		t.Fatalf("output file object: %d %v", st, fo)
	}
	req, _ := http.NewRequest("GET", e.base+"/v1/files/"+*o.OutputFileID+"/content", nil)
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	seen := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var line pipeline.OutputLine
		if err := json.Unmarshal([]byte(l), &line); err != nil || line.CustomID == nil {
			t.Fatalf("output line %q: %v", l, err)
		}
		seen[*line.CustomID]++
	}
	for i := range 7 {
		if n := seen[fmt.Sprintf("api-%d", i)]; n != 1 {
			t.Fatalf("custom_id api-%d appears %d times in the output", i, n)
		}
	}
	// Results pages: 7 completed, 3 at a time.
	var page struct {
		Data    []json.RawMessage `json:"data"`
		HasMore bool              `json:"has_more"`
		LastID  string            `json:"last_id"`
	}
	if st := e.call("GET", "/v1/batches/"+o.ID+"/results?limit=3", "", nil, &page); st != 200 || len(page.Data) != 3 || !page.HasMore {
		t.Fatalf("results page 1: %d %d %v", st, len(page.Data), page.HasMore)
	}
	total := 3
	for page.HasMore {
		after := page.LastID
		page.Data = nil
		if st := e.call("GET", "/v1/batches/"+o.ID+"/results?limit=3&after="+after, "", nil, &page); st != 200 {
			t.Fatalf("results page: %d", st)
		}
		total += len(page.Data)
	}
	if total != 7 {
		t.Fatalf("paged through %d results, want 7", total)
	}
	if st := e.call("GET", "/v1/batches/"+o.ID+"/results?status=failed", "", nil, &page); st != 200 || len(page.Data) != 1 {
		t.Fatalf("failed results: %d %d", st, len(page.Data))
	}
	// Cancelling a finished batch is refused.
	var ae apiErr
	if st := e.postJSON("/v1/batches/"+o.ID+"/cancel", nil, &ae); st != http.StatusConflict {
		t.Fatalf("cancel completed: %d %+v", st, ae)
	}
	// It is listed, and `batchd status` sees it (the ledger is shared).
	var list struct {
		Data []pipeline.BatchObject `json:"data"`
	}
	if st := e.call("GET", "/v1/batches?limit=100", "", nil, &list); st != 200 || len(list.Data) != 1 || list.Data[0].ID != o.ID {
		t.Fatalf("list: %d %+v", st, list)
	}
}

// A dropped file shows in GET /v1/batches, with its input as a file.
func TestAPIListsDroppedFiles(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	e.drop("dropped.jsonl", chatBatch(3, "d"))
	e.waitEnded("dropped", "jsonl")
	var list struct {
		Data []pipeline.BatchObject `json:"data"`
	}
	if st := e.call("GET", "/v1/batches", "", nil, &list); st != 200 || len(list.Data) != 1 {
		t.Fatalf("list: %d %+v", st, list)
	}
	o := list.Data[0]
	if o.Batchd.Name != "dropped" || o.Status != "completed" {
		t.Fatalf("%+v", o)
	}
	var fo map[string]any
	if st := e.call("GET", "/v1/files/"+o.InputFileID, "", nil, &fo); st != 200 || fo["filename"] != "dropped.jsonl" {
		t.Fatalf("input file: %d %v", st, fo)
	}
}

func TestAPIErrors(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, func(c *daemon.Config) { c.API.MaxUploadBytes = 100 })
	// No key, wrong key: 401 in OpenAI's shape.
	for _, auth := range []string{"", "Bearer nope"} {
		req, _ := http.NewRequest("GET", e.base+"/v1/batches", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var ae apiErr
		json.NewDecoder(resp.Body).Decode(&ae)
		resp.Body.Close()
		if resp.StatusCode != 401 || ae.Error.Code == nil || ae.Error.Message == "" {
			t.Fatalf("auth %q: %d %+v", auth, resp.StatusCode, ae)
		}
	}
	// Health stays open.
	if resp, err := http.Get(e.base + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	var ae apiErr
	if st := e.call("GET", "/v1/batches/batch_nope", "", nil, &ae); st != 404 || *ae.Error.Code != "batch_not_found" {
		t.Fatalf("unknown batch: %d %+v", st, ae)
	}
	if st := e.call("GET", "/v1/files/file-nope", "", nil, &ae); st != 404 {
		t.Fatalf("unknown file: %d", st)
	}
	if st := e.call("GET", "/v1/files/..%2f..%2fetc", "", nil, &ae); st != 404 {
		t.Fatalf("path traversal: %d", st)
	}
	if st, _ := e.upload("fine-tune", "x.jsonl", "{}\n"); st != 400 {
		t.Fatalf("wrong purpose: %d", st)
	}
	if st, _ := e.upload("batch", "big.jsonl", strings.Repeat("x", 200)); st != 413 {
		t.Fatalf("too large: %d", st)
	}
	if st := e.postJSON("/v1/batches", map[string]any{"input_file_id": "file-nope", "endpoint": "/v1/chat/completions"}, &ae); st != 404 {
		t.Fatalf("create with unknown file: %d", st)
	}
	_, f := e.upload("batch", "ok.jsonl", "{}\n")
	if st := e.postJSON("/v1/batches", map[string]any{"input_file_id": f["id"], "endpoint": "/v1/images"}, &ae); st != 400 || *ae.Error.Param != "endpoint" {
		t.Fatalf("bad endpoint: %d %+v", st, ae)
	}
	if st := e.postJSON("/v1/batches", map[string]any{"input_file_id": f["id"], "endpoint": "/v1/chat/completions", "completion_window": "soon"}, &ae); st != 400 {
		t.Fatalf("bad window: %d", st)
	}
	if st := e.call("GET", "/v1/batches?limit=0", "", nil, &ae); st != 400 {
		t.Fatalf("bad limit: %d", st)
	}
	if st := e.call("GET", "/v1/nothing", "", nil, &ae); st != 404 {
		t.Fatalf("unknown url: %d", st)
	}
	// Deleting an upload.
	var del map[string]any
	if st := e.call("DELETE", "/v1/files/"+f["id"].(string), "", nil, &del); st != 200 || del["deleted"] != true {
		t.Fatalf("delete: %d %v", st, del)
	}
	if st := e.call("GET", "/v1/files/"+f["id"].(string), "", nil, &ae); st != 404 {
		t.Fatalf("deleted file: %d", st)
	}
}

// A running batch can be read while it runs and cancelled; concurrent
// cancels are fine.
func TestAPICancelAndResultsWhileRunning(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{Fault: func(n int64, r *http.Request, body []byte) openaitest.Fault {
		time.Sleep(5 * time.Millisecond) // a slow engine, so the batch is still running
		return openaitest.Fault{}
	}}, func(c *daemon.Config) { c.Pipeline.Workers = 2 })
	_, f := e.upload("batch", "slow.jsonl", chatBatch(1000, "slow"))
	var o pipeline.BatchObject
	e.postJSON("/v1/batches", map[string]any{"input_file_id": f["id"], "endpoint": "/v1/chat/completions"}, &o)
	var page struct {
		Data []json.RawMessage `json:"data"`
	}
	waitFor(t, 60*time.Second, "results while running", func() bool {
		e.call("GET", "/v1/batches/"+o.ID+"/results?limit=5", "", nil, &page)
		return len(page.Data) == 5
	})
	done := make(chan int, 3)
	for range 3 {
		go func() {
			req, _ := http.NewRequest("POST", e.base+"/v1/batches/"+o.ID+"/cancel", nil)
			req.Header.Set("Authorization", "Bearer "+e.key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
	}
	for range 3 {
		if st := <-done; st != 200 && st != 409 {
			t.Fatalf("concurrent cancel: %d", st)
		}
	}
	end := e.waitBatch(o.ID, func(o *pipeline.BatchObject) bool { return pipeline.Terminal(o.Status) })
	if end.Status != "cancelled" || end.RequestCounts.Completed+end.RequestCounts.Failed != 1000 || end.RequestCounts.Failed == 0 {
		t.Fatalf("%+v", end.RequestCounts)
	}
}

func TestAPIOnlineEndpoints(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	var chat map[string]any
	if st := e.postJSON("/v1/chat/completions", map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hello there"}}}, &chat); st != 200 || chat["object"] != "chat.completion" {
		t.Fatalf("chat: %d %v", st, chat)
	}
	var ae apiErr
	if st := e.postJSON("/v1/chat/completions", map[string]any{"messages": []any{}, "temperature": 5}, &ae); st != 400 || ae.Error.Param == nil {
		t.Fatalf("invalid chat: %d %+v", st, ae)
	}
	// stream: true answers with server-sent events ending in [DONE].
	req, _ := http.NewRequest("POST", e.base+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sse, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" || !strings.HasSuffix(string(sse), "data: [DONE]\n\n") || !strings.Contains(string(sse), `"chat.completion.chunk"`) {
		t.Fatalf("stream: %s\n%s", ct, sse)
	}
	var emb map[string]any
	if st := e.postJSON("/v1/embeddings", map[string]any{"model": "m", "input": "x"}, &emb); st != 200 || emb["object"] != "list" {
		t.Fatalf("embeddings: %d %v", st, emb)
	}
	var models map[string]any
	if st := e.call("GET", "/v1/models", "", nil, &models); st != 200 || models["object"] != "list" {
		t.Fatalf("models: %d %v", st, models)
	}
}

// The official openai npm package, unchanged, drives the API
// (testdata/sdk.mjs). .ci/run installs it into .cache/npm-openai.
func TestOpenAINodeSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	modDir := os.Getenv("BATCHD_OPENAI_NODE_DIR")
	if modDir == "" {
		modDir, _ = filepath.Abs("../.cache/npm-openai")
	}
	_, statErr := os.Stat(filepath.Join(modDir, "node_modules", "openai", "package.json"))
	if err != nil || statErr != nil {
		msg := "the openai npm package or node is missing: run `npm install openai@7.59.0` in .cache/npm-openai (.ci/run does), or set BATCHD_OPENAI_NODE_DIR"
		if os.Getenv("BATCHD_REQUIRE_SDK") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	e := newAPIEnv(t, openaitest.Options{Fault: func(n int64, r *http.Request, body []byte) openaitest.Fault {
		if bytes.Contains(body, []byte(`"slow `)) {
			time.Sleep(5 * time.Millisecond) // the batch to cancel runs long enough
		}
		return openaitest.Fault{}
	}}, func(c *daemon.Config) { c.Pipeline.Workers = 2 })
	script, _ := filepath.Abs("testdata/sdk.mjs")
	// The script imports "openai": run it from a copy beside node_modules.
	dst := filepath.Join(modDir, "sdk.mjs")
	data, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, dst, "20", "400")
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+e.base+"/v1", "OPENAI_API_KEY="+e.key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sdk test: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

// The official Anthropic npm SDK, unchanged, drives /v1/messages
// (testdata/anthropic.mjs): a message, a stream, a 400 and a 401 in
// Anthropic's error shape, the key sent as x-api-key. .ci/run installs it
// into .cache/npm-anthropic.
func TestAnthropicNodeSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	modDir := os.Getenv("BATCHD_ANTHROPIC_NODE_DIR")
	if modDir == "" {
		modDir, _ = filepath.Abs("../.cache/npm-anthropic")
	}
	_, statErr := os.Stat(filepath.Join(modDir, "node_modules", "@anthropic-ai", "sdk", "package.json"))
	if err != nil || statErr != nil {
		msg := "the @anthropic-ai/sdk npm package or node is missing: run `npm install @anthropic-ai/sdk@1.16.0` in .cache/npm-anthropic (.ci/run does), or set BATCHD_ANTHROPIC_NODE_DIR"
		if os.Getenv("BATCHD_REQUIRE_SDK") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	e := newAPIEnv(t, openaitest.Options{}, nil)
	data, err := os.ReadFile("testdata/anthropic.mjs")
	if err != nil {
		t.Fatal(err)
	}
	// The script imports the SDK: run it from a copy beside node_modules.
	dst := filepath.Join(modDir, "anthropic.mjs")
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, dst)
	cmd.Env = append(os.Environ(), "ANTHROPIC_BASE_URL="+e.base, "ANTHROPIC_API_KEY="+e.key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("anthropic sdk test: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

// Retry runs only the failed requests again: completed ones are not redone.
func TestAPIRetryRunsOnlyFailed(t *testing.T) {
	var refuse atomic.Bool
	e := newAPIEnv(t, refuseLineOne(&refuse), nil)
	_, f := e.upload("batch", "r.jsonl", chatBatch(20, "r"))
	var o pipeline.BatchObject
	e.postJSON("/v1/batches", map[string]any{"input_file_id": f["id"], "endpoint": "/v1/chat/completions"}, &o)
	e.retryRunsOnlyFailed(o.ID, &refuse)
}

// refuseLineOne is a stand-in engine that refuses (400) the requests of
// chatBatch lines 1 and 10-19 while refuse holds, which it does at first.
func refuseLineOne(refuse *atomic.Bool) openaitest.Options {
	refuse.Store(true)
	return openaitest.Options{Fault: func(n int64, r *http.Request, body []byte) openaitest.Fault {
		if refuse.Load() && bytes.Contains(body, []byte(`line 1`)) {
			return openaitest.Fault{Status: http.StatusBadRequest}
		}
		return openaitest.Fault{}
	}}
}

// retryRunsOnlyFailed checks the retry of batch id, whose lines 1 and 10-19
// of 20 the engine refuses while refuse holds: its first run ends with 11
// failed and 9 completed; with refuse off, a retry sends the 11 failed
// requests only and ends with all 20 completed; a second retry is refused
// (nothing failed).
func (e *apiEnv) retryRunsOnlyFailed(id string, refuse *atomic.Bool) {
	t := e.t
	t.Helper()
	first := e.waitBatch(id, func(o *pipeline.BatchObject) bool { return pipeline.Terminal(o.Status) })
	if first.RequestCounts.Failed != 11 || first.RequestCounts.Completed != 9 {
		t.Fatalf("first run: %+v", first.RequestCounts)
	}
	before := e.srv.Requests()
	refuse.Store(false)
	var ro pipeline.BatchObject
	if st := e.postJSON("/v1/batches/"+id+"/retry", nil, &ro); st != 200 {
		t.Fatalf("retry: %d", st)
	}
	second := e.waitBatch(id, func(o *pipeline.BatchObject) bool {
		return pipeline.Terminal(o.Status) && o.RequestCounts.Completed == 20
	})
	if second.RequestCounts.Failed != 0 {
		t.Fatalf("after retry: %+v", second.RequestCounts)
	}
	if got := e.srv.Requests() - before; got != 11 {
		t.Fatalf("the retry sent %d requests, want the 11 failed ones only", got)
	}
	var ae apiErr
	if st := e.postJSON("/v1/batches/"+id+"/retry", nil, &ae); st != http.StatusConflict {
		t.Fatalf("retry with nothing failed: %d", st)
	}
}

// With the native engine, stream: true sends the text as it is generated:
// several content chunks that add up to the non-streamed answer.
func TestAPIStreamsNativeTokens(t *testing.T) {
	model := demoModel(t)
	e := newAPIEnv(t, openaitest.Options{}, func(c *daemon.Config) {
		c.Engine = "native"
		c.Native.Models = []native.ModelConfig{{Path: model}}
	})
	body := `{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"ignore_eos":true}`
	var whole struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	if st := e.call("POST", "/v1/completions", "application/json", strings.NewReader(body), &whole); st != 200 || len(whole.Choices) != 1 {
		t.Fatalf("completion: %d %+v", st, whole)
	}
	req, _ := http.NewRequest("POST", e.base+"/v1/completions", strings.NewReader(strings.Replace(body, "{", `{"stream":true,`, 1)))
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var text strings.Builder
	pieces := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		for _, ch := range c.Choices {
			if ch.Text != "" {
				pieces++
				text.WriteString(ch.Text)
			}
		}
	}
	if text.String() != whole.Choices[0].Text {
		t.Fatalf("streamed %q, whole %q", text.String(), whole.Choices[0].Text)
	}
	if pieces < 2 {
		t.Fatalf("the text came in %d piece(s); it should stream token by token", pieces)
	}
}

// The operator's view: Prometheus metrics and the status page's data come
// from the same ledger and engine as the API.
func TestMetricsAndStatusPage(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, func(c *daemon.Config) { c.Pipeline.Workers = 3 })
	e.drop("m.jsonl", chatBatch(4, "m")+"bad line\n")
	e.waitEnded("m", "jsonl")
	get := func(path string) (int, string, string) { return e.get(path, true) }
	st, _, metrics := get("/metrics")
	for _, want := range []string{`batchd_batches{status="completed"} 1`, `batchd_requests_total{result="completed"} 4`,
		`batchd_requests_total{result="failed"} 1`, `batchd_engine_in_flight 0`, "go_goroutines",
		// A remote engine's window is the workers of the pool.
		"batchd_dispatch_in_flight 0", "batchd_dispatch_waiting 0", "batchd_dispatch_window 3"} {
		if st != 200 || !strings.Contains(metrics, want) {
			t.Fatalf("metrics (%d) lack %q:\n%s", st, want, metrics)
		}
	}
	if strings.Contains(metrics, "batchd_kernels_info{") {
		t.Errorf("batchd_kernels_info reported for a remote engine:\n%s", metrics)
	}
	st, ct, page := get("/")
	if st != 200 || !strings.HasPrefix(ct, "text/html") || !strings.Contains(page, "<html") {
		t.Fatalf("status page: %d %s", st, ct)
	}
	st, _, status := get("/status.json")
	if st != 200 || !strings.Contains(status, `"m"`) {
		t.Fatalf("status.json: %d %s", st, status)
	}
}

// The native engine's CPU kernels, as native.kernels chose them, are in the
// metrics with the architecture and the CPU's features.
func TestMetricsNameTheNativeKernels(t *testing.T) {
	model := demoModel(t)
	e := newAPIEnv(t, openaitest.Options{}, func(c *daemon.Config) {
		c.Engine = "native"
		c.Native.Models = []native.ModelConfig{{Path: model}}
		c.Native.Kernels = kernels.BackendGeneric
	})
	_, _, b := e.get("/metrics", true)
	want := fmt.Sprintf(`batchd_kernels_info{arch=%q,backend="generic",features=%q} 1`, runtime.GOARCH, strings.Join(kernels.Features(), ","))
	if !strings.Contains(string(b), want) {
		t.Fatalf("metrics lack %s:\n%s", want, b)
	}
}

// A batch that ends sends a signed webhook in OpenAI's event shape.
func TestWebhookOnBatchEnd(t *testing.T) {
	const secret = "whsec_c2VjcmV0LWZvci10ZXN0cw=="
	got := make(chan []byte, 4)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify(secret, r.Header, body, time.Minute, time.Now()); err != nil {
			t.Errorf("webhook signature: %v", err)
		}
		got <- body
	}))
	defer recv.Close()
	e := newAPIEnv(t, openaitest.Options{}, func(c *daemon.Config) {
		c.Webhooks.URLs = []string{recv.URL + "/hook"}
		c.Webhooks.Secret = secret
	})
	_, f := e.upload("batch", "w.jsonl", chatBatch(2, "w"))
	var o pipeline.BatchObject
	e.postJSON("/v1/batches", map[string]any{"input_file_id": f["id"], "endpoint": "/v1/chat/completions"}, &o)
	select {
	case body := <-got:
		var ev struct {
			Object string `json:"object"`
			Type   string `json:"type"`
			Data   struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &ev); err != nil || ev.Object != "event" || ev.Type != "batch.completed" || ev.Data.ID != o.ID {
			t.Fatalf("webhook %s (%v), want batch.completed for %s", body, err, o.ID)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no webhook within 60s")
	}
}

// GET /v1/batches and GET /v1/files page with limit and after, newest
// first, without repeats or gaps.
func TestAPIPagination(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	want := map[string]bool{}
	for i := range 5 {
		_, f := e.upload("batch", fmt.Sprintf("p%d.jsonl", i), chatBatch(1, fmt.Sprintf("p%d", i)))
		var o pipeline.BatchObject
		e.postJSON("/v1/batches", map[string]any{"input_file_id": f["id"], "endpoint": "/v1/chat/completions"}, &o)
		want[o.ID] = true
	}
	for _, kind := range []string{"batches", "files"} {
		seen := map[string]bool{}
		after := ""
		for pages := 0; ; pages++ {
			var page struct {
				Data []struct {
					ID string `json:"id"`
				} `json:"data"`
				HasMore bool   `json:"has_more"`
				LastID  string `json:"last_id"`
			}
			path := "/v1/" + kind + "?limit=2"
			if after != "" {
				path += "&after=" + after
			}
			if st := e.call("GET", path, "", nil, &page); st != 200 || len(page.Data) > 2 {
				t.Fatalf("%s page: %d %+v", kind, st, page)
			}
			for _, d := range page.Data {
				if seen[d.ID] {
					t.Fatalf("%s: %s listed twice", kind, d.ID)
				}
				seen[d.ID] = true
			}
			if !page.HasMore {
				break
			}
			after = page.LastID
		}
		if len(seen) != 5 {
			t.Fatalf("%s: listed %d, want 5", kind, len(seen))
		}
		if kind == "batches" {
			for id := range want {
				if !seen[id] {
					t.Fatalf("batch %s not listed", id)
				}
			}
		}
	}
	var ae apiErr
	if st := e.call("GET", "/v1/batches?after=batch_nope", "", nil, &ae); st != 400 {
		t.Fatalf("after an unknown id: %d", st)
	}
}

// Past retention, an API batch is forgotten entirely: GET answers 404, not
// a stale "validating" object.
func TestRetentionForgetsAPIBatches(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	_, f := e.upload("batch", "x.jsonl", chatBatch(2, "x"))
	var o pipeline.BatchObject
	e.postJSON("/v1/batches", map[string]any{"input_file_id": f["id"], "endpoint": "/v1/chat/completions"}, &o)
	e.waitBatch(o.ID, func(o *pipeline.BatchObject) bool { return pipeline.Terminal(o.Status) })
	waitFor(t, 10*time.Second, "the run to finish", func() bool { return e.d.Expire(time.Now().Add(time.Hour)) > 0 })
	var ae apiErr
	if st := e.call("GET", "/v1/batches/"+o.ID, "", nil, &ae); st != 404 {
		t.Fatalf("expired batch: %d %+v", st, ae)
	}
	if _, err := os.Stat(filepath.Join(e.dirs.Done, o.ID+".jsonl")); err != nil {
		t.Fatalf("the input in done/ must stay: %v", err)
	}
}

// The hostile requests of issue 10: a token id outside the vocabulary, sent
// online or in a batch file, is a 400 naming the field; the daemon stays
// up and the rest of the batch runs.
func TestOutOfVocabularyTokenIDsAreRefusedNotFatal(t *testing.T) {
	model := demoModel(t)
	e := newAPIEnv(t, openaitest.Options{}, func(c *daemon.Config) {
		c.Engine = "native"
		c.Native.Models = []native.ModelConfig{{Path: model}}
	})
	for _, c := range []struct{ path, body, param string }{
		{"/v1/embeddings", `{"input":[[1,99999999]]}`, "input"},
		{"/v1/completions", `{"prompt":[1,99999999],"max_tokens":2}`, "prompt"},
	} {
		var out struct {
			Error struct {
				Message string  `json:"message"`
				Param   *string `json:"param"`
			} `json:"error"`
		}
		st := e.call("POST", c.path, "application/json", strings.NewReader(c.body), &out)
		if st != 400 || out.Error.Param == nil || *out.Error.Param != c.param || !strings.Contains(out.Error.Message, "outside the vocabulary") {
			t.Fatalf("%s %s: %d %+v, want a 400 naming %s", c.path, c.body, st, out, c.param)
		}
	}
	e.drop("tok.jsonl", `{"custom_id":"bad","method":"POST","url":"/v1/embeddings","body":{"input":[[1,99999999]]}}
{"custom_id":"good","method":"POST","url":"/v1/embeddings","body":{"input":[[1,2,3]]}}
`)
	o := e.waitEnded("tok", "jsonl")
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 1 || o.RequestCounts.Failed != 1 {
		t.Fatalf("%s %+v", o.Status, o.RequestCounts)
	}
	errs := e.lines("tok.errors.jsonl")
	if len(errs) != 1 || !strings.Contains(errs[0], `"custom_id":"bad"`) || !strings.Contains(errs[0], `"status_code":400`) || !strings.Contains(errs[0], "outside the vocabulary") {
		t.Fatalf("errors file: %q", errs)
	}
	e.check("tok", "jsonl")
	var ok map[string]any
	if st := e.call("POST", "/v1/embeddings", "application/json", strings.NewReader(`{"input":"still up"}`), &ok); st != 200 {
		t.Fatalf("after the hostile requests: %d %v", st, ok)
	}
}

// An online answer the engine gets wrong (not UTF-8, not an object) is a
// 502 engine_bad_response, never passed on: the same check as a batch's.
func TestAPIOnlineRefusesABadAnswer(t *testing.T) {
	bodies := map[string]string{"gpt-bad-utf8": "{\"object\":\"chat.completion\",\"x\":\"\xff\"}", "gpt-array": "[]"}
	e := newAPIEnv(t, openaitest.Options{Fault: func(n int64, r *http.Request, body []byte) openaitest.Fault {
		var req struct{ Model string }
		_ = json.Unmarshal(body, &req)
		if b, ok := bodies[req.Model]; ok {
			return openaitest.Fault{Status: 200, Body: b}
		}
		return openaitest.Fault{}
	}}, nil)
	for model := range bodies {
		var ae apiErr
		st := e.postJSON("/v1/chat/completions", map[string]any{"model": model, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}, &ae)
		if st != http.StatusBadGateway || ae.Error.Code == nil || *ae.Error.Code != "engine_bad_response" {
			t.Errorf("%s: %d %+v, want 502 engine_bad_response", model, st, ae)
		}
	}
	var chat map[string]any
	if st := e.postJSON("/v1/chat/completions", map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}, &chat); st != 200 || chat["object"] != "chat.completion" {
		t.Fatalf("a good answer after them: %d %v", st, chat)
	}
}
