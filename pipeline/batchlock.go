package pipeline

import "sync"

// batchLocks holds one mutex per batch id, so that one batch runs (or is
// refused, or expired) at a time. An id's entry lives only while someone
// holds or waits for its mutex: every batch id ever seen would otherwise
// stay in the map for the life of the daemon.
type batchLocks struct {
	mu sync.Mutex
	m  map[string]*batchLockEntry
}

type batchLockEntry struct {
	mu   sync.Mutex
	refs int // holders and waiters; the entry goes at 0
}

// batchLock is the lock of batch id, used as a mutex: Lock then Unlock, or
// a TryLock that succeeded then Unlock. The value takes nothing until
// locked, so one that is never locked costs nothing.
type batchLock struct {
	set *batchLocks
	id  string
}

func (p *Pipeline) batchLock(id string) batchLock { return batchLock{&p.locks, id} }

// acquire is the entry of id with a reference taken; set.mu is held.
func (s *batchLocks) acquire(id string) *batchLockEntry {
	if s.m == nil {
		s.m = make(map[string]*batchLockEntry)
	}
	e := s.m[id]
	if e == nil {
		e = new(batchLockEntry)
		s.m[id] = e
	}
	e.refs++
	return e
}

// release drops a reference to e, the entry of id; set.mu is held.
func (s *batchLocks) release(id string, e *batchLockEntry) {
	if e.refs--; e.refs == 0 {
		delete(s.m, id)
	}
}

// Lock waits for the batch's mutex.
func (l batchLock) Lock() {
	l.set.mu.Lock()
	e := l.set.acquire(l.id)
	l.set.mu.Unlock()
	e.mu.Lock() // the reference keeps e in the map while we wait
}

// TryLock takes the batch's mutex if it is free.
func (l batchLock) TryLock() bool {
	l.set.mu.Lock()
	defer l.set.mu.Unlock()
	e := l.set.acquire(l.id)
	if e.mu.TryLock() {
		return true
	}
	l.set.release(l.id, e)
	return false
}

// Unlock releases the batch's mutex, which the caller holds.
func (l batchLock) Unlock() {
	l.set.mu.Lock()
	defer l.set.mu.Unlock()
	e := l.set.m[l.id]
	e.mu.Unlock()
	l.set.release(l.id, e)
}
