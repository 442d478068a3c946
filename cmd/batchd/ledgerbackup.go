package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline/ledger"
	"github.com/batchd/batchd/store/folder"
)

func init() {
	for _, f := range []string{"url", "key"} {
		valueFlags[f] = true
	}
}

// cmdLedgerBackup copies DATA/state/ledger.db to FILE: itself when no
// daemon runs on DATA (holding the data directory's lock meanwhile, so
// none starts), else through the running daemon's admin route, which
// streams the copy from one read transaction. FILE appears whole or not at
// all, and only once the copy opens and passes the ledger check.
func cmdLedgerBackup(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ledger backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: batchd ledger backup FILE [--data DIR] [--url HOST:PORT] [--key KEY]\n\n"+
			"Writes a consistent copy of DATA/state/ledger.db to FILE (temporary file, fsync, rename),\n"+
			"then checks the copy as `batchd ledger check` does. While a batchd runs on DATA the copy\n"+
			"comes from it over HTTP (GET "+daemon.LedgerBackupPath+", from the address it records in\n"+
			"DATA/state/http.addr, with an API key when it has keys); otherwise the file is copied here.\n\nflags:")
		fs.PrintDefaults()
	}
	data := dataFlag(fs)
	url := fs.String("url", "", "the running batchd's HTTP address (default: the one it recorded in DATA/state/http.addr)")
	key := fs.String("key", os.Getenv("BATCHD_API_KEY"), "an API key of the running batchd (default $BATCHD_API_KEY)")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long the whole copy may take")
	if err := fs.Parse(reorder(args)); err != nil || fs.NArg() != 1 {
		if err == nil {
			fs.Usage()
		}
		return exitUsage
	}
	dst := fs.Arg(0)
	dirs := daemon.DataDirs(*data)
	src := filepath.Join(dirs.State, "ledger.db")
	if _, err := os.Stat(src); err != nil {
		return errorf(stderr, exitUsage, "no ledger at %s (is %s a batchd data directory?)", src, dirs.Root)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var how string
	var copyTo func(w io.Writer) error
	lock, err := daemon.LockDataDir(dirs)
	switch {
	case err == nil:
		defer lock.Close()
		how = "copied offline"
		copyTo = func(w io.Writer) error {
			_, err := ledger.BackupFile(src, w, 5*time.Second)
			return err
		}
	case errors.Is(err, daemon.ErrInUse):
		addr := *url
		if addr == "" {
			raw, rerr := fsx.ReadRegular(daemon.AddrFile(dirs)) // no link followed
			if errors.Is(rerr, fsx.ErrNotRegular) {
				return errorf(stderr, exitUsage, "%v; %v: give the daemon's address with --url", err, rerr)
			}
			if rerr != nil {
				return errorf(stderr, exitUsage, "%v; the batchd running on %s records no HTTP address (%s): it runs with listen: off. Give its address with --url, or stop it and back up offline", err, dirs.Root, daemon.AddrFile(dirs))
			}
			addr = strings.TrimSpace(string(raw))
		}
		base := addr
		if !strings.Contains(base, "://") {
			base = "http://" + base
		}
		how = "from the running batchd at " + addr
		copyTo = func(w io.Writer) error {
			return fetchLedger(ctx, strings.TrimSuffix(base, "/")+daemon.LedgerBackupPath, *key, w)
		}
	default:
		return errorf(stderr, exitUsage, "%v", err)
	}
	rep, size, err := writeVerified(dst, copyTo)
	if err != nil {
		return errorf(stderr, exitUsage, "ledger backup: %v", err)
	}
	if !rep.OK() {
		for _, p := range rep.Problems {
			fmt.Fprintln(stdout, p)
		}
		fmt.Fprintf(stdout, "FAIL backup of %s: the copy has %d problems; %s was not written\n", src, len(rep.Problems), dst)
		return exitFailure
	}
	fmt.Fprintf(stdout, "OK backup of %s to %s: %d bytes, %s (%s)\n", src, dst, size, plural(rep.Batches, "batch", "batches"), how)
	return exitOK
}

// fetchLedger GETs a ledger copy from url into w, refusing a short one.
func fetchLedger(ctx context.Context, url, key string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("ask the running batchd for a copy: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		hint := ""
		if resp.StatusCode == http.StatusUnauthorized {
			hint = " (give one of its api.keys with --key or BATCHD_API_KEY)"
		}
		return fmt.Errorf("the running batchd answered %s%s: %s", resp.Status, hint, strings.TrimSpace(string(msg)))
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return fmt.Errorf("read the copy from the running batchd: %w", err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return fmt.Errorf("the running batchd's copy was cut short: %d of %d bytes", n, resp.ContentLength)
	}
	return nil
}

// writeVerified writes dst through a temporary file beside it: copyTo
// fills it, it is synced, checked as `batchd ledger check` checks a ledger
// (without the result files, which belong to the data directory), and only
// a copy without problems is renamed into place.
func writeVerified(dst string, copyTo func(io.Writer) error) (*ledger.CheckReport, int64, error) {
	tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-"+strconv.Itoa(os.Getpid()))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, 0, err
	}
	defer os.Remove(tmp) // a no-op once renamed
	err = copyTo(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, 0, err
	}
	rep, err := ledger.Check(tmp, ledger.CheckOptions{Retiring: folder.CheckRetiring})
	if err != nil {
		return nil, 0, fmt.Errorf("the copy does not open as a ledger: %w", err)
	}
	if !rep.OK() {
		return rep, 0, nil
	}
	st, err := os.Stat(tmp)
	if err != nil {
		return nil, 0, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return nil, 0, err
	}
	return rep, st.Size(), fsx.SyncDir(filepath.Dir(dst))
}

// cmdLedgerCompact rewrites DATA/state/ledger.db without its free pages.
// It holds the data directory's lock throughout, so it refuses to run
// beside a daemon and no daemon starts during it.
func cmdLedgerCompact(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ledger compact", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: batchd ledger compact [--data DIR]\n\n"+
			"Rewrites DATA/state/ledger.db without its free pages (bbolt files never shrink by\n"+
			"themselves), with batchd stopped: the new file is synced, checked to hold every key and\n"+
			"value of the old one, then renamed over it. Prints the sizes before and after.\n\nflags:")
		fs.PrintDefaults()
	}
	data := dataFlag(fs)
	if err := fs.Parse(reorder(args)); err != nil || fs.NArg() != 0 {
		if err == nil {
			fs.Usage()
		}
		return exitUsage
	}
	dirs := daemon.DataDirs(*data)
	path := filepath.Join(dirs.State, "ledger.db")
	if _, err := os.Stat(path); err != nil {
		return errorf(stderr, exitUsage, "no ledger at %s (is %s a batchd data directory?)", path, dirs.Root)
	}
	lock, err := daemon.LockDataDir(dirs)
	if errors.Is(err, daemon.ErrInUse) {
		return errorf(stderr, exitUsage, "%v: ledger compact runs only with batchd stopped (stop it, compact, start it again; `batchd ledger backup` works while it runs)", err)
	}
	if err != nil {
		return errorf(stderr, exitUsage, "%v", err)
	}
	defer lock.Close()
	res, err := ledger.Compact(path, 5*time.Second)
	if err != nil {
		return errorf(stderr, exitUsage, "%v", err)
	}
	fmt.Fprintf(stdout, "OK compacted %s: %d bytes before, %d after\n", path, res.Before, res.After)
	return exitOK
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
