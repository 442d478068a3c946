// Package sdnotify speaks systemd's notification protocol (sd_notify(3)):
// datagrams such as "READY=1" sent to the socket named by NOTIFY_SOCKET, and
// the watchdog interval systemd announces in WATCHDOG_USEC. Without
// NOTIFY_SOCKET every call does nothing, so a daemon calls it unconditionally.
// It imports nothing of batchd.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Notifier sends state lines to the service manager. The zero value and a
// nil *Notifier send nothing.
type Notifier struct {
	addr *net.UnixAddr // nil: not run by a service manager that listens
}

// FromEnv returns the notifier NOTIFY_SOCKET names (one that sends nothing
// when it is unset). A name starting with '@' is an abstract socket, as
// systemd passes it; Go's net package maps '@' to the leading NUL.
func FromEnv(getenv func(string) string) (*Notifier, error) {
	name := getenv("NOTIFY_SOCKET")
	if name == "" {
		return &Notifier{}, nil
	}
	if !strings.HasPrefix(name, "/") && !strings.HasPrefix(name, "@") {
		// systemd also accepts vsock:… addresses (VMs); batchd does not run there.
		return nil, fmt.Errorf("NOTIFY_SOCKET %q: want an absolute path or an @abstract name", name)
	}
	return &Notifier{addr: &net.UnixAddr{Name: name, Net: "unixgram"}}, nil
}

// Enabled reports whether Send reaches a service manager.
func (n *Notifier) Enabled() bool { return n != nil && n.addr != nil }

// Send sends one datagram of newline-separated assignments, e.g. "READY=1"
// or "STATUS=…". It does nothing when the notifier is not enabled.
func (n *Notifier) Send(state string) error {
	if !n.Enabled() {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify %s: %w", firstLine(state), err)
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// Status builds a STATUS= line from s: one line (newlines would start new
// assignments), at most max bytes, cut on a rune boundary with "…".
func Status(s string, max int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > max {
		cut := max - len("…")
		for cut > 0 && !utf8Start(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return "STATUS=" + s
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// ErrOtherPID says WATCHDOG_USEC was meant for another process.
var ErrOtherPID = errors.New("WATCHDOG_PID names another process")

// WatchdogInterval returns the watchdog timeout systemd set for this process
// (WATCHDOG_USEC), or 0 when there is none. WATCHDOG_PID, when set, must be
// this process's pid; otherwise the watchdog belongs to another process and
// 0 is returned with ErrOtherPID. Callers ping at half the interval.
func WatchdogInterval(getenv func(string) string, pid int) (time.Duration, error) {
	us := getenv("WATCHDOG_USEC")
	if us == "" {
		return 0, nil
	}
	if p := getenv("WATCHDOG_PID"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return 0, fmt.Errorf("WATCHDOG_PID %q: not a pid", p)
		}
		if n != pid {
			return 0, ErrOtherPID
		}
	}
	n, err := strconv.ParseInt(us, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("WATCHDOG_USEC %q: want a positive number of microseconds", us)
	}
	return time.Duration(n) * time.Microsecond, nil
}
