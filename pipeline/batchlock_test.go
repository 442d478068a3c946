package pipeline

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

func (s *batchLocks) entries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// Locking many distinct ids leaves no entry behind: the map holds only the
// ids someone holds or waits for.
func TestBatchLocksShrink(t *testing.T) {
	var s batchLocks
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				l := batchLock{&s, fmt.Sprintf("batch_%d_%d", g, i%50)}
				if i%3 == 0 {
					if !l.TryLock() {
						continue
					}
				} else {
					l.Lock()
				}
				l.Unlock()
			}
		})
	}
	wg.Wait()
	if n := s.entries(); n != 0 {
		t.Fatalf("%d entries left after every lock was released", n)
	}

	a := batchLock{&s, "a"}
	a.Lock()
	if a.TryLock() {
		t.Fatal("TryLock took a held lock")
	}
	if n := s.entries(); n != 1 {
		t.Fatalf("%d entries while one id is held, want 1", n)
	}
	a.Unlock()
	if n := s.entries(); n != 0 {
		t.Fatalf("%d entries after the last unlock", n)
	}
}

// One holder per id at a time, however the entries come and go (run with
// -race: the counters are plain ints guarded only by the batch locks).
func TestBatchLocksExclude(t *testing.T) {
	const ids, goroutines, rounds = 3, 8, 2000
	var s batchLocks
	var inside [ids]atomic.Int32
	var count [ids]int
	var tried atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				id := (g + i) % ids
				l := batchLock{&s, fmt.Sprint("batch_", id)}
				if i%4 == 0 {
					if !l.TryLock() {
						tried.Add(1)
						continue
					}
				} else {
					l.Lock()
				}
				if n := inside[id].Add(1); n != 1 {
					t.Errorf("batch_%d held by %d at once", id, n)
				}
				count[id]++
				inside[id].Add(-1)
				l.Unlock()
			}
		})
	}
	wg.Wait()
	total := int64(0)
	for _, c := range count {
		total += int64(c)
	}
	if want := int64(goroutines*rounds) - tried.Load(); total != want {
		t.Fatalf("%d critical sections counted, want %d", total, want)
	}
	if n := s.entries(); n != 0 {
		t.Fatalf("%d entries left", n)
	}
}
