package daemon_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
)

// uploadHead is the start of a POST /v1/files body: the purpose, then the
// file part's headers and the first bytes of its content.
const uploadHead = "--B\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n" +
	"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"slow.jsonl\"\r\n" +
	"Content-Type: application/octet-stream\r\n\r\n" + `{"custom_id":"a",`

// startBody opens a connection to addr and sends the headers of a POST to
// path announcing a body of 1 MiB, and head, the first bytes of it. The
// rest is the caller's to send (or not).
func startBody(t *testing.T, addr, path, contentType, head string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: batchd\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
		path, contentType, 1<<20, head)
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	return conn
}

// readAnswer reads the response on conn and decodes its OpenAI error.
func readAnswer(t *testing.T, conn net.Conn) (*http.Response, apiErr) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // fails, not hangs, when no answer comes
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	defer resp.Body.Close()
	var e apiErr
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("answer %s, not an OpenAI error: %s", resp.Status, raw)
	}
	return resp, e
}

// partialUploads lists the files dir's temporary files (uploads not
// finished).
func partialUploads(t *testing.T, data string) []string {
	t.Helper()
	tmps, err := filepath.Glob(filepath.Join(data, "files", ".*.tmp"))
	if err != nil {
		t.Fatal(err)
	}
	return tmps
}

func TestSlowBodiesAreCutOff(t *testing.T) {
	// A body that stops, or that drips a byte at a time below
	// api.body_min_rate, is answered 408 within api.body_timeout, on every
	// route that reads one; an upload's partial file is removed.
	e := newEnv(t, openaitest.Options{})
	cfg := e.config()
	cfg.Listen = "127.0.0.1:0"
	cfg.API.BodyTimeout, cfg.API.BodyMinRate = 200*time.Millisecond, 1<<10 // 204 bytes a window
	addr := e.open(cfg).HTTPAddr()
	cases := []struct {
		name, path, contentType, head string
		drip                          bool
	}{
		{"upload stops", "/v1/files", "multipart/form-data; boundary=B", uploadHead, false},
		{"upload drips", "/v1/files", "multipart/form-data; boundary=B", uploadHead, true},
		{"batch drips", "/v1/batches", "application/json", `{"input_file_id":`, true},
		{"chat stops", "/v1/chat/completions", "application/json", `{"model":"m","messages":[`, false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn := startBody(t, addr, tc.path, tc.contentType, tc.head)
			if tc.drip {
				// A byte every 5 ms, 40 a window: never idle, always too slow.
				go func() {
					tick := time.NewTicker(5 * time.Millisecond)
					defer tick.Stop()
					for range tick.C {
						if _, err := conn.Write([]byte(" ")); err != nil {
							return
						}
					}
				}()
			}
			resp, ae := readAnswer(t, conn)
			if resp.StatusCode != http.StatusRequestTimeout || ae.Error.Code == nil || *ae.Error.Code != "request_timeout" ||
				!strings.Contains(ae.Error.Message, "api.body_min_rate") {
				t.Errorf("answer %s %+v, want 408 request_timeout naming api.body_min_rate", resp.Status, ae.Error)
			}
			if tmps := partialUploads(t, cfg.Data); len(tmps) > 0 {
				t.Errorf("partial uploads left: %v", tmps)
			}
			if n := scrape(t, addr)["batchd_api_bodies_too_slow_total"]; n != float64(i+1) {
				t.Errorf("batchd_api_bodies_too_slow_total = %v, want %d", n, i+1)
			}
		})
	}
	// A body at a good pace is read whole: an upload, then a batch of it.
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "ok.jsonl")
	io.WriteString(fw, chatBatch(2, "ok"))
	mw.Close()
	resp, err := http.Post("http://"+addr+"/v1/files", mw.FormDataContentType(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("upload at a good pace: %s", resp.Status)
	}
}

func TestBodyTimeoutEndsWithTheBody(t *testing.T) {
	// The pace applies to the body alone: an online request read whole
	// and then answered after several body timeouts is answered, not cut
	// off (the server's read for a client going away must not time out).
	e := newEnv(t, openaitest.Options{Fault: func(int64, *http.Request, []byte) openaitest.Fault {
		return openaitest.Fault{Delay: 500 * time.Millisecond}
	}})
	cfg := e.config()
	cfg.Listen = "127.0.0.1:0"
	cfg.API.BodyTimeout = 50 * time.Millisecond
	addr := e.open(cfg).HTTPAddr()
	body := `{"model":"m","messages":[{"role":"user","content":"slow answer"}],"max_tokens":4}`
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), "chat.completion") {
		t.Errorf("online request answered after the body timeout: %s %s", resp.Status, raw)
	}
}

func TestConcurrentUploadsAreCapped(t *testing.T) {
	// With api.max_concurrent_uploads uploads held open mid-body, one more
	// is answered 429 with Retry-After before anything is written, while
	// /healthz and the other routes answer; once one ends, an upload is
	// taken again.
	const limit = 3
	e := newEnv(t, openaitest.Options{})
	cfg := e.config()
	cfg.Listen = "127.0.0.1:0"
	cfg.API.MaxConcurrentUploads = limit
	cfg.API.BodyTimeout = 10 * time.Minute // held uploads are not cut off here
	addr := e.open(cfg).HTTPAddr()
	base := "http://" + addr
	held := make([]net.Conn, limit)
	for i := range held {
		held[i] = startBody(t, addr, "/v1/files", "multipart/form-data; boundary=B", uploadHead)
	}
	waitFor(t, 30*time.Second, "the server to take the held uploads and start their files", func() bool {
		return scrape(t, addr)["batchd_api_uploads_in_progress"] == limit && len(partialUploads(t, cfg.Data)) == limit
	})
	upload := func() (*http.Response, apiErr) {
		t.Helper()
		conn := startBody(t, addr, "/v1/files", "multipart/form-data; boundary=B", "")
		return readAnswer(t, conn)
	}
	resp, ae := upload()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" ||
		ae.Error.Type != "rate_limit_exceeded" || !strings.Contains(ae.Error.Message, "api.max_concurrent_uploads") {
		t.Errorf("upload over the cap: %s Retry-After %q %+v, want 429 with Retry-After 1", resp.Status, resp.Header.Get("Retry-After"), ae.Error)
	}
	if n := scrape(t, addr)["batchd_api_uploads_refused_total"]; n != 1 {
		t.Errorf("batchd_api_uploads_refused_total = %v, want 1", n)
	}
	for _, path := range []string{"/healthz", "/readyz", "/v1/files"} {
		if code, body := get(t, base+path); code != http.StatusOK {
			t.Errorf("GET %s with the uploads held: %d %s", path, code, body)
		}
	}

	// One held upload ends (the client goes away): its partial file goes,
	// and its slot serves the next upload.
	held[0].Close()
	waitFor(t, 30*time.Second, "the ended upload's slot to free", func() bool {
		return scrape(t, addr)["batchd_api_uploads_in_progress"] == limit-1
	})
	conn := startBody(t, addr, "/v1/files", "multipart/form-data; boundary=B", uploadHead)
	waitFor(t, 30*time.Second, "the next upload to be taken", func() bool {
		return scrape(t, addr)["batchd_api_uploads_in_progress"] == limit
	})
	conn.Close()
	for _, c := range held[1:] {
		c.Close()
	}
	waitFor(t, 30*time.Second, "every upload to end", func() bool {
		return scrape(t, addr)["batchd_api_uploads_in_progress"] == 0
	})
	if tmps := partialUploads(t, cfg.Data); len(tmps) > 0 {
		t.Errorf("partial uploads left: %v", tmps)
	}
	entries, err := os.ReadDir(filepath.Join(cfg.Data, "files"))
	if err != nil || len(entries) != 0 {
		t.Errorf("files dir after the aborted uploads: %v %v, want empty", entries, err)
	}
}
