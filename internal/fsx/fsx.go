// Package fsx holds the few file operations batchd needs to be durable:
// replacing a file atomically, copying one, and making a directory's
// entries durable. RELIABILITY.md: write temp → fsync → rename → fsync the
// directory; an fsync error is final for that file.
package fsx

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// SyncDir fsyncs a directory so that renames and creations in it are durable.
func SyncDir(dir string) error {
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

// WriteFile replaces path with data through a temporary file beside it
// (".BASE-*.tmp", unique, so concurrent writers never share one), renamed
// over path; with durable, the file is fsynced before the rename and the
// directory after it.
func WriteFile(path string, data []byte, durable bool) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+"-*.tmp")
	if err != nil {
		return fmt.Errorf("create temp for %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if durable {
		return SyncDir(dir)
	}
	return nil
}

// CopyFile copies src to dst (created or truncated) and fsyncs dst.
func CopyFile(src, dst string) error { return CopyPrefix(src, dst, -1) }

// CopyPrefix copies the first n bytes of src (all of it when n < 0) to dst
// (created or truncated) and fsyncs dst.
func CopyPrefix(src, dst string, n int64) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", dst, err)
	}
	var r io.Reader = in
	if n >= 0 {
		r = io.LimitReader(in, n)
	}
	if c, err := io.Copy(out, r); err == nil && n >= 0 && c < n {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, io.ErrUnexpectedEOF)
	} else if err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return fmt.Errorf("sync %s: %w", dst, err)
	}
	return out.Close()
}
