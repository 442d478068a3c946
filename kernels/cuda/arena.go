package cuda

import "fmt"

// arena carries a pass's small host inputs (token ids, rows, RoPE tables)
// to the device. Outside a pass an upload is copied at once to the next
// free bytes of one device buffer, which wraps around when full: stream
// order makes that safe, since everything that read the old bytes was
// queued before the copy. During a pass uploads are staged on the host and
// copied in one piece before the recorded launches run, so a pass replayed
// as a graph finds its inputs at the addresses it was captured with.
type arena struct {
	dev     DevPtr
	cap     int64
	off     int64  // next free byte
	sent    int64  // staged bytes [sent, off) not yet copied (during a pass)
	host    []byte // staging, cap bytes
	epoch   int64  // advances whenever bytes may be reused
	retired []DevPtr
}

const arenaAlign = 256

// reserve makes sure n more bytes fit without wrapping (growing the arena
// at a pass's start, where nothing recorded refers to it yet).
func (d *Device) reserve(n int64) {
	a := &d.arena
	if a.off+n <= a.cap {
		return
	}
	d.fail("flush", d.q.flush(false))
	if a.dev != 0 && n <= a.cap && !d.q.recording {
		a.off, a.sent = 0, 0
		a.epoch++
		return
	}
	c := max(2*a.cap, n+arenaAlign, 1<<20)
	p, err := d.drv.Alloc(c)
	d.fail(fmt.Sprintf("alloc a %d-byte input arena", c), err)
	if a.dev != 0 {
		// Recorded launches and graphs may still name it: it goes when the
		// pass ends.
		a.retired = append(a.retired, a.dev)
	}
	a.dev, a.cap, a.off, a.sent = p, c, 0, 0
	a.host = make([]byte, c)
	a.epoch++
}

// stage puts b in the arena and returns its device address.
func (d *Device) stage(b []byte) DevPtr {
	n := (int64(len(b)) + arenaAlign - 1) / arenaAlign * arenaAlign
	d.reserve(max(n, arenaAlign))
	a := &d.arena
	p := a.dev + DevPtr(a.off)
	if d.q.recording {
		copy(a.host[a.off:], b)
	} else if len(b) > 0 {
		d.fail("upload inputs", d.drv.CopyIn(p, b))
	}
	a.off += max(n, arenaAlign)
	if !d.q.recording {
		a.sent = a.off
	}
	return p
}

// send copies the staged bytes to the device (before recorded launches
// run).
func (d *Device) send() error {
	a := &d.arena
	if a.sent < a.off {
		if err := d.drv.CopyIn(a.dev+DevPtr(a.sent), a.host[a.sent:a.off]); err != nil {
			return fmt.Errorf("upload inputs: %w", err)
		}
		a.sent = a.off
	}
	return nil
}
