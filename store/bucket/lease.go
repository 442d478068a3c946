package bucket

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/batchd/batchd/store/bucket/s3client"
)

// dirLeases holds one lease object per claimed batch: NAME.json.
const dirLeases = ".batchd/leases"

// errHeld is a claim on an input another live daemon holds.
var errHeld = errors.New("claimed by another daemon")

// errLeaseTaken is a renewal that found the lease taken over: another
// daemon owns the batch now, and this one must stop working on it (the
// run stops with ErrLeaseLost).
var errLeaseTaken = errors.New("lease lost")

// leaseRecord is the content of .batchd/leases/NAME.json.
type leaseRecord struct {
	Owner string `json:"owner"`
	Input string `json:"input"` // the input's key
	ETag  string `json:"etag"`  // the input's ETag
	// Expires is when the lease lapses unless renewed (Unix ms, the owner's
	// clock: daemons sharing a bucket need clocks within a fraction of the TTL).
	Expires int64 `json:"expires_unix_ms"`
}

// maxLeaseBytes bounds a lease object read back.
const maxLeaseBytes = 64 << 10

// lease is this daemon's claim on one input.
type lease struct {
	b      *s3client.Bucket
	key    string
	record leaseRecord

	// renewing serializes renewals: each must match the ETag the one
	// before it wrote.
	renewing sync.Mutex
	mu       sync.Mutex
	etag     string // the lease object's ETag as this daemon last wrote it
	// resumed tells that the claim took over an expired lease: a batch
	// another daemon started.
	resumed bool
	// prevOwner is the owner of the lease taken over.
	prevOwner string
}

// claim claims the input key (at etag) of batch name for this daemon: it
// creates the lease object only if it does not exist (If-None-Match: *),
// or replaces an expired one only if nobody else replaced it first
// (If-Match). It returns errHeld while another daemon's lease is live.
func claim(ctx context.Context, b *s3client.Bucket, name, key, etag string) (*lease, error) {
	owner := b.Owner()
	l := &lease{b: b, key: b.Key(dirLeases, name+".json"), record: leaseRecord{Owner: owner, Input: key, ETag: etag}}
	l.record.Expires = time.Now().Add(l.TTL()).UnixMilli()
	err := l.put(ctx, s3client.IfETag(""))
	if err == nil {
		return l, nil
	}
	if !errors.Is(err, s3client.ErrPrecondition) {
		return nil, err
	}
	cur, curTag, err := readLease(ctx, b, l.key)
	if s3client.IsNotFound(err) {
		return nil, fmt.Errorf("claim %s: %w (released just now; try again)", name, errHeld)
	}
	if err != nil {
		return nil, err
	}
	if cur.Owner != owner && time.Now().UnixMilli() < cur.Expires {
		return nil, fmt.Errorf("claim %s: %w (%s, for %s more)", name, errHeld, cur.Owner,
			time.Until(time.UnixMilli(cur.Expires)).Round(time.Second))
	}
	if err := l.put(ctx, s3client.IfETag(curTag)); err != nil {
		if errors.Is(err, s3client.ErrPrecondition) {
			return nil, fmt.Errorf("claim %s: %w (taken over by another daemon first)", name, errHeld)
		}
		return nil, err
	}
	l.resumed = cur.Owner != owner
	l.prevOwner = cur.Owner
	return l, nil
}

func (l *lease) put(ctx context.Context, cond s3client.Cond) error {
	data, _ := json.Marshal(l.record)
	tag, err := l.b.LeasePut(ctx, l.key, data, cond)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.etag = tag
	l.mu.Unlock()
	return nil
}

// readLease reads the lease object key and its ETag. One that cannot be
// decoded reads as expired, so that it can be replaced.
func readLease(ctx context.Context, b *s3client.Bucket, key string) (leaseRecord, string, error) {
	var lr leaseRecord
	data, tag, err := b.LeaseGet(ctx, key, maxLeaseBytes)
	if err != nil {
		return lr, "", err
	}
	if err := json.Unmarshal(data, &lr); err != nil {
		// Not ours to judge: treat as expired so it can be replaced.
		return leaseRecord{Owner: "(unreadable lease)"}, tag, nil
	}
	return lr, tag, nil
}

// Renew extends the lease by the TTL, only if it is still the object this
// daemon last wrote (If-Match); otherwise it returns errLeaseTaken. One
// attempt gives up after RenewTimeout, so that a caller has time to try
// again before the lease lapses. Concurrent calls run one after another.
func (l *lease) Renew(ctx context.Context) error {
	l.renewing.Lock()
	defer l.renewing.Unlock()
	ctx, cancel := context.WithTimeout(ctx, l.RenewTimeout())
	defer cancel()
	l.mu.Lock()
	tag := l.etag
	l.record.Expires = time.Now().Add(l.TTL()).UnixMilli()
	l.mu.Unlock()
	err := l.put(ctx, s3client.IfETag(tag))
	if errors.Is(err, s3client.ErrPrecondition) {
		// An earlier attempt that gave up may have been applied all the
		// same: the object is then still this claim's, at an ETag this
		// daemon never saw.
		if ok, aerr := l.adopt(ctx); aerr != nil {
			return aerr
		} else if ok {
			err = l.put(ctx, s3client.IfETag(l.currentETag()))
		}
	}
	if errors.Is(err, s3client.ErrPrecondition) || s3client.IsNotFound(err) {
		return fmt.Errorf("renew lease %s: %w", l.b.URL(l.key), errLeaseTaken)
	}
	return err
}

// mine tells whether the lease object cur is this claim's: this daemon's,
// on the same input version (a daemon runs each name once at a time).
func (l *lease) mine(cur leaseRecord) bool {
	return cur.Owner == l.record.Owner && cur.Input == l.record.Input && cur.ETag == l.record.ETag
}

// adopt takes the ETag of the lease object when it is still this claim's.
func (l *lease) adopt(ctx context.Context) (bool, error) {
	cur, tag, err := readLease(ctx, l.b, l.key)
	if s3client.IsNotFound(err) {
		return false, nil
	}
	if err != nil || !l.mine(cur) {
		return false, err
	}
	l.mu.Lock()
	l.etag = tag
	l.mu.Unlock()
	return true, nil
}

func (l *lease) currentETag() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.etag
}

// Release removes the lease if it is still this daemon's.
func (l *lease) Release(ctx context.Context) error {
	cur, _, err := readLease(ctx, l.b, l.key)
	if s3client.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	// Judged by content, not by ETag: a renewal that gave up may have
	// been applied.
	if !l.mine(cur) {
		return nil
	}
	return l.b.LeaseRemove(ctx, l.key)
}

// TTL is the lease's time to live; renew well within it.
func (l *lease) TTL() time.Duration { return l.b.Config().LeaseTTL }

// RenewTimeout bounds one renewal attempt (s3client.LeaseTimeout).
func (l *lease) RenewTimeout() time.Duration { return s3client.LeaseTimeout(l.TTL()) }
