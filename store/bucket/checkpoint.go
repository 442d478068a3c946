package bucket

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/watcher/s3"
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
		data, err := json.Marshal(s3.Record{Line: l.Line, Errors: l.Errors, Result: l.Data})
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
func (c *checkpointer) flush(ctx context.Context, b *s3.Bucket, name, etag string) error {
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
		if err := b.Checkpoint(ctx, name, etag, p.seq, p.path); err != nil {
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
