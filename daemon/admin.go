package daemon

import (
	"errors"
	"fmt"
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
func LockDataDir(dirs Dirs) (*os.File, error) {
	path := filepath.Join(dirs.State, "batchd.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		raw, _ := os.ReadFile(path)
		f.Close()
		pid := strings.TrimSpace(string(raw))
		if pid == "" {
			pid = "unknown"
		}
		return nil, fmt.Errorf("%w: %s is in use by another batchd (pid %s)", ErrInUse, dirs.Root, pid)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
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
