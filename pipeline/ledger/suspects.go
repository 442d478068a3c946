package ledger

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// bucketSuspects counts, per batch and input line, the unclean stops of the
// daemon (a crash, an OOM kill, kill -9) while the line's request was in
// flight: the pipeline runs a suspect alone, and fails one that was in
// flight at two stops instead of running it a third time (no crash loop).
// Key: batch id, 0, line (4 bytes big-endian); value: the count (1 byte).
var bucketSuspects = []byte("suspects")

// LineRef names one input line of one batch.
type LineRef struct {
	Batch string
	Line  int
}

func suspectKey(id string, line int) []byte {
	k := make([]byte, len(id)+5)
	copy(k, id)
	binary.BigEndian.PutUint32(k[len(id)+1:], uint32(line))
	return k
}

// AddSuspects records one more unclean stop for each line (a line named
// twice counts once) and returns the lines' counts after it.
func (l *Ledger) AddSuspects(lines []LineRef) (map[LineRef]int, error) {
	counts := map[LineRef]int{}
	err := l.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketSuspects)
		if err != nil {
			return err
		}
		for _, r := range lines {
			if _, seen := counts[r]; seen {
				continue
			}
			k := suspectKey(r.Batch, r.Line)
			n := 1
			if v := b.Get(k); len(v) == 1 {
				n = min(int(v[0])+1, 255)
			}
			if err := b.Put(k, []byte{byte(n)}); err != nil {
				return err
			}
			counts[r] = n
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record suspect lines: %w", err)
	}
	return counts, nil
}

// Suspects returns batch id's lines that were in flight at an unclean
// stop, with how many.
func (l *Ledger) Suspects(id string) (map[int]int, error) {
	out := map[int]int{}
	err := l.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSuspects)
		if b == nil {
			return nil
		}
		prefix := append([]byte(id), 0)
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && len(k) == len(prefix)+4 && string(k[:len(prefix)]) == string(prefix); k, v = c.Next() {
			if len(v) == 1 {
				out[int(binary.BigEndian.Uint32(k[len(prefix):]))] = int(v[0])
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read suspect lines of %s: %w", id, err)
	}
	return out, nil
}

// deleteSuspects drops batch id's suspect lines (in Delete's transaction).
func deleteSuspects(tx *bolt.Tx, id string) error {
	b := tx.Bucket(bucketSuspects)
	if b == nil {
		return nil
	}
	prefix := append([]byte(id), 0)
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && len(k) > len(prefix) && string(k[:len(prefix)]) == string(prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}
