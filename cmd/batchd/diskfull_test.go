package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/internal/failpoint"
)

// diskFullConfig is crashConfig with a quick free-space check, so that the
// tests see intake resume soon after space returns.
var diskFullConfig = strings.Replace(crashConfig, "pipeline:\n", "pipeline:\n  disk_check_interval: 100ms\n", 1)

// startDiskDaemon starts batchd with HTTP on a free loopback port, so the
// test can read /metrics and /status.json, and returns the base URL.
func startDiskDaemon(t *testing.T, bin, data, cfg, engineURL, logPath string, env ...string) (*proc, string) {
	t.Helper()
	p := startBatchdCmd(t, bin, logPath, env, "run", "--config", cfg, "--data", data, "--engine", "openai",
		"--openai-url", engineURL, "--listen", "127.0.0.1:0")
	p.waitReady(t)
	raw, _ := os.ReadFile(logPath)
	m := regexp.MustCompile(`msg="batchd running" .* listen=(\S+)`).FindAllSubmatch(raw, -1)
	if len(m) == 0 {
		t.Fatalf("no listen address in the log\n%s", logTail(logPath))
	}
	return p, "http://" + string(m[len(m)-1][1])
}

// metric reads one unlabelled sample from base's /metrics (ok false when
// it cannot be read).
func metric(base, name string) (float64, bool) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// statusDiskFull reads disk_full from base's /status.json.
func statusDiskFull(base string) (full, ok bool) {
	resp, err := http.Get(base + "/status.json")
	if err != nil {
		return false, false
	}
	defer resp.Body.Close()
	var st struct {
		DiskFull *bool `json:"disk_full"`
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil || st.DiskFull == nil {
		return false, false
	}
	return *st.DiskFull, true
}

// waitMetric polls base's metric name until it reads want.
func waitMetric(t *testing.T, p *proc, base, name string, want float64) {
	t.Helper()
	waitFor(t, 2*time.Minute, name+" to read "+strconv.FormatFloat(want, 'g', -1, 64), func() bool {
		if !p.running() {
			t.Fatalf("batchd exited: %v\n%s", p.err, logTail(p.log))
		}
		v, ok := metric(base, name)
		return ok && v == want
	})
}

// checkPauseLogged checks that the log tells of one pause and one resume,
// with the free space, and of no failed run.
func checkPauseLogged(t *testing.T, logPath, stateDir string) {
	t.Helper()
	log, _ := os.ReadFile(logPath)
	for want, n := range map[string]int{
		`msg="disk full: intake paused`:             1,
		`msg="disk space returned: intake resumes"`: 1,
		`msg="batch paused: the disk is full`:       1,
	} {
		if got := bytes.Count(log, []byte(want)); got != n {
			t.Errorf("%d times %q in the log, want %d\n%s", got, want, n, logTail(logPath))
		}
	}
	for _, line := range bytes.Split(log, []byte("\n")) {
		if bytes.Contains(line, []byte(`msg="disk full: intake paused`)) && !bytes.Contains(line, []byte(stateDir+": ")) {
			t.Errorf("the pause does not report the state dir's free space:\n%s", line)
		}
	}
	for _, bad := range []string{"batch run failed", "batch failed", "level=ERROR"} {
		if bytes.Contains(log, []byte(bad)) {
			t.Errorf("%q in the log: a full disk must pause, not fail\n%s", bad, logTail(logPath))
		}
	}
}

// TestFailpointDiskFullPausesAndResumes makes a write fail with ENOSPC
// (the results' fsync, then the publish): intake pauses (the pause counter
// on /metrics, a WARN naming the free space), the run stops at its last
// commit with nothing failed, and since the disk in fact has room the
// check resumes intake without a restart; the batch ends as an
// uninterrupted run does.
func TestFailpointDiskFullPausesAndResumes(t *testing.T) {
	bin := needBinary(t)
	fpBin := needFailpointBinary(t)
	f := newFailpointFixture(t, bin)
	cfg := filepath.Join(f.root, "diskfull.yaml")
	if err := os.WriteFile(cfg, []byte(diskFullConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []string{failpoint.ResultsSync + ":3=enospc", failpoint.FolderPublishObject + "=enospc"} {
		t.Run(spec, func(t *testing.T) {
			t.Parallel()
			data, logPath := f.place(t)
			p, base := startDiskDaemon(t, fpBin, data, cfg, f.srv.URL(), logPath, failpoint.Env+"="+spec)
			waitMetric(t, p, base, "batchd_disk_full_pauses_total", 1)
			waitFor(t, 2*time.Minute, "the batch to complete", func() bool {
				if !p.running() {
					t.Fatalf("batchd exited: %v\n%s", p.err, logTail(logPath))
				}
				return finished(data, f.name, "jsonl")
			})
			waitMetric(t, p, base, "batchd_disk_full", 0)
			if full, ok := statusDiskFull(base); !ok || full {
				t.Errorf("status.json disk_full = %v (present %v) after the resume, want false", full, ok)
			}
			if n := readyLines(logPath); n != 1 {
				t.Errorf("batchd started %d times, want once: the resume needs no restart", n)
			}
			checkPauseLogged(t, logPath, filepath.Join(data, "state"))
			f.finish(t, p, data)
		})
	}
}

// TestDiskFullTmpfsPausesAndResumes runs a batch on a data directory on a
// small tmpfs that a ballast file fills so that the results do not fit:
// intake pauses (batchd_disk_full 1, status.json disk_full, a WARN), the
// input waits in the inbox with nothing failed; once the test deletes the
// ballast the batch ends without a restart, `batchd check` passes and the
// outputs are those of an uninterrupted run. It needs root (mount).
func TestDiskFullTmpfsPausesAndResumes(t *testing.T) {
	bin := needBinary(t)
	f := newFailpointFixture(t, bin)
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", data, "tmpfs", 0, "size=16m"); err != nil {
		t.Skipf("skipped: cannot mount a tmpfs for the data directory (%v); run as root, or rely on TestFailpointDiskFullPausesAndResumes", err)
	}
	t.Cleanup(func() { syscall.Unmount(data, syscall.MNT_DETACH) }) // runs after the daemon is killed
	cfg := filepath.Join(f.root, "diskfull-tmpfs.yaml")
	if err := os.WriteFile(cfg, []byte(diskFullConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	var results int64
	for _, ext := range []string{".output.jsonl", ".errors.jsonl"} {
		st, err := os.Stat(filepath.Join(f.refOutbox, f.name+ext))
		if err != nil {
			t.Fatal(err)
		}
		results += st.Size()
	}
	data, logPath := f.placeIn(t, data)
	// Leave room to start and to begin the batch, but not for half its
	// results: their writes fail with ENOSPC.
	var fs syscall.Statfs_t
	if err := syscall.Statfs(data, &fs); err != nil {
		t.Fatal(err)
	}
	leave := results / 2
	ballast := filepath.Join(data, "ballast")
	fill := int64(fs.Bavail)*fs.Bsize - leave
	if err := os.WriteFile(ballast, bytes.Repeat([]byte{'x'}, int(fill)), 0o644); err != nil {
		t.Fatalf("write the ballast (%d bytes): %v", fill, err)
	}
	t.Logf("results %d bytes; %d bytes left free", results, leave)

	p, base := startDiskDaemon(t, bin, data, cfg, f.srv.URL(), logPath)
	waitMetric(t, p, base, "batchd_disk_full", 1)
	if full, ok := statusDiskFull(base); !ok || !full {
		t.Errorf("status.json disk_full = %v (present %v) while paused, want true", full, ok)
	}
	if _, err := os.Stat(filepath.Join(data, "inbox", f.name+".jsonl")); err != nil {
		t.Errorf("the input left the inbox while the disk was full: %v", err)
	}
	if status, _ := batchProgress(filepath.Join(data, "outbox"), f.name); status == "failed" || status == "completed" {
		t.Errorf("batch object says %s while the disk is full", status)
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the batch to complete once space returned", func() bool {
		if !p.running() {
			t.Fatalf("batchd exited: %v\n%s", p.err, logTail(logPath))
		}
		return finished(data, f.name, "jsonl")
	})
	waitMetric(t, p, base, "batchd_disk_full", 0)
	if v, ok := metric(base, "batchd_disk_full_pauses_total"); !ok || v < 1 {
		t.Errorf("batchd_disk_full_pauses_total = %v (present %v), want at least 1", v, ok)
	}
	if n := readyLines(logPath); n != 1 {
		t.Errorf("batchd started %d times, want once: the resume needs no restart", n)
	}
	checkPauseLogged(t, logPath, filepath.Join(data, "state"))
	f.finish(t, p, data)
}
