package s3client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
)

// partSize is the multipart upload part size: results above it go up in
// parts, with bounded memory.
const partSize = 16 << 20

// ErrChanged is an input object replaced while it was being read.
var ErrChanged = errors.New("object changed while it was read")

// Stat returns the ETag of key, or "" when it does not exist.
func (b *Bucket) Stat(ctx context.Context, key string) (etag string, modified time.Time, err error) {
	err = b.retry(ctx, "stat "+b.URL(key), func() error {
		st, err := b.client.StatObject(ctx, b.bucket, key, minio.StatObjectOptions{})
		if err != nil {
			if minio.ToErrorResponse(err).StatusCode == 404 {
				etag = ""
				return nil
			}
			return err
		}
		etag, modified = strings.Trim(st.ETag, `"`), st.LastModified
		return nil
	})
	return etag, modified, err
}

// Download streams key (which must still be at etag, when etag is given)
// to the file dst, resuming with a ranged read from where it stopped when
// the connection drops. It never holds the object in memory. It returns an
// error wrapping ErrChanged when the object was replaced, and one IsNotFound
// tells when it is gone.
func (b *Bucket) Download(ctx context.Context, key, etag, dst string) error {
	tmp := dst + ".part"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("download %s: %w", b.URL(key), err)
	}
	defer func() {
		if f != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	var off int64
	err = b.retry(ctx, "download "+b.URL(key), func() error {
		var opts minio.GetObjectOptions
		if etag != "" {
			if err := opts.SetMatchETag(etag); err != nil {
				return permanent(err)
			}
		}
		if off > 0 {
			if err := opts.SetRange(off, 0); err != nil {
				return permanent(err)
			}
		}
		obj, err := b.client.GetObject(ctx, b.bucket, key, opts)
		if err != nil {
			return err
		}
		defer obj.Close()
		if etag == "" {
			// Resume only into the same version.
			st, err := obj.Stat()
			if err != nil {
				if minio.ToErrorResponse(err).StatusCode == 416 && off > 0 {
					return nil // nothing left past off: done
				}
				return err
			}
			etag = strings.Trim(st.ETag, `"`)
		}
		n, err := io.Copy(f, obj)
		off += n
		if err != nil && minio.ToErrorResponse(err).StatusCode == 416 && off > 0 {
			return nil // nothing left past off: done
		}
		if err != nil && off > 0 && n > 0 {
			b.log.Info("download interrupted; resuming", "key", key, "at", off, "error", err)
		}
		return err
	})
	if errors.Is(err, ErrPrecondition) {
		return fmt.Errorf("download %s: %w", b.URL(key), ErrChanged)
	}
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("download %s: %w", b.URL(key), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("download %s: %w", b.URL(key), err)
	}
	f = nil
	return os.Rename(tmp, dst)
}

// Cond is the precondition of a write: the ETag the object must still have
// ("" for an object that must not exist), or Any for none.
type Cond struct {
	any  bool
	etag string
}

// Any is no precondition.
var Any = Cond{any: true}

// IfETag is the precondition "the object is still at etag" ("" for "the
// object does not exist").
func IfETag(etag string) Cond { return Cond{etag: etag} }

// apply puts the precondition on a write.
func (c Cond) apply(opts *minio.PutObjectOptions) {
	switch {
	case c.any:
	case c.etag == "":
		opts.SetMatchETagExcept("*")
	default:
		opts.SetMatchETag(c.etag)
	}
}

// Upload writes the file src to key under cond, in parts above 16 MiB
// (the precondition is checked when the upload completes), and returns the
// new ETag. A failed precondition is an error wrapping ErrPrecondition.
func (b *Bucket) Upload(ctx context.Context, key, src, contentType string, cond Cond) (string, error) {
	var etag string
	err := b.retry(ctx, "upload "+b.URL(key), func() error {
		f, err := os.Open(src)
		if err != nil {
			return permanent(err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return permanent(err)
		}
		opts := minio.PutObjectOptions{ContentType: contentType, PartSize: partSize}
		cond.apply(&opts)
		info, err := b.client.PutObject(ctx, b.bucket, key, f, st.Size(), opts)
		if err != nil {
			return err
		}
		etag = strings.Trim(info.ETag, `"`)
		return nil
	})
	return etag, err
}

// PutBytes writes data to key under cond and returns the new ETag.
func (b *Bucket) PutBytes(ctx context.Context, key string, data []byte, contentType string, cond Cond) (string, error) {
	var etag string
	err := b.retry(ctx, "write "+b.URL(key), func() error {
		opts := minio.PutObjectOptions{ContentType: contentType}
		cond.apply(&opts)
		info, err := b.client.PutObject(ctx, b.bucket, key, bytes.NewReader(data), int64(len(data)), opts)
		if err != nil {
			return err
		}
		etag = strings.Trim(info.ETag, `"`)
		return nil
	})
	return etag, err
}

// Get reads a small object whole (at most max bytes).
func (b *Bucket) Get(ctx context.Context, key string, max int64) ([]byte, string, error) {
	var data []byte
	var etag string
	err := b.retry(ctx, "read "+b.URL(key), func() error {
		obj, err := b.client.GetObject(ctx, b.bucket, key, minio.GetObjectOptions{})
		if err != nil {
			return err
		}
		defer obj.Close()
		st, err := obj.Stat()
		if err != nil {
			return err
		}
		if st.Size > max {
			return permanent(fmt.Errorf("%s is %d bytes, more than %d", b.URL(key), st.Size, max))
		}
		data, err = io.ReadAll(obj)
		etag = strings.Trim(st.ETag, `"`)
		return err
	})
	return data, etag, err
}

// Remove deletes key (no error when it is gone).
func (b *Bucket) Remove(ctx context.Context, key string) error {
	return b.retry(ctx, "remove "+b.URL(key), func() error {
		err := b.client.RemoveObject(ctx, b.bucket, key, minio.RemoveObjectOptions{})
		if err != nil && minio.ToErrorResponse(err).StatusCode == 404 {
			return nil
		}
		return err
	})
}

// Copy copies src (only while it is at etag, when given) to dst.
func (b *Bucket) Copy(ctx context.Context, src, etag, dst string) error {
	return b.retry(ctx, "copy "+b.URL(src), func() error {
		s := minio.CopySrcOptions{Bucket: b.bucket, Object: src, MatchETag: etag}
		_, err := b.client.CopyObject(ctx, minio.CopyDestOptions{Bucket: b.bucket, Object: dst}, s)
		return err
	})
}

// List lists the keys under prefix (recursively), in key order.
func (b *Bucket) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	err := b.retry(ctx, "list "+b.URL(prefix), func() error {
		keys = keys[:0]
		objs, err := b.list(ctx, prefix)
		for _, o := range objs {
			keys = append(keys, o.Key)
		}
		return err
	})
	slices.Sort(keys)
	return keys, err
}

// Objects lists the objects under prefix (recursively) in one attempt,
// with no retry: a caller that lists again on a timer (the watcher) logs
// the error and waits for its next turn.
func (b *Bucket) Objects(ctx context.Context, prefix string) ([]minio.ObjectInfo, error) {
	objs, err := b.list(ctx, prefix)
	if err != nil {
		return nil, b.classify("list "+b.URL(prefix), err)
	}
	return objs, nil
}

func (b *Bucket) list(ctx context.Context, prefix string) ([]minio.ObjectInfo, error) {
	var objs []minio.ObjectInfo
	for obj := range b.client.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, obj.Err
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// Compose copies src to dst server-side, in parts when src is large (Copy
// is limited to 5 GiB).
func (b *Bucket) Compose(ctx context.Context, src, dst string) error {
	return b.retry(ctx, "compose "+b.URL(dst), func() error {
		_, err := b.client.ComposeObject(ctx, minio.CopyDestOptions{Bucket: b.bucket, Object: dst}, minio.CopySrcOptions{Bucket: b.bucket, Object: src})
		return err
	})
}
