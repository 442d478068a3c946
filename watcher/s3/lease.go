package s3

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
)

// ErrHeld is a claim on an input another live daemon holds.
var ErrHeld = errors.New("claimed by another daemon")

// ErrLeaseLost is a renewal that found the lease taken over: another daemon
// owns the batch now, and this one must stop working on it.
var ErrLeaseLost = errors.New("lease lost")

// leaseBody is the content of .batchd/leases/NAME.json.
type leaseBody struct {
	Owner string `json:"owner"`
	Input string `json:"input"` // the input's key
	ETag  string `json:"etag"`  // the input's ETag
	// Expires is when the lease lapses unless renewed (Unix ms, the owner's
	// clock: daemons sharing a bucket need clocks within a fraction of the TTL).
	Expires int64 `json:"expires_unix_ms"`
}

// Lease is this daemon's claim on one input.
type Lease struct {
	b    *Bucket
	key  string
	body leaseBody

	// renewing serializes renewals: each must match the ETag the one
	// before it wrote.
	renewing sync.Mutex
	mu       sync.Mutex
	etag     string // the lease object's ETag as this daemon last wrote it
	// Resumed tells that the claim took over an expired lease: a batch
	// another daemon started.
	Resumed bool
	// PrevOwner is the owner of the lease taken over.
	PrevOwner string
}

// Claim claims the input key (at etag) of batch name for this daemon: it
// creates the lease object only if it does not exist (If-None-Match: *),
// or replaces an expired one only if nobody else replaced it first
// (If-Match). It returns ErrHeld while another daemon's lease is live.
func (b *Bucket) Claim(ctx context.Context, name, key, etag string) (*Lease, error) {
	l := &Lease{b: b, key: b.Key(dirLeases, name+".json"), body: leaseBody{Owner: b.cfg.Owner, Input: key, ETag: etag}}
	l.body.Expires = time.Now().Add(b.cfg.LeaseTTL).UnixMilli()
	var opts minio.PutObjectOptions
	opts.SetMatchETagExcept("*")
	err := l.put(ctx, opts)
	if err == nil {
		return l, nil
	}
	if !errors.Is(err, ErrPrecondition) {
		return nil, err
	}
	cur, curTag, err := b.readLease(ctx, l.key)
	if IsNotFound(err) {
		return nil, fmt.Errorf("claim %s: %w (released just now; try again)", name, ErrHeld)
	}
	if err != nil {
		return nil, err
	}
	if cur.Owner != b.cfg.Owner && time.Now().UnixMilli() < cur.Expires {
		return nil, fmt.Errorf("claim %s: %w (%s, for %s more)", name, ErrHeld, cur.Owner,
			time.Until(time.UnixMilli(cur.Expires)).Round(time.Second))
	}
	opts = minio.PutObjectOptions{}
	opts.SetMatchETag(curTag)
	if err := l.put(ctx, opts); err != nil {
		if errors.Is(err, ErrPrecondition) {
			return nil, fmt.Errorf("claim %s: %w (taken over by another daemon first)", name, ErrHeld)
		}
		return nil, err
	}
	l.Resumed = cur.Owner != b.cfg.Owner
	l.PrevOwner = cur.Owner
	return l, nil
}

func (l *Lease) put(ctx context.Context, opts minio.PutObjectOptions) error {
	data, _ := json.Marshal(l.body)
	opts.ContentType = "application/json"
	info, err := l.b.leases.PutObject(ctx, l.b.bucket, l.key, bytes.NewReader(data), int64(len(data)), opts)
	if err != nil {
		return l.b.classify("write lease "+l.b.URL(l.key), err)
	}
	l.mu.Lock()
	l.etag = strings.Trim(info.ETag, `"`)
	l.mu.Unlock()
	return nil
}

func (b *Bucket) readLease(ctx context.Context, key string) (leaseBody, string, error) {
	var lb leaseBody
	obj, err := b.leases.GetObject(ctx, b.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return lb, "", b.classify("read lease", err)
	}
	defer obj.Close()
	data, err := io.ReadAll(io.LimitReader(obj, 64<<10))
	if err != nil {
		return lb, "", b.classify("read lease", err)
	}
	st, err := obj.Stat()
	if err != nil {
		return lb, "", b.classify("read lease", err)
	}
	if err := json.Unmarshal(data, &lb); err != nil {
		// Not ours to judge: treat as expired so it can be replaced.
		return leaseBody{Owner: "(unreadable lease)"}, strings.Trim(st.ETag, `"`), nil
	}
	return lb, strings.Trim(st.ETag, `"`), nil
}

// Renew extends the lease by the TTL, only if it is still the object this
// daemon last wrote (If-Match); otherwise it returns ErrLeaseLost. One
// attempt gives up after RenewTimeout, so that a caller has time to try
// again before the lease lapses. Concurrent calls run one after another.
func (l *Lease) Renew(ctx context.Context) error {
	l.renewing.Lock()
	defer l.renewing.Unlock()
	ctx, cancel := context.WithTimeout(ctx, l.RenewTimeout())
	defer cancel()
	l.mu.Lock()
	tag := l.etag
	l.body.Expires = time.Now().Add(l.b.cfg.LeaseTTL).UnixMilli()
	l.mu.Unlock()
	var opts minio.PutObjectOptions
	opts.SetMatchETag(tag)
	err := l.put(ctx, opts)
	if errors.Is(err, ErrPrecondition) {
		// An earlier attempt that gave up may have been applied all the
		// same: the object is then still this claim's, at an ETag this
		// daemon never saw.
		if ok, aerr := l.adopt(ctx); aerr != nil {
			return aerr
		} else if ok {
			opts = minio.PutObjectOptions{}
			opts.SetMatchETag(l.currentETag())
			err = l.put(ctx, opts)
		}
	}
	if errors.Is(err, ErrPrecondition) || IsNotFound(err) {
		return fmt.Errorf("renew lease %s: %w", l.b.URL(l.key), ErrLeaseLost)
	}
	return err
}

// mine tells whether the lease object cur is this claim's: this daemon's,
// on the same input version (a daemon runs each name once at a time).
func (l *Lease) mine(cur leaseBody) bool {
	return cur.Owner == l.b.cfg.Owner && cur.Input == l.body.Input && cur.ETag == l.body.ETag
}

// adopt takes the ETag of the lease object when it is still this claim's.
func (l *Lease) adopt(ctx context.Context) (bool, error) {
	cur, tag, err := l.b.readLease(ctx, l.key)
	if IsNotFound(err) {
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

func (l *Lease) currentETag() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.etag
}

// Release removes the lease if it is still this daemon's.
func (l *Lease) Release(ctx context.Context) error {
	cur, _, err := l.b.readLease(ctx, l.key)
	if IsNotFound(err) {
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
	if err := l.b.leases.RemoveObject(ctx, l.b.bucket, l.key, minio.RemoveObjectOptions{}); err != nil {
		return l.b.classify("release lease", err)
	}
	return nil
}

// TTL is the lease's time to live; renew well within it.
func (l *Lease) TTL() time.Duration { return l.b.cfg.LeaseTTL }

// RenewTimeout bounds one renewal attempt: 3/10 of the TTL, so that an
// owner renewing every TTL/3 whose attempt hangs has time for another
// whole attempt (TTL/30 later) before the lease lapses, and a slow server
// as much time as that allows.
func (l *Lease) RenewTimeout() time.Duration { return renewTimeout(l.b.cfg.LeaseTTL) }

func renewTimeout(ttl time.Duration) time.Duration { return ttl * 3 / 10 }
