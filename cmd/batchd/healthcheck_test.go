package main

import (
	"net"
	"strings"
	"testing"

	"github.com/batchd/batchd/daemon"
)

// TestHealthcheck runs the subcommand against a real daemon on loopback:
// healthy while it serves, a failure (exit 1) once it has stopped.
func TestHealthcheck(t *testing.T) {
	d := startDaemonWith(t, t.TempDir(), func(c *daemon.Config) { c.Listen = "127.0.0.1:0" })
	url := "http://" + d.HTTPAddr() + "/healthz"
	code, stdout, stderr := cli(t, "healthcheck", "--url", url)
	if code != exitOK || !strings.Contains(stdout, "200") {
		t.Fatalf("healthcheck on a running daemon: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// Nothing listening (a port just released): a failure.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/healthz"
	ln.Close()
	code, _, stderr = cli(t, "healthcheck", "--url", closed)
	if code != exitFailure || !strings.Contains(stderr, "healthcheck:") {
		t.Fatalf("healthcheck with nothing listening: exit %d, stderr %q; want exit 1 naming the failure", code, stderr)
	}
	// A route that is not 200 is a failure too, with the status named.
	d2 := startDaemonWith(t, t.TempDir(), func(c *daemon.Config) {
		c.Listen = "127.0.0.1:0"
		c.API.Keys = []string{"k"}
	})
	code, _, stderr = cli(t, "healthcheck", "--url", "http://"+d2.HTTPAddr()+"/metrics")
	if code != exitFailure || !strings.Contains(stderr, "401") {
		t.Fatalf("healthcheck on a 401 route: exit %d, stderr %q", code, stderr)
	}
	if code, _, _ = cli(t, "healthcheck", "extra"); code != exitUsage {
		t.Fatalf("healthcheck with an argument: exit %d, want %d", code, exitUsage)
	}
}

func TestHealthzURL(t *testing.T) {
	for listen, want := range map[string]string{
		"":               "http://127.0.0.1:8080/healthz",
		"0.0.0.0:8080":   "http://127.0.0.1:8080/healthz",
		":9090":          "http://127.0.0.1:9090/healthz",
		"[::]:8080":      "http://127.0.0.1:8080/healthz",
		"10.0.0.5:8081":  "http://10.0.0.5:8081/healthz",
		"localhost:8080": "http://localhost:8080/healthz",
	} {
		got, err := healthzURL(listen)
		if err != nil || got != want {
			t.Errorf("healthzURL(%q) = %q, %v; want %q", listen, got, err, want)
		}
	}
	for _, bad := range []string{"off", "nonsense"} {
		if _, err := healthzURL(bad); err == nil || !strings.Contains(err.Error(), "--url") {
			t.Errorf("healthzURL(%q): err %v, want one pointing at --url", bad, err)
		}
	}
}
