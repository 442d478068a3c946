package ledger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"

	"github.com/batchd/batchd/internal/fsx"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrDamaged is returned when the ledger file is not a whole bbolt file (cut
// short, emptied, or with broken pages). The error is a *DamagedError.
var ErrDamaged = errors.New("ledger damaged")

// ErrLocked is returned when another process (a running batchd) holds the
// ledger file.
var ErrLocked = errors.New("ledger in use by another process")

// DamagedError says which ledger file is damaged, how, and what to do.
type DamagedError struct {
	Path    string
	Problem string
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("ledger %s is damaged: %s. Restore it from a backup; or move it aside to start with an "+
		"empty ledger (batches in progress then start over, and completed work may be redone); "+
		"`batchd ledger check` reports what it can read", e.Path, e.Problem)
}

// Is makes errors.Is(err, ErrDamaged) true.
func (e *DamagedError) Is(target error) bool { return target == ErrDamaged }

func damaged(path, format string, args ...any) error {
	return &DamagedError{Path: path, Problem: fmt.Sprintf(format, args...)}
}

// The parts of bbolt's file format (go.etcd.io/bbolt/internal/common) that
// inspect reads itself, with plain reads, so that a cut-short file is
// refused before bbolt maps it: reading a mapped page past the end of the
// file kills the process with SIGBUS.
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	pageHeaderSize = 16 // id u64, flags u16, count u16, overflow u32
	metaSize       = 64 // magic, version, page size, flags u32; root, sequence, freelist, pgid, txid, checksum u64
	noFreelist     = ^uint64(0)
	branchPage     = 0x01
	leafPage       = 0x02
	freelistPage   = 0x10
	minPageSize    = 1024
	maxPageSize    = 1 << 16
)

// meta is one of bbolt's two meta pages; bbolt uses the valid one with the
// higher transaction id.
type meta struct {
	page     int
	pageSize uint32
	root     uint64 // page of the root bucket
	freelist uint64 // page of the freelist, or noFreelist
	pgid     uint64 // pages in use: the file must hold this many
	txid     uint64
	invalid  string // why it is not valid; "" when it is
}

func readMeta(buf []byte, page int) meta {
	m := meta{page: page}
	if len(buf) < pageHeaderSize+metaSize {
		m.invalid = "missing"
		return m
	}
	b := buf[pageHeaderSize : pageHeaderSize+metaSize]
	ne := binary.NativeEndian // bbolt writes its structs as they lie in memory
	magic, version := ne.Uint32(b[0:]), ne.Uint32(b[4:])
	m.pageSize = ne.Uint32(b[8:])
	m.root, m.freelist, m.pgid, m.txid = ne.Uint64(b[16:]), ne.Uint64(b[32:]), ne.Uint64(b[40:]), ne.Uint64(b[48:])
	h := fnv.New64a()
	h.Write(b[:56])
	switch {
	case magic != boltMagic:
		m.invalid = "not a bbolt meta page"
	case version != boltVersion:
		m.invalid = fmt.Sprintf("format version %d, not %d", version, boltVersion)
	case ne.Uint64(b[56:]) != h.Sum64():
		m.invalid = "checksum mismatch"
	}
	return m
}

// header is what inspect found: the meta page bbolt will use, and the
// problem of the other one ("" when it is valid).
type header struct {
	use        meta
	otherPage  int
	otherFault string
}

// inspect checks, without mapping the file, what bbolt would trust blindly:
// a meta page is valid, and the pages it says are in use lie inside the
// file. It returns a *DamagedError for a file that fails.
func inspect(path string) (header, error) {
	f, err := os.Open(path)
	if err != nil {
		return header{}, fmt.Errorf("open ledger: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return header{}, fmt.Errorf("stat ledger: %w", err)
	}
	size := st.Size()
	if size == 0 {
		return header{}, damaged(path, "the file is empty (0 bytes); batchd never leaves an empty ledger, so it was emptied")
	}
	readPage := func(off int64) []byte {
		buf := make([]byte, pageHeaderSize+metaSize)
		n, err := f.ReadAt(buf, off)
		if err != nil && err != io.EOF {
			return nil
		}
		return buf[:n]
	}
	// The page size is in the meta pages; like bbolt, look for meta page 1
	// at each possible page size when meta page 0 is unreadable.
	m0 := readMeta(readPage(0), 0)
	pageSize := int64(0)
	if m0.invalid == "" {
		pageSize = int64(m0.pageSize)
	} else {
		for ps := int64(minPageSize); ps <= maxPageSize && ps < size; ps *= 2 {
			if m := readMeta(readPage(ps), 1); m.invalid == "" {
				pageSize = int64(m.pageSize)
				break
			}
		}
	}
	if pageSize == 0 {
		return header{}, damaged(path, "neither meta page is valid (page 0: %s)", m0.invalid)
	}
	if pageSize < minPageSize || pageSize > maxPageSize || pageSize&(pageSize-1) != 0 {
		return header{}, damaged(path, "its meta page gives page size %d, which bbolt never writes", pageSize)
	}
	if size%pageSize != 0 {
		return header{}, damaged(path, "the file is %d bytes, not a whole number of %d-byte pages: it was cut short or appended to", size, pageSize)
	}
	if size < 4*pageSize {
		return header{}, damaged(path, "the file is %d bytes, less than the 4 pages of an empty bbolt file: it was cut short", size)
	}
	metas := [2]meta{readMeta(readPage(0), 0), readMeta(readPage(pageSize), 1)}
	use, other := metas[0], metas[1]
	if use.invalid != "" || (other.invalid == "" && other.txid > use.txid) {
		use, other = other, use
	}
	if use.invalid != "" {
		return header{}, damaged(path, "neither meta page is valid (page 0: %s; page 1: %s)", metas[0].invalid, metas[1].invalid)
	}
	pages := uint64(size / pageSize)
	switch {
	case use.pageSize != uint32(pageSize):
		return header{}, damaged(path, "its meta pages disagree on the page size (%d and %d)", pageSize, use.pageSize)
	case use.pgid > pages:
		return header{}, damaged(path, "the file is %d bytes (%d pages), but meta page %d (transaction %d) uses %d pages: it was cut short",
			size, pages, use.page, use.txid, use.pgid)
	case use.root < 2 || use.root >= use.pgid:
		return header{}, damaged(path, "meta page %d (transaction %d) puts the root at page %d, outside the %d pages in use", use.page, use.txid, use.root, use.pgid)
	case use.freelist != noFreelist && (use.freelist < 2 || use.freelist >= use.pgid):
		return header{}, damaged(path, "meta page %d (transaction %d) puts the freelist at page %d, outside the %d pages in use", use.page, use.txid, use.freelist, use.pgid)
	}
	// The two pages bbolt reads while opening: their headers must say what
	// they are, or bbolt's assertions panic.
	page := func(id uint64) (pid uint64, flags uint16, count uint16, overflow uint32) {
		b := readPage(int64(id) * pageSize)
		if len(b) < pageHeaderSize {
			return
		}
		ne := binary.NativeEndian
		return ne.Uint64(b), ne.Uint16(b[8:]), ne.Uint16(b[10:]), ne.Uint32(b[12:])
	}
	if pid, flags, _, _ := page(use.root); pid != use.root || (flags != branchPage && flags != leafPage) {
		return header{}, damaged(path, "its root page %d is not a tree page (it says page %d, flags %#x)", use.root, pid, flags)
	}
	if use.freelist != noFreelist {
		pid, flags, count, overflow := page(use.freelist)
		n := uint64(count)
		if count == 0xFFFF { // the real count is the first element
			b := readPage(int64(use.freelist)*pageSize + pageHeaderSize)
			if len(b) >= 8 {
				n = binary.NativeEndian.Uint64(b) + 1
			}
		}
		switch {
		case pid != use.freelist || flags != freelistPage:
			return header{}, damaged(path, "its freelist page %d is not a freelist (it says page %d, flags %#x)", use.freelist, pid, flags)
		case use.freelist+uint64(overflow) >= use.pgid || n*8 > (uint64(overflow)+1)*uint64(pageSize)-pageHeaderSize:
			return header{}, damaged(path, "its freelist (page %d, %d more pages, %d ids) does not fit in the %d pages in use", use.freelist, overflow, n, use.pgid)
		}
	}
	return header{use: use, otherPage: other.page, otherFault: other.invalid}, nil
}

// guard runs f with memory faults turned into panics, and panics (bbolt's
// assertions on a damaged page, or a fault reading past the end of a
// mapping) into an error, so a damaged file is reported instead of killing
// the process.
func guard(f func() error) (panicked error, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			panicked = fmt.Errorf("%v", r)
		}
	}()
	return nil, f()
}

// maxCheckErrors bounds how many of bbolt's own findings are kept.
const maxCheckErrors = 20

// openVerified opens the bbolt file at path after inspect, then reads every
// page in use (every bucket, key and value) and runs bbolt's own
// consistency check, all under guard. Damage found while reading is a
// *DamagedError; bbolt's findings go to checkErrs when it is not nil, and
// otherwise also make a *DamagedError.
func openVerified(path string, opts *bolt.Options, checkErrs *[]string) (*bolt.DB, header, error) {
	if err := fsx.NoLink(path); err != nil {
		return nil, header{}, fmt.Errorf("open ledger: %w", err)
	}
	h, err := inspect(path)
	if err != nil {
		return nil, h, err
	}
	if err := walkTree(path, h.use); err != nil {
		return nil, h, err
	}
	var db *bolt.DB
	var found []string
	// A panic inside bolt.Open leaves no handle to close; the file it opened
	// is closed here so that its lock goes with it (the mapping stays).
	var file *os.File
	o := *opts
	o.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := fsx.OpenNoFollow(name, flag, perm)
		file = f
		return f, err
	}
	panicked, err := guard(func() error {
		var err error
		if db, err = bolt.Open(path, 0o600, &o); err != nil {
			return err
		}
		return db.View(func(tx *bolt.Tx) error {
			readAll(tx)
			// Check's goroutine recovers its own panics; a fault there
			// cannot happen after readAll touched every page it reads.
			for err := range tx.Check() {
				if len(found) < maxCheckErrors {
					found = append(found, err.Error())
				}
			}
			return nil
		})
	})
	switch {
	case panicked != nil:
		if db != nil {
			db.Close()
		} else if file != nil {
			file.Close()
		}
		return nil, h, damaged(path, "reading it failed: %v", panicked)
	case errors.Is(err, berrors.ErrTimeout):
		return nil, h, fmt.Errorf("open ledger %s: %w: another process holds it", path, ErrLocked)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
		return nil, h, damaged(path, "%v", err)
	case err != nil:
		if db != nil {
			db.Close()
		}
		return nil, h, fmt.Errorf("open ledger %s: %w", path, err)
	}
	if checkErrs != nil {
		*checkErrs = found
	} else if len(found) > 0 {
		db.Close()
		return nil, h, damaged(path, "bbolt's consistency check failed: %s", strings.Join(found, "; "))
	}
	return db, h, nil
}

// sink keeps readAll's reads from being optimised away.
var sink atomic.Uint32

// readAll reads every key and value of every bucket, so that every page in
// use is touched once.
func readAll(tx *bolt.Tx) {
	var x byte
	var walk func(b *bolt.Bucket)
	walk = func(b *bolt.Bucket) {
		b.ForEach(func(k, v []byte) error {
			for _, c := range k {
				x ^= c
			}
			if v == nil {
				if child := b.Bucket(k); child != nil {
					walk(child)
				}
				return nil
			}
			for _, c := range v {
				x ^= c
			}
			return nil
		})
	}
	tx.ForEach(func(name []byte, b *bolt.Bucket) error {
		walk(b)
		return nil
	})
	sink.Store(uint32(x))
}

// Sizes of bbolt's page elements and the flag of a bucket's leaf element.
const (
	elementSize    = 16 // leaf: flags, pos, ksize, vsize u32; branch: pos, ksize u32, pgid u64
	bucketLeafFlag = 0x01
	bucketHeader   = 16 // root u64, sequence u64
)

// walkTree reads, with plain reads, every tree page reachable from the
// root bucket of m, and returns a *DamagedError for what bbolt trusts
// blindly: a page referenced twice or in a cycle (bbolt's reads and its
// check recurse forever), a page whose header gives another id, another
// type or an overflow past the pages in use (bbolt's check loops over the
// overflow), elements outside their page, and an inline bucket (a small
// bucket kept in its parent's value) with a broken page header (neither
// reading nor bbolt's check looks at it, but the first write trusts its
// page id and faults outside the mapping, killing the process).
func walkTree(path string, m meta) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open ledger: %w", err)
	}
	defer f.Close()
	ne := binary.NativeEndian
	ps := int64(m.pageSize)
	seen := map[uint64]bool{}
	// checkElements checks a page's (or an inline page's) elements lie in
	// buf and returns the pages and inline buckets they lead to.
	var stack []uint64
	var checkElements func(where string, buf []byte, leaf bool) string
	checkElements = func(where string, buf []byte, leaf bool) string {
		count := int(ne.Uint16(buf[10:]))
		if pageHeaderSize+count*elementSize > len(buf) {
			return fmt.Sprintf("%s has %d elements, more than fit in it", where, count)
		}
		for i := range count {
			off := pageHeaderSize + i*elementSize
			e := buf[off:]
			if !leaf {
				pos, ksize := int64(ne.Uint32(e)), int64(ne.Uint32(e[4:]))
				if int64(off)+pos+ksize > int64(len(buf)) {
					return fmt.Sprintf("%s: element %d's key lies outside the page", where, i)
				}
				stack = append(stack, ne.Uint64(e[8:]))
				continue
			}
			flags, pos, ksize, vsize := ne.Uint32(e), int64(ne.Uint32(e[4:])), int64(ne.Uint32(e[8:])), int64(ne.Uint32(e[12:]))
			start := int64(off) + pos + ksize
			if start+vsize > int64(len(buf)) {
				return fmt.Sprintf("%s: element %d's key or value lies outside the page", where, i)
			}
			if flags&bucketLeafFlag == 0 {
				continue
			}
			v := buf[start : start+vsize]
			if len(v) < bucketHeader {
				return fmt.Sprintf("%s: element %d is a bucket of %d bytes, too short for its header", where, i, len(v))
			}
			if root := ne.Uint64(v); root != 0 {
				stack = append(stack, root)
				continue
			}
			ip := v[bucketHeader:]
			if len(ip) < pageHeaderSize {
				return fmt.Sprintf("%s: element %d is an inline bucket too short for its page header", where, i)
			}
			if id, fl, ov := ne.Uint64(ip), ne.Uint16(ip[8:]), ne.Uint32(ip[12:]); id != 0 || fl != leafPage || ov != 0 {
				return fmt.Sprintf("%s: element %d is an inline bucket with a broken page header (page %d, flags %#x, overflow %d)", where, i, id, fl, ov)
			}
			if p := checkElements(fmt.Sprintf("%s: the inline bucket of element %d", where, i), ip, true); p != "" {
				return p
			}
		}
		return ""
	}
	stack = append(stack, m.root)
	head := make([]byte, pageHeaderSize)
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch {
		case id < 2 || id >= m.pgid:
			return damaged(path, "a tree page refers to page %d, outside the %d pages in use", id, m.pgid)
		case seen[id]:
			return damaged(path, "page %d is referred to twice (a cycle, or two parents)", id)
		}
		seen[id] = true
		if _, err := f.ReadAt(head, int64(id)*ps); err != nil {
			return damaged(path, "page %d cannot be read: %v", id, err)
		}
		pid, flags, overflow := ne.Uint64(head), ne.Uint16(head[8:]), uint64(ne.Uint32(head[12:]))
		switch {
		case pid != id:
			return damaged(path, "page %d says it is page %d", id, pid)
		case flags != branchPage && flags != leafPage:
			return damaged(path, "page %d is in the tree but is not a tree page (flags %#x)", id, flags)
		case id+overflow >= m.pgid:
			return damaged(path, "page %d runs %d pages on, past the %d pages in use", id, overflow, m.pgid)
		}
		for o := uint64(1); o <= overflow; o++ {
			if seen[id+o] {
				return damaged(path, "page %d is referred to twice (a cycle, or two parents)", id+o)
			}
			seen[id+o] = true
		}
		buf := make([]byte, int64(overflow+1)*ps)
		if _, err := f.ReadAt(buf, int64(id)*ps); err != nil {
			return damaged(path, "page %d cannot be read: %v", id, err)
		}
		if p := checkElements(fmt.Sprintf("page %d", id), buf, flags == leafPage); p != "" {
			return damaged(path, "%s", p)
		}
	}
	return nil
}
