package pipeline

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// syncDir fsyncs a directory so that renames and creations in it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

// writeFileAtomic replaces path with data: temp file beside it, fsync when
// durable, rename, fsync the directory when durable.
func writeFileAtomic(path string, data []byte, durable bool) error {
	dir, base := filepath.Split(path)
	tmp := filepath.Join(dir, "."+base+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if durable {
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("sync %s: %w", tmp, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	if durable {
		return syncDir(dir)
	}
	return nil
}

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
		if err := copyFile(src, tmp); err != nil {
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

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return fmt.Errorf("sync %s: %w", dst, err)
	}
	return out.Close()
}

// moveFile renames src to dst (replacing dst), making both directories durable.
func moveFile(src, dst string) error {
	if err := os.Rename(src, dst); err != nil {
		return fmt.Errorf("move %s: %w", src, err)
	}
	if err := syncDir(filepath.Dir(dst)); err != nil {
		return err
	}
	return syncDir(filepath.Dir(src))
}
