package pipeline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline/ledger"
)

// The in-flight table: which requests the engine holds (each dispatch
// worker's, or each one handed to an engine.Queue and not answered), kept
// in a small file of fixed slots in the state directory so that the next
// start can tell what was running when the daemon stopped without closing
// (a crash the engine could not recover from, an OOM kill, kill -9). Those
// requests become suspects (ledger.AddSuspects): each runs alone, and one
// that was in flight at two such stops fails with engine_crashed instead
// of taking the daemon down a third time. A clean stop leaves every slot
// empty.
//
// A slot is written before the request goes to the engine and cleared
// after it returns (the table grows to the deepest window used). The file
// is mapped shared, so a slot is written by plain stores into the page
// cache, with no system call: the page cache keeps what a crashed or
// killed process stored, as it keeps what it wrote with pwrite, so no
// fsync is needed (a power cut may lose the table; then the lines simply
// run again, as before). A slot's marker byte is stored last when it is
// set and first when it is cleared or rewritten, so a process stopped
// between two stores leaves an empty slot or a whole one, never one that
// names the wrong line. Where the file cannot be mapped, or a store into
// the mapping faults (a full disk on a filesystem that allocates at write
// back), slots are written with one pwrite each instead. A slot is
//
//	'R', line (uint32 BE), len(batch id) (uint8), batch id, zero padding.
const inflightSlot = 128

// inflightFile is the table's file name in the state directory.
const inflightFile = "inflight"

type inflight struct {
	f *os.File
	// data is the file mapped shared (nil: slots are written with pwrite);
	// growing the table maps it again, larger, and keeps the older
	// mappings (of the same pages) until close, so a store never waits.
	data   atomic.Pointer[[]byte]
	mu     sync.Mutex // growing
	mapped [][]byte   // every mapping made (mu)
}

// openInflight opens the table at path with room for slots requests and
// returns what a previous run left in it; the table starts empty.
func openInflight(path string, slots int) (*inflight, []ledger.LineRef, error) {
	left, err := readInflight(path)
	if err != nil {
		return nil, nil, err
	}
	f, err := fsx.OpenNoFollow(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open in-flight table: %w", err)
	}
	t := &inflight{f: f}
	if !t.grow(slots * inflightSlot) {
		// Not mapped: the table is written with pwrite, and a slot past
		// the end grows the file.
		if err := f.Truncate(int64(slots * inflightSlot)); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("size in-flight table %s: %w", path, err)
		}
	}
	return t, left, nil
}

// grow makes the mapping at least size bytes, the file's blocks written
// (zeros) first so that a store into it needs no allocation; it reports
// false when the file cannot be grown or mapped.
func (t *inflight) grow(size int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := 0
	if n := len(t.mapped); n > 0 {
		if t.data.Load() == nil {
			return false // given up on the mapping (unmap)
		}
		old = len(t.mapped[n-1])
	}
	if size <= old {
		return true
	}
	size = max(size, 2*old)
	if _, err := t.f.WriteAt(make([]byte, size-old), int64(old)); err != nil {
		return false
	}
	data, err := syscall.Mmap(int(t.f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return false
	}
	t.mapped = append(t.mapped, data)
	t.data.Store(&data)
	return true
}

// readInflight lists the requests in the table's slots (none when the file
// does not exist). Slots that do not parse are skipped. A link at path is
// refused (fsx.ErrLink), never read or truncated through.
func readInflight(path string) ([]ledger.LineRef, error) {
	f, err := fsx.OpenNoFollow(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read in-flight table: %w", err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("read in-flight table: %w", err)
	}
	var out []ledger.LineRef
	for off := 0; off+inflightSlot <= len(data); off += inflightSlot {
		s := data[off : off+inflightSlot]
		n := int(s[5])
		if s[0] != 'R' || 6+n > inflightSlot || n == 0 {
			continue
		}
		out = append(out, ledger.LineRef{Batch: string(s[6 : 6+n]), Line: int(binary.BigEndian.Uint32(s[1:5]))})
	}
	return out, nil
}

// set records that slot holds line of batch id; a slot past the end of the
// table grows it.
func (t *inflight) set(slot int, id string, line int) error {
	if t == nil {
		return nil
	}
	if 6+len(id) > inflightSlot {
		return fmt.Errorf("batch id %q is too long for the in-flight table", id)
	}
	var s [inflightSlot]byte
	s[0] = 'R'
	binary.BigEndian.PutUint32(s[1:5], uint32(line))
	s[5] = byte(len(id))
	copy(s[6:], id)
	return t.write(slot, s[:])
}

// clear records that slot holds nothing.
func (t *inflight) clear(slot int) error {
	if t == nil {
		return nil
	}
	return t.write(slot, []byte{0})
}

// write stores s (a whole slot, or its marker alone) at the start of slot.
func (t *inflight) write(slot int, s []byte) error {
	off := slot * inflightSlot
	d := t.data.Load()
	if d != nil && off+inflightSlot > len(*d) {
		if !t.grow(off + inflightSlot) {
			t.unmap()
		}
		d = t.data.Load()
	}
	if d != nil {
		if storeSlot((*d)[off:off+inflightSlot], s) {
			return nil
		}
		t.unmap() // a fault: the disk is full; pwrite reports it
	}
	_, err := t.f.WriteAt(s, int64(off))
	return err
}

// storeSlot copies s into dst, the marker (s[0]) last and, over a slot in
// use, an empty marker first. It reports false when a store faulted (the
// mapping's pages could not be allocated).
func storeSlot(dst, s []byte) (ok bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	if len(s) > 1 {
		dst[0] = 0
		copy(dst[1:], s[1:])
	}
	dst[0] = s[0]
	return true
}

// unmap makes later writes use pwrite. The mappings stay until close: a
// store in progress may still use one.
func (t *inflight) unmap() {
	t.data.Store(nil)
}

// close empties the table (a clean stop: nothing is in flight) and closes it.
func (t *inflight) close() error {
	if t == nil {
		return nil
	}
	t.data.Store(nil)
	for _, m := range t.mapped {
		syscall.Munmap(m)
	}
	t.mapped = nil
	err := t.f.Truncate(0)
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	return err
}
