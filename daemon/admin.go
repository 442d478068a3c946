package daemon

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/batchd/batchd/internal/fsx"
)

// LedgerBackupPath is the admin route that streams a consistent copy of the
// running daemon's ledger (`batchd ledger backup` calls it while the
// daemon holds the ledger).
const LedgerBackupPath = "/admin/ledger/backup"

// LockDataDir makes the calling process the only batchd on dirs: an
// exclusive flock on DATA/state/batchd.lock (so a killed process never
// leaves it held) holding the process id. Close the file to release it.
// Commands that must not run beside a daemon (ledger compact) take it too.
// A link at the lock's path is refused, never written through.
func LockDataDir(dirs Dirs) (*os.File, error) {
	f, err := flockDataDir(dirs)
	if err != nil {
		return nil, err
	}
	recordPid(f)
	return f, nil
}

// flockDataDir takes the lock of LockDataDir without writing to it.
func flockDataDir(dirs Dirs) (*os.File, error) {
	f, err := fsx.OpenNoFollow(filepath.Join(dirs.State, "batchd.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		raw, _ := io.ReadAll(io.LimitReader(f, 64))
		f.Close()
		pid := strings.TrimSpace(string(raw))
		if pid == "" {
			pid = "unknown"
		}
		return nil, fmt.Errorf("%w: %s is in use by another batchd (pid %s)", ErrInUse, dirs.Root, pid)
	}
	return f, nil
}

// recordPid writes the process id into the lock file f holds.
func recordPid(f *os.File) {
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
}

// checkDataDirs refuses a data directory whose own folders (inbox/,
// outbox/, done/, rejected/, state/, api/, files/ and the folders state/
// holds) are symbolic links: batchd follows none, so that nothing outside
// the data directory is read or written through them, and a second daemon
// never runs another's inbox through a link. The data directory itself
// may be a link (its path is the operator's to choose).
func checkDataDirs(dirs Dirs) error {
	for _, p := range []string{dirs.Inbox, dirs.Outbox, dirs.Done, dirs.Rejected, dirs.State,
		filepath.Join(dirs.Root, "api"), filepath.Join(dirs.Root, "files"),
		filepath.Join(dirs.State, "batches"), filepath.Join(dirs.State, "webhooks"), filepath.Join(dirs.State, "bucket")} {
		if err := fsx.NoLink(p); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
	}
	return nil
}

// AddrFile is where a daemon with HTTP on records the address it listens
// on (host:port), for commands that talk to it (batchd ledger backup).
// It is only meaningful while the data directory's lock is held.
func AddrFile(dirs Dirs) string { return filepath.Join(dirs.State, "http.addr") }

// writeAddrFile records addr in AddrFile, with an unspecified host (a
// listen on all interfaces) written as loopback, the way to reach it here.
func writeAddrFile(dirs Dirs, addr net.Addr) error {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return fmt.Errorf("record http address: %w", err)
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	if err := fsx.WriteFile(AddrFile(dirs), []byte(net.JoinHostPort(host, port)+"\n"), false); err != nil {
		return fmt.Errorf("record http address: %w", err)
	}
	return nil
}

// admin guards the admin routes: a Bearer key when there are keys (as the
// API), and with no keys a loopback client only, even where api.open
// leaves the API open beyond loopback.
// The keys are read per request: SIGHUP may change them.
func (a *access) admin(h http.Handler) http.Handler {
	withKey := a.api(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(a.cur.Load().keys) > 0 {
			withKey.ServeHTTP(w, r)
			return
		}
		if !isLoopback(r.RemoteAddr) {
			http.Error(w, "admin routes answer only loopback clients when api.keys is empty; set api.keys to reach them from elsewhere", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// handleLedgerBackup streams a consistent copy of the ledger from one read
// transaction; Content-Length is the copy's size, so a client detects a cut
// stream.
func (d *Daemon) handleLedgerBackup(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "no-store")
	_, err := d.pipe.Ledger().Backup(w, func(n int64) {
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	})
	if err != nil && !errors.Is(err, syscall.EPIPE) {
		logAPI(d.log, r, err)
	}
}
