package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
)

// signalsConfig: four requests in flight at most, HTTP on a free loopback
// port; %s is the shutdown_grace.
const signalsConfig = `
listen: 127.0.0.1:0
shutdown_grace: %s
pipeline:
  commit_interval: 20ms
  commit_every: 64
  progress_interval: 50ms
  workers: 4
watcher:
  settle: 100ms
  rescan: 1s
openai:
  max_inflight: 4
  retry_wait_min: 10ms
  retry_wait_max: 100ms
  probe_interval: 50ms
log:
  level: info
`

// gate holds every request the stand-in gets until it is opened (or the
// client goes away): what is in flight is then known, not guessed.
type gate struct {
	open chan struct{}
	held atomic.Int64 // requests that reached the stand-in
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func (g *gate) fault(n int64, r *http.Request, body []byte) openaitest.Fault {
	g.held.Add(1)
	select {
	case <-g.open:
	case <-r.Context().Done():
	}
	return openaitest.Fault{}
}

type signalsRun struct {
	t        *testing.T
	bin      string
	root     string
	data     string
	cfg      string
	log      string
	srv      *openaitest.Server
	g        *gate
	requests int
}

// newSignalsRun starts the held stand-in and writes a batch of n requests
// into a new data directory's inbox.
func newSignalsRun(t *testing.T, grace string, n int) *signalsRun {
	bin := needBinary(t)
	g := newGate()
	srv := openaitest.NewServer(openaitest.Options{Fault: g.fault})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	root := t.TempDir()
	s := &signalsRun{t: t, bin: bin, root: root, data: filepath.Join(root, "data"), cfg: filepath.Join(root, "batchd.yaml"),
		log: filepath.Join(root, "batchd.log"), srv: srv, g: g, requests: n}
	s.writeConfig(fmt.Sprintf(signalsConfig, grace))
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `{"custom_id":"sig-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hello %d"}]}}`+"\n", i, i)
	}
	placeInput(t, filepath.Join(s.data, "inbox"), "sig.jsonl", []byte(b.String()))
	return s
}

func (s *signalsRun) writeConfig(text string) {
	s.t.Helper()
	if err := os.WriteFile(s.cfg, []byte(text), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

func (s *signalsRun) start() *proc {
	s.t.Helper()
	p := startBatchdCmd(s.t, s.bin, s.log, nil, "run", "--config", s.cfg, "--data", s.data, "--engine", "openai",
		"--openai-url", s.srv.URL())
	p.waitReady(s.t)
	return p
}

// logCount counts the lines of the log that contain all of parts.
func (s *signalsRun) logCount(parts ...string) int {
	raw, _ := os.ReadFile(s.log)
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			n++
		}
	}
	return n
}

func (s *signalsRun) waitLog(p *proc, what string, parts ...string) {
	s.t.Helper()
	waitFor(s.t, 60*time.Second, what, func() bool {
		if !p.running() && s.logCount(parts...) == 0 {
			s.t.Fatalf("batchd exited before %s: %v\n%s", what, p.err, logTail(s.log))
		}
		return s.logCount(parts...) > 0
	})
}

var listenRE = regexp.MustCompile(`msg="batchd running".* listen=(127\.0\.0\.1:\d+)`)

// addr is the HTTP address the last started daemon logged.
func (s *signalsRun) addr() string {
	raw, _ := os.ReadFile(s.log)
	m := listenRE.FindAllStringSubmatch(string(raw), -1)
	if len(m) == 0 {
		s.t.Fatalf("no listen address in the log\n%s", logTail(s.log))
	}
	return m[len(m)-1][1]
}

// waitHeld waits until the stand-in holds want requests.
func (s *signalsRun) waitHeld(p *proc, want int64) {
	s.t.Helper()
	waitFor(s.t, 60*time.Second, fmt.Sprintf("%d requests in flight", want), func() bool {
		if !p.running() {
			s.t.Fatalf("batchd exited: %v\n%s", p.err, logTail(s.log))
		}
		return s.g.held.Load() >= want
	})
}

// sendSignal signals p without waiting for it to exit.
func sendSignal(t *testing.T, p *proc, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// waitExit waits for p to exit and wants status 0.
func (s *signalsRun) waitExit(p *proc) {
	s.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		s.t.Fatalf("batchd did not exit\n%s", logTail(s.log))
	}
	if p.err != nil {
		s.t.Fatalf("batchd exit: %v (want 0)\n%s", p.err, logTail(s.log))
	}
}

// finishAndCheck restarts with the stand-in answering at once, waits for
// the batch to complete, and runs the exactly-once checker.
func (s *signalsRun) finishAndCheck() {
	s.t.Helper()
	select {
	case <-s.g.open:
	default:
		close(s.g.open)
	}
	p := s.start()
	waitFor(s.t, 2*time.Minute, "the batch to complete after the restart", func() bool {
		if !p.running() {
			s.t.Fatalf("batchd exited: %v\n%s", p.err, logTail(s.log))
		}
		return finished(s.data, "sig", "jsonl")
	})
	p.signal(s.t, syscall.SIGTERM)
	if p.err != nil {
		s.t.Fatalf("batchd exit: %v\n%s", p.err, logTail(s.log))
	}
	check := exec.Command(s.bin, "check", "--data", s.data, "sig")
	check.Env = hermeticEnv()
	if out, err := check.CombinedOutput(); err != nil {
		s.t.Fatalf("batchd check: %v\n%s", err, out)
	}
	if n := len(fileLines(s.t, filepath.Join(s.data, "outbox", "sig.output.jsonl"))); n != s.requests {
		s.t.Errorf("output has %d lines, want %d", n, s.requests)
	}
}

// SIGTERM with requests in flight that finish within the grace: intake
// stops (503 with Retry-After, /readyz not ready, no further request sent),
// the four finish and are committed, exit 0; the restart sends only the
// requests never sent.
func TestSIGTERMFinishesInFlightWithinGrace(t *testing.T) {
	s := newSignalsRun(t, "10m", 20)
	p := s.start()
	s.waitHeld(p, 4)
	sendSignal(t, p, syscall.SIGTERM)
	s.waitLog(p, "intake to stop", "intake stopped", "in_flight=4")
	base := "http://" + s.addr()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz while shutting down: %d, want 503", resp.StatusCode)
	}
	resp, err = http.Post(base+"/v1/batches", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("POST /v1/batches while shutting down: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	close(s.g.open)
	s.waitExit(p)
	if s.logCount("finished within the grace", "in_flight=4", "finished=4", "abandoned=0") != 1 {
		t.Errorf("no log line saying the 4 requests finished within the grace\n%s", logTail(s.log))
	}
	if got := s.srv.Requests(); got != 4 {
		t.Errorf("the stand-in got %d requests before the exit, want the 4 in flight only", got)
	}
	s.finishAndCheck()
	if got := s.srv.Requests(); got != int64(s.requests) {
		t.Errorf("the stand-in got %d requests in all, want %d: the restart redid finished work", got, s.requests)
	}
}

// SIGTERM whose grace ends with requests in flight: exit 0, the abandoned
// requests run again on the restart, exactly once in the results.
func TestSIGTERMGraceExpires(t *testing.T) {
	s := newSignalsRun(t, "1s", 20)
	p := s.start()
	s.waitHeld(p, 4)
	sendSignal(t, p, syscall.SIGTERM)
	s.waitExit(p)
	if s.logCount("shutdown_grace over", "in_flight=4", "abandoned=4") != 1 {
		t.Errorf("no log line saying the grace ended with 4 requests abandoned\n%s", logTail(s.log))
	}
	s.finishAndCheck()
}

// A second SIGTERM during the grace stops at once; the restart completes
// the batch exactly once.
func TestSecondSIGTERMStopsAtOnce(t *testing.T) {
	s := newSignalsRun(t, "10m", 20)
	p := s.start()
	s.waitHeld(p, 4)
	sendSignal(t, p, syscall.SIGTERM)
	s.waitLog(p, "intake to stop", "intake stopped")
	sendSignal(t, p, syscall.SIGTERM)
	s.waitExit(p) // well before the 10m grace
	if s.logCount("stopped at a second signal", "abandoned=4") != 1 {
		t.Errorf("no log line saying the second signal abandoned 4 requests\n%s", logTail(s.log))
	}
	s.finishAndCheck()
}

// SIGHUP applies new API keys and log level, names what needs a restart,
// and refuses an invalid config, keeping the old one.
func TestSIGHUPReloadsConfig(t *testing.T) {
	s := newSignalsRun(t, "30s", 1)
	close(s.g.open)
	withKeys := func(keys, level, workers string) string {
		c := fmt.Sprintf(signalsConfig, "30s")
		c = strings.Replace(c, "level: info", "level: "+level, 1)
		c = strings.Replace(c, "workers: 4", "workers: "+workers, 1)
		return c + "api:\n  keys: [" + keys + "]\n"
	}
	s.writeConfig(withKeys("old-key", "info", "4"))
	p := s.start()
	base := "http://" + s.addr()
	status := func(key string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/batches", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitFor(t, time.Minute, "the first batch", func() bool { return finished(s.data, "sig", "jsonl") })
	if s.logCount("inbox file delivered") != 0 {
		t.Fatalf("a debug line at level info")
	}
	if a, b := status("old-key"), status("new-key"); a != 200 || b != 401 {
		t.Fatalf("before the reload: old key %d, new key %d; want 200, 401", a, b)
	}

	s.writeConfig(withKeys("new-key", "debug", "8"))
	sendSignal(t, p, syscall.SIGHUP)
	s.waitLog(p, "the reload", "config reloaded", "reloaded=api.keys,log.level", "changed_needs_restart=pipeline.workers")
	if a, b := status("old-key"), status("new-key"); a != 401 || b != 200 {
		t.Errorf("after the reload: old key %d, new key %d; want 401, 200", a, b)
	}
	placeInput(t, filepath.Join(s.data, "inbox"), "second.jsonl",
		[]byte(`{"custom_id":"x","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`+"\n"))
	s.waitLog(p, "a debug line at level debug", "inbox file delivered")

	s.writeConfig(withKeys("newer-key", "loud", "8"))
	sendSignal(t, p, syscall.SIGHUP)
	s.waitLog(p, "the refusal", "config refused", "log.level")
	if a, b := status("new-key"), status("newer-key"); a != 200 || b != 401 {
		t.Errorf("after the refused reload: new key %d, newer key %d; want 200, 401", a, b)
	}
	if !p.running() {
		t.Fatalf("batchd exited at a refused reload\n%s", logTail(s.log))
	}
	p.signal(t, syscall.SIGTERM)
	if p.err != nil {
		t.Fatalf("exit: %v\n%s", p.err, logTail(s.log))
	}
}
