package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// cmdHealthcheck GETs the daemon's /healthz and exits 0 on 200, 1 otherwise:
// the container image's HEALTHCHECK, which has no curl or shell to run.
func cmdHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "", "URL to GET (default: /healthz on $BATCHD_LISTEN, else http://127.0.0.1:8080/healthz)")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "usage: batchd healthcheck [--url URL] [--timeout D]")
		return exitUsage
	}
	target := *url
	if target == "" {
		var err error
		if target, err = healthzURL(os.Getenv("BATCHD_LISTEN")); err != nil {
			return errorf(stderr, exitUsage, "healthcheck: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return errorf(stderr, exitUsage, "healthcheck: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return errorf(stderr, exitFailure, "healthcheck: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return errorf(stderr, exitFailure, "healthcheck: GET %s: %s: %s", target, resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Fprintf(stdout, "ok: GET %s: %s\n", target, resp.Status)
	return exitOK
}

// healthzURL is /healthz on the address the daemon listens on (listen:
// host:port, as BATCHD_LISTEN has it), with an unspecified host (0.0.0.0,
// ::, empty) reached on loopback.
func healthzURL(listen string) (string, error) {
	if listen == "" {
		return "http://127.0.0.1:8080/healthz", nil
	}
	if listen == "off" {
		return "", fmt.Errorf("BATCHD_LISTEN is off: the daemon serves no HTTP; give --url")
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("BATCHD_LISTEN=%q: %w; give --url", listen, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz", nil
}
