package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// listen opens a datagram socket the test owns at name (a path or @name).
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("read notify socket: %v", err)
	}
	return string(buf[:n])
}

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestSendReachesPathAndAbstractSockets(t *testing.T) {
	dir, err := os.MkdirTemp("", "sdn") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, name := range []string{
		filepath.Join(dir, "notify"),
		fmt.Sprintf("@batchd-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano()),
	} {
		c := listen(t, name)
		n, err := FromEnv(env(map[string]string{"NOTIFY_SOCKET": name}))
		if err != nil || !n.Enabled() {
			t.Fatalf("FromEnv(%q): %v, enabled %v", name, err, n.Enabled())
		}
		for _, msg := range []string{"READY=1", "STATUS=2 batches running", "STOPPING=1"} {
			if err := n.Send(msg); err != nil {
				t.Fatalf("%s: send %q: %v", name, msg, err)
			}
			if got := recv(t, c); got != msg {
				t.Fatalf("%s: got %q, want %q", name, got, msg)
			}
		}
	}
}

func TestUnsetSocketSendsNothing(t *testing.T) {
	n, err := FromEnv(env(nil))
	if err != nil || n.Enabled() {
		t.Fatalf("FromEnv without NOTIFY_SOCKET: %v, enabled %v", err, n.Enabled())
	}
	if err := n.Send("READY=1"); err != nil {
		t.Fatal(err)
	}
	var nilN *Notifier
	if err := nilN.Send("READY=1"); err != nil {
		t.Fatal(err)
	}
}

func TestBadSocketNames(t *testing.T) {
	if _, err := FromEnv(env(map[string]string{"NOTIFY_SOCKET": "vsock:2:1234"})); err == nil || !strings.Contains(err.Error(), "NOTIFY_SOCKET") {
		t.Fatalf("vsock address: %v, want an error naming NOTIFY_SOCKET", err)
	}
	n, _ := FromEnv(env(map[string]string{"NOTIFY_SOCKET": "/nonexistent/notify"}))
	if err := n.Send("READY=1"); err == nil || !strings.Contains(err.Error(), "sd_notify") {
		t.Fatalf("send to a missing socket: %v, want an sd_notify error", err)
	}
}

func TestWatchdogInterval(t *testing.T) {
	pid := os.Getpid()
	for _, tc := range []struct {
		env  map[string]string
		want time.Duration
		err  string
	}{
		{nil, 0, ""},
		{map[string]string{"WATCHDOG_USEC": "60000000"}, time.Minute, ""},
		{map[string]string{"WATCHDOG_USEC": "500000", "WATCHDOG_PID": fmt.Sprint(pid)}, 500 * time.Millisecond, ""},
		{map[string]string{"WATCHDOG_USEC": "500000", "WATCHDOG_PID": fmt.Sprint(pid + 1)}, 0, ErrOtherPID.Error()},
		{map[string]string{"WATCHDOG_USEC": "0"}, 0, "WATCHDOG_USEC"},
		{map[string]string{"WATCHDOG_USEC": "soon"}, 0, "WATCHDOG_USEC"},
		{map[string]string{"WATCHDOG_USEC": "5", "WATCHDOG_PID": "me"}, 0, "WATCHDOG_PID"},
	} {
		got, err := WatchdogInterval(env(tc.env), pid)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%v: got %v, %v; want %v, error containing %q", tc.env, got, err, tc.want, tc.err)
		}
	}
	if _, err := WatchdogInterval(env(map[string]string{"WATCHDOG_USEC": "1", "WATCHDOG_PID": "1"}), 2); !errors.Is(err, ErrOtherPID) {
		t.Fatalf("other pid: %v, want ErrOtherPID", err)
	}
}

func TestStatusIsOneBoundedLine(t *testing.T) {
	if got := Status("2 batches running\n3 queued", 100); got != "STATUS=2 batches running 3 queued" {
		t.Fatalf("got %q", got)
	}
	long := strings.Repeat("é", 300)
	got := Status(long, 101)
	if len(got)-len("STATUS=") > 101 || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Fatalf("got %d bytes %q: want at most 101 after STATUS=, valid UTF-8, ending in …", len(got)-len("STATUS="), got)
	}
}
