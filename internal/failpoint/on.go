//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Enabled reports whether the points are compiled in.
const Enabled = true

// armed is the point BATCHD_FAILPOINT arms (nil: none).
var armed = func() *point {
	spec := os.Getenv(Env)
	if spec == "" {
		return nil
	}
	p, err := parse(spec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "batchd: %s=%q: %v\n", Env, spec, err)
		os.Exit(2)
	}
	return p
}()

type point struct {
	name   string
	at     int64
	action string
	hits   atomic.Int64
}

// parse reads NAME[:N][=ACTION].
func parse(spec string) (*point, error) {
	p := &point{at: 1, action: "crash"}
	spec, action, ok := strings.Cut(spec, "=")
	if ok {
		p.action = action
	}
	switch p.action {
	case "crash", "panic", "eio", "enospc":
	default:
		return nil, fmt.Errorf("unknown action %q (crash, panic, eio or enospc)", p.action)
	}
	name, n, ok := strings.Cut(spec, ":")
	if ok {
		at, err := strconv.ParseInt(n, 10, 64)
		if err != nil || at < 1 {
			return nil, fmt.Errorf("hit count %q: want a whole number from 1", n)
		}
		p.at = at
	}
	for _, known := range Names {
		if name == known {
			p.name = name
			return p, nil
		}
	}
	return nil, fmt.Errorf("unknown failpoint %q (one of %s)", name, strings.Join(Names, ", "))
}

// Inject acts as BATCHD_FAILPOINT says when it arms name: it kills the
// process, panics, or returns the error the step must treat as its own.
func Inject(name string) error {
	p := armed
	if p == nil || p.name != name {
		return nil
	}
	hit := p.hits.Add(1)
	if hit != p.at {
		return nil
	}
	fmt.Fprintf(os.Stderr, "batchd failpoint %s: %s (hit %d)\n", name, p.action, hit)
	switch p.action {
	case "panic":
		panic("failpoint " + name)
	case "eio":
		return fmt.Errorf("failpoint %s: %w", name, syscall.EIO)
	case "enospc":
		return fmt.Errorf("failpoint %s: %w", name, syscall.ENOSPC)
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
