package lazyfs

import (
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// pageSize is the unit in which Torn keeps or loses unsynced data.
const pageSize = 4096

// place is one durable name to restore: a record at a path under backing.
type place struct {
	rec  *record
	path string
}

// restore rewrites the unmounted backing directory to the durable state.
// Caller holds mu; the mount is gone.
func (f *FS) restore() error {
	// Where each backing inode is now, for content never copied.
	now := map[uint64]string{}
	err := filepath.WalkDir(f.backing, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		ino := info.Sys().(*syscall.Stat_t).Ino
		if _, seen := now[ino]; !seen {
			now[ino] = p
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("lazyfs: power cut: walk backing: %w", err)
	}
	open := map[uint64]*os.File{}
	for h := range f.handles {
		open[h.rec.id] = h.file
	}

	places := f.durableTree()
	done := map[uint64]bool{}
	for _, pl := range places {
		r := pl.rec
		if !r.isFile() || done[r.id] {
			continue
		}
		done[r.id] = true
		cur, err := f.current(r, now, open)
		if err != nil {
			return fmt.Errorf("lazyfs: power cut: %w", err)
		}
		if !r.shadowed {
			if cur == nil {
				return fmt.Errorf("lazyfs: power cut: node %d lost its mount-time content", r.id)
			}
			err = f.materialize(r, cur)
		} else if f.opt.Torn && cur != nil {
			err = f.tear(r, cur)
		}
		if cur != nil {
			cur.Close()
		}
		if err != nil {
			return fmt.Errorf("lazyfs: power cut: node %d: %w", r.id, err)
		}
	}

	names, err := readNames(f.backing)
	if err != nil {
		return fmt.Errorf("lazyfs: power cut: %w", err)
	}
	for _, name := range names {
		if err := os.RemoveAll(filepath.Join(f.backing, name)); err != nil {
			return fmt.Errorf("lazyfs: power cut: clear backing: %w", err)
		}
	}
	if err := f.build(places); err != nil {
		return fmt.Errorf("lazyfs: power cut: %w", err)
	}
	return nil
}

// durableTree lists the durable names breadth first from the root, names
// sorted; a directory durable under two names is kept at the first only.
func (f *FS) durableTree() []place {
	var out []place
	seen := map[uint64]bool{1: true}
	queue := []place{{f.recs[1], f.backing}}
	for len(queue) > 0 {
		dir := queue[0]
		queue = queue[1:]
		names := make([]string, 0, len(dir.rec.entries))
		for name := range dir.rec.entries {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			r := f.recs[dir.rec.entries[name]]
			pl := place{r, filepath.Join(dir.path, name)}
			if r.isDir() {
				if seen[r.id] {
					continue
				}
				seen[r.id] = true
				queue = append(queue, pl)
			}
			out = append(out, pl)
		}
	}
	return out
}

// current opens r's current content for reading: through an open handle,
// else at a backing name it still has; nil if neither reaches it.
func (f *FS) current(r *record, now map[uint64]string, open map[uint64]*os.File) (*os.File, error) {
	if h := open[r.id]; h != nil {
		return reopen(h)
	}
	if p, ok := now[r.ino]; ok && r.ino != 0 {
		return os.Open(p)
	}
	return nil, nil
}

// tear applies Torn to r's shadow: the file gets its durable or its current
// size, and each page touched since the last fsync its current or its
// durable content, on coin flips seeded by Options.Seed and r's id.
func (f *FS) tear(r *record, cur *os.File) error {
	st, err := cur.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	touched := r.dirty.add(r.minSize, max(r.durSize, size))
	if len(touched) == 0 && size == r.durSize {
		return nil // nothing unsynced
	}
	rng := rand.New(rand.NewPCG(f.opt.Seed, r.id))
	if rng.IntN(2) == 0 {
		size = r.durSize
	}
	sh, err := os.OpenFile(f.shadow(r), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer sh.Close()
	if err := sh.Truncate(size); err != nil {
		return err
	}
	buf := make([]byte, pageSize)
	for _, p := range touched.pages(pageSize) {
		start := p * pageSize
		if start >= size {
			break
		}
		if rng.IntN(2) == 0 {
			continue // this page is lost
		}
		page := buf[:min(pageSize, size-start)]
		clear(page)
		if _, err := cur.ReadAt(page, start); err != nil && err != io.EOF {
			return err
		}
		if _, err := sh.WriteAt(page, start); err != nil {
			return err
		}
	}
	return nil
}

// build makes the durable tree in the emptied backing directory.
func (f *FS) build(places []place) error {
	first := map[uint64]string{} // file record → its first restored name
	var dirs []place
	for _, pl := range places {
		r := pl.rec
		var err error
		switch {
		case r.isDir():
			err = os.Mkdir(pl.path, 0o700)
			dirs = append(dirs, pl)
		case r.isFile():
			if p, ok := first[r.id]; ok {
				err = os.Link(p, pl.path)
			} else {
				first[r.id] = pl.path
				err = f.writeDurable(r, pl.path)
			}
		case r.typ == syscall.S_IFLNK:
			err = os.Symlink(r.target, pl.path)
		default:
			err = syscall.Mknod(pl.path, r.typ|r.perm, int(r.rdev))
		}
		if err != nil {
			return fmt.Errorf("restore %s: %w", pl.path, err)
		}
	}
	// Permissions last, deepest first, so no directory is closed before
	// its entries exist.
	dirs = append(dirs, place{f.recs[1], f.backing})
	for _, d := range slices.Backward(dirs) {
		if err := syscall.Chmod(d.path, d.rec.perm); err != nil {
			return fmt.Errorf("restore %s: %w", d.path, err)
		}
	}
	return nil
}

// writeDurable writes r's durable content (its shadow; absent, empty) at p.
func (f *FS) writeDurable(r *record, p string) error {
	out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	in, err := os.Open(f.shadow(r))
	switch {
	case err == nil:
		_, err = io.Copy(out, in)
		in.Close()
	case os.IsNotExist(err):
		err = nil
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := syscall.Chmod(p, r.perm); err != nil {
		return err
	}
	mtime := time.Unix(0, r.durMtime)
	return os.Chtimes(p, mtime, mtime)
}
