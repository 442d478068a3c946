// Package fsx holds the few file operations batchd needs to be durable:
// replacing a file atomically, copying one, and making a directory's
// entries durable; and resolving a path a request names inside a configured
// root directory (Under). RELIABILITY.md: write temp → fsync → rename → fsync the
// directory; an fsync error is final for that file.
package fsx

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// MkdirAll creates dir and every missing parent, as os.MkdirAll does, and
// makes each directory it creates durable: the directory that holds it is
// fsynced, so that a power cut never takes away a folder whose files were
// made durable.
func MkdirAll(dir string, perm os.FileMode) error {
	if st, err := os.Stat(dir); err == nil {
		if st.IsDir() {
			return nil
		}
		return fmt.Errorf("create dir %s: %w", dir, syscall.ENOTDIR)
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil {
		// Another creator raced this one: the directory is its to make
		// durable, but syncing the parent again costs little and makes
		// sure of it before this caller relies on it.
		if st, serr := os.Stat(dir); !errors.Is(err, os.ErrExist) || serr != nil || !st.IsDir() {
			return fmt.Errorf("create dir %s: %w", dir, err)
		}
	}
	return SyncDir(parent)
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

// CopyFile copies src to dst (created or truncated; a link there is an
// error) and fsyncs dst.
func CopyFile(src, dst string) error { return CopyPrefix(src, dst, -1) }

// CopyPrefix copies the first n bytes of src (all of it when n < 0) to dst
// (created or truncated; a link there is an error) and fsyncs dst.
func CopyPrefix(src, dst string, n int64) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer in.Close()
	// O_NOFOLLOW: a link someone planted at dst is an error, never a way
	// to write outside the data directory.
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
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

// ErrNotRegular is an entry batchd will not read: a symbolic link, a FIFO,
// a socket, a device or a directory.
var ErrNotRegular = errors.New("not a regular file")

// OpenRegular opens a file batchd reads from a user's folder (an input, an
// options file) and refuses anything but a regular file: it follows no
// symbolic link, whose target may lie outside the data directory, and never
// blocks on a FIFO.
func OpenRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("open %s: %w: a symbolic link (batchd follows none)", path, ErrNotRegular)
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
		return nil, fmt.Errorf("open %s: %w (%s)", path, ErrNotRegular, st.Mode().Type())
	}
	return f, nil
}

// ReadRegular reads the whole regular file at path (OpenRegular).
func ReadRegular(path string) ([]byte, error) {
	f, err := OpenRegular(path)
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

// ErrLink is the error for a symbolic link where batchd keeps its own
// files and folders (a data directory's inbox/, outbox/, state/ and what
// state/ holds): batchd follows none there, so that nothing outside the
// data directory is read or written through one.
var ErrLink = errors.New("is a symbolic link; batchd follows no link among its own files and folders (remove it)")

// OpenNoFollow opens path as os.OpenFile does, but not through a symbolic
// link at path itself (O_NOFOLLOW): a link there, even a dangling one, is
// an error wrapping ErrLink that names path. Links in the folders above
// path are followed; NoLink checks those batchd owns when it starts.
func OpenNoFollow(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW, perm)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s %w", path, ErrLink)
	}
	return f, err
}

// NoLink returns an error wrapping ErrLink that names path when path is
// a symbolic link, nil when it is anything else or does not exist.
func NoLink(path string) error {
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("check %s: %w", path, err)
	case st.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%s %w", path, ErrLink)
	}
	return nil
}

// ErrOutsideRoot is Under's error for a path that resolves outside its root.
var ErrOutsideRoot = errors.New("outside the root directory")

// Under resolves loc under root, as a daemon reads files a request names:
// a relative loc is relative to root, symlinks are followed, and the result
// must lie inside root (itself resolved). It returns root's real path and
// loc's path relative to it, for os.OpenRoot(realRoot).Open(rel), which
// also refuses a symlink swapped in after this check. A loc that does not
// exist is an error wrapping fs.ErrNotExist; one outside root wraps
// ErrOutsideRoot.
func Under(root, loc string) (realRoot, rel string, err error) {
	realRoot, err = filepath.EvalSymlinks(root)
	if err != nil {
		return "", "", fmt.Errorf("root %s: %w", root, err)
	}
	path := loc
	if !filepath.IsAbs(path) {
		path = filepath.Join(root, path)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", "", err
	}
	rel, err = filepath.Rel(realRoot, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", "", ErrOutsideRoot
	}
	return realRoot, rel, nil
}
