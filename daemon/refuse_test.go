package daemon_test

import (
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/pipeline"
)

// refuseConfig is e's config with fast rescans and a short grace for
// incomplete inputs.
func (e *env) refuseConfig() daemon.Config {
	cfg := e.config()
	cfg.Watcher.Rescan = 100 * time.Millisecond
	cfg.Watcher.IncompleteAfter = 300 * time.Millisecond
	return cfg
}

// waitRefused waits for name's failed batch object with code and for the
// input base to be in rejected/ and gone from the inbox.
func (e *env) waitRefused(name, base, code string) *pipeline.BatchObject {
	e.t.Helper()
	var o *pipeline.BatchObject
	waitFor(e.t, 60*time.Second, "refusal of "+name, func() bool {
		o = e.object(name)
		if o == nil || o.Status != pipeline.StatusFailed {
			return false
		}
		_, inbox := os.Lstat(filepath.Join(e.dirs.Inbox, base))
		_, rejected := os.Lstat(filepath.Join(e.dirs.Rejected, base))
		return inbox != nil && rejected == nil
	})
	if o.Errors == nil || len(o.Errors.Data) != 1 || o.Errors.Data[0].Code != code || o.Errors.Data[0].Message == "" {
		e.t.Fatalf("%s: errors = %+v, want one with code %s", name, o.Errors, code)
	}
	return o
}

// runSentinel runs a normal batch to its end: the daemon still takes work,
// and the watcher has rescanned the inbox meanwhile.
func (e *env) runSentinel(name string) {
	e.t.Helper()
	e.drop(name+".jsonl", chatBatch(2, name))
	if o := e.waitEnded(name, "jsonl"); o.Status != pipeline.StatusCompleted {
		e.t.Fatalf("%s: %s", name, o.Status)
	}
}

func TestLongNameFailsUnderAShortNameOnce(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	e.open(e.refuseConfig())
	long := strings.Repeat("L", 240)
	e.drop(long+".jsonl", chatBatch(3, "long"))
	short := filecontract.SafeName(long)
	o := e.waitRefused(short, long+".jsonl", filecontract.CodeNameTooLong)
	if o.Batchd.InputFile != long+".jsonl" || !strings.Contains(o.Errors.Data[0].Message, "rename") {
		t.Fatalf("object = %+v, %+v", o.Batchd, o.Errors.Data[0])
	}
	e.runSentinel("after")
	logs := e.logs.String()
	if n := strings.Count(logs, `msg="inbox file refused"`); n != 1 {
		t.Fatalf("refused %d times, want once", n)
	}
	if strings.Contains(logs, "retried") || e.srv.Requests() != 2 {
		t.Fatalf("retried, or the engine saw %d requests, want the sentinel's 2", e.srv.Requests())
	}
}

// A link to a file outside DATA is refused unread: nothing batchd writes,
// logs or serves quotes it.
func TestSymlinkOutsideDataIsRefusedUnread(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	cfg := e.refuseConfig()
	cfg.Listen = "127.0.0.1:0"
	d := e.open(cfg)
	const secret = "root:x:0:0:SECRET-LINE"
	target := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(target, []byte(secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(e.dirs.Inbox, "passwd.jsonl")); err != nil {
		t.Fatal(err)
	}
	o := e.waitRefused("passwd", "passwd.jsonl", filecontract.CodeNotRegular)

	// A link planted in done/ under the batch's input name is not served.
	if err := os.Symlink(target, filepath.Join(e.dirs.Done, "passwd.jsonl")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + d.HTTPAddr() + "/v1/files/file-i" + strings.TrimPrefix(o.ID, "batch_") + "/content")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || strings.Contains(string(body), "SECRET") {
		t.Fatalf("input content: %d %s, want 404", resp.StatusCode, body)
	}

	e.runSentinel("after")
	if strings.Contains(e.logs.String(), "SECRET") {
		t.Fatal("the log quotes the link's target")
	}
	err = filepath.WalkDir(e.dirs.Root, func(path string, de fs.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return err
		}
		raw, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(raw), "SECRET") {
			t.Errorf("%s quotes the link's target", path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestFIFOIsRefusedWithoutBlocking(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	e.open(e.refuseConfig())
	if err := syscall.Mkfifo(filepath.Join(e.dirs.Inbox, "x.jsonl"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.waitRefused("x", "x.jsonl", filecontract.CodeNotRegular)
	if st, err := os.Lstat(filepath.Join(e.dirs.Rejected, "x.jsonl")); err != nil || st.Mode()&fs.ModeNamedPipe == 0 {
		t.Fatalf("rejected/x.jsonl: %v %v, want the FIFO", st, err)
	}
	e.runSentinel("after")
}

// A directory named like an input is logged once, left alone, and fails
// nothing.
func TestDirectoryNamedLikeAnInputIsLoggedOnce(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	e.open(e.refuseConfig())
	if err := os.Mkdir(filepath.Join(e.dirs.Inbox, "d.jsonl"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.runSentinel("after")
	e.runSentinel("after2")
	if n := strings.Count(e.logs.String(), "d.jsonl"); n != 1 {
		t.Fatalf("d.jsonl logged %d times, want once", n)
	}
	if e.object("d") != nil {
		t.Fatal("a batch object for the directory")
	}
	if st, err := os.Stat(filepath.Join(e.dirs.Inbox, "d.jsonl")); err != nil || !st.IsDir() {
		t.Fatalf("the directory was moved: %v", err)
	}
}

func TestIncompleteInputsFailAfterTheGrace(t *testing.T) {
	e := newEnv(t, openaitest.Options{})
	e.open(e.refuseConfig())
	e.drop("cut.jsonl", chatBatch(2, "c")+`{"custom_id":"half"`)
	e.drop("doc.json", `{"requests":[{"custom_id":"a","messages":[]}]`)
	for _, name := range []string{"cut", "doc"} {
		base := name + ".jsonl"
		if name == "doc" {
			base = name + ".json"
		}
		o := e.waitRefused(name, base, filecontract.CodeIncomplete)
		if msg := o.Errors.Data[0].Message; !strings.Contains(msg, "300ms") || !strings.Contains(msg, "rename it into the inbox") {
			t.Errorf("%s: message %q", name, msg)
		}
	}
	if e.srv.Requests() != 0 {
		t.Fatalf("the engine saw %d requests of incomplete inputs", e.srv.Requests())
	}
}

func TestIncompleteAfterMustBePositive(t *testing.T) {
	cfg := daemon.DefaultConfig()
	cfg.Engine = "openai"
	cfg.Watcher.IncompleteAfter = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "watcher.incomplete_after") {
		t.Fatalf("Validate = %v, want an error naming watcher.incomplete_after", err)
	}
}
