package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/internal/fsx"
)

// `batchd ledger backup` copies a running daemon's ledger through its
// admin route (with its API key) while a batch runs; the copy passes the
// ledger check and, restored over the ledger, resumes the batch to an
// exactly-once end. `batchd ledger compact` refuses while a daemon runs
// and, once it stopped, rewrites the ledger keeping every batch.
func TestLedgerBackupWhileRunningAndRestore(t *testing.T) {
	bin := needBinary(t)
	const name, requests, gate = "bk", 600, 200
	// The stand-in answers the first gate requests, then holds the rest
	// until release closes (or the daemon gives up on them), so that the
	// batch is surely in progress during the backup.
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open)
	srv := openaitest.NewServer(openaitest.Options{Fault: func(n int64, r *http.Request, _ []byte) openaitest.Fault {
		if n > gate {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		return openaitest.Fault{}
	}})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	root := t.TempDir()
	data := filepath.Join(root, "data")
	cfg := writeFile(t, filepath.Join(root, "batchd.yaml"), "watcher:\n  settle: 50ms\n")
	logPath := filepath.Join(root, "batchd.log")
	start := func() *proc {
		p := startBatchdCmd(t, bin, logPath, []string{"BATCHD_API_KEY=sekrit"}, "run", "--config", cfg, "--data", data,
			"--engine", "openai", "--openai-url", srv.URL(), "--listen", "127.0.0.1:0")
		p.waitReady(t)
		return p
	}
	p := start()
	placeInput(t, filepath.Join(data, "inbox"), name+".jsonl", []byte(chatBatch(requests, name)))
	outbox := filepath.Join(data, "outbox")
	waitFor(t, 2*time.Minute, "the batch to pass its first requests", func() bool {
		_, done := batchProgress(outbox, name)
		return done >= gate/2
	})

	backup := filepath.Join(root, "ledger.backup")
	code, stdout, stderr := cli(t, "ledger", "backup", backup, "--data", data, "--key", "")
	if code != exitUsage || !strings.Contains(stderr, "401") || !strings.Contains(stderr, "--key") {
		t.Errorf("backup without the key: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, err := os.Stat(backup); !os.IsNotExist(err) {
		t.Errorf("a refused backup left %s: %v", backup, err)
	}
	// A link planted at state/http.addr is not followed to an address.
	addrFile := filepath.Join(data, "state", "http.addr")
	outside := writeFile(t, filepath.Join(root, "outside.addr"), "127.0.0.1:1\n")
	if err := os.Rename(addrFile, addrFile+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, addrFile); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = cli(t, "ledger", "backup", backup, "--data", data, "--key", "sekrit")
	if code != exitUsage || !strings.Contains(stderr, "symbolic link") || !strings.Contains(stderr, "--url") {
		t.Errorf("backup through a linked http.addr: exit %d\n%s%s", code, stdout, stderr)
	}
	if err := os.Remove(addrFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(addrFile+".real", addrFile); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = cli(t, "ledger", "backup", backup, "--data", data, "--key", "sekrit")
	if code != exitOK || !strings.HasPrefix(stdout, "OK backup of ") || !strings.Contains(stdout, "1 batch (from the running batchd at 127.0.0.1:") {
		t.Fatalf("backup of a running daemon's ledger: exit %d\n%s%s", code, stdout, stderr)
	}
	if status, _ := batchProgress(outbox, name); status == "completed" {
		t.Fatalf("the batch completed before the backup; the gate did not hold it")
	}
	code, _, stderr = cli(t, "ledger", "compact", "--data", data)
	if code != exitUsage || !strings.Contains(stderr, "in use by another batchd") || !strings.Contains(stderr, "stop it") {
		t.Errorf("compact beside a running daemon: exit %d, %s", code, stderr)
	}

	// Stop it mid-batch, put the backup in place of the ledger (which has
	// moved on since) and start again: the batch resumes from the backup's
	// commit and ends exactly once.
	p.signal(t, syscall.SIGTERM)
	ledgerPath := filepath.Join(data, "state", "ledger.db")
	if err := fsx.CopyFile(backup, ledgerPath); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := cli(t, "ledger", "check", "--data", data); code != exitOK {
		t.Fatalf("ledger check of the restored backup: exit %d\n%s%s", code, stdout, stderr)
	}
	open()
	p = start()
	waitFor(t, 2*time.Minute, "the restored batch to finish", func() bool {
		if !p.running() {
			t.Fatalf("batchd exited: %v\n%s", p.err, logTail(logPath))
		}
		return finished(data, name, "jsonl")
	})
	// Offline now: the CLI copies the file itself.
	p.signal(t, syscall.SIGTERM)
	if code, stdout, stderr := cli(t, "check", "--data", data, name); code != exitOK {
		t.Fatalf("batchd check after the restore: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = cli(t, "ledger", "backup", backup, "--data", data)
	if code != exitOK || !strings.Contains(stdout, "(copied offline)") {
		t.Errorf("offline backup: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = cli(t, "ledger", "compact", "--data", data)
	if code != exitOK || !strings.HasPrefix(stdout, "OK compacted "+ledgerPath+": ") {
		t.Fatalf("compact: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := cli(t, "ledger", "check", "--data", data); code != exitOK || !strings.Contains(stdout, ": 1 batch\n") {
		t.Errorf("ledger check after compact: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := cli(t, "check", "--data", data, name); code != exitOK {
		t.Errorf("batchd check after compact: exit %d\n%s%s", code, stdout, stderr)
	}
}
