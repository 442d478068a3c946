package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/openai/openaitest"
)

// notifySocket is a datagram socket the test owns, standing in for systemd's
// NOTIFY_SOCKET; a reader goroutine hands its datagrams to msgs.
type notifySocket struct {
	path string
	msgs chan string
}

func newNotifySocket(t *testing.T) *notifySocket {
	t.Helper()
	dir, err := os.MkdirTemp("", "sdn") // short: socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &notifySocket{path: filepath.Join(dir, "notify"), msgs: make(chan string, 1024)}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: s.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				close(s.msgs)
				return
			}
			s.msgs <- string(buf[:n])
		}
	}()
	return s
}

// await reads datagrams until one satisfies ok and returns those read, the
// matching one last; it fails the test after a generous deadline.
func (s *notifySocket) await(t *testing.T, what string, p *proc, ok func(string) bool) []string {
	t.Helper()
	var seen []string
	deadline := time.After(60 * time.Second)
	for {
		select {
		case m := <-s.msgs:
			seen = append(seen, m)
			if ok(m) {
				return seen
			}
		case <-p.exited:
			t.Fatalf("batchd exited waiting for %s; datagrams %q\n%s", what, seen, logTail(p.log))
		case <-deadline:
			t.Fatalf("no %s within 60s; datagrams %q\n%s", what, seen, logTail(p.log))
		}
	}
}

func count(msgs []string, m string) int {
	n := 0
	for _, x := range msgs {
		if x == m {
			n++
		}
	}
	return n
}

// `batchd run` under Type=notify: READY=1 once it serves (/readyz answers at
// that moment, no polling), STATUS with the batch running and its progress,
// WATCHDOG=1 only when WATCHDOG_USEC is set for its pid, STOPPING=1 as it
// shuts down on SIGTERM.
func TestSystemdNotify(t *testing.T) {
	bin := needBinary(t)
	for _, tc := range []struct {
		name string
		env  []string
		pets bool
	}{
		{"watchdog", []string{"WATCHDOG_USEC=400000"}, true},
		{"no watchdog", []string{"WATCHDOG_USEC=", "WATCHDOG_PID="}, false},
		{"another pid's watchdog", []string{"WATCHDOG_USEC=400000", "WATCHDOG_PID=1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The first request is answered; the others hang until
			// shutdown, so the batch stays running at 1/3.
			srv, root, cfgPath := crashFixture(t, func(n int64, r *http.Request, body []byte) openaitest.Fault {
				return openaitest.Fault{Hang: n > 1}
			})
			sock := newNotifySocket(t)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			data := filepath.Join(root, "data")
			env := append([]string{"NOTIFY_SOCKET=" + sock.path}, tc.env...)
			p := startBatchdCmd(t, bin, filepath.Join(root, "batchd.log"), env, "run", "--config", cfgPath,
				"--data", data, "--engine", "openai", "--openai-url", srv.URL(), "--listen", addr)

			seen := sock.await(t, "READY=1", p, func(m string) bool { return m == "READY=1" })
			if len(seen) != 1 {
				t.Fatalf("datagrams before READY=1: %q", seen[:len(seen)-1])
			}
			resp, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				t.Fatalf("/readyz right after READY=1: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("/readyz right after READY=1: %s", resp.Status)
			}

			placeInput(t, filepath.Join(data, "inbox"), "slow.jsonl", []byte(chatBatch(3, "r")))
			want := "STATUS=1 batch running: slow 1/3; 0 queued"
			seen = append(seen, sock.await(t, want, p, func(m string) bool { return m == want })...)
			if tc.pets {
				pets := count(seen, "WATCHDOG=1")
				seen = append(seen, sock.await(t, "three WATCHDOG=1", p, func(m string) bool {
					if m == "WATCHDOG=1" {
						pets++
					}
					return pets >= 3
				})...)
			}

			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			seen = append(seen, sock.await(t, "STOPPING=1", p, func(m string) bool { return m == "STOPPING=1" })...)
			select {
			case <-p.exited:
			case <-time.After(60 * time.Second):
				t.Fatalf("batchd did not exit within 60s of SIGTERM\n%s", logTail(p.log))
			}
			if p.err != nil {
				t.Fatalf("exit after SIGTERM: %v\n%s", p.err, logTail(p.log))
			}
			if n := count(seen, "STOPPING=1"); n != 1 {
				t.Errorf("STOPPING=1 sent %d times", n)
			}
			if n := count(seen, "READY=1"); n != 1 {
				t.Errorf("READY=1 sent %d times", n)
			}
			if n := count(seen, "WATCHDOG=1"); !tc.pets && n > 0 {
				t.Errorf("WATCHDOG=1 sent %d times with %q", n, tc.env)
			}
			for _, m := range seen {
				if strings.HasPrefix(m, "STATUS=") && len(m) > len("STATUS=")+256 {
					t.Errorf("STATUS longer than 256 bytes: %q", m)
				}
			}
		})
	}
}
