package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
)

// The soak test (TestSoak) runs bin/batchd against a chaotic stand-in engine
// for a bounded time while dropping inputs, SIGKILLing the daemon and
// killing, pausing and restarting the engine; then it lets everything finish
// and checks every batch, the ledger, and that an idle daemon holds no more
// goroutines, file descriptors or heap after more work than before it.
//
// Environment:
//
//	BATCHD_SOAK=1        run it (it is skipped otherwise)
//	BATCHD_SOAK_TIME     length of the chaos phase (default 2m)
//	BATCHD_SOAK_SEED     replay a seed (default: from the clock; it is logged)
//	BATCHD_SOAK_DIR      work in this directory and keep it (default: a temporary one)
//	BATCHD_SOAK_RACE=1   build the daemon with the race detector; a race fails the soak
//
// scripts/soak.sh runs it for long manual runs.

// soakEngineEnv, when set, makes this test binary serve the chaotic
// stand-in engine instead of running tests: the soak needs an engine in a
// process of its own, to SIGKILL and SIGSTOP it.
const soakEngineEnv = "BATCHD_SOAK_ENGINE"

// chaosSpec is what the engine process is told, as JSON in soakEngineEnv.
type chaosSpec struct {
	Addr                         string
	Seed                         uint64
	Error, Reset, Truncate, Hang float64
	Latency                      time.Duration
}

func init() {
	if spec := os.Getenv(soakEngineEnv); spec != "" {
		os.Exit(serveChaosEngine(spec))
	}
}

// serveChaosEngine serves the stand-in with seeded chaos until SIGTERM.
func serveChaosEngine(specJSON string) int {
	var spec chaosSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "chaos engine: %s: %v\n", soakEngineEnv, err)
		return 2
	}
	chaos := &openaitest.Chaos{Seed: spec.Seed, Error: spec.Error, Reset: spec.Reset,
		Truncate: spec.Truncate, Hang: spec.Hang, Latency: spec.Latency}
	srv := openaitest.NewServer(openaitest.Options{Addr: spec.Addr, Fault: chaos.Fault})
	if err := srv.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "chaos engine: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "chaos engine: serving %s with seed %d\n", srv.URL(), spec.Seed)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	srv.Close()
	return 0
}

// soakConfig is the daemon's config in the soak: short commit, progress and
// retry intervals so that kills land at every step, and an attempt timeout
// that ends the engine's hangs within the test's time.
const soakConfig = `
pipeline:
  commit_interval: 20ms
  commit_every: 64
  progress_interval: 50ms
  workers: 8
watcher:
  settle: 100ms
  rescan: 1s
openai:
  max_inflight: 8
  retry_wait_min: 10ms
  retry_wait_max: 200ms
  probe_interval: 100ms
  attempt_timeout: 3s
  hang_after: 2s
log:
  level: info
`

// soakChaos is the engine's chaos: the rates are per POST. A request fails
// for good only after 8 failures while other requests are answered
// (openai.max_retries 7), about 0.075^8 ≈ 1e-9: every error line the soak
// finds beyond the invalid lines it wrote is a bug.
var soakChaos = chaosSpec{Error: 0.03, Reset: 0.02, Truncate: 0.02, Hang: 0.005, Latency: 20 * time.Millisecond}

// soakInput is one input the soak dropped.
type soakInput struct {
	name, format string // format: jsonl or json
	src          string // a copy outside the inbox
	options      bool   // dropped with NAME.options.json
	cancelled    bool   // NAME.cancel was written
	requests     int    // from batchd validate
	invalid      int
}

type soak struct {
	t    *testing.T
	bin  string
	rng  *rand.Rand
	seed uint64
	root string
	data string
	cfg  string
	log  string

	engineExe  string
	engineAddr string
	engineLog  string
	engine     *exec.Cmd
	engineDone chan struct{}
	engineGen  uint64 // engine processes started, for their seeds
	paused     bool

	p      *proc
	inputs []*soakInput
}

func TestSoak(t *testing.T) {
	if os.Getenv("BATCHD_SOAK") != "1" {
		t.Skip("soak skipped: set BATCHD_SOAK=1 to run it (BATCHD_SOAK_TIME bounds it, default 2m; .ci/run and scripts/soak.sh do)")
	}
	bin := needBinary(t)
	length := 2 * time.Minute
	if v := os.Getenv("BATCHD_SOAK_TIME"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("BATCHD_SOAK_TIME=%q: want a positive duration such as 2m or 30m", v)
		}
		length = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("BATCHD_SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("BATCHD_SOAK_SEED=%q: want an unsigned integer", v)
		}
		seed = n
	}
	t.Logf("soak seed %d, chaos for %s (replay with BATCHD_SOAK_SEED=%d: the same inputs and schedule, not the same interleaving)", seed, length, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("soak failed with seed %d (BATCHD_SOAK_SEED=%d)", seed, seed)
		}
	})

	root := os.Getenv("BATCHD_SOAK_DIR")
	if root == "" {
		root = t.TempDir()
	} else if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("soak directory %s", root)
	if os.Getenv("BATCHD_SOAK_RACE") == "1" {
		bin = buildRaceBatchd(t, root)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := &soak{t: t, bin: bin, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x736f616b)), root: root,
		data: filepath.Join(root, "data"), cfg: filepath.Join(root, "batchd.yaml"), log: filepath.Join(root, "batchd.log"),
		engineExe: exe, engineAddr: freeLoopbackAddr(t), engineLog: filepath.Join(root, "engine.log")}
	if err := os.WriteFile(s.cfg, []byte(soakConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stopEngine)

	s.startEngine()
	s.p = s.startBatchd()
	kills, engineKills, pauses := s.chaos(length)
	t.Logf("chaos phase: %d inputs, %d daemon kills, %d engine kills, %d engine pauses", len(s.inputs), kills, engineKills, pauses)

	// The last daemon is never killed: it finishes the work, then runs
	// rounds of more work between idle samples.
	s.p.waitReady(t)
	metricsURL := "http://" + s.listenAddr() + "/metrics"
	s.waitAllFinished(10 * time.Minute)
	base := s.waitIdle(metricsURL, nil)
	t.Logf("idle after the chaos: %s", base)
	samples := []resourceSample{base}
	const rounds = 3
	for r := 1; r <= rounds; r++ {
		for _, kind := range []string{"jsonl", "json", "options"} {
			s.drop(s.inputRNG(), kind, 200)
		}
		s.waitAllFinished(5 * time.Minute)
		samples = append(samples, s.waitIdle(metricsURL, &base))
		t.Logf("idle after round %d: %s", r, samples[len(samples)-1])
	}
	checkHeap(t, samples)

	s.p.signal(t, syscall.SIGTERM)
	if s.p.err != nil {
		t.Fatalf("batchd exit after SIGTERM: %v\n%s", s.p.err, logTail(s.log))
	}
	s.stopEngine()
	s.verify()
}

// chaos drops inputs, kills and restarts the daemon, and kills, pauses and
// restarts the engine at random moments until length has passed. It leaves
// the engine up and a daemon running.
func (s *soak) chaos(length time.Duration) (kills, engineKills, pauses int) {
	t := s.t
	type event struct {
		at   time.Time
		what string
		name string // for cancel
	}
	var events []event
	after := func(what string, lo, hi time.Duration) {
		d := lo + time.Duration(s.rng.Int64N(int64(hi-lo)))
		events = append(events, event{at: time.Now().Add(d), what: what})
	}
	after("drop", 0, time.Second)
	after("kill", 2*time.Second, 12*time.Second)
	after("engine-kill", 4*time.Second, 20*time.Second)
	after("engine-pause", 3*time.Second, 15*time.Second)
	end := time.Now().Add(length)
	for {
		sort.Slice(events, func(i, j int) bool { return events[i].at.Before(events[j].at) })
		ev := events[0]
		if !ev.at.Before(end) {
			break
		}
		timer := time.NewTimer(time.Until(ev.at)) // the chaos's moments, not synchronisation
		select {
		case <-timer.C:
		case <-s.p.exited:
			timer.Stop()
			t.Fatalf("batchd exited by itself: %v\n%s", s.p.err, logTail(s.log))
		}
		events = events[1:]
		switch ev.what {
		case "drop":
			if s.unfinished() < 5 {
				in := s.dropRandom()
				if s.rng.IntN(6) == 0 {
					events = append(events, event{at: time.Now().Add(time.Duration(s.rng.Int64N(int64(3 * time.Second)))), what: "cancel", name: in.name})
				}
			}
			after("drop", 300*time.Millisecond, 4*time.Second)
		case "cancel":
			for _, in := range s.inputs {
				if in.name == ev.name {
					in.cancelled = true
				}
			}
			placeInput(t, filepath.Join(s.data, "inbox"), ev.name+".cancel", nil)
		case "kill":
			s.p.signal(t, syscall.SIGKILL)
			kills++
			s.p = s.startBatchd()
			if s.rng.IntN(4) == 0 { // soon after a start: in recovery
				after("kill", 0, 400*time.Millisecond)
			} else {
				after("kill", 2*time.Second, 12*time.Second)
			}
		case "engine-kill":
			s.killEngine()
			engineKills++
			after("engine-start", 0, 3*time.Second)
		case "engine-start":
			s.startEngine()
			after("engine-kill", 4*time.Second, 20*time.Second)
		case "engine-pause":
			if s.engine != nil && !s.paused {
				if err := s.engine.Process.Signal(syscall.SIGSTOP); err == nil {
					s.paused = true
					pauses++
					after("engine-resume", 200*time.Millisecond, 2500*time.Millisecond)
					continue
				}
			}
			after("engine-pause", 3*time.Second, 15*time.Second)
		case "engine-resume":
			s.resumeEngine()
			after("engine-pause", 3*time.Second, 15*time.Second)
		}
	}
	s.resumeEngine()
	if s.engine == nil {
		s.startEngine()
	}
	return kills, engineKills, pauses
}

// unfinished counts the inputs without a terminal batch object.
func (s *soak) unfinished() int {
	n := 0
	for _, in := range s.inputs {
		if !s.finished(in) {
			n++
		}
	}
	return n
}

// finished reports whether in has ended: a terminal batch object, its input
// in done/ and nothing of it left in the inbox.
func (s *soak) finished(in *soakInput) bool {
	status, _ := batchProgress(filepath.Join(s.data, "outbox"), in.name)
	if !pipeline.Terminal(status) {
		return false
	}
	for _, p := range []string{filepath.Join(s.data, "inbox", in.name+"."+in.format), filepath.Join(s.data, "inbox", in.name+".cancel")} {
		if _, err := os.Stat(p); err == nil {
			return false
		}
	}
	_, err := os.Stat(filepath.Join(s.data, "done", in.name+"."+in.format))
	return err == nil
}

func (s *soak) waitAllFinished(timeout time.Duration) {
	t := s.t
	t.Helper()
	pollUntil(t, timeout, "every input to finish", func() (bool, string) {
		if !s.p.running() {
			t.Fatalf("batchd exited by itself: %v\n%s", s.p.err, logTail(s.log))
		}
		var left []string
		for _, in := range s.inputs {
			if !s.finished(in) {
				status, done := batchProgress(filepath.Join(s.data, "outbox"), in.name)
				left = append(left, fmt.Sprintf("%s (%q, %d/%d done)", in.name, status, done, in.requests))
			}
		}
		return len(left) == 0, fmt.Sprintf("unfinished: %s\n%s", strings.Join(left, ", "), logTail(s.log))
	})
}

// pollUntil polls cond every 100ms until it holds, or fails the test with
// cond's explanation once timeout has passed.
func pollUntil(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dropRandom drops an input of a random kind and size; the first five
// inputs are one of each kind. The i-th input is the same for a seed
// whenever it is dropped.
func (s *soak) dropRandom() *soakInput {
	rng := s.inputRNG()
	first := []string{"jsonl", "broken", "json", "same", "options"}
	if n := len(s.inputs); n < len(first) {
		return s.drop(rng, first[n], 50+rng.IntN(200))
	}
	switch k := rng.IntN(20); {
	case k == 0:
		return s.drop(rng, "broken", 0)
	case k <= 2:
		return s.drop(rng, "same", 0)
	case k <= 6:
		return s.drop(rng, "json", 5+rng.IntN(300))
	case k <= 8:
		return s.drop(rng, "options", 10+rng.IntN(500))
	default:
		// Mostly small, sometimes a few thousand lines.
		return s.drop(rng, "jsonl", 1+int(float64(3000)*rng.Float64()*rng.Float64()))
	}
}

// inputRNG returns the random source of the next input, drawn from the
// seed and the input's number only.
func (s *soak) inputRNG() *rand.Rand {
	return rand.New(rand.NewPCG(s.seed, 0x696e707574<<16|uint64(len(s.inputs))))
}

// drop writes an input of kind (jsonl, json, options: a jsonl with an
// options file, broken: a requests document that is not JSON, same: the
// content of an earlier input under a new name) with n requests into the
// inbox, drawing its content from rng, and records what batchd validate
// says of it.
func (s *soak) drop(rng *rand.Rand, kind string, n int) *soakInput {
	t := s.t
	t.Helper()
	in := &soakInput{name: fmt.Sprintf("soak-%03d", len(s.inputs)+1), format: "jsonl"}
	var content []byte
	switch kind {
	case "jsonl":
		content = soakLines(rng, in.name, n)
	case "options":
		content, in.options = soakLines(rng, in.name, n), true
	case "json":
		content, in.format = soakDocument(rng, in.name, n), "json"
	case "broken":
		// Not JSON: one invalid line, as batchd validate says.
		content, in.format = []byte(`{"requests": [{"custom_id": "a", "messages": oops}]}`+"\n"), "json"
	case "same":
		prev := s.inputs[rng.IntN(len(s.inputs))]
		raw, err := os.ReadFile(prev.src)
		if err != nil {
			t.Fatal(err)
		}
		content, in.format = raw, prev.format
	default:
		t.Fatalf("unknown input kind %q", kind)
	}
	in.src = filepath.Join(s.root, "src", in.name+"."+in.format)
	if err := os.WriteFile(in.src, content, 0o644); err != nil {
		t.Fatal(err)
	}
	validateArgs := []string{"validate", "-q", in.src}
	if in.options {
		opts := []byte(fmt.Sprintf(`{"metadata":{"soak":%q},"max_tokens":7}`, in.name))
		optsSrc := filepath.Join(s.root, "src", in.name+".options.json")
		if err := os.WriteFile(optsSrc, opts, 0o644); err != nil {
			t.Fatal(err)
		}
		validateArgs = []string{"validate", "-q", "--options", optsSrc, in.src}
		placeInput(t, filepath.Join(s.data, "inbox"), in.name+".options.json", opts)
	}
	out, err := exec.Command(s.bin, validateArgs...).CombinedOutput()
	m := regexp.MustCompile(`: (\d+) requests, \d+ valid, (\d+) invalid`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("batchd validate %s: %v\n%s", in.src, err, out)
	}
	in.requests, _ = strconv.Atoi(string(m[1]))
	in.invalid, _ = strconv.Atoi(string(m[2]))
	placeInput(t, filepath.Join(s.data, "inbox"), in.name+"."+in.format, content)
	s.inputs = append(s.inputs, in)
	return in
}

// soakLines returns n batch lines for name: chat, completions and
// embeddings requests, about one in fifty of them invalid in one of several
// ways.
func soakLines(rng *rand.Rand, name string, n int) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("%s-%d", name, i)
		words := fmt.Sprintf("%s request %d says %s", name, i, strings.Repeat("word ", rng.IntN(40)))
		if rng.IntN(50) == 0 {
			switch rng.IntN(4) {
			case 0:
				b.WriteString(`{"custom_id":"broken", not json` + "\n")
			case 1: // a duplicate custom_id
				fmt.Fprintf(&b, `{"custom_id":%q,"method":"POST","url":"/v1/embeddings","body":{"input":"dup"}}`+"\n", fmt.Sprintf("%s-%d", name, max(i-1, 1)))
			case 2:
				fmt.Fprintf(&b, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":%q}],"temperature":9}}`+"\n", id, words)
			case 3:
				fmt.Fprintf(&b, `{"method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":%q}]}}`+"\n", words)
			}
			continue
		}
		switch rng.IntN(6) {
		case 0:
			fmt.Fprintf(&b, `{"custom_id":%q,"method":"POST","url":"/v1/embeddings","body":{"model":"emb","input":%q}}`+"\n", id, words)
		case 1:
			fmt.Fprintf(&b, `{"custom_id":%q,"method":"POST","url":"/v1/completions","body":{"prompt":%q,"max_tokens":%d}}`+"\n", id, words, rng.IntN(16)+1)
		default:
			fmt.Fprintf(&b, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":%q}],"max_tokens":%d}}`+"\n", id, words, rng.IntN(16)+1)
		}
	}
	return b.Bytes()
}

// soakDocument returns a requests document of n chat requests for name, a
// few of them invalid.
func soakDocument(rng *rand.Rand, name string, n int) []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type req struct {
		CustomID    string   `json:"custom_id,omitempty"`
		Messages    []msg    `json:"messages"`
		MaxTokens   int      `json:"max_tokens,omitempty"`
		Temperature *float64 `json:"temperature,omitempty"`
	}
	doc := struct {
		URL          string         `json:"url"`
		Defaults     map[string]any `json:"defaults"`
		SystemPrompt string         `json:"system_prompt"`
		Requests     []req          `json:"requests"`
	}{URL: "/v1/chat/completions", Defaults: map[string]any{"max_tokens": 8, "temperature": 0}, SystemPrompt: "Answer briefly."}
	for i := 1; i <= n; i++ {
		r := req{CustomID: fmt.Sprintf("%s-%d", name, i),
			Messages: []msg{{Role: "user", Content: fmt.Sprintf("%s question %d: %s", name, i, strings.Repeat("why ", rng.IntN(30)))}}}
		switch rng.IntN(40) {
		case 0:
			hot := 9.0
			r.Temperature = &hot // out of range: invalid
		case 1:
			r.MaxTokens = rng.IntN(20) + 1
		}
		doc.Requests = append(doc.Requests, r)
	}
	raw, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		panic(err)
	}
	return append(raw, '\n')
}

// startBatchd starts the daemon on the soak's data, listening on a free
// loopback port.
func (s *soak) startBatchd() *proc {
	return startBatchdArgs(s.t, s.bin, s.log, "run", "--config", s.cfg, "--data", s.data, "--engine", "openai",
		"--openai-url", "http://"+s.engineAddr+"/v1", "--listen", "127.0.0.1:0")
}

// listenAddr returns the HTTP address the latest daemon logged.
func (s *soak) listenAddr() string { return loggedListenAddr(s.t, s.log) }

// loggedListenAddr returns the HTTP address the latest daemon logged in
// logPath.
func loggedListenAddr(t *testing.T, logPath string) string {
	t.Helper()
	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	all := regexp.MustCompile(`msg="batchd running" .* listen=(\S+)`).FindAllSubmatch(raw, -1)
	if len(all) == 0 {
		t.Fatalf("no listen address in the log\n%s", logTail(logPath))
	}
	return string(all[len(all)-1][1])
}

// freeLoopbackAddr returns a loopback address with a port free now, for the
// engine, which must come back on the same one after each kill.
func freeLoopbackAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startEngine starts an engine process and waits until it answers.
func (s *soak) startEngine() {
	t := s.t
	t.Helper()
	s.engineGen++
	spec := soakChaos
	spec.Addr, spec.Seed = s.engineAddr, s.seed^(s.engineGen*0x9e3779b97f4a7c15)
	raw, _ := json.Marshal(spec)
	deadline := time.Now().Add(60 * time.Second)
	for {
		logF, err := os.OpenFile(s.engineLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(s.engineExe, "-test.run=^$")
		cmd.Env = append(os.Environ(), soakEngineEnv+"="+string(raw))
		cmd.Stdout, cmd.Stderr = logF, logF
		if err := cmd.Start(); err != nil {
			logF.Close()
			t.Fatalf("start the engine: %v", err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); logF.Close(); close(done) }()
		up := false
		for !up && time.Now().Before(deadline) {
			select {
			case <-done:
			default:
				resp, err := http.Get("http://" + s.engineAddr + "/v1/models")
				if err == nil {
					resp.Body.Close()
					up = resp.StatusCode == http.StatusOK
				}
				if !up {
					time.Sleep(20 * time.Millisecond)
				}
				continue
			}
			break // exited: the port may still be held by a dying one; start again
		}
		if up {
			s.engine, s.engineDone, s.paused = cmd, done, false
			return
		}
		select {
		case <-done:
		default:
			cmd.Process.Kill()
			<-done
		}
		if time.Now().After(deadline) {
			raw, _ := os.ReadFile(s.engineLog)
			t.Fatalf("the engine did not come up on %s within 60s:\n%s", s.engineAddr, raw)
		}
	}
}

func (s *soak) killEngine() {
	if s.engine == nil {
		return
	}
	s.engine.Process.Kill()
	<-s.engineDone
	s.engine, s.paused = nil, false
}

func (s *soak) resumeEngine() {
	if s.engine != nil && s.paused {
		s.engine.Process.Signal(syscall.SIGCONT)
		s.paused = false
	}
}

func (s *soak) stopEngine() {
	if s.engine == nil {
		return
	}
	s.resumeEngine()
	s.engine.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.engineDone:
	case <-time.After(30 * time.Second):
		s.engine.Process.Kill()
		<-s.engineDone
	}
	s.engine = nil
}

// resourceSample is what the daemon's /metrics says of its resources.
type resourceSample struct {
	goroutines, fds, heapInuse, nextGC float64
}

func (r resourceSample) String() string {
	return fmt.Sprintf("%.0f goroutines, %.0f fds, heap in use %.1f MiB, next GC at %.1f MiB",
		r.goroutines, r.fds, r.heapInuse/(1<<20), r.nextGC/(1<<20))
}

// scrape reads the unlabelled samples of a Prometheus text exposition.
func scrape(url string) (map[string]float64, error) {
	client := http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || strings.HasPrefix(f[0], "#") || strings.Contains(f[0], "{") {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out[f[0]] = v
		}
	}
	return out, sc.Err()
}

// waitIdle waits until the daemon has nothing in flight (and, given a
// baseline, until its goroutines and fds are back within bounds of it), and
// returns its resources then. Goroutines of finished work may take a moment
// to end, so the bounds are polled for with a deadline rather than sampled
// once.
func (s *soak) waitIdle(url string, base *resourceSample) resourceSample {
	t := s.t
	t.Helper()
	const moreGoroutines, moreFDs = 20, 10
	var last resourceSample
	pollUntil(t, 2*time.Minute, "the daemon to be idle", func() (bool, string) {
		m, err := scrape(url)
		if err != nil {
			return false, err.Error()
		}
		last = resourceSample{m["go_goroutines"], m["process_open_fds"], m["go_memstats_heap_inuse_bytes"], m["go_memstats_next_gc_bytes"]}
		if busy := m["batchd_engine_in_flight"] + m["batchd_engine_queue_depth"]; busy > 0 {
			return false, fmt.Sprintf("%.0f requests in flight or queued", busy)
		}
		if base == nil {
			return true, ""
		}
		if last.goroutines > base.goroutines+moreGoroutines || last.fds > base.fds+moreFDs {
			return false, fmt.Sprintf("idle at first: %s; now: %s (allowed: %d more goroutines, %d more fds)", base, last, moreGoroutines, moreFDs)
		}
		return true, ""
	})
	return last
}

// checkHeap fails when the idle heap grew after every round of the same
// work and ended well above where it started: a leak grows with the work
// done; garbage that a later collection frees does not grow every time.
func checkHeap(t *testing.T, samples []resourceSample) {
	t.Helper()
	const slack = 32 << 20
	growing := true
	for i := 1; i < len(samples); i++ {
		if samples[i].nextGC <= samples[i-1].nextGC {
			growing = false
		}
	}
	first, last := samples[0], samples[len(samples)-1]
	if growing && last.nextGC > first.nextGC+slack {
		t.Errorf("the heap goal after each idle round grew every time, from %.1f to %.1f MiB: a leak?", first.nextGC/(1<<20), last.nextGC/(1<<20))
	}
	if last.heapInuse > 2*first.heapInuse+2*slack {
		t.Errorf("heap in use when idle grew from %.1f to %.1f MiB across rounds of the same work", first.heapInuse/(1<<20), last.heapInuse/(1<<20))
	}
}

// verify checks, with the daemon stopped, every batch with batchd check,
// its counts and error lines, the ledger with batchd ledger check, and that
// nothing is left in the inbox.
func (s *soak) verify() {
	t := s.t
	outbox := filepath.Join(s.data, "outbox")
	counts := map[string]int{}
	for _, in := range s.inputs {
		obj, err := pipeline.ReadBatchObject(filepath.Join(outbox, in.name+".batch.json"))
		if err != nil {
			t.Errorf("%s: %v", in.name, err)
			continue
		}
		counts[obj.Status]++
		out, err := exec.Command(s.bin, "check", "--data", s.data, in.name).CombinedOutput()
		if err != nil {
			t.Errorf("batchd check %s (%s%s): %v\n%s", in.name, in.format, map[bool]string{true: ", cancelled"}[in.cancelled], err, out)
		}
		c := obj.RequestCounts
		switch {
		case in.cancelled:
			if obj.Status != pipeline.StatusCompleted && obj.Status != pipeline.StatusCancelled {
				t.Errorf("%s: cancelled, ended %q", in.name, obj.Status)
			}
			if c.Total != in.requests || c.Completed+c.Failed != c.Total || c.Failed < in.invalid {
				t.Errorf("%s: cancelled, request_counts %+v; the input has %d requests, %d invalid", in.name, c, in.requests, in.invalid)
			}
		default:
			if obj.Status != pipeline.StatusCompleted {
				t.Errorf("%s: ended %q, want completed", in.name, obj.Status)
			}
			if c.Total != in.requests || c.Failed != in.invalid || c.Completed != in.requests-in.invalid {
				t.Errorf("%s: request_counts %+v; the input has %d requests, %d invalid (batchd validate)", in.name, c, in.requests, in.invalid)
			}
		}
		for _, f := range []string{in.name + ".output.jsonl", in.name + ".errors.jsonl"} {
			raw, err := os.ReadFile(filepath.Join(outbox, f))
			if err != nil {
				if !os.IsNotExist(err) || f == in.name+".output.jsonl" && c.Completed > 0 {
					t.Errorf("%s: %v", in.name, err)
				}
				continue
			}
			if bytes.Contains(raw, []byte(`"engine_unavailable"`)) {
				t.Errorf("%s: an engine outage or fault became an error line (outages must pause the batch):\n%s", f, firstLineWith(raw, `"engine_unavailable"`))
			}
		}
		if in.options && obj.Metadata["soak"] != in.name {
			t.Errorf("%s: metadata %v: its options file was lost", in.name, obj.Metadata)
		}
	}
	t.Logf("batches by status: %v", counts)
	out, err := exec.Command(s.bin, "ledger", "check", "--data", s.data).CombinedOutput()
	if err != nil {
		t.Errorf("batchd ledger check: %v\n%s", err, out)
	} else {
		t.Logf("%s", bytes.TrimSpace(out))
	}
	if ents, _ := os.ReadDir(filepath.Join(s.data, "inbox")); len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("the inbox still holds %s", strings.Join(names, ", "))
	}
	for _, bad := range leftovers(t, outbox) {
		t.Errorf("temporary file left behind: %s", bad)
	}
	if raw, _ := os.ReadFile(s.log); bytes.Contains(raw, []byte("WARNING: DATA RACE")) {
		t.Errorf("the race detector found a data race in batchd:\n%s", firstLineWith(raw, "WARNING: DATA RACE"))
	}
}

// firstLineWith returns the line of raw holding sub, and a few after it.
func firstLineWith(raw []byte, sub string) string {
	i := bytes.Index(raw, []byte(sub))
	if i < 0 {
		return ""
	}
	start := bytes.LastIndexByte(raw[:i], '\n') + 1
	end := min(len(raw), start+4000)
	return string(raw[start:end])
}

// buildRaceBatchd builds batchd with the race detector into dir.
func buildRaceBatchd(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "batchd-race")
	out, err := exec.Command("go", "build", "-race", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -race: %v\n%s", err, out)
	}
	return bin
}
