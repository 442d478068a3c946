package pipeline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

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
// A slot is written with one pwrite before the request goes to the engine
// and cleared after it returns (the table grows to the deepest window
// used): the page cache keeps what a killed process
// wrote, so no fsync is needed (a power cut may lose the table; then the
// lines simply run again, as before). A slot is
//
//	'R', line (uint32 BE), len(batch id) (uint8), batch id, zero padding.
const inflightSlot = 128

// inflightFile is the table's file name in the state directory.
const inflightFile = "inflight"

type inflight struct {
	f *os.File
}

// openInflight opens the table at path with room for slots requests and
// returns what a previous run left in it; the table starts empty.
func openInflight(path string, slots int) (*inflight, []ledger.LineRef, error) {
	left, err := readInflight(path)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open in-flight table: %w", err)
	}
	if err := f.Truncate(int64(slots * inflightSlot)); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("size in-flight table %s: %w", path, err)
	}
	return &inflight{f: f}, left, nil
}

// readInflight lists the requests in the table's slots (none when the file
// does not exist). Slots that do not parse are skipped.
func readInflight(path string) ([]ledger.LineRef, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
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
	_, err := t.f.WriteAt(s[:], int64(slot*inflightSlot))
	return err
}

// clear records that slot holds nothing.
func (t *inflight) clear(slot int) error {
	if t == nil {
		return nil
	}
	_, err := t.f.WriteAt([]byte{0}, int64(slot*inflightSlot))
	return err
}

// close empties the table (a clean stop: nothing is in flight) and closes it.
func (t *inflight) close() error {
	if t == nil {
		return nil
	}
	err := t.f.Truncate(0)
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	return err
}
