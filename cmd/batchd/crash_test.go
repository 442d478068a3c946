package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// batchdBin is the batchd binary TestMain builds (empty under -short, or when
// no go tool is found).
var batchdBin string

// binDir is where TestMain builds binaries (removed when the tests end).
var binDir string

// buildErr says why batchdBin is empty when it should not be.
var buildErr error

var crashSeed = flag.Uint64("crash.seed", 0, "seed of the crash test's kill schedule (0: from the clock)")

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(func() int {
		if testing.Short() {
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "batchd-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "batchd test: temp dir:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		binDir = dir
		goTool, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("no go tool on PATH: %w", err)
			return m.Run()
		}
		bin := filepath.Join(dir, "batchd")
		cmd := exec.Command(goTool, "build", "-o", bin, ".")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "batchd test: go build: %v\n%s", err, out)
			return 1
		}
		batchdBin = bin
		return m.Run()
	}())
}

// needBinary skips a test that runs the built binary when there is none.
func needBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped under -short: needs the batchd binary, which TestMain builds only without -short")
	}
	if batchdBin == "" {
		t.Skipf("no batchd binary: %v", buildErr)
	}
	return batchdBin
}

// proc is a batchd process.
type proc struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{} // closed once Wait returned
	err    error         // Wait's error, valid after exited

	readyBefore int // "watching" lines in the log before this process started
}

// readyLine is what `batchd run` prints once its signal handlers are set and
// the daemon is open.
const readyLine = "batchd: watching "

func readyLines(logPath string) int {
	raw, _ := os.ReadFile(logPath)
	return bytes.Count(raw, []byte(readyLine))
}

// waitReady waits until the process says it is running.
func (p *proc) waitReady(t *testing.T) {
	t.Helper()
	waitFor(t, 60*time.Second, "batchd to start", func() bool {
		if !p.running() {
			t.Fatalf("batchd exited at start: %v\n%s", p.err, logTail(p.log))
		}
		return readyLines(p.log) > p.readyBefore
	})
}

// startBatchd starts `batchd run` on data with the stand-in at url; its
// stderr is appended to logPath.
func startBatchd(t *testing.T, bin, data, configPath, url, logPath string) *proc {
	t.Helper()
	return startBatchdEnv(t, bin, data, configPath, url, logPath)
}

// startBatchdEnv is startBatchd with env added to the hermetic environment.
func startBatchdEnv(t *testing.T, bin, data, configPath, url, logPath string, env ...string) *proc {
	t.Helper()
	return startBatchdCmd(t, bin, logPath, env, "run", "--config", configPath, "--data", data, "--engine", "openai",
		"--openai-url", url, "--listen", "off")
}

// startBatchdArgs starts batchd with args; its stderr is appended to logPath.
func startBatchdArgs(t *testing.T, bin, logPath string, args ...string) *proc {
	t.Helper()
	return startBatchdCmd(t, bin, logPath, nil, args...)
}

// startBatchdCmd starts batchd with args and env added to the hermetic
// environment; its stderr is appended to logPath.
func startBatchdCmd(t *testing.T, bin, logPath string, env []string, args ...string) *proc {
	t.Helper()
	before := readyLines(logPath)
	logF, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.Env = logF, logF, append(hermeticEnv(), env...)
	if err := cmd.Start(); err != nil {
		logF.Close()
		t.Fatalf("start batchd: %v", err)
	}
	p := &proc{cmd: cmd, log: logPath, exited: make(chan struct{}), readyBefore: before}
	go func() {
		p.err = cmd.Wait()
		logF.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// hermeticEnv is this process's environment without BATCHD_* variables,
// which would override the config the tests give.
func hermeticEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BATCHD_") {
			env = append(env, kv)
		}
	}
	return env
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// signal sends sig and waits for the process to exit.
func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && p.running() {
		t.Fatalf("signal %v: %v", sig, err)
	}
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("batchd did not exit within 60s of %v\n%s", sig, logTail(p.log))
	}
}

// logTail returns the end of a log file, for failure messages.
func logTail(path string) string {
	raw, _ := os.ReadFile(path)
	const keep = 6000
	if len(raw) > keep {
		raw = raw[len(raw)-keep:]
	}
	return "--- batchd log (tail) ---\n" + string(raw)
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// batchProgress reads NAME.batch.json: its status and requests done (-1 and
// "" when there is none yet).
func batchProgress(outbox, name string) (status string, done int) {
	o, err := pipeline.ReadBatchObject(filepath.Join(outbox, name+".batch.json"))
	if err != nil {
		return "", -1
	}
	return o.Status, o.RequestCounts.Completed + o.RequestCounts.Failed
}

// finished reports whether batch name is completed with its input in done/
// and gone from the inbox.
func finished(data, name, format string) bool {
	status, _ := batchProgress(filepath.Join(data, "outbox"), name)
	if status != pipeline.StatusCompleted {
		return false
	}
	if _, err := os.Stat(filepath.Join(data, "done", name+"."+format)); err != nil {
		return false
	}
	_, err := os.Stat(filepath.Join(data, "inbox", name+"."+format))
	return os.IsNotExist(err)
}

// crashInput returns n batch lines: chat, completions and embeddings
// requests, with a few invalid lines among them.
func crashInput(n int) (content []byte, invalid int) {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("req-%d", i)
		words := fmt.Sprintf("crash request number %d says %s", i, strings.Repeat("word ", i%11))
		switch {
		case i == 7:
			b.WriteString(`{"custom_id":"broken", not json` + "\n")
			invalid++
			continue
		case i == 300: // duplicate of line 299's custom_id
			id = "req-299"
			invalid++
		case i == 1500:
			fmt.Fprintf(&b, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":%q}],"max_tokens":5,"temperature":9}}`+"\n", id, words)
			invalid++
			continue
		case i == 1800: // no custom_id
			fmt.Fprintf(&b, `{"method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":%q}],"max_tokens":5}}`+"\n", words)
			invalid++
			continue
		}
		switch {
		case i%7 == 0:
			fmt.Fprintf(&b, `{"custom_id":%q,"method":"POST","url":"/v1/embeddings","body":{"model":"emb","input":%q}}`+"\n", id, words)
		case i%5 == 0:
			fmt.Fprintf(&b, `{"custom_id":%q,"method":"POST","url":"/v1/completions","body":{"prompt":%q,"max_tokens":%d}}`+"\n", id, words, i%9+1)
		default:
			fmt.Fprintf(&b, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":%q}],"max_tokens":%d}}`+"\n", id, words, i%9+1)
		}
	}
	return b.Bytes(), invalid
}

// placeInput writes content to dir/name through a dot-named file and a rename.
func placeInput(t *testing.T, dir, name string, content []byte) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "."+name+".part")
	if err := os.WriteFile(tmp, content, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func fileLines(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sortedFileLines(t *testing.T, path string) []string {
	l := fileLines(t, path)
	sort.Strings(l)
	return l
}

// leftovers lists temporary files (dot-files, *.tmp, *.part) in dirs.
func leftovers(t *testing.T, dirs ...string) []string {
	t.Helper()
	var bad []string
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".tmp") || strings.HasSuffix(n, ".part") {
				bad = append(bad, filepath.Join(d, n))
			}
		}
	}
	return bad
}

// diffResults explains how two result files differ: lines present on one
// side only, and for lines of the same input line which JSON fields differ.
func diffResults(want, got []string) string {
	key := func(s string) string {
		var l struct {
			ID string `json:"id"` // derived from batch and line
		}
		json.Unmarshal([]byte(s), &l)
		return l.ID
	}
	wm, gm := map[string]string{}, map[string]string{}
	for _, s := range want {
		wm[key(s)] = s
	}
	for _, s := range got {
		gm[key(s)] = s
	}
	var b strings.Builder
	shown := 0
	for k, w := range wm {
		if shown >= 5 {
			break
		}
		g, ok := gm[k]
		switch {
		case !ok:
			fmt.Fprintf(&b, "only in the reference: %s\n", w)
			shown++
		case g != w:
			var wv, gv any
			json.Unmarshal([]byte(w), &wv)
			json.Unmarshal([]byte(g), &gv)
			fmt.Fprintf(&b, "result %s differs in %s\n  reference: %s\n  crash run: %s\n", k, strings.Join(jsonDiff("", wv, gv), ", "), w, g)
			shown++
		}
	}
	for k, g := range gm {
		if shown >= 10 {
			break
		}
		if _, ok := wm[k]; !ok {
			fmt.Fprintf(&b, "only in the crash run: %s\n", g)
			shown++
		}
	}
	return b.String()
}

// jsonDiff returns the paths at which two decoded JSON values differ.
func jsonDiff(path string, a, b any) []string {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		var out []string
		for k := range am {
			out = append(out, jsonDiff(path+"."+k, am[k], bm[k])...)
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				out = append(out, path+"."+k)
			}
		}
		return out
	}
	if !reflect.DeepEqual(a, b) {
		if path == "" {
			path = "."
		}
		return []string{path}
	}
	return nil
}

// crashConfig is the daemon config of the crash test: small commit and
// progress intervals, few workers so the batch lasts long enough to be killed
// twenty times.
const crashConfig = `
pipeline:
  commit_interval: 20ms
  commit_every: 64
  progress_interval: 50ms
  workers: 4
watcher:
  settle: 100ms
  rescan: 1s
openai:
  max_inflight: 8
  retry_wait_min: 10ms
  retry_wait_max: 100ms
  probe_interval: 50ms
log:
  level: info
`

// crashFixture starts the stand-in engine with fault (nil: none) and
// writes crashConfig into a new temporary root; it returns the server, the
// root and the config's path.
func crashFixture(t *testing.T, fault func(n int64, r *http.Request, body []byte) openaitest.Fault) (*openaitest.Server, string, string) {
	t.Helper()
	srv := openaitest.NewServer(openaitest.Options{Fault: fault})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	root := t.TempDir()
	cfgPath := filepath.Join(root, "batchd.yaml")
	if err := os.WriteFile(cfgPath, []byte(crashConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	return srv, root, cfgPath
}

// TestCrashKillRestartIsExactlyOnce runs a 2,000-request batch to the end
// once without interruption, then again on a fresh data directory while
// SIGKILLing and restarting the daemon twenty times at random moments, and
// once more as the results are published; `batchd check` must pass and the
// outputs must be the same as the uninterrupted run's, line for line.
func TestCrashKillRestartIsExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped under -short: it builds batchd and SIGKILLs it 20 times (about 20s)")
	}
	bin := needBinary(t)
	const (
		name     = "crash"
		requests = 2000
		kills    = 20
		latency  = 5 * time.Millisecond // per request: the batch runs a few seconds
	)
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("crash test seed %d (rerun with -crash.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x6261746368640a))

	srv, root, cfgPath := crashFixture(t, func(n int64, r *http.Request, body []byte) openaitest.Fault {
		time.Sleep(latency) // simulated model latency, not synchronisation
		return openaitest.Fault{}
	})
	content, invalid := crashInput(requests)
	src := filepath.Join(root, name+".jsonl")
	if err := os.WriteFile(src, content, 0o644); err != nil {
		t.Fatal(err)
	}
	// An options file rides along; it must end in done/ with its input.
	options := []byte(`{"metadata":{"suite":"crash"}}`)
	optsPath := filepath.Join(root, "options.json")
	if err := os.WriteFile(optsPath, options, 0o644); err != nil {
		t.Fatal(err)
	}

	// Reference: one uninterrupted run.
	refData := filepath.Join(root, "ref")
	placeInput(t, filepath.Join(refData, "inbox"), name+".options.json", options)
	placeInput(t, filepath.Join(refData, "inbox"), name+".jsonl", content)
	refLog := filepath.Join(root, "ref.log")
	began := time.Now()
	ref := startBatchd(t, bin, refData, cfgPath, srv.URL(), refLog)
	waitFor(t, 5*time.Minute, "the reference batch to complete", func() bool {
		if !ref.running() {
			t.Fatalf("reference batchd exited: %v\n%s", ref.err, logTail(refLog))
		}
		return finished(refData, name, "jsonl")
	})
	ref.waitReady(t)
	ref.signal(t, syscall.SIGTERM)
	if ref.err != nil {
		t.Fatalf("reference batchd exit after SIGTERM: %v\n%s", ref.err, logTail(refLog))
	}
	refRequests := srv.Requests()
	t.Logf("reference run: %s, %d requests to the stand-in", time.Since(began).Round(time.Millisecond), refRequests)

	// Crash run: the same file, submitted with `batchd submit`.
	data := filepath.Join(root, "crash")
	outbox := filepath.Join(data, "outbox")
	submit := exec.Command(bin, "submit", "--data", data, "--options", optsPath, src)
	submit.Env = hermeticEnv()
	if out, err := submit.CombinedOutput(); err != nil {
		t.Fatalf("batchd submit: %v\n%s", err, out)
	}
	crashLog := filepath.Join(root, "crash.log")

	// The kill schedule: most kills wait for a share of the batch to be done
	// (sorted, so they spread from early to near the end, the last one past
	// 90%); every fourth kill instead comes a random moment after a restart,
	// landing in startup, recovery or the first requests after it.
	delayKill := func(i int) bool { return i%4 == 1 }
	var fractions []float64
	for i := range kills {
		if !delayKill(i) {
			fractions = append(fractions, 0.02+rng.Float64()*0.88)
		}
	}
	sort.Float64s(fractions)
	fractions[len(fractions)-1] = 0.9 + rng.Float64()*0.05
	began = time.Now()
	p := startBatchd(t, bin, data, cfgPath, srv.URL(), crashLog)
	killed := 0
	for i := range kills {
		started := time.Now()
		how := ""
		if delayKill(i) {
			d := time.Duration(rng.Int64N(int64(250 * time.Millisecond)))
			how = fmt.Sprintf("%s after start", d.Round(time.Millisecond))
			select {
			case <-time.After(d):
			case <-p.exited:
			}
		} else {
			target := int(fractions[0] * requests)
			fractions = fractions[1:]
			how = fmt.Sprintf("once %d/%d requests are done", target, requests)
			waitFor(t, 2*time.Minute, fmt.Sprintf("kill %d: %d requests done", i+1, target), func() bool {
				_, done := batchProgress(outbox, name)
				return done >= target || !p.running() || finished(data, name, "jsonl")
			})
		}
		if !p.running() {
			t.Fatalf("kill %d: batchd exited by itself: %v\n%s", i+1, p.err, logTail(crashLog))
		}
		if finished(data, name, "jsonl") {
			t.Logf("kill %d: the batch finished first (the stand-in is faster than planned)", i+1)
			break
		}
		p.signal(t, syscall.SIGKILL)
		killed++
		status, done := batchProgress(outbox, name)
		t.Logf("kill %2d: %-32s after %-6s batch.json: %q %d/%d", i+1, how, time.Since(started).Round(time.Millisecond), status, done, requests)
		p = startBatchd(t, bin, data, cfgPath, srv.URL(), crashLog)
	}
	if killed < kills {
		t.Errorf("only %d of %d kills landed before the batch finished", killed, kills)
	}
	// One more kill the moment the results are published in the outbox: it
	// lands while the batch finalizes (results published, input not yet
	// moved) or just after it ended; either way a restart must settle it.
	if killed == kills {
		// A tight poll: the window between publishing and moving the input
		// is a few fsyncs long.
		published := filepath.Join(outbox, name+".output.jsonl")
		for deadline := time.Now().Add(2 * time.Minute); ; runtime.Gosched() {
			if _, err := os.Stat(published); err == nil || !p.running() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the results were not published within 2m\n%s", logTail(crashLog))
			}
		}
		if !p.running() {
			t.Fatalf("batchd exited by itself: %v\n%s", p.err, logTail(crashLog))
		}
		p.signal(t, syscall.SIGKILL)
		status, _ := batchProgress(outbox, name)
		_, inErr := os.Stat(filepath.Join(data, "inbox", name+".jsonl"))
		t.Logf("kill %d: as the results were published: batch.json %q, input still in the inbox: %v", kills+1, status, inErr == nil)
		p = startBatchd(t, bin, data, cfgPath, srv.URL(), crashLog)
	}
	waitFor(t, 5*time.Minute, "the crash-run batch to complete", func() bool {
		if !p.running() {
			t.Fatalf("batchd exited by itself: %v\n%s", p.err, logTail(crashLog))
		}
		return finished(data, name, "jsonl")
	})
	p.waitReady(t) // SIGTERM before the handlers are set would just kill it
	p.signal(t, syscall.SIGTERM)
	if p.err != nil {
		t.Fatalf("batchd exit after SIGTERM: %v\n%s", p.err, logTail(crashLog))
	}
	t.Logf("crash run: %s, %d kills, %d requests to the stand-in for %d valid lines (%d redone)",
		time.Since(began).Round(time.Millisecond), killed, srv.Requests()-refRequests, requests-invalid,
		srv.Requests()-refRequests-int64(requests-invalid))

	// The offline oracle.
	check := exec.Command(bin, "check", "--data", data, name)
	check.Env = hermeticEnv()
	out, err := check.CombinedOutput()
	if err != nil {
		t.Fatalf("batchd check: %v\n%s", err, out)
	}
	t.Logf("batchd check: %s", bytes.TrimSpace(out))

	// Same results as the uninterrupted run.
	sameResults(t, filepath.Join(refData, "outbox"), outbox, name)
	if n := len(fileLines(t, filepath.Join(outbox, name+".errors.jsonl"))); n != invalid {
		t.Errorf("errors file has %d lines, want %d (one per invalid line)", n, invalid)
	}
	obj, err := pipeline.ReadBatchObject(filepath.Join(outbox, name+".batch.json"))
	if err != nil {
		t.Fatal(err)
	}
	if c := obj.RequestCounts; c.Total != requests || c.Failed != invalid || c.Completed != requests-invalid {
		t.Errorf("request_counts %+v, want total %d failed %d", c, requests, invalid)
	}

	// Nothing temporary is left, and the input is in done/.
	for _, bad := range leftovers(t, filepath.Join(data, "inbox"), outbox) {
		t.Errorf("temporary file left behind: %s", bad)
	}
	done, err := os.ReadFile(filepath.Join(data, "done", name+".jsonl"))
	if err != nil || !bytes.Equal(done, content) {
		t.Errorf("done/%s.jsonl: %v (identical to the input: %v)", name, err, bytes.Equal(done, content))
	}
	if got, err := os.ReadFile(filepath.Join(data, "done", name+".options.json")); err != nil || !bytes.Equal(got, options) {
		t.Errorf("done/%s.options.json: %q, %v", name, got, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(data, "inbox")); len(ents) != 0 {
		// pipeline/retire.go retire moves the input, then the options file: a
		// kill between the two leaves NAME.options.json behind, and it would
		// apply to the next batch dropped as NAME.
		t.Errorf("the inbox still holds %d entries, e.g. %s", len(ents), ents[0].Name())
	}
	if obj.Metadata["suite"] != "crash" {
		t.Errorf("metadata %v: the options were lost", obj.Metadata)
	}
}
