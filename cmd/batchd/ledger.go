package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/pipeline/ledger"
	"github.com/batchd/batchd/store/folder"
)

const ledgerUsage = "usage: batchd ledger check [--data DIR] [--timeout D]\n" +
	"       batchd ledger backup FILE [--data DIR] [--url HOST:PORT] [--key KEY]\n" +
	"       batchd ledger compact [--data DIR]"

func cmdLedger(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "backup":
			return cmdLedgerBackup(ctx, args[1:], stdout, stderr)
		case "compact":
			return cmdLedgerCompact(ctx, args[1:], stdout, stderr)
		}
	}
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(stderr, ledgerUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("ledger check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, ledgerUsage+"\n\nChecks DATA/state/ledger.db offline, without changing it: bbolt's own consistency\n"+
			"check, and for each batch that its done set matches its request counts, that its status\n"+
			"has its timestamp and that its committed result lengths fit its result files; every\n"+
			"name and done set must belong to a batch. One line per problem; exit 0 when there is\n"+
			"none, 1 when there are problems, 2 when the ledger cannot be read.\n\nflags:")
		fs.PrintDefaults()
	}
	data := dataFlag(fs)
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for the ledger's lock (a running batchd holds it)")
	if err := fs.Parse(reorder(args[1:])); err != nil || fs.NArg() != 0 {
		if err == nil {
			fs.Usage()
		}
		return exitUsage
	}
	dirs := daemon.DataDirs(*data)
	path := filepath.Join(dirs.State, "ledger.db")
	rep, err := pipeline.CheckLedger(dirs.State, *timeout, folder.CheckRetiring)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errorf(stderr, exitUsage, "no ledger at %s (is %s a batchd data directory?)", path, dirs.Root)
	case errors.Is(err, ledger.ErrLocked):
		return errorf(stderr, exitUsage, "ledger %s is in use by a running batchd: stop it first, or check a copy of %s made while it was stopped (batchd ledger check --data COPY)", path, dirs.Root)
	case err != nil:
		return errorf(stderr, exitUsage, "%v", err)
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(stdout, p)
	}
	batches := fmt.Sprintf("%d batches", rep.Batches)
	if rep.Batches == 1 {
		batches = "1 batch"
	}
	pending := ""
	if rep.Retiring > 0 {
		pending = fmt.Sprintf("; %d interrupted moves to done, which the next start finishes", rep.Retiring)
	}
	if !rep.OK() {
		fmt.Fprintf(stdout, "FAIL ledger %s: %s, %d problems%s\n", path, batches, len(rep.Problems), pending)
		return exitFailure
	}
	fmt.Fprintf(stdout, "OK ledger %s: %s%s\n", path, batches, pending)
	return exitOK
}
