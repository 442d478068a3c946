package bucket

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/store/bucket/s3client"
)

// checkpointer collects committed result lines in a local file and uploads
// them as numbered checkpoint objects. add runs on the batch's writer;
// flush on the saver; files not uploaded yet wait, in order, for the next
// flush.
type checkpointer struct {
	mu      sync.Mutex
	base    string
	f       *os.File
	w       *bufio.Writer
	n       int
	seq     int
	pending []pendingCheckpoint
}

type pendingCheckpoint struct {
	path string
	seq  int
}

func newCheckpointer(base string, seq int) (*checkpointer, error) {
	c := &checkpointer{base: base, seq: seq}
	return c, c.open()
}

func (c *checkpointer) open() error {
	f, err := os.Create(fmt.Sprintf("%s-%08d.jsonl", c.base, c.seq))
	if err != nil {
		return fmt.Errorf("checkpoint spool: %w", err)
	}
	c.f, c.w, c.n = f, bufio.NewWriterSize(f, 256<<10), 0
	return nil
}

func (c *checkpointer) add(lines []pipeline.Committed) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range lines {
		data, err := json.Marshal(checkpointRecord{Line: l.Line, Errors: l.Errors, Result: l.Data})
		if err != nil {
			return err
		}
		c.w.Write(data)
		if err := c.w.WriteByte('\n'); err != nil {
			return fmt.Errorf("checkpoint spool: %w", err)
		}
		c.n++
	}
	return nil
}

// flush uploads what add collected since the last flush.
func (c *checkpointer) flush(ctx context.Context, b *s3client.Bucket, name, etag string) error {
	c.mu.Lock()
	if c.n > 0 {
		if err := c.w.Flush(); err != nil {
			c.mu.Unlock()
			return fmt.Errorf("checkpoint spool: %w", err)
		}
		c.f.Close()
		c.pending = append(c.pending, pendingCheckpoint{c.f.Name(), c.seq})
		c.seq++
		if err := c.open(); err != nil {
			c.mu.Unlock()
			return err
		}
	}
	pend := c.pending
	c.mu.Unlock()
	for len(pend) > 0 {
		p := pend[0]
		if err := uploadCheckpoint(ctx, b, name, etag, p.seq, p.path); err != nil {
			return err
		}
		os.Remove(p.path)
		pend = pend[1:]
		c.mu.Lock()
		c.pending = c.pending[1:]
		c.mu.Unlock()
	}
	return nil
}

func (c *checkpointer) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f != nil {
		c.f.Close()
	}
}

// dirCheckpoints holds the checkpoints of each batch and input version:
// NAME/ETAG/SEQ-OWNER.jsonl, each a file of checkpointRecords.
const dirCheckpoints = ".batchd/checkpoints"

// checkpointRecord is one committed result line in a checkpoint object,
// one JSON object a line.
type checkpointRecord struct {
	Line   int             `json:"line"`
	Errors bool            `json:"errors,omitempty"`
	Result json.RawMessage `json:"result"`
}

// checkpointDir is where the checkpoints of batch name at input ETag live.
func checkpointDir(b *s3client.Bucket, name, etag string) string {
	return b.Key(dirCheckpoints, name+"/"+etag) + "/"
}

// uploadCheckpoint uploads the file of records src as the next checkpoint
// of batch name at input etag. seq orders checkpoints; the owner's name
// keeps two daemons' checkpoints apart.
func uploadCheckpoint(ctx context.Context, b *s3client.Bucket, name, etag string, seq int, src string) error {
	key := fmt.Sprintf("%s%08d-%s.jsonl", checkpointDir(b, name, etag), seq, b.Owner())
	_, err := b.Upload(ctx, key, src, "application/jsonl", s3client.Any)
	return err
}

// nextCheckpoint is the sequence number after the last checkpoint of
// batch name at etag.
func nextCheckpoint(ctx context.Context, b *s3client.Bucket, name, etag string) (int, error) {
	keys, err := b.List(ctx, checkpointDir(b, name, etag))
	if err != nil || len(keys) == 0 {
		return 1, err
	}
	last := keys[len(keys)-1]
	base := last[strings.LastIndex(last, "/")+1:]
	n, _ := strconv.Atoi(strings.SplitN(base, "-", 2)[0])
	return n + 1, nil
}

// readCheckpoints streams every record of batch name's checkpoints at
// etag to yield, each checkpoint object downloaded to dir first (so that a
// dropped connection resumes, and memory stays bounded). Records of
// several owners may repeat a line; the caller keeps the first.
func readCheckpoints(ctx context.Context, b *s3client.Bucket, name, etag, dir string, yield func(checkpointRecord) error) (objects int, err error) {
	keys, err := b.List(ctx, checkpointDir(b, name, etag))
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

func readRecords(path string, yield func(checkpointRecord) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReaderSize(f, 1<<20))
	for {
		var r checkpointRecord
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

// removeCheckpoints deletes the checkpoints of batch name at etag.
func removeCheckpoints(ctx context.Context, b *s3client.Bucket, name, etag string) error {
	keys, err := b.List(ctx, checkpointDir(b, name, etag))
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
