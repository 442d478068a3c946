package lazyfs

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is the FUSE side of a record: a go-fuse inode whose StableAttr.Ino
// is the record's id, so identity follows the record, never the name.
type node struct {
	fs.Inode
	lfs *FS
}

// handle is an open regular file.
type handle struct {
	rec  *record
	file *os.File // on the backing file
}

// A directory's FSYNCDIR reaches Fsync below: go-fuse's bridge (fs/bridge.go,
// rawBridge.FsyncDir) asks the directory handle for FileFsyncdirer first,
// and the handle it makes for NodeReaddirer streams (dirStreamAsFile) has
// none, so it falls back to the node's NodeFsyncer.
var (
	_ fs.NodeStatfser   = (*node)(nil)
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeReadlinker = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeReader     = (*node)(nil)
	_ fs.NodeWriter     = (*node)(nil)
	_ fs.NodeFsyncer    = (*node)(nil)
	_ fs.NodeReleaser   = (*node)(nil)
	_ fs.NodeAllocater  = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeMknoder    = (*node)(nil)
	_ fs.NodeLinker     = (*node)(nil)
	_ fs.NodeSymlinker  = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeRenamer    = (*node)(nil)
)

// path is the node's backing path. An orphaned node (unlinked, reached
// through a handle) gets go-fuse's placeholder, which does not exist.
func (n *node) path() string {
	return filepath.Join(n.lfs.backing, n.Path(n.Root()))
}

func (n *node) child(name string) string { return filepath.Join(n.path(), name) }

// rec returns the node's record. Caller holds mu.
func (n *node) rec() *record { return n.lfs.recs[n.StableAttr().Ino] }

// newChild makes the inode of a record just looked up or made, and fills
// out with st. Caller holds mu.
func (n *node) newChild(ctx context.Context, r *record, st *syscall.Stat_t, out *fuse.EntryOut) *fs.Inode {
	out.Attr.FromStat(st)
	out.Attr.Ino = r.id
	return n.NewInode(ctx, &node{lfs: n.lfs}, fs.StableAttr{Mode: r.typ, Ino: r.id})
}

// entry lstats a name just made in n and registers its record.
func (n *node) entry(ctx context.Context, p string, fresh bool, out *fuse.EntryOut) (*fs.Inode, *record, syscall.Errno) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, nil, fs.ToErrno(err)
	}
	r := n.lfs.recordOf(&st, fresh)
	return n.newChild(ctx, r, &st, out), r, 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var s syscall.Statfs_t
	if err := syscall.Statfs(n.lfs.backing, &s); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStatfsT(&s)
	return 0
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.lfs.mu.Lock()
	defer n.lfs.mu.Unlock()
	ch, _, e := n.entry(ctx, n.child(name), false, out)
	return ch, e
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	var err error
	if h, ok := fh.(*handle); ok {
		err = syscall.Fstat(int(h.file.Fd()), &st)
	} else {
		err = syscall.Lstat(n.path(), &st)
	}
	if err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	out.Ino = n.StableAttr().Ino
	return 0
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	h, _ := fh.(*handle)
	if size, ok := in.GetSize(); ok {
		if e := n.truncate(h, int64(size)); e != 0 {
			return e
		}
	}
	if n.lfs.frozen.Load() {
		return syscall.EIO // it would change the backing file
	}
	// Through a handle, go by /proc (which follows to the file, even an
	// unlinked one); by path, never follow a symlink.
	p, follow := n.path(), false
	if h != nil {
		p, follow = procPath(h.file), true
	}
	if mode, ok := in.GetMode(); ok && n.StableAttr().Mode != syscall.S_IFLNK {
		if err := syscall.Chmod(p, mode); err != nil {
			return fs.ToErrno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		u, g := -1, -1
		if uok {
			u = int(uid)
		}
		if gok {
			g = int(gid)
		}
		chown := os.Lchown
		if follow {
			chown = os.Chown
		}
		if err := chown(p, u, g); err != nil {
			return fs.ToErrno(err)
		}
	}
	at, aok := in.GetATime()
	mt, mok := in.GetMTime()
	if aok || mok {
		ts := [2]unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if aok {
			ts[0] = unix.NsecToTimespec(at.UnixNano())
		}
		if mok {
			ts[1] = unix.NsecToTimespec(mt.UnixNano())
		}
		flags := unix.AT_SYMLINK_NOFOLLOW
		if follow {
			flags = 0
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts[:], flags); err != nil {
			return fs.ToErrno(err)
		}
	}
	return n.Getattr(ctx, fh, out)
}

// truncate is the counted op of setting a file's size.
func (n *node) truncate(h *handle, size int64) syscall.Errno {
	f := n.lfs
	if e := f.begin(); e != 0 {
		return e
	}
	defer f.mu.Unlock()
	r := n.rec()
	if h != nil {
		r = h.rec
	}
	src := func() (*os.File, error) { return os.Open(n.path()) }
	if h != nil {
		src = func() (*os.File, error) { return reopen(h.file) }
	}
	if err := f.ensureShadow(r, src); err != nil {
		return fs.ToErrno(err)
	}
	var err error
	if h != nil {
		err = h.file.Truncate(size)
	} else {
		err = os.Truncate(n.path(), size)
	}
	if err != nil {
		return fs.ToErrno(err)
	}
	r.minSize = min(r.minSize, size)
	return 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	t, err := os.Readlink(n.path())
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return []byte(t), 0
}

// backingFlags are the open flags to use on the backing file: O_APPEND goes
// (the kernel computes the offset of every write) and so does O_DIRECT
// (FUSE writes arrive unaligned).
func backingFlags(flags uint32) int {
	return int(flags) &^ (syscall.O_APPEND | syscall.O_DIRECT | syscall.O_CREAT | syscall.O_EXCL | syscall.O_NOCTTY)
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	f := n.lfs
	trunc := flags&syscall.O_TRUNC != 0
	if trunc {
		if e := f.begin(); e != 0 {
			return nil, 0, e
		}
	} else {
		f.mu.Lock()
	}
	defer f.mu.Unlock()
	r := n.rec()
	p := n.path()
	if r.isFile() && (trunc || flags&syscall.O_ACCMODE != syscall.O_RDONLY) {
		if err := f.ensureShadow(r, func() (*os.File, error) { return os.Open(p) }); err != nil {
			return nil, 0, fs.ToErrno(err)
		}
	}
	file, err := os.OpenFile(p, backingFlags(flags), 0)
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	if trunc {
		r.minSize = 0
	}
	h := &handle{rec: r, file: file}
	f.handles[h] = struct{}{}
	return h, 0, 0
}

func (n *node) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, ok := fh.(*handle)
	if !ok {
		return nil, syscall.EBADF
	}
	got, err := h.file.ReadAt(dest, off)
	if err != nil && err != io.EOF {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(dest[:got]), 0
}

func (n *node) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	h, ok := fh.(*handle)
	if !ok {
		return 0, syscall.EBADF
	}
	f := n.lfs
	if e := f.begin(); e != 0 {
		return 0, e
	}
	defer f.mu.Unlock()
	if err := f.ensureShadow(h.rec, func() (*os.File, error) { return reopen(h.file) }); err != nil {
		return 0, fs.ToErrno(err)
	}
	wrote, err := h.file.WriteAt(data, off)
	h.rec.dirty = h.rec.dirty.add(off, off+int64(wrote))
	if err != nil {
		return uint32(wrote), fs.ToErrno(err)
	}
	return uint32(wrote), 0
}

func (n *node) Allocate(ctx context.Context, fh fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	h, ok := fh.(*handle)
	if !ok {
		return syscall.EBADF
	}
	f := n.lfs
	if e := f.begin(); e != 0 {
		return e
	}
	defer f.mu.Unlock()
	if err := f.ensureShadow(h.rec, func() (*os.File, error) { return reopen(h.file) }); err != nil {
		return fs.ToErrno(err)
	}
	if err := unix.Fallocate(int(h.file.Fd()), mode, int64(off), int64(size)); err != nil {
		return fs.ToErrno(err)
	}
	h.rec.dirty = h.rec.dirty.add(int64(off), int64(off+size))
	return 0
}

// Fsync makes a file's data and size durable, or, for a directory
// (FSYNCDIR, see above), its entries.
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	f := n.lfs
	if e := f.begin(); e != 0 {
		return e
	}
	defer f.mu.Unlock()
	r := n.rec()
	if h, ok := fh.(*handle); ok {
		r = h.rec
		src, err := reopen(h.file)
		if err != nil {
			return fs.ToErrno(err)
		}
		defer src.Close()
		return fs.ToErrno(f.syncFile(r, src))
	}
	if r.isDir() {
		return fs.ToErrno(f.syncDir(r, n.path()))
	}
	src, err := os.Open(n.path())
	if err != nil {
		return fs.ToErrno(err)
	}
	defer src.Close()
	return fs.ToErrno(f.syncFile(r, src))
}

func (n *node) Release(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	h, ok := fh.(*handle)
	if !ok {
		return 0
	}
	f := n.lfs
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, open := f.handles[h]; open {
		delete(f.handles, h)
		h.file.Close()
	}
	return 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	ents, err := os.ReadDir(n.path())
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	list := make([]fuse.DirEntry, 0, len(ents))
	f := n.lfs
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			continue // gone since the listing
		}
		st := info.Sys().(*syscall.Stat_t)
		ino := st.Ino
		if r := f.byIno[ino]; r != nil {
			ino = r.id
		}
		list = append(list, fuse.DirEntry{Name: e.Name(), Mode: st.Mode & syscall.S_IFMT, Ino: ino})
	}
	return fs.NewListDirStream(list), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f := n.lfs
	if e := f.begin(); e != 0 {
		return nil, e
	}
	defer f.mu.Unlock()
	p := n.child(name)
	if err := syscall.Mkdir(p, mode); err != nil {
		return nil, fs.ToErrno(err)
	}
	ch, _, e := n.entry(ctx, p, true, out)
	return ch, e
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f := n.lfs
	if e := f.begin(); e != 0 {
		return nil, e
	}
	defer f.mu.Unlock()
	p := n.child(name)
	if err := syscall.Mknod(p, mode, int(rdev)); err != nil {
		return nil, fs.ToErrno(err)
	}
	ch, _, e := n.entry(ctx, p, true, out)
	return ch, e
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f := n.lfs
	if e := f.begin(); e != 0 {
		return nil, e
	}
	defer f.mu.Unlock()
	p := n.child(name)
	if err := os.Symlink(target, p); err != nil {
		return nil, fs.ToErrno(err)
	}
	ch, r, e := n.entry(ctx, p, true, out)
	if r != nil {
		r.target = target
	}
	return ch, e
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	f := n.lfs
	if e := f.begin(); e != 0 {
		return nil, e
	}
	defer f.mu.Unlock()
	p := n.child(name)
	if err := os.Link(t.path(), p); err != nil {
		return nil, fs.ToErrno(err)
	}
	ch, _, e := n.entry(ctx, p, false, out)
	return ch, e
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	f := n.lfs
	if e := f.begin(); e != 0 {
		return nil, nil, 0, e
	}
	defer f.mu.Unlock()
	p := n.child(name)
	// The kernel creates only names it found missing; should one have
	// appeared since, keep its durable content before opening it.
	var st syscall.Stat_t
	if flags&syscall.O_EXCL == 0 && syscall.Lstat(p, &st) == nil {
		if r := f.byIno[st.Ino]; r != nil {
			if err := f.ensureShadow(r, func() (*os.File, error) { return os.Open(p) }); err != nil {
				return nil, nil, 0, fs.ToErrno(err)
			}
		}
	}
	file, err := os.OpenFile(p, backingFlags(flags)|os.O_CREATE, os.FileMode(mode&0o777))
	if err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	if err := syscall.Fstat(int(file.Fd()), &st); err != nil {
		file.Close()
		return nil, nil, 0, fs.ToErrno(err)
	}
	r := f.recordOf(&st, flags&syscall.O_EXCL != 0)
	if flags&syscall.O_TRUNC != 0 {
		r.minSize = 0
	}
	h := &handle{rec: r, file: file}
	f.handles[h] = struct{}{}
	return n.newChild(ctx, r, &st, out), h, 0, 0
}

// removing prepares the removal of name p's link to its node: the node's
// durable content must outlive the backing inode. It returns the record
// and whether this is the inode's last name.
func (f *FS) removing(p string) (*record, bool, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, false, err
	}
	r := f.recordOf(&st, false)
	if err := f.ensureShadow(r, func() (*os.File, error) { return os.Open(p) }); err != nil {
		return nil, false, err
	}
	return r, r.isDir() || st.Nlink <= 1, nil
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, syscall.Unlink)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, syscall.Rmdir)
}

func (n *node) remove(name string, rm func(string) error) syscall.Errno {
	f := n.lfs
	if e := f.begin(); e != 0 {
		return e
	}
	defer f.mu.Unlock()
	p := n.child(name)
	r, last, err := f.removing(p)
	if err != nil {
		return fs.ToErrno(err)
	}
	if err := rm(p); err != nil {
		return fs.ToErrno(err)
	}
	if last {
		f.forget(r)
	}
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	f := n.lfs
	if e := f.begin(); e != 0 {
		return e
	}
	defer f.mu.Unlock()
	from, to := n.child(name), np.child(newName)
	var src syscall.Stat_t
	if err := syscall.Lstat(from, &src); err != nil {
		return fs.ToErrno(err)
	}
	// A replaced target loses a name (not so in an exchange).
	var (
		old     *record
		oldLast bool
	)
	var dst syscall.Stat_t
	if flags&unix.RENAME_EXCHANGE == 0 && syscall.Lstat(to, &dst) == nil && dst.Ino != src.Ino {
		var err error
		if old, oldLast, err = f.removing(to); err != nil {
			return fs.ToErrno(err)
		}
	}
	if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, uint(flags)); err != nil {
		return fs.ToErrno(err)
	}
	if old != nil && oldLast {
		f.forget(old)
	}
	return 0
}

// ensureShadow copies a mount-time file's content into the shadow before
// its first change; src opens the current (still durable) content.
// Caller holds mu.
func (f *FS) ensureShadow(r *record, src func() (*os.File, error)) error {
	if !r.isFile() || r.shadowed {
		return nil
	}
	in, err := src()
	if err != nil {
		return fmt.Errorf("open for shadow copy: %w", err)
	}
	defer in.Close()
	return f.materialize(r, in)
}

// materialize copies in, the durable content of r, into r's shadow.
func (f *FS) materialize(r *record, in *os.File) error {
	st, err := in.Stat()
	if err != nil {
		return fmt.Errorf("shadow copy: %w", err)
	}
	out, err := os.OpenFile(f.shadow(r), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("shadow copy: %w", err)
	}
	_, err = io.Copy(out, io.NewSectionReader(in, 0, st.Size()))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("shadow copy: %w", err)
	}
	r.shadowed = true
	r.durSize, r.minSize, r.dirty = st.Size(), st.Size(), nil
	return nil
}

// syncFile makes src's current data and size r's durable content, copying
// only what changed since the last fsync. Caller holds mu.
func (f *FS) syncFile(r *record, src *os.File) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(src.Fd()), &st); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	r.perm = st.Mode & 0o7777
	r.durMtime = st.Mtim.Nano()
	if !r.isFile() || !r.shadowed {
		return nil // unchanged since Mount, or no data to keep
	}
	sh, err := os.OpenFile(f.shadow(r), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	defer sh.Close()
	// Cut to the smallest size since the last fsync (what lies beyond
	// was either rewritten, and is dirty, or zeros), then grow to the
	// current size.
	cur := st.Size
	if err := sh.Truncate(min(r.minSize, cur)); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	if err := sh.Truncate(cur); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	for _, sp := range r.dirty {
		end := min(sp.end, cur)
		if sp.start >= end {
			continue
		}
		if _, err := io.Copy(io.NewOffsetWriter(sh, sp.start), io.NewSectionReader(src, sp.start, end-sp.start)); err != nil {
			return fmt.Errorf("fsync: copy dirty range: %w", err)
		}
	}
	r.durSize, r.minSize, r.dirty = cur, cur, nil
	return nil
}

// syncDir makes a directory's current entries its durable ones.
// Caller holds mu.
func (f *FS) syncDir(r *record, dir string) error {
	names, err := readNames(dir)
	if err != nil {
		return fmt.Errorf("fsyncdir: %w", err)
	}
	entries := make(map[string]uint64, len(names))
	for _, name := range names {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, name), &st); err != nil {
			return fmt.Errorf("fsyncdir: %w", err)
		}
		entries[name] = f.recordOf(&st, false).id
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err == nil {
		r.perm = st.Mode & 0o7777
	}
	r.entries = entries
	return nil
}

func (f *FS) shadow(r *record) string {
	return filepath.Join(f.state, fmt.Sprint(r.id))
}

// procPath names an open file through /proc, which reaches it even unlinked.
func procPath(file *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", file.Fd()) }

// reopen opens an open backing file again for reading (the handle may be
// write-only).
func reopen(file *os.File) (*os.File, error) { return os.Open(procPath(file)) }
