package pipeline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/batchd/batchd/internal/fsx"
)

// publish places src at dst atomically: a hard link (or, across filesystems,
// a copy) under a temporary name beside dst, fsynced, then renamed over dst.
// The caller fsyncs dst's directory.
func publish(src, dst string) error {
	if si, err := os.Stat(src); err == nil {
		if di, err := os.Stat(dst); err == nil && os.SameFile(si, di) {
			return nil // already published (a re-run after a crash in finalize)
		}
	}
	dir, base := filepath.Split(dst)
	tmp := filepath.Join(dir, "."+base+".tmp")
	os.Remove(tmp)
	if err := os.Link(src, tmp); err != nil {
		if !errors.Is(err, syscall.EXDEV) && !errors.Is(err, syscall.EPERM) {
			return fmt.Errorf("link %s: %w", src, err)
		}
		if err := fsx.CopyFile(src, tmp); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	// Renaming a link over another link to the same file does nothing and
	// leaves the temporary name behind.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", tmp, err)
	}
	return nil
}

// moveFile renames src to dst (replacing dst), making both directories durable.
func moveFile(src, dst string) error {
	if err := os.Rename(src, dst); err != nil {
		return fmt.Errorf("move %s: %w", src, err)
	}
	if err := fsx.SyncDir(filepath.Dir(dst)); err != nil {
		return err
	}
	return fsx.SyncDir(filepath.Dir(src))
}
