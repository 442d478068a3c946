package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// fakeSpace stands in for statfs: the free space of a real file system
// cannot be set from a test without a mount (cmd/batchd's tmpfs test does
// that end to end).
type fakeSpace struct {
	mu          sync.Mutex
	free, total uint64
}

func (f *fakeSpace) stat(string) (uint64, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.free, f.total, nil
}

func (f *fakeSpace) set(free uint64) {
	f.mu.Lock()
	f.free = free
	f.mu.Unlock()
}

func TestDiskGuardPausesAndResumesWithHysteresis(t *testing.T) {
	cfg := DefaultConfig(t.TempDir())
	space := &fakeSpace{free: 0, total: 1 << 30}
	g := newDiskGuard(cfg, slog.New(slog.DiscardHandler))
	g.free = space.stat

	if err := g.wait(context.Background()); err != nil {
		t.Fatalf("wait before any pause: %v", err)
	}
	err := fmt.Errorf("write results: %w", &fs.PathError{Op: "write", Path: "/data/state/x", Err: syscall.ENOSPC})
	if !isENOSPC(err) {
		t.Fatal("a wrapped ENOSPC is not recognised")
	}
	if !g.markFull(err) || g.markFull(err) {
		t.Fatal("markFull must report a new pause once")
	}
	if st := g.state(); !st.Full || st.Pauses != 1 || st.Since.IsZero() {
		t.Fatalf("state after ENOSPC = %+v, want full, 1 pause", st)
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.wait(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait while full = %v, want it to block until ctx ends", err)
	}
	// 1% of 1 GiB (10.7 MiB) is less than 64 MiB: that is the bar.
	for _, free := range []uint64{0, 4096, 10 << 20} {
		space.set(free)
		g.check()
		if !g.state().Full {
			t.Fatalf("resumed with %d bytes free, below 1%% of the disk", free)
		}
	}
	space.set(11 << 20)
	g.check()
	if st := g.state(); st.Full || st.Pauses != 1 {
		t.Fatalf("state with 11 MiB free = %+v, want resumed", st)
	}
	if err := g.wait(cancelled); err != nil {
		t.Fatalf("wait after space returned: %v", err)
	}
	// A second pause counts again and blocks again.
	if !g.markFull(err) || g.state().Pauses != 2 {
		t.Fatalf("second pause: %+v", g.state())
	}
}

func TestDiskConfigRefusesBadValues(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"disk_resume_free_bytes":   func(c *Config) { c.DiskResumeFreeBytes = -1 },
		"disk_resume_free_percent": func(c *Config) { c.DiskResumeFreePercent = 101 },
		"disk_check_interval":      func(c *Config) { c.DiskCheckInterval = 0 },
	} {
		c := DefaultConfig("state")
		mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: Validate = %v, want an error naming the field", name, err)
		}
	}
}
