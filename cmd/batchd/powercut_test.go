package main

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/internal/failpoint"
	"github.com/batchd/batchd/internal/lazyfs"
	"github.com/batchd/batchd/pipeline"
)

// The power-cut tests run the daemon with its data directory on lazyfs, a
// FUSE filesystem that keeps only what was made durable (fsync of a file,
// of the directory that holds an entry). A SIGKILL alone keeps the page
// cache, so a missing fsync passes every crash test; here, after the kill,
// the power goes too: unsynced data is dropped or torn at page boundaries,
// unsynced creations, renames, links and unlinks are undone. The daemon
// then restarts on what survived and must finish every batch with the
// outputs of an uninterrupted run: no request lost, none duplicated, and
// `batchd check` and `batchd ledger check` pass (docs/guarantees.md).

var powerCutSeed = flag.Uint64("powercut.seed", 0, "seed of the power-cut tests' cut points (0: from the clock)")

// powerCutCuts is how many random cuts each scenario takes: 12 in make
// test (about 0.4 s each), BATCHD_POWERCUT_CUTS more (scripts/powercut.sh).
func powerCutCuts(t *testing.T) int {
	if v := os.Getenv("BATCHD_POWERCUT_CUTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("BATCHD_POWERCUT_CUTS=%q: want a positive count", v)
		}
		return n
	}
	return 12
}

// powerCutRand returns the random source of a power-cut test (stream
// tells the tests apart), seeded by -powercut.seed or the clock; it logs
// the seed.
func powerCutRand(t *testing.T, stream uint64) *rand.Rand {
	seed := *powerCutSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("power-cut seed %d (rerun with -args -powercut.seed=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, stream))
}

// needLazyFS skips the test when no FUSE filesystem can be mounted here
// (not root, no /dev/fuse), and fails it where BATCHD_REQUIRE_FUSE says
// one must be (CI).
func needLazyFS(t *testing.T) {
	t.Helper()
	if err := lazyfs.Available(); err != nil {
		if os.Getenv("BATCHD_REQUIRE_FUSE") != "" {
			t.Fatalf("BATCHD_REQUIRE_FUSE is set but lazyfs cannot mount here: %v", err)
		}
		t.Skipf("power-cut test skipped: lazyfs cannot mount here: %v", err)
	}
}

// cutScenario is one batch the power-cut tests run: the files placed in
// the inbox before the daemon starts (in order), and the status it ends in.
type cutScenario struct {
	name, format, status string
	files                []inboxFile
}

type inboxFile struct {
	base string
	data []byte
}

// powerCutScenarios are the batches cut: a JSONL batch with an options
// file (every folder durability step), one whose cancel request waits
// beside its input (it starts cancelled: the cancel's removal at retire),
// and a requests document, whose results.json is written and published
// at the end.
func powerCutScenarios() []cutScenario {
	content, _ := crashInput(failpointRequests)
	short, _ := crashInput(100)
	var doc bytes.Buffer
	doc.WriteString(`{"url":"/v1/chat/completions","defaults":{"max_tokens":4},"system_prompt":"be brief","requests":[`)
	for i := range 150 {
		if i > 0 {
			doc.WriteString(",")
		}
		fmt.Fprintf(&doc, `{"custom_id":"doc-%d","messages":[{"role":"user","content":"document request %d"}]}`, i, i)
	}
	doc.WriteString("]}\n")
	return []cutScenario{
		{name: "pc", format: "jsonl", status: pipeline.StatusCompleted, files: []inboxFile{
			{"pc.options.json", []byte(`{"metadata":{"suite":"powercut"}}`)}, {"pc.jsonl", content}}},
		{name: "pcc", format: "jsonl", status: pipeline.StatusCancelled, files: []inboxFile{
			{"pcc.jsonl", short}, {"pcc.cancel", nil}}},
		{name: "pcd", format: "json", status: pipeline.StatusCompleted, files: []inboxFile{{"pcd.json", doc.Bytes()}}},
	}
}

// cutFixture is the stand-in engine, the config and the binaries.
type cutFixture struct {
	bin, fpBin, cfg, url string
}

func newCutFixture(t *testing.T) *cutFixture {
	t.Helper()
	bin := needBinary(t)
	needLazyFS(t)
	fpBin := needFailpointBinary(t)
	srv, _, cfg := crashFixture(t, nil)
	return &cutFixture{bin: bin, fpBin: fpBin, cfg: cfg, url: srv.URL()}
}

// place writes s's inbox files into data.
func (s cutScenario) place(t *testing.T, data string) {
	t.Helper()
	for _, f := range s.files {
		placeInput(t, filepath.Join(data, "inbox"), f.base, f.data)
	}
}

// ended reports whether s's batch ended in its status with its input in
// done/ and the inbox empty (options, cancel request and retry mark gone).
func (s cutScenario) ended(data string) bool {
	if st, _ := batchProgress(filepath.Join(data, "outbox"), s.name); st != s.status {
		return false
	}
	if _, err := os.Stat(filepath.Join(data, "done", s.name+"."+s.format)); err != nil {
		return false
	}
	ents, err := os.ReadDir(filepath.Join(data, "inbox"))
	return err == nil && len(ents) == 0
}

// listing names the entries of data's dirs, for failure messages.
func listing(data string, dirs ...string) string {
	var b strings.Builder
	for _, d := range dirs {
		ents, _ := os.ReadDir(filepath.Join(data, d))
		names := make([]string, len(ents))
		for i, e := range ents {
			names[i] = e.Name()
		}
		fmt.Fprintf(&b, "%s/: %s; ", d, strings.Join(names, " "))
	}
	return b.String()
}

// run starts bin on data and waits for s's batch to end, then stops it
// with SIGTERM.
func (f *cutFixture) run(t *testing.T, s cutScenario, bin, data, logPath string) {
	t.Helper()
	p := startBatchd(t, bin, data, f.cfg, f.url, logPath)
	deadline := time.Now().Add(2 * time.Minute)
	for !s.ended(data) {
		if !p.running() {
			t.Fatalf("batchd exited: %v\n%s", p.err, logTail(logPath))
		}
		if time.Now().After(deadline) {
			st, done := batchProgress(filepath.Join(data, "outbox"), s.name)
			t.Fatalf("batch %s did not end %s within 2 minutes: batch.json %q %d done; %s\n%s",
				s.name, s.status, st, done, listing(data, "inbox", "outbox", "done"), logTail(logPath))
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.waitReady(t)
	p.signal(t, syscall.SIGTERM)
	if p.err != nil {
		t.Fatalf("batchd exit after SIGTERM: %v\n%s", p.err, logTail(logPath))
	}
}

// reference runs s without interruption on an ordinary directory and
// returns its outbox.
func (f *cutFixture) reference(t *testing.T, s cutScenario) string {
	t.Helper()
	data := filepath.Join(t.TempDir(), "ref")
	s.place(t, data)
	f.run(t, s, f.bin, data, data+".log")
	return filepath.Join(data, "outbox")
}

// opsOf runs s without interruption on lazyfs and returns how many
// mutating operations it took: the range the random cuts are drawn from.
func (f *cutFixture) opsOf(t *testing.T, s cutScenario) int64 {
	t.Helper()
	root := t.TempDir()
	backing, data := filepath.Join(root, "backing"), filepath.Join(root, "data")
	s.place(t, backing)
	fs := mountLazy(t, backing, data, lazyfs.Options{})
	f.run(t, s, f.bin, data, root+"/batchd.log")
	if err := fs.Unmount(); err != nil {
		t.Fatal(err)
	}
	return fs.Ops()
}

// mountLazy mounts lazyfs over backing at mountpoint (created).
func mountLazy(t *testing.T, backing, mountpoint string, opt lazyfs.Options) *lazyfs.FS {
	t.Helper()
	if err := os.MkdirAll(mountpoint, 0o755); err != nil {
		t.Fatal(err)
	}
	fs, err := lazyfs.Mount(backing, mountpoint, opt)
	if err != nil {
		t.Fatalf("mount lazyfs: %v", err)
	}
	t.Cleanup(func() { fs.Unmount() })
	return fs
}

// cut runs s on lazyfs at root/data with bin and env until the daemon dies
// (a failpoint's SIGKILL, or kill called from lazyfs's OnOp), cuts the
// power, and leaves what survived at root/data, an ordinary directory
// again at the same path (the ledger's records name it).
func (f *cutFixture) cut(t *testing.T, s cutScenario, root string, opt lazyfs.Options, at int64, env ...string) string {
	t.Helper()
	backing, data := filepath.Join(root, "backing"), filepath.Join(root, "data")
	s.place(t, backing)
	fs := mountLazy(t, backing, data, opt)
	bin := f.bin
	if len(env) > 0 {
		bin = f.fpBin
	}
	logPath := root + "/batchd.log"
	p := armCut(fs, at, func() *proc { return startBatchdEnv(t, bin, data, f.cfg, f.url, logPath, env...) })
	waitFor(t, 2*time.Minute, "batchd to die", func() bool {
		if s.ended(data) && at > 0 {
			// The run took fewer operations than the cut point: it
			// ends with the power on.
			p.signal(t, syscall.SIGTERM)
		}
		return !p.running()
	})
	if len(env) > 0 && !killedBy(p.err, syscall.SIGKILL) {
		t.Fatalf("batchd exit %v, want death by SIGKILL at the failpoint\n%s", p.err, logTail(logPath))
	}
	powerCut(t, fs, backing, data)
	return data
}

// armCut makes lazyfs kill the process start starts before its at-th
// operation (none when at is 0) and returns the process.
func armCut(fs *lazyfs.FS, at int64, start func() *proc) *proc {
	var (
		mu   sync.Mutex
		p    *proc
		fire bool
	)
	if at > 0 {
		fs.OnOp(at, func() {
			mu.Lock()
			defer mu.Unlock()
			fire = true
			if p != nil {
				p.cmd.Process.Kill()
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	p = start()
	if fire {
		p.cmd.Process.Kill()
	}
	return p
}

// powerCut cuts the power of fs, whose daemon is dead, and leaves what
// survived in backing at data, an ordinary directory again at the same
// path (the ledger's records name it).
func powerCut(t *testing.T, fs *lazyfs.FS, backing, data string) {
	t.Helper()
	if err := fs.PowerCut(); err != nil {
		t.Fatalf("power cut: %v", err)
	}
	if err := os.Remove(data); err != nil {
		t.Fatalf("remove the mountpoint: %v", err)
	}
	if err := os.Rename(backing, data); err != nil {
		t.Fatal(err)
	}
}

// restartAndCheck restarts the daemon on what a cut left at data and checks the
// end: the batch ends in its status with the reference's outputs, line for
// line (nothing lost, nothing twice), and batchd check and batchd ledger
// check pass.
func (f *cutFixture) restartAndCheck(t *testing.T, s cutScenario, data, refOutbox string) {
	t.Helper()
	logPath := filepath.Dir(data) + "/batchd.log"
	f.run(t, s, f.bin, data, logPath)
	for _, args := range [][]string{{"check", "--data", data, s.name}, {"ledger", "check", "--data", data}} {
		cmd := exec.Command(f.bin, args...)
		cmd.Env = hermeticEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("batchd %s: %v\n%s\n%s", strings.Join(args, " "), err, out, logTail(logPath))
		}
	}
	outbox := filepath.Join(data, "outbox")
	sameResults(t, refOutbox, outbox, s.name)
	if s.format == "json" {
		want, _ := os.ReadFile(filepath.Join(refOutbox, s.name+".results.json"))
		got, err := os.ReadFile(filepath.Join(outbox, s.name+".results.json"))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s.results.json differs from the reference's (%v)", s.name, err)
		}
	}
	for _, bad := range leftovers(t, filepath.Join(data, "inbox"), outbox) {
		t.Errorf("temporary file left behind: %s", bad)
	}
	for _, in := range s.files {
		if strings.HasSuffix(in.base, ".cancel") {
			continue
		}
		if got, err := os.ReadFile(filepath.Join(data, "done", in.base)); err != nil || !bytes.Equal(got, in.data) {
			t.Errorf("done/%s: %v (same content: %v)", in.base, err, bytes.Equal(got, in.data))
		}
	}
	if t.Failed() {
		t.Log(logTail(logPath))
	}
}

// TestPowerCutAtEachStep kills the daemon at each durability step of a
// folder batch (the failpoints), then cuts the power: what was not made
// durable before that step is gone. The restart must finish the batch as
// an uninterrupted run does.
func TestPowerCutAtEachStep(t *testing.T) {
	f := newCutFixture(t)
	s := powerCutScenarios()[0]
	ref := f.reference(t, s)
	specs := []string{failpoint.ResultsSync + ":2", failpoint.LedgerCommit + ":2", failpoint.AfterCommit + ":2",
		failpoint.AfterFinalizing, failpoint.FolderPublishObject, failpoint.FinalStatus, failpoint.RetireMove,
		failpoint.FolderRetireOptions}
	for _, spec := range specs {
		t.Run(spec, func(t *testing.T) {
			root := t.TempDir()
			data := f.cut(t, s, root, lazyfs.Options{}, 0, failpoint.Env+"="+spec)
			status, done := batchProgress(filepath.Join(data, "outbox"), s.name)
			t.Logf("power cut at %s: batch.json %q %d/%d survived", spec, status, done, failpointRequests)
			f.restartAndCheck(t, s, data, ref)
		})
	}
}

// TestPowerCutAtRandomOperations cuts the power at random points of each
// scenario's run: the cut comes before the Nth operation that changes the
// filesystem (a write, a create, a rename, an fsync ...), N drawn from
// the run's length, and unsynced pages survive or not at random (torn
// writes). It logs its seed (-powercut.seed replays it).
func TestPowerCutAtRandomOperations(t *testing.T) {
	f := newCutFixture(t)
	rng := powerCutRand(t, 0x706f776572637574)
	cuts := powerCutCuts(t)
	for _, s := range powerCutScenarios() {
		t.Run(s.name, func(t *testing.T) {
			ref := f.reference(t, s)
			total := f.opsOf(t, s)
			t.Logf("%s: an uninterrupted run takes %d operations", s.name, total)
			for i := range cuts {
				at := 1 + rng.Int64N(total)
				opt := lazyfs.Options{Torn: true, Seed: rng.Uint64()}
				t.Run(fmt.Sprintf("cut%d-op%d", i, at), func(t *testing.T) {
					data := f.cut(t, s, t.TempDir(), opt, at)
					f.restartAndCheck(t, s, data, ref)
				})
			}
		})
	}
}
