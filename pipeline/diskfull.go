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
	"time"
)

// ErrDiskFull is the cause of a run stopped, or not started, because a
// write of the data directory failed with ENOSPC. Nothing of the batch is
// written as failed: it stopped at its last durable commit and resumes,
// in the same process, once space returns (Pipeline.WaitForSpace).
var ErrDiskFull = errors.New("disk full: intake paused")

// DiskState is the disk-full pause as operators see it.
type DiskState struct {
	// Full is true while intake is paused for a full disk.
	Full bool
	// Since is when the current pause began (zero when not full).
	Since time.Time
	// Pauses counts the pauses since the pipeline opened.
	Pauses int64
}

// diskGuard holds the disk-full pause: a write that fails with ENOSPC
// marks the disk full; a check every interval clears it once each watched
// directory has room again (hysteresis: at least resumeBytes, or
// resumePercent of its file system, free), so one freed block does not
// start batches that fail at once.
type diskGuard struct {
	dirs          []string
	resumeBytes   int64
	resumePercent float64
	interval      time.Duration
	log           *slog.Logger
	// free reports a directory's free and total bytes (statfs).
	free func(dir string) (free, total uint64, err error)

	mu     sync.Mutex
	full   bool
	since  time.Time
	pauses int64
	room   chan struct{} // closed when space returns; replaced at each pause
}

func newDiskGuard(cfg Config, log *slog.Logger) *diskGuard {
	dirs := append([]string{cfg.StateDir}, cfg.DiskDirs...)
	g := &diskGuard{dirs: dirs, resumeBytes: cfg.DiskResumeFreeBytes, resumePercent: cfg.DiskResumeFreePercent,
		interval: cfg.DiskCheckInterval, log: log, free: statfsFree, room: make(chan struct{})}
	close(g.room)
	return g
}

// statfsFree reports the bytes free to an unprivileged writer and the size
// of dir's file system.
func statfsFree(dir string) (free, total uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}

// isENOSPC reports whether err says a disk is full.
func isENOSPC(err error) bool { return errors.Is(err, syscall.ENOSPC) }

// markFull pauses intake after err, a write that failed with ENOSPC. It
// reports whether the pause began now (it logs once per pause).
func (g *diskGuard) markFull(err error) bool {
	g.mu.Lock()
	if g.full {
		g.mu.Unlock()
		return false
	}
	g.full, g.since = true, time.Now()
	g.pauses++
	g.room = make(chan struct{})
	g.mu.Unlock()
	attrs := []any{"error", err}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		attrs = append(attrs, "file", pe.Path)
	}
	attrs = append(attrs, g.freeAttrs()...)
	g.log.Warn("disk full: intake paused; running batches stop at their last commit with nothing marked failed; they resume without a restart once space returns",
		append(attrs, "resume_free_bytes", g.resumeBytes, "resume_free_percent", g.resumePercent)...)
	return true
}

// freeAttrs are log attributes with each watched directory's free space.
func (g *diskGuard) freeAttrs() []any {
	var parts []string
	for _, dir := range g.dirs {
		free, total, err := g.free(dir)
		if err != nil {
			parts = append(parts, err.Error())
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: %d of %d bytes", dir, free, total))
	}
	return []any{"free", strings.Join(parts, "; ")}
}

// hasRoom reports whether every watched directory has the free space to
// resume.
func (g *diskGuard) hasRoom() bool {
	for _, dir := range g.dirs {
		free, total, err := g.free(dir)
		if err != nil {
			g.log.Warn("disk full: cannot read free space", "error", err)
			return false
		}
		need := uint64(g.resumeBytes)
		if pct := uint64(float64(total) * g.resumePercent / 100); pct < need {
			need = pct
		}
		if free < need || free == 0 {
			return false
		}
	}
	return true
}

// check resumes intake if space has returned.
func (g *diskGuard) check() {
	g.mu.Lock()
	full := g.full
	g.mu.Unlock()
	if !full || !g.hasRoom() {
		return
	}
	g.mu.Lock()
	g.full, g.since = false, time.Time{}
	close(g.room)
	g.mu.Unlock()
	g.log.Info("disk space returned: intake resumes", g.freeAttrs()...)
}

// loop checks every interval until ctx ends.
func (g *diskGuard) loop(ctx context.Context) {
	t := time.NewTicker(g.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.check()
		}
	}
}

func (g *diskGuard) state() DiskState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return DiskState{Full: g.full, Since: g.since, Pauses: g.pauses}
}

// wait returns once the disk is not full, or with ctx's error.
func (g *diskGuard) wait(ctx context.Context) error {
	g.mu.Lock()
	room := g.room
	g.mu.Unlock()
	select {
	case <-room:
		return nil // before ctx: a caller with space never waits
	default:
	}
	select {
	case <-room:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// DiskState reports the disk-full pause.
func (p *Pipeline) DiskState() DiskState { return p.disk.state() }

// WaitForSpace returns at once unless intake is paused for a full disk;
// then it returns once space has returned, or with ctx's error. Callers
// that start batches wait here: Run refuses to start one while the disk
// is full (ErrDiskFull).
func (p *Pipeline) WaitForSpace(ctx context.Context) error { return p.disk.wait(ctx) }

// diskFull pauses intake after err (an ENOSPC) and stops every running
// batch at its last durable commit, as at shutdown.
func (p *Pipeline) diskFull(err error) {
	if !p.disk.markFull(err) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.running {
		r.stopRun(ErrDiskFull)
	}
}
