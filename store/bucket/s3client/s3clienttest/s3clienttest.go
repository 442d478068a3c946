// Package s3clienttest connects s3client.Buckets to a test MinIO server
// (internal/miniotest), for the tests of the bucket client, the bucket
// source and the bucket store.
package s3clienttest

import (
	"context"
	"testing"
	"time"

	"github.com/batchd/batchd/internal/miniotest"
	"github.com/batchd/batchd/store/bucket/s3client"
)

// Config is the config of the bucket at url (s3://BUCKET/PREFIX) on the
// server at endpoint, with miniotest's credentials, for the daemon named
// owner; it retries every 20 to 200 ms.
func Config(endpoint, url, owner string) s3client.Config {
	cfg := s3client.DefaultConfig(url)
	cfg.Endpoint = endpoint
	cfg.AccessKey, cfg.SecretKey = miniotest.AccessKey, miniotest.SecretKey
	cfg.Owner = owner
	cfg.RetryMin, cfg.RetryMax = 20*time.Millisecond, 200*time.Millisecond
	return cfg
}

// Connect returns the Bucket of cfg, connected; it fails the test when the
// bucket cannot be reached within two minutes.
func Connect(t testing.TB, cfg s3client.Config) *s3client.Bucket {
	t.Helper()
	b, err := s3client.NewBucket(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := b.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	return b
}
