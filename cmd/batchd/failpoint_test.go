package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/internal/failpoint"
	"github.com/batchd/batchd/internal/miniotest"
	"github.com/batchd/batchd/pipeline"
)

var (
	failpointOnce sync.Once
	failpointBin  string
	failpointErr  error
)

// needFailpointBinary builds batchd with the failpoints tag (once, beside
// the binary TestMain built) and returns its path.
func needFailpointBinary(t *testing.T) string {
	t.Helper()
	needBinary(t)
	failpointOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			failpointErr = err
			return
		}
		bin := filepath.Join(binDir, "batchd-failpoints")
		out, err := exec.Command(goTool, "build", "-tags", "failpoints", "-o", bin, ".").CombinedOutput()
		if err != nil {
			failpointErr = fmt.Errorf("go build -tags failpoints: %v\n%s", err, out)
			return
		}
		failpointBin = bin
	})
	if failpointErr != nil {
		t.Fatal(failpointErr)
	}
	return failpointBin
}

// failpointRequests is the size of the failpoint tests' batch: several
// group commits (commit_every is 64), with two invalid lines.
const failpointRequests = 400

// failpointCase is one armed point: BATCHD_FAILPOINT's value.
type failpointCase struct {
	point string
	spec  string
}

// TestFailpointCrashAtEachStep builds batchd with the failpoints tag and,
// for each durability step of a folder batch, runs a batch that kills
// itself (SIGKILL) at that step; a restart must finish it, `batchd check`
// and `batchd ledger check` must pass, and the outputs must be the same
// as an uninterrupted run's, line for line.
func TestFailpointCrashAtEachStep(t *testing.T) {
	bin := needBinary(t)
	fpBin := needFailpointBinary(t)
	cases := []failpointCase{
		{failpoint.ResultsSync, failpoint.ResultsSync + ":2"},
		{failpoint.LedgerCommit, failpoint.LedgerCommit + ":2"},
		{failpoint.AfterCommit, failpoint.AfterCommit + ":2"},
		{failpoint.AfterFinalizing, failpoint.AfterFinalizing},
		{failpoint.FolderPublishObject, failpoint.FolderPublishObject},
		{failpoint.FinalStatus, failpoint.FinalStatus},
		{failpoint.RetireMove, failpoint.RetireMove},
		{failpoint.FolderRetireOptions, failpoint.FolderRetireOptions},
	}
	f := newFailpointFixture(t, bin)
	for _, c := range cases {
		t.Run(c.point, func(t *testing.T) {
			t.Parallel()
			data, logPath := f.place(t)
			p := startBatchdEnv(t, fpBin, data, f.cfg, f.srv.URL(), logPath, failpoint.Env+"="+c.spec)
			// A point that never fires leaves batchd running: the wait
			// times out.
			waitFor(t, 2*time.Minute, "batchd to crash at "+c.point, func() bool { return !p.running() })
			fired := "batchd failpoint " + c.point + ": crash"
			if log, _ := os.ReadFile(logPath); !bytes.Contains(log, []byte(fired)) {
				t.Fatalf("batchd exited (%v) without %q in its log\n%s", p.err, fired, logTail(logPath))
			}
			if !killedBy(p.err, syscall.SIGKILL) {
				t.Fatalf("batchd exit %v, want death by SIGKILL", p.err)
			}
			status, done := batchProgress(filepath.Join(data, "outbox"), f.name)
			t.Logf("crashed at %s: batch.json %q %d/%d", c.spec, status, done, failpointRequests)
			p = startBatchd(t, bin, data, f.cfg, f.srv.URL(), logPath)
			f.finish(t, p, data)
		})
	}
}

// TestFailpointIOErrorFailsTheStep makes an fsync, a ledger commit and a
// publish fail with EIO: the step fails cleanly (the run stops
// before the ledger records anything not durable), the daemon keeps
// running, and the batch is run again from the ledger on the next rescan,
// ending with the same outputs as an uninterrupted run.
func TestFailpointIOErrorFailsTheStep(t *testing.T) {
	bin := needBinary(t)
	fpBin := needFailpointBinary(t)
	cases := []failpointCase{
		{failpoint.ResultsSync, failpoint.ResultsSync + ":2=eio"},
		{failpoint.LedgerCommit, failpoint.LedgerCommit + ":3=eio"},
		{failpoint.AfterFinalizing, failpoint.AfterFinalizing + "=eio"},
		{failpoint.FolderPublishObject, failpoint.FolderPublishObject + "=eio"},
	}
	f := newFailpointFixture(t, bin)
	for _, c := range cases {
		t.Run(c.spec, func(t *testing.T) {
			t.Parallel()
			data, logPath := f.place(t)
			p := startBatchdEnv(t, fpBin, data, f.cfg, f.srv.URL(), logPath, failpoint.Env+"="+c.spec)
			f.finish(t, p, data)
			log, _ := os.ReadFile(logPath)
			for _, want := range []string{"batchd failpoint " + c.point, "batch run failed; it is retried on the next rescan"} {
				if !bytes.Contains(log, []byte(want)) {
					t.Fatalf("no %q in the log\n%s", want, logTail(logPath))
				}
			}
		})
	}
}

// stopWhenFinished waits for batch name (jsonl) to complete on p, then
// stops p with SIGTERM, which it must obey.
func stopWhenFinished(t *testing.T, p *proc, data, name string) {
	t.Helper()
	waitFor(t, 2*time.Minute, "batch "+name+" to complete", func() bool {
		if !p.running() {
			t.Fatalf("batchd exited: %v\n%s", p.err, logTail(p.log))
		}
		return finished(data, name, "jsonl")
	})
	p.waitReady(t) // SIGTERM before the handlers are set would just kill it
	p.signal(t, syscall.SIGTERM)
	if p.err != nil {
		t.Fatalf("batchd exit after SIGTERM: %v\n%s", p.err, logTail(p.log))
	}
}

// killedBy reports whether a process's Wait error says it died of sig.
func killedBy(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// failpointFixture is a stand-in engine, a config, an input with options,
// and the outputs of an uninterrupted run of it.
type failpointFixture struct {
	root, cfg, name string
	content         []byte
	options         []byte
	invalid         int
	srv             *openaitest.Server
	refOutbox       string
}

func newFailpointFixture(t *testing.T, bin string) *failpointFixture {
	t.Helper()
	srv, root, cfgPath := crashFixture(t, nil)
	f := &failpointFixture{root: root, cfg: cfgPath, name: "fp", srv: srv, options: []byte(`{"metadata":{"suite":"failpoint"}}`)}
	f.content, f.invalid = crashInput(failpointRequests)
	ref, refLog := f.placeIn(t, filepath.Join(f.root, "ref"))
	stopWhenFinished(t, startBatchd(t, bin, ref, f.cfg, srv.URL(), refLog), ref, f.name)
	f.refOutbox = filepath.Join(ref, "outbox")
	return f
}

// place makes a data directory for one subtest with the input (and its
// options) in its inbox; it returns the directory and a log path.
func (f *failpointFixture) place(t *testing.T) (data, logPath string) {
	return f.placeIn(t, t.TempDir())
}

func (f *failpointFixture) placeIn(t *testing.T, data string) (string, string) {
	t.Helper()
	inbox := filepath.Join(data, "inbox")
	placeInput(t, inbox, f.name+".options.json", f.options)
	placeInput(t, inbox, f.name+".jsonl", f.content)
	return data, data + ".log"
}

// finish waits for the batch to end on p, stops p, and checks data as the
// crash test does: batchd check, batchd ledger check, the outputs against
// the reference, nothing left in the inbox or temporary in the outbox.
func (f *failpointFixture) finish(t *testing.T, p *proc, data string) {
	t.Helper()
	stopWhenFinished(t, p, data, f.name)
	for _, args := range [][]string{{"check", "--data", data, f.name}, {"ledger", "check", "--data", data}} {
		cmd := exec.Command(batchdBin, args...)
		cmd.Env = hermeticEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("batchd %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	outbox := filepath.Join(data, "outbox")
	sameResults(t, f.refOutbox, outbox, f.name)
	for _, bad := range leftovers(t, filepath.Join(data, "inbox"), outbox) {
		t.Errorf("temporary file left behind: %s", bad)
	}
	if ents, _ := os.ReadDir(filepath.Join(data, "inbox")); len(ents) != 0 {
		t.Errorf("the inbox still holds %d entries, e.g. %s", len(ents), ents[0].Name())
	}
	for name, want := range map[string][]byte{f.name + ".jsonl": f.content, f.name + ".options.json": f.options} {
		if got, err := os.ReadFile(filepath.Join(data, "done", name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("done/%s: %v (same content: %v)", name, err, bytes.Equal(got, want))
		}
	}
}

// sameResults compares batch name's result files and batch object in
// outbox with the reference run's in refOutbox.
func sameResults(t *testing.T, refOutbox, outbox, name string) {
	t.Helper()
	for _, f := range []string{name + ".output.jsonl", name + ".errors.jsonl"} {
		want := sortedFileLines(t, filepath.Join(refOutbox, f))
		got := sortedFileLines(t, filepath.Join(outbox, f))
		if !reflect.DeepEqual(want, got) {
			t.Errorf("%s: differs from the reference (%d vs %d lines):\n%s", f, len(got), len(want), diffResults(want, got))
		}
	}
	refObj, err := pipeline.ReadBatchObject(filepath.Join(refOutbox, name+".batch.json"))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := pipeline.ReadBatchObject(filepath.Join(outbox, name+".batch.json"))
	if err != nil {
		t.Fatal(err)
	}
	if obj.ID != refObj.ID || obj.RequestCounts != refObj.RequestCounts || obj.Usage != refObj.Usage {
		t.Errorf("batch object: id %s counts %+v usage %+v; reference id %s counts %+v usage %+v",
			obj.ID, obj.RequestCounts, obj.Usage, refObj.ID, refObj.RequestCounts, refObj.Usage)
	}
}

// TestFailpointCrashBucketPublish kills a bucket daemon after it staged
// its results and after it committed the publication record; a restart
// must publish the batch, and `batchd check --source` must pass with the
// outputs of an uninterrupted run.
func TestFailpointCrashBucketPublish(t *testing.T) {
	bin := needBinary(t)
	fpBin := needFailpointBinary(t)
	minio := miniotest.Start(t)
	srv := openaitest.NewServer(openaitest.Options{})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	root := t.TempDir()
	content, _ := crashInput(failpointRequests)
	// run runs the batch on a fresh bucket, first with env (a crash
	// expected when it arms a point) then plainly, and returns the bucket.
	run := func(label string, env ...string) string {
		bucket := minio.Bucket()
		cfg := filepath.Join(root, label+".yaml")
		if err := os.WriteFile(cfg, []byte(bucketDaemonConfig(minio, bucket, "d-"+label)), 0o644); err != nil {
			t.Fatal(err)
		}
		data, logPath := filepath.Join(root, label), filepath.Join(root, label+".log")
		minio.Put(bucket, "jobs/inbox/fp.jsonl", content)
		published := func() bool { _, ok := minio.Get(bucket, "jobs/done/fp.jsonl"); return ok }
		if len(env) > 0 {
			p := startBatchdEnv(t, fpBin, data, cfg, srv.URL(), logPath, env...)
			waitFor(t, 2*time.Minute, label+": batchd to crash", func() bool { return !p.running() })
			if !killedBy(p.err, syscall.SIGKILL) {
				t.Fatalf("batchd exit %v, want death by SIGKILL\n%s", p.err, logTail(logPath))
			}
		}
		p := startBatchd(t, bin, data, cfg, srv.URL(), logPath)
		waitFor(t, 2*time.Minute, label+": the batch to be published", func() bool {
			if !p.running() {
				t.Fatalf("batchd exited: %v\n%s", p.err, logTail(logPath))
			}
			return published()
		})
		p.waitReady(t)
		p.signal(t, syscall.SIGTERM)
		check := exec.Command(bin, "check", "--source", "s3://"+bucket+"/jobs", "--s3-endpoint", minio.Endpoint, "fp")
		check.Env = append(hermeticEnv(), "BATCHD_S3_ACCESS_KEY="+miniotest.AccessKey, "BATCHD_S3_SECRET_KEY="+miniotest.SecretKey)
		if out, err := check.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "OK fp") {
			t.Fatalf("%s: batchd check: %v\n%s", label, err, out)
		}
		return bucket
	}
	ref := run("ref")
	for _, point := range []string{failpoint.BucketCommit, failpoint.BucketInstall} {
		bucket := run(point, failpoint.Env+"="+point)
		for _, suffix := range []string{".output.jsonl", ".errors.jsonl"} {
			want, _ := minio.Get(ref, "jobs/outbox/fp"+suffix)
			got, _ := minio.Get(bucket, "jobs/outbox/fp"+suffix)
			if w, g := sortedLines(want), sortedLines(got); !reflect.DeepEqual(w, g) {
				t.Errorf("%s: fp%s differs from the reference (%d vs %d lines):\n%s", point, suffix, len(g), len(w), diffResults(w, g))
			}
		}
	}
}

// sortedLines splits raw into lines, sorted.
func sortedLines(raw []byte) []string {
	l := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(raw) == 0 {
		l = nil
	}
	sort.Strings(l)
	return l
}

// An outbox batchd cannot write to (here a directory stands where the
// output file goes: the tests run as root, which file modes do not stop)
// fails the publish step with an error that names the file; the batch
// waits, its input stays in the inbox, and it ends as an uninterrupted
// run does once the outbox is fixed, without a restart.
func TestUnwritableOutboxWaitsAndRecovers(t *testing.T) {
	bin := needBinary(t)
	f := newFailpointFixture(t, bin)
	data := t.TempDir()
	blocker := filepath.Join(data, "outbox", f.name+".output.jsonl")
	if err := os.MkdirAll(filepath.Join(blocker, "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, logPath := f.placeIn(t, data)
	p := startBatchd(t, bin, data, f.cfg, f.srv.URL(), logPath)
	waitFor(t, 2*time.Minute, "the publish to fail twice (a rescan retried it)", func() bool {
		if !p.running() {
			t.Fatalf("batchd exited: %v\n%s", p.err, logTail(logPath))
		}
		log, _ := os.ReadFile(logPath)
		return bytes.Count(log, []byte("batch run failed; it is retried on the next rescan")) >= 2
	})
	log, _ := os.ReadFile(logPath)
	if !bytes.Contains(log, []byte(f.name+".output.jsonl")) {
		t.Fatalf("the error does not name the output file\n%s", logTail(logPath))
	}
	if _, err := os.Stat(filepath.Join(data, "inbox", f.name+".jsonl")); err != nil {
		t.Fatalf("the input left the inbox while its results could not be published: %v", err)
	}
	if err := os.RemoveAll(blocker); err != nil {
		t.Fatal(err)
	}
	f.finish(t, p, data)
}
