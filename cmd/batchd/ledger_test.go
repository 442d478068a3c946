package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/openai/openaitest"
)

// `batchd ledger check` reads a stopped daemon's ledger: clean, with a
// problem it names, or held by a running daemon (a clear refusal, not a
// wait).
func TestLedgerCheck(t *testing.T) {
	d := startBinDaemon(t)
	data, dirs := d.data, d.dirs
	placeInput(t, dirs.Inbox, "l.jsonl", []byte(chatBatch(12, "l")+mixedBatch))
	waitFor(t, 60*time.Second, "batch l to finish", func() bool { return finished(data, "l", "jsonl") })

	code, stdout, stderr := cli(t, "ledger", "check", "--data", data, "--timeout", "100ms")
	if code != exitUsage || !strings.Contains(stderr, "in use by a running batchd: stop it first") {
		t.Errorf("check of a running daemon's ledger: exit %d\n%s%s", code, stdout, stderr)
	}
	d.p.signal(t, syscall.SIGTERM)

	ledgerPath := filepath.Join(dirs.State, "ledger.db")
	code, stdout, stderr = cli(t, "ledger", "check", "--data", data)
	if want := "OK ledger " + ledgerPath + ": 1 batch\n"; code != exitOK || stdout != want {
		t.Fatalf("check: exit %d\n%s%s\nwant %q", code, stdout, stderr, want)
	}

	// The pipeline's copy of the output, cut shorter than the ledger says.
	outs, _ := filepath.Glob(filepath.Join(dirs.State, "batches", "*", "output.1.jsonl"))
	if len(outs) != 1 {
		t.Fatalf("result files in the state dir: %v", outs)
	}
	id := filepath.Base(filepath.Dir(outs[0]))
	if err := os.Truncate(outs[0], 10); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = cli(t, "ledger", "check", "--data", data)
	if code != exitFailure || !strings.HasPrefix(stdout, id+": out_len: ") || !strings.Contains(stdout, "has only 10\nFAIL ledger ") {
		t.Errorf("check with a short result file: exit %d\n%s%s", code, stdout, stderr)
	}

	if code, _, stderr := cli(t, "ledger", "check", "--data", t.TempDir()); code != exitUsage || !strings.Contains(stderr, "no ledger at") {
		t.Errorf("check of no ledger: exit %d, %s", code, stderr)
	}
	if code, _, stderr := cli(t, "ledger", "verify"); code != exitUsage || !strings.Contains(stderr, "usage: batchd ledger check") {
		t.Errorf("ledger verify: exit %d, %s", code, stderr)
	}
}

// A damaged ledger stops `batchd run` at start with an error naming the
// file and what to do: no crash (SIGBUS, a bbolt panic), and no silent
// start on an empty ledger. `batchd ledger check` says the same.
func TestRunRefusesADamagedLedger(t *testing.T) {
	d := startBinDaemon(t)
	data, dirs := d.data, d.dirs
	for _, name := range []string{"a", "b", "c"} {
		placeInput(t, dirs.Inbox, name+".jsonl", []byte(chatBatch(300, name)))
	}
	for _, name := range []string{"a", "b", "c"} {
		waitFor(t, 60*time.Second, "batch "+name+" to finish", func() bool { return finished(data, name, "jsonl") })
	}
	d.p.signal(t, syscall.SIGTERM)
	ledgerPath := filepath.Join(dirs.State, "ledger.db")
	whole, err := os.ReadFile(ledgerPath)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	if len(whole) < 6*page {
		t.Fatalf("the ledger is only %d bytes; the cases need more pages", len(whole))
	}
	for _, c := range []struct {
		name string
		size int
	}{{"empty", 0}, {"8KiB", 8192}, {"half", len(whole) / 2 / page * page}, {"one byte off", len(whole) - 1}} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(ledgerPath, whole[:c.size], 0o600); err != nil {
				t.Fatal(err)
			}
			code, msg := d.runAgain(t)
			if code != exitFailure {
				t.Fatalf("batchd run on a damaged ledger: exit %d, want %d\n%s", code, exitFailure, msg)
			}
			for _, want := range []string{"batchd: start: ledger " + ledgerPath + " is damaged", "backup", "move it aside", "batchd ledger check"} {
				if !strings.Contains(msg, want) {
					t.Errorf("batchd run did not say %q:\n%s", want, msg)
				}
			}
			for _, crash := range []string{"panic", "fatal error", "goroutine ", "batchd: watching"} {
				if strings.Contains(msg, crash) {
					t.Errorf("batchd run said %q:\n%s", crash, msg)
				}
			}
			code, stdout, stderr := cli(t, "ledger", "check", "--data", data)
			if code != exitUsage || !strings.Contains(stderr, ledgerPath+" is damaged") {
				t.Errorf("ledger check: exit %d\n%s%s", code, stdout, stderr)
			}
			if got, _ := os.ReadFile(ledgerPath); !bytes.Equal(got, whole[:c.size]) {
				t.Errorf("the damaged ledger was changed: %d bytes, was %d", len(got), c.size)
			}
		})
	}
}

// binDaemon is the built batchd running on a fresh data directory against
// a fresh stand-in server.
type binDaemon struct {
	bin, data, cfgPath, url string
	dirs                    daemon.Dirs
	p                       *proc
}

// startBinDaemon starts one and waits until it is ready.
func startBinDaemon(t *testing.T) *binDaemon {
	t.Helper()
	bin := needBinary(t)
	srv := openaitest.NewServer(openaitest.Options{})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	d := &binDaemon{bin: bin, data: filepath.Join(dir, "data"), url: srv.URL(),
		cfgPath: writeFile(t, filepath.Join(dir, "batchd.yaml"), "watcher:\n  settle: 50ms\n")}
	d.dirs = daemon.DataDirs(d.data)
	d.p = startBatchd(t, bin, d.data, d.cfgPath, d.url, filepath.Join(dir, "batchd.log"))
	d.p.waitReady(t)
	return d
}

// runAgain runs a second `batchd run` on the same data directory to its
// end (it is expected to refuse to start) and returns its exit code and
// output.
func (d *binDaemon) runAgain(t *testing.T) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, d.bin, "run", "--config", d.cfgPath, "--data", d.data, "--openai-url", d.url, "--listen", "off")
	cmd.Stdout, cmd.Stderr, cmd.Env = &out, &out, hermeticEnv()
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("second batchd run: %v, want it to refuse to start\n%s", err, out.String())
	}
	return exit.ExitCode(), out.String()
}
