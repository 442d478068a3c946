package bucket

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/store/bucket/s3client"
)

// FetchBatch downloads batch name's input (from done/, or inbox/ while it
// runs) and its result objects from b into dir, for `batchd check`. A
// missing input or result wraps os.ErrNotExist.
func FetchBatch(ctx context.Context, b *s3client.Bucket, name, dir string) (pipeline.CheckInput, error) {
	var in pipeline.CheckInput
	for _, key := range []string{b.DoneKey(name + filecontract.SuffixJSONL), b.DoneKey(name + filecontract.SuffixJSON), b.InboxKey(name + filecontract.SuffixJSONL), b.InboxKey(name + filecontract.SuffixJSON)} {
		tag, _, err := b.Stat(ctx, key)
		if err != nil {
			return in, err
		}
		if tag == "" {
			continue
		}
		in.Input = filepath.Join(dir, filepath.Base(key))
		in.Format = strings.TrimPrefix(filepath.Ext(key), ".")
		if err := b.Download(ctx, key, tag, in.Input); err != nil {
			return in, err
		}
		break
	}
	if in.Input == "" {
		return in, fmt.Errorf("no input for batch %q in %s or %s: %w", name, b.URL(b.DoneKey("")), b.URL(b.InboxKey("")), os.ErrNotExist)
	}
	for _, f := range []struct {
		base string
		dst  *string
	}{{name + filecontract.SuffixOutput, &in.Output}, {name + filecontract.SuffixErrors, &in.Errors}, {name + filecontract.SuffixBatch, &in.Object}} {
		*f.dst = filepath.Join(dir, f.base)
		if err := b.Download(ctx, b.OutboxKey(f.base), "", *f.dst); err != nil {
			if s3client.IsNotFound(err) {
				return in, fmt.Errorf("%s: %w", b.URL(b.OutboxKey(f.base)), os.ErrNotExist)
			}
			return in, err
		}
	}
	// NAME.results.json is there only for a requests document: Check
	// reports one missing, or one there for JSONL.
	in.Results = filepath.Join(dir, name+filecontract.SuffixResults)
	if err := b.Download(ctx, b.OutboxKey(name+filecontract.SuffixResults), "", in.Results); err != nil && !s3client.IsNotFound(err) {
		return in, err
	}
	return in, nil
}
