package pipeline

import (
	"errors"
	"fmt"
	"io"
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

// openInput opens a file batchd reads from a user's folder (an input, an
// options file) and refuses anything but a regular file: it follows no
// symbolic link, whose target may lie outside the data directory, and never
// blocks on a FIFO.
func openInput(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("open %s: %w: a symbolic link (batchd follows none)", path, errNotRegular)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open %s: %w (%s)", path, errNotRegular, st.Mode().Type())
	}
	return f, nil
}

var errNotRegular = errors.New("not a regular file")

// readRegular reads the whole regular file at path (openInput).
func readRegular(path string) ([]byte, error) {
	f, err := openInput(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return raw, nil
}
