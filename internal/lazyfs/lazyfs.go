// Package lazyfs is a FUSE test filesystem that loses, on a simulated power
// cut, everything that was not made durable. It passes every operation
// through to a backing directory and keeps, beside it, what a strict POSIX
// filesystem would have on disk after a crash; PowerCut rewrites the backing
// directory to exactly that. The idea is Jepsen's lazyfs; the code is ours,
// on github.com/hanwen/go-fuse.
//
// The durability rules are strict POSIX, stricter than ext4 (no
// auto_da_alloc, no ordered-data mode, no rename-over heuristics):
//
//   - Everything in the backing directory at Mount is durable.
//   - A regular file's data and size become durable when the file is
//     fsynced (fsync and fdatasync alike). Writes, truncates and
//     fallocates since the file's last fsync are dropped by a power cut;
//     with Options.Torn, each 4096-byte page they touched survives or not
//     on a coin flip of its own, and the file keeps either its durable or
//     its current size (one more coin flip per file). Pages beyond the
//     current size read back as zeros. The coins come from Options.Seed
//     and the file's node number, so one op sequence tears the same way
//     every time.
//   - A directory's entries (creates, renames, links, unlinks, mkdir,
//     rmdir, mknod, symlink) become durable only when that directory is
//     fsynced (open the directory and Sync it). Fsyncing a file does not
//     make its name durable. A rename between two directories is durable
//     on each side only once that side's directory is fsynced, so a cut can
//     leave the file at both names or at neither.
//   - Identity is by node, not by name: a name restores to the node it
//     named when its directory was last fsynced, with that node's durable
//     content, so a rename undone by a cut brings back the old name with
//     the old data. Two durable names of one node restore as a hard link.
//   - A node's permission bits, and a regular file's modification time,
//     are taken as of its creation or its last fsync (fsync makes the
//     inode durable); owners and other times are not kept (restored files
//     belong to the process that runs the FS). A directory that is
//     durable under two names (an unsynced directory rename) restores under
//     the first of them in a breadth-first walk by sorted names only.
//
// Durable file content lives in a shadow directory outside the backing one:
// a mount-time file is copied there once, before its first change, and each
// fsync copies only the ranges written since the previous one. FUSE's
// writeback cache stays off and entry and attribute timeouts are zero, so
// every write reaches the FS; mmap reads and flock (handled by the kernel)
// work. Mounting needs root or CAP_SYS_ADMIN and /dev/fuse; see Available.
//
// The package is for tests. It imports nothing of batchd.
package lazyfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Options tune a mount.
type Options struct {
	// StateDir is where the shadow copies of durable file content go, in a
	// fresh subdirectory per mount that Unmount and PowerCut remove. It
	// must lie outside the backing directory. Empty: the system's temp dir.
	StateDir string
	// Torn makes a power cut keep each unsynced page of a file, and the
	// file's current size, on a seeded coin flip instead of dropping them.
	Torn bool
	// Seed seeds the coin flips of Torn.
	Seed uint64
	// Debug logs every FUSE request (go-fuse's log, to stderr).
	Debug bool
}

// FS is a mounted lazyfs. Its methods are safe for concurrent use.
type FS struct {
	backing, mountpoint, state string
	opt                        Options
	server                     *fuse.Server

	frozen atomic.Bool
	ops    atomic.Int64

	mu      sync.Mutex // guards everything below and orders mutating ops
	recs    map[uint64]*record
	byIno   map[uint64]*record // backing inode → the live record it holds
	handles map[*handle]struct{}
	nextID  uint64
	trigger int64
	onOp    func()
	done    bool // unmounted or cut
}

// record is one node: what is durable of it, and what changed since.
type record struct {
	id     uint64
	typ    uint32 // S_IFMT bits
	perm   uint32 // permission bits as of creation or the last fsync
	rdev   uint64
	ino    uint64 // backing inode while a name reaches it; 0 once freed
	target string // a symlink's target

	// Regular files. shadowed: the durable content is the shadow file
	// (absent: empty); otherwise it is the backing content, untouched
	// since Mount.
	shadowed bool
	durSize  int64
	durMtime int64 // modification time (ns) as of Mount, creation or the last fsync
	minSize  int64 // smallest size since the last fsync
	dirty    spans // byte ranges written since the last fsync

	// Directories: the entries as of the last fsync (or Mount), name → id.
	entries map[string]uint64
}

func (r *record) isDir() bool  { return r.typ == syscall.S_IFDIR }
func (r *record) isFile() bool { return r.typ == syscall.S_IFREG }

// Mount mounts a lazyfs of backing at mountpoint (created if missing).
// Everything in backing now is durable. Neither the mountpoint nor
// Options.StateDir may lie inside backing.
func Mount(backing, mountpoint string, opt Options) (*FS, error) {
	var err error
	if backing, err = filepath.Abs(backing); err != nil {
		return nil, fmt.Errorf("lazyfs: backing dir: %w", err)
	}
	if mountpoint, err = filepath.Abs(mountpoint); err != nil {
		return nil, fmt.Errorf("lazyfs: mountpoint: %w", err)
	}
	parent := opt.StateDir
	if parent == "" {
		parent = os.TempDir()
	}
	if parent, err = filepath.Abs(parent); err != nil {
		return nil, fmt.Errorf("lazyfs: state dir: %w", err)
	}
	for _, p := range []string{mountpoint, parent} {
		if within(p, backing) {
			return nil, fmt.Errorf("lazyfs: %s lies inside the backing dir %s", p, backing)
		}
	}
	if err := os.MkdirAll(mountpoint, 0o755); err != nil {
		return nil, fmt.Errorf("lazyfs: create mountpoint: %w", err)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("lazyfs: create state dir: %w", err)
	}
	state, err := os.MkdirTemp(parent, "lazyfs-state-")
	if err != nil {
		return nil, fmt.Errorf("lazyfs: create state dir: %w", err)
	}
	f := &FS{
		backing: backing, mountpoint: mountpoint, state: state, opt: opt,
		recs: map[uint64]*record{}, byIno: map[uint64]*record{}, handles: map[*handle]struct{}{},
	}
	if err := f.scan(); err != nil {
		os.RemoveAll(state)
		return nil, err
	}
	zero := time.Duration(0)
	f.server, err = fs.Mount(mountpoint, &node{lfs: f}, &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMount:   true,
			FsName:        backing,
			Name:          "lazyfs",
			DisableXAttrs: true,
			Debug:         opt.Debug,
		},
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		RootStableAttr:  &fs.StableAttr{Ino: 1},
	})
	if err != nil {
		os.RemoveAll(state)
		return nil, fmt.Errorf("lazyfs: mount %s: %w", mountpoint, err)
	}
	return f, nil
}

func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// scan records the backing tree as durable: one record per inode, the
// root first, children in sorted order (so node numbers are reproducible).
func (f *FS) scan() error {
	var walk func(path string, st *syscall.Stat_t) (*record, error)
	walk = func(path string, st *syscall.Stat_t) (*record, error) {
		if r := f.byIno[st.Ino]; r != nil {
			return r, nil // another name of a hard-linked file
		}
		r := f.newRecord(st)
		r.shadowed = false
		if r.typ == syscall.S_IFLNK {
			t, err := os.Readlink(path)
			if err != nil {
				return nil, fmt.Errorf("lazyfs: scan: %w", err)
			}
			r.target = t
		}
		if !r.isDir() {
			return r, nil
		}
		names, err := readNames(path)
		if err != nil {
			return nil, fmt.Errorf("lazyfs: scan: %w", err)
		}
		for _, name := range names {
			var cst syscall.Stat_t
			p := filepath.Join(path, name)
			if err := syscall.Lstat(p, &cst); err != nil {
				return nil, fmt.Errorf("lazyfs: scan: lstat %s: %w", p, err)
			}
			c, err := walk(p, &cst)
			if err != nil {
				return nil, err
			}
			r.entries[name] = c.id
		}
		return r, nil
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(f.backing, &st); err != nil {
		return fmt.Errorf("lazyfs: backing dir: %w", err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return fmt.Errorf("lazyfs: backing %s is not a directory", f.backing)
	}
	_, err := walk(f.backing, &st)
	return err
}

// readNames lists a directory, sorted.
func readNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

// newRecord registers a record for a backing inode new to the FS: a node
// made through the mount, durable nowhere yet, its durable content empty.
// The caller holds mu (or is Mount).
func (f *FS) newRecord(st *syscall.Stat_t) *record {
	f.nextID++
	r := &record{
		id: f.nextID, typ: st.Mode & syscall.S_IFMT, perm: st.Mode & 0o7777, rdev: st.Rdev,
		ino: st.Ino, shadowed: true, durMtime: st.Mtim.Nano(),
	}
	if r.isDir() {
		r.entries = map[string]uint64{}
	}
	f.recs[r.id] = r
	f.byIno[st.Ino] = r
	return r
}

// recordOf returns the record of a backing inode, registering it if new.
// fresh: the inode was just made (mkdir, mknod, symlink, exclusive
// create), so a record still mapped to its number is stale. Caller holds mu.
func (f *FS) recordOf(st *syscall.Stat_t, fresh bool) *record {
	if r := f.byIno[st.Ino]; r != nil && !fresh && r.typ == st.Mode&syscall.S_IFMT {
		return r
	}
	return f.newRecord(st)
}

// forget unmaps a record whose backing inode lost its last name; the
// record itself stays, for the durable state may still name it.
func (f *FS) forget(r *record) {
	if r.ino != 0 && f.byIno[r.ino] == r {
		delete(f.byIno, r.ino)
	}
	r.ino = 0
}

// begin starts a mutating op: it takes mu, counts the op, and fires OnOp's
// trigger. A non-zero errno means the FS is frozen and mu is not held.
func (f *FS) begin() syscall.Errno {
	f.mu.Lock()
	if f.frozen.Load() {
		f.mu.Unlock()
		return syscall.EIO
	}
	if n := f.ops.Add(1); n == f.trigger {
		f.frozen.Store(true)
		fn := f.onOp
		f.onOp = nil
		f.mu.Unlock()
		if fn != nil {
			// Not inline: the process whose op this is cannot die (say, from
			// fn's SIGKILL) until the op is answered.
			go fn()
		}
		return syscall.EIO
	}
	return 0
}

// Ops returns how many mutating ops the FS has seen since Mount: write,
// truncate (setattr of the size, open with O_TRUNC), fallocate, create,
// mknod, mkdir, unlink, rmdir, rename, link, symlink, fsync and fsyncdir.
// Ops that found the FS frozen are not counted.
func (f *FS) Ops() int64 { return f.ops.Load() }

// OnOp arms a crash point: just before the nth mutating op since Mount
// (counted as Ops counts) is applied, the FS freezes — that op and every
// later one that would change anything (chmod, chown and utimes too) fail
// with EIO and change nothing — and fn runs once, on a goroutine of its
// own (the process making the op is blocked in it until the FS answers, so
// fn may kill it but must not wait for it inline). Reads go on answering
// from the frozen state until PowerCut, as a machine's memory would until
// the power goes: a process that reads its files through mmap (bbolt)
// would otherwise die of SIGBUS. An n not above Ops() never fires. A later
// call replaces the earlier one.
func (f *FS) OnOp(n int64, fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trigger, f.onOp = n, fn
}

// Frozen reports whether the FS has frozen (OnOp fired, or a cut began).
func (f *FS) Frozen() bool { return f.frozen.Load() }

// Unmount unmounts cleanly: the backing directory keeps everything written
// through the mount, durable or not. It fails if the mount is busy.
func (f *FS) Unmount() error {
	f.mu.Lock()
	if f.done {
		f.mu.Unlock()
		return errors.New("lazyfs: already unmounted")
	}
	f.mu.Unlock()
	if err := f.server.Unmount(); err != nil {
		return fmt.Errorf("lazyfs: unmount %s: %w", f.mountpoint, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = true
	f.frozen.Store(true)
	f.closeHandles()
	if err := os.RemoveAll(f.state); err != nil {
		return fmt.Errorf("lazyfs: remove state: %w", err)
	}
	return nil
}

// closeHandles closes the backing files of every open handle. Caller holds mu.
func (f *FS) closeHandles() {
	for h := range f.handles {
		h.file.Close()
		delete(f.handles, h)
	}
}

// PowerCut simulates a power cut: it freezes the FS, unmounts it (by force,
// and lazily, if a process still holds it: that process sees only errors
// from then on), and rewrites the backing directory to exactly the durable
// state. The FS is finished after it; mount again to go on.
func (f *FS) PowerCut() error {
	f.mu.Lock()
	f.frozen.Store(true)
	if f.done {
		f.mu.Unlock()
		return errors.New("lazyfs: already unmounted")
	}
	f.done = true
	f.mu.Unlock()

	if err := syscall.Unmount(f.mountpoint, 0); err != nil {
		// Busy: abort the connection (MNT_FORCE) and detach the mount.
		if err := syscall.Unmount(f.mountpoint, syscall.MNT_FORCE|syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("lazyfs: power cut: unmount %s: %w", f.mountpoint, err)
		}
	}
	f.server.Wait()

	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.restore()
	f.closeHandles()
	if rerr := os.RemoveAll(f.state); rerr != nil && err == nil {
		err = fmt.Errorf("lazyfs: remove state: %w", rerr)
	}
	return err
}

// Available reports whether a lazyfs can be mounted here: nil, or an error
// saying why not. Tests skip with it (or fail, if they must run).
func Available() error {
	if os.Geteuid() != 0 && !hasSysAdmin() {
		return errors.New("lazyfs: mounting FUSE needs root or CAP_SYS_ADMIN")
	}
	d, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("lazyfs: %w", err)
	}
	d.Close()
	return nil
}

// hasSysAdmin reads the effective capability set of this process.
func hasSysAdmin() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		hex, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		var caps uint64
		if _, err := fmt.Sscanf(strings.TrimSpace(hex), "%x", &caps); err != nil {
			return false
		}
		const capSysAdmin = 21
		return caps&(1<<capSysAdmin) != 0
	}
	return false
}
