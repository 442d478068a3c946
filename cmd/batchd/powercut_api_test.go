package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/internal/lazyfs"
	"github.com/batchd/batchd/pipeline"
)

// apiFlow is the HTTP API's part of the power-cut tests, as a client
// drives it: an upload and a batch made of it, run to its end; its failed
// requests retried; a second batch created and cancelled. Each answered
// step is a promise the daemon keeps across a power cut: an answered
// upload is there after it, an answered batch reaches an outcome, an
// answered retry or cancel is carried out. A step that got no answer is
// taken again after the restart, as a client would.
type apiFlow struct {
	content, small []byte
	valid, invalid int

	fileA, batch1, fileB, batch2 string
	retried, cancelled, done     bool
}

func newAPIFlow() *apiFlow {
	content, invalid := crashInput(failpointRequests)
	small, _ := crashInput(60)
	return &apiFlow{content: content, small: small, valid: failpointRequests - invalid, invalid: invalid}
}

// errGone is a step's error when the daemon stopped answering.
type errGone struct{ err error }

func (e errGone) Error() string { return "the daemon stopped answering: " + e.err.Error() }

// apiCall is one request to the daemon at base; a transport error is
// errGone.
func apiCall(base, method, path, contentType string, body []byte, out any) (int, error) {
	req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, errGone{err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, errGone{err}
	}
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode %q: %w", method, path, raw, err)
		}
	}
	return resp.StatusCode, nil
}

func apiUpload(base string, content []byte) (string, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "input.jsonl")
	fw.Write(content)
	mw.Close()
	var obj struct{ ID string }
	code, err := apiCall(base, "POST", "/v1/files", mw.FormDataContentType(), body.Bytes(), &obj)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("upload: status %d", code)
	}
	return obj.ID, err
}

func apiCreate(base, fileID string) (string, error) {
	body := fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","completion_window":"24h"}`, fileID)
	var obj struct{ ID string }
	code, err := apiCall(base, "POST", "/v1/batches", "application/json", []byte(body), &obj)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("create batch: status %d", code)
	}
	return obj.ID, err
}

// apiWait polls batch id until it ends and returns its object.
func apiWait(base, id string) (*pipeline.BatchObject, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var o pipeline.BatchObject
		code, err := apiCall(base, "GET", "/v1/batches/"+id, "", nil, &o)
		switch {
		case err != nil:
			return nil, err
		case code != http.StatusOK:
			return nil, fmt.Errorf("get batch %s: status %d", id, code)
		case pipeline.Terminal(o.Status):
			return &o, nil
		case time.Now().After(deadline):
			return nil, fmt.Errorf("batch %s still %s after 2 minutes", id, o.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drive takes the flow's steps from the first unanswered one to its end
// against the daemon at base. It returns errGone when the daemon stops
// answering, an error for a step answered 5xx (which the power going off
// under the daemon explains, and nothing else: the caller tells), and
// fails t on a broken promise.
func (a *apiFlow) drive(t *testing.T, base string) error {
	t.Helper()
	var err error
	if a.fileA == "" {
		if a.fileA, err = apiUpload(base, a.content); err != nil {
			return err
		}
	}
	if code, err := apiCall(base, "GET", "/v1/files/"+a.fileA, "", nil, nil); err != nil {
		return err
	} else if code != http.StatusOK {
		t.Fatalf("the answered upload %s is gone: status %d", a.fileA, code)
	}
	if a.batch1 == "" {
		if a.batch1, err = apiCreate(base, a.fileA); err != nil {
			return err
		}
	}
	o, err := apiWait(base, a.batch1)
	if err != nil {
		return err
	}
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != a.valid || o.RequestCounts.Failed != a.invalid {
		t.Fatalf("batch %s ended %s with %+v, want completed with %d completed and %d failed", a.batch1, o.Status, o.RequestCounts, a.valid, a.invalid)
	}
	if !a.retried {
		code, err := apiCall(base, "POST", "/v1/batches/"+a.batch1+"/retry", "", nil, nil)
		if err != nil {
			return err
		}
		if code >= 500 { // the power may be off: the caller tells
			return fmt.Errorf("retry of %s: status %d", a.batch1, code)
		}
		if code != http.StatusOK {
			t.Fatalf("retry of %s: status %d", a.batch1, code)
		}
		a.retried = true
	}
	// Retried, its invalid lines fail again and the completed stay.
	if o, err = apiWait(base, a.batch1); err != nil {
		return err
	}
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != a.valid || o.RequestCounts.Failed != a.invalid {
		t.Fatalf("batch %s ended its retry %s with %+v", a.batch1, o.Status, o.RequestCounts)
	}
	if a.fileB == "" {
		if a.fileB, err = apiUpload(base, a.small); err != nil {
			return err
		}
	}
	if a.batch2 == "" {
		if a.batch2, err = apiCreate(base, a.fileB); err != nil {
			return err
		}
	}
	if !a.cancelled {
		code, err := apiCall(base, "POST", "/v1/batches/"+a.batch2+"/cancel", "", nil, nil)
		if err != nil {
			return err
		}
		if code >= 500 { // the power may be off: the caller tells
			return fmt.Errorf("cancel of %s: status %d", a.batch2, code)
		}
		// 409: it ended before the request (a fast engine).
		if code != http.StatusOK && code != http.StatusConflict {
			t.Fatalf("cancel of %s: status %d", a.batch2, code)
		}
		a.cancelled = true
	}
	if o, err = apiWait(base, a.batch2); err != nil {
		return err
	}
	if o.Status != pipeline.StatusCancelled && o.Status != pipeline.StatusCompleted {
		t.Fatalf("batch %s ended %s after its cancel", a.batch2, o.Status)
	}
	a.done = true
	return nil
}

// startAPI starts bin on data listening on a free loopback port (the log
// names it: loggedListenAddr).
func (f *cutFixture) startAPI(t *testing.T, bin, data, logPath string) *proc {
	t.Helper()
	return startBatchdCmd(t, bin, logPath, nil, "run", "--config", f.cfg, "--data", data, "--engine", "openai",
		"--openai-url", f.url, "--listen", "127.0.0.1:0")
}

// TestPowerCutAPI cuts the power at random points of the API's flow
// (upload, create, run, retry, cancel) and drives the flow to its end
// after the restart: every answered step's promise holds, and batchd check
// passes for each batch and batchd ledger check for the ledger.
func TestPowerCutAPI(t *testing.T) {
	f := newCutFixture(t)
	rng := powerCutRand(t, 0x617069637574)

	// An uninterrupted flow on lazyfs gives the range of the cut points.
	root := t.TempDir()
	backing, data := filepath.Join(root, "backing"), filepath.Join(root, "data")
	if err := os.MkdirAll(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	fs := mountLazy(t, backing, data, lazyfs.Options{})
	p := f.startAPI(t, f.bin, data, root+"/batchd.log")
	p.waitReady(t)
	if err := newAPIFlow().drive(t, "http://"+loggedListenAddr(t, root+"/batchd.log")); err != nil {
		t.Fatalf("uninterrupted flow: %v\n%s", err, logTail(root+"/batchd.log"))
	}
	p.signal(t, syscall.SIGTERM)
	if err := fs.Unmount(); err != nil {
		t.Fatal(err)
	}
	total := fs.Ops()
	t.Logf("an uninterrupted API flow takes %d operations", total)

	for i := range powerCutCuts(t) {
		at := 1 + rng.Int64N(total)
		opt := lazyfs.Options{Torn: true, Seed: rng.Uint64()}
		t.Run(fmt.Sprintf("cut%d-op%d", i, at), func(t *testing.T) {
			root := t.TempDir()
			backing, data := filepath.Join(root, "backing"), filepath.Join(root, "data")
			logPath := root + "/batchd.log"
			if err := os.MkdirAll(backing, 0o755); err != nil {
				t.Fatal(err)
			}
			fs := mountLazy(t, backing, data, opt)
			p := armCut(fs, at, func() *proc { return f.startAPI(t, f.bin, data, logPath) })
			flow := newAPIFlow()
			waitFor(t, time.Minute, "batchd to start or die", func() bool { return !p.running() || readyLines(logPath) > p.readyBefore })
			var err error = errGone{errors.New("it died starting")}
			if p.running() {
				err = flow.drive(t, "http://"+loggedListenAddr(t, logPath))
			}
			// Once the power is off every write fails (EIO) until the
			// kill lands, and the daemon may answer that in between.
			if _, gone := err.(errGone); err != nil && !gone && !fs.Frozen() {
				t.Fatalf("flow: %v\n%s", err, logTail(logPath))
			}
			if err == nil {
				// The flow took fewer operations than the cut point.
				p.signal(t, syscall.SIGTERM)
			}
			waitFor(t, time.Minute, "batchd to die", func() bool { return !p.running() })
			powerCut(t, fs, backing, data)
			t.Logf("cut after: file %q batch %q retried %v file %q batch %q cancelled %v",
				flow.fileA, flow.batch1, flow.retried, flow.fileB, flow.batch2, flow.cancelled)
			p = f.startAPI(t, f.bin, data, logPath)
			p.waitReady(t)
			if err := flow.drive(t, "http://"+loggedListenAddr(t, logPath)); err != nil {
				t.Fatalf("flow after the restart: %v\n%s", err, logTail(logPath))
			}
			p.signal(t, syscall.SIGTERM)
			checks := [][]string{{"ledger", "check", "--data", data}}
			for _, id := range []string{flow.batch1, flow.batch2} {
				checks = append(checks, []string{"check", "--data", data, id})
			}
			for _, args := range checks {
				cmd := exec.Command(f.bin, args...)
				cmd.Env = hermeticEnv()
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("batchd %s: %v\n%s\n%s", strings.Join(args, " "), err, out, logTail(logPath))
				}
			}
		})
	}
}
