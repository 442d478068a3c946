package s3

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// ---- progress checkpoints ----------------------------------------------------

// Record is one result line in a checkpoint.
type Record struct {
	Line   int             `json:"line"`
	Errors bool            `json:"errors,omitempty"`
	Result json.RawMessage `json:"result"`
}

// checkpointDir is where the checkpoints of batch name at input ETag live.
func (b *Bucket) checkpointDir(name, etag string) string {
	return b.Key(dirCheckpoints, name+"/"+etag) + "/"
}

// Checkpoint uploads the file of records src as the next checkpoint of
// batch name at input etag. seq orders checkpoints; the owner's name keeps
// two daemons' checkpoints apart.
func (b *Bucket) Checkpoint(ctx context.Context, name, etag string, seq int, src string) error {
	key := fmt.Sprintf("%s%08d-%s.jsonl", b.checkpointDir(name, etag), seq, b.cfg.Owner)
	_, err := b.Upload(ctx, key, src, "application/jsonl", Any)
	return err
}

// checkpoints lists the checkpoint keys of batch name at etag, in order.
func (b *Bucket) checkpoints(ctx context.Context, name, etag string) ([]string, error) {
	var keys []string
	err := b.retry(ctx, "list checkpoints", func() error {
		keys = keys[:0]
		for obj := range b.client.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: b.checkpointDir(name, etag), Recursive: true}) {
			if obj.Err != nil {
				return obj.Err
			}
			keys = append(keys, obj.Key)
		}
		return nil
	})
	slices.Sort(keys)
	return keys, err
}

// NextCheckpoint is the sequence number after the last checkpoint of batch
// name at etag.
func (b *Bucket) NextCheckpoint(ctx context.Context, name, etag string) (int, error) {
	keys, err := b.checkpoints(ctx, name, etag)
	if err != nil || len(keys) == 0 {
		return 1, err
	}
	last := keys[len(keys)-1]
	base := last[strings.LastIndex(last, "/")+1:]
	n, _ := strconv.Atoi(strings.SplitN(base, "-", 2)[0])
	return n + 1, nil
}

// ReadCheckpoints streams every record of batch name's checkpoints at etag
// to yield, each checkpoint object downloaded to dir first (so that a
// dropped connection resumes, and memory stays bounded). Records of
// several owners may repeat a line; the caller keeps the first.
func (b *Bucket) ReadCheckpoints(ctx context.Context, name, etag, dir string, yield func(Record) error) (objects int, err error) {
	keys, err := b.checkpoints(ctx, name, etag)
	if err != nil {
		return 0, err
	}
	for _, key := range keys {
		local := filepath.Join(dir, "checkpoint.jsonl")
		if err := b.Download(ctx, key, "", local); err != nil {
			return objects, err
		}
		if err := readRecords(local, yield); err != nil {
			return objects, fmt.Errorf("checkpoint %s: %w", b.URL(key), err)
		}
		os.Remove(local)
		objects++
	}
	return objects, nil
}

func readRecords(path string, yield func(Record) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReaderSize(f, 1<<20))
	for {
		var r Record
		err := dec.Decode(&r)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			// An upload is all or nothing, so this is not a torn write.
			return fmt.Errorf("decode record: %w", err)
		}
		if err := yield(r); err != nil {
			return err
		}
	}
}

// RemoveCheckpoints deletes the checkpoints of batch name at etag.
func (b *Bucket) RemoveCheckpoints(ctx context.Context, name, etag string) error {
	keys, err := b.checkpoints(ctx, name, etag)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := b.Remove(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// ---- publishing -----------------------------------------------------------------

// Publication is the commit record of a batch's results: which daemon's
// staged objects become the outbox objects. It lives at
// .batchd/published/NAME/ETAG.json and is created only if it does not
// exist, so exactly one daemon publishes each input version.
type Publication struct {
	Owner   string            `json:"owner"`
	Objects map[string]string `json:"objects"` // outbox key → staged key
}

func (b *Bucket) publicationKey(name, etag string) string {
	return b.Key(".batchd/published", name+"/"+etag+".json")
}

// StagingKey is where this daemon stages result file base of batch name at
// etag before publishing it.
func (b *Bucket) StagingKey(name, etag, base string) string {
	return b.Key(".batchd/staging", name+"/"+etag+"/"+b.cfg.Owner+"/"+base)
}

// Commit creates the publication record of batch name at etag. It returns
// the record that holds: pub when this daemon's write created it (or an
// earlier write of its own did), another daemon's otherwise.
func (b *Bucket) Commit(ctx context.Context, name, etag string, pub Publication) (Publication, error) {
	data, _ := json.Marshal(pub)
	key := b.publicationKey(name, etag)
	_, err := b.PutBytes(ctx, key, data, "application/json", IfETag(""))
	if err == nil {
		return pub, nil
	}
	if !errors.Is(err, ErrPrecondition) {
		return Publication{}, err
	}
	cur, ok, err := b.Published(ctx, name, etag)
	if err != nil {
		return Publication{}, err
	}
	if !ok {
		return Publication{}, fmt.Errorf("publication record %s vanished", b.URL(key))
	}
	return cur, nil
}

// Published reads the publication record of batch name at etag.
func (b *Bucket) Published(ctx context.Context, name, etag string) (Publication, bool, error) {
	var pub Publication
	data, _, err := b.Get(ctx, b.publicationKey(name, etag), 1<<20)
	if IsNotFound(err) {
		return pub, false, nil
	}
	if err != nil {
		return pub, false, err
	}
	if err := json.Unmarshal(data, &pub); err != nil {
		return pub, false, fmt.Errorf("publication record of %s: %w", name, err)
	}
	return pub, true, nil
}

// Install copies a publication's staged objects to their outbox keys
// (server-side, in parts when large). It is idempotent: whoever finds a
// record whose publisher died finishes the job.
func (b *Bucket) Install(ctx context.Context, pub Publication) error {
	keys := make([]string, 0, len(pub.Objects))
	for k := range pub.Objects {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, dst := range keys {
		src := pub.Objects[dst]
		err := b.retry(ctx, "install "+b.URL(dst), func() error {
			_, err := b.client.ComposeObject(ctx, minio.CopyDestOptions{Bucket: b.bucket, Object: dst}, minio.CopySrcOptions{Bucket: b.bucket, Object: src})
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Unpublish removes the publication record of batch name at etag and every
// daemon's staged objects for it.
func (b *Bucket) Unpublish(ctx context.Context, name, etag string) error {
	var keys []string
	err := b.retry(ctx, "list staging", func() error {
		keys = keys[:0]
		for obj := range b.client.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: b.Key(".batchd/staging", name+"/"+etag+"/"), Recursive: true}) {
			if obj.Err != nil {
				return obj.Err
			}
			keys = append(keys, obj.Key)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := b.Remove(ctx, k); err != nil {
			return err
		}
	}
	return b.Remove(ctx, b.publicationKey(name, etag))
}
