package bucket_test

import (
	"context"
	"testing"
	"time"

	"github.com/batchd/batchd/internal/miniotest"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/store/bucket"
	"github.com/batchd/batchd/store/bucket/s3client/s3clienttest"
	"github.com/batchd/batchd/store/storetest"
)

func TestContract(t *testing.T) {
	srv := miniotest.Start(t)
	storetest.Run(t, storetest.Harness{Checkpoints: true, New: func(t *testing.T) storetest.Fixture {
		name := srv.Bucket()
		b := s3clienttest.Connect(t, s3clienttest.Config(srv.Endpoint, "s3://"+name+"/team", "a"))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		t.Cleanup(cancel)
		bc := bucket.Config{Bucket: b, Spool: t.TempDir(), CheckpointInterval: 50 * time.Millisecond}
		return storetest.Fixture{
			Put: func(t *testing.T, dir, base string, data []byte) {
				srv.Put(name, b.Key(dir, base), data)
			},
			Get: func(t *testing.T, dir, base string) ([]byte, bool) {
				return srv.Get(name, b.Key(dir, base))
			},
			Open: func(t *testing.T, name string) pipeline.Store {
				k := b.InboxKey(name + ".jsonl")
				tag, _, err := b.Stat(ctx, k)
				if err != nil || tag == "" {
					t.Fatalf("stat %s: %q %v", k, tag, err)
				}
				st, err := bucket.Open(ctx, bc, name, k, tag)
				if err != nil || st == nil {
					t.Fatalf("Open %s: %v %v", name, st, err)
				}
				return st
			},
			Stop: func(t *testing.T, s pipeline.Store, runErr error) {
				if err := s.(*bucket.Store).Close(runErr); err != runErr {
					t.Fatalf("Close(%v) = %v", runErr, err)
				}
			},
		}
	}})
}
