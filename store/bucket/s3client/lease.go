package s3client

import (
	"bytes"
	"context"
	"io"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
)

// The Lease* methods read and write small objects through a connection
// of their own, one attempt each, with no retry: a lease renewal waits
// behind no upload for a connection, and gives up (for its caller to try
// again) well within the lease's TTL. What a lease object holds, and when
// it may be written, is store/bucket's (lease.go).

// LeaseTimeout bounds one attempt of the Lease* methods: 3/10 of the lease
// TTL, so that an owner renewing every TTL/3 whose attempt hangs has time
// for another whole attempt (TTL/30 later) before the lease lapses, and a
// slow server as much time as that allows.
func LeaseTimeout(ttl time.Duration) time.Duration { return ttl * 3 / 10 }

// LeasePut writes data to key under cond and returns the new ETag. A
// failed precondition is an error wrapping ErrPrecondition.
func (b *Bucket) LeasePut(ctx context.Context, key string, data []byte, cond Cond) (string, error) {
	opts := minio.PutObjectOptions{ContentType: "application/json"}
	cond.apply(&opts)
	info, err := b.leases.PutObject(ctx, b.bucket, key, bytes.NewReader(data), int64(len(data)), opts)
	if err != nil {
		return "", b.classify("write lease "+b.URL(key), err)
	}
	return strings.Trim(info.ETag, `"`), nil
}

// LeaseGet reads key (at most max bytes of it) and its ETag; an error
// IsNotFound tells that it does not exist.
func (b *Bucket) LeaseGet(ctx context.Context, key string, max int64) ([]byte, string, error) {
	obj, err := b.leases.GetObject(ctx, b.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, "", b.classify("read lease", err)
	}
	defer obj.Close()
	data, err := io.ReadAll(io.LimitReader(obj, max))
	if err != nil {
		return nil, "", b.classify("read lease", err)
	}
	st, err := obj.Stat()
	if err != nil {
		return nil, "", b.classify("read lease", err)
	}
	return data, strings.Trim(st.ETag, `"`), nil
}

// LeaseRemove deletes key.
func (b *Bucket) LeaseRemove(ctx context.Context, key string) error {
	if err := b.leases.RemoveObject(ctx, b.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return b.classify("release lease", err)
	}
	return nil
}
