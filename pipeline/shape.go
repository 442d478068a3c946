package pipeline

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline/ledger"
)

// The shape NAME.output.jsonl is published in (result_shape). The pipeline
// keeps every batch's results in OpenAI's shape (seeding, re-drops and
// retries read them; /v1/files/{id}/content serves them); a batch that
// asks for Doubleword's shape publishes a copy in it, built from the
// committed output file when the batch ends. It is a function of that
// file, so building it again gives the same bytes.

// doublewordLine is a line of NAME.output.jsonl in Doubleword's shape.
type doublewordLine struct {
	ID           string          `json:"id"`
	CustomID     *string         `json:"custom_id"`
	ResponseBody json.RawMessage `json:"response_body"`
}

// publishedOutput returns the output file to publish for b in shape: out
// (the pipeline's own, OpenAI's shape) or its copy in Doubleword's shape,
// built when rebuild is set or it is missing.
func (p *Pipeline) publishedOutput(b *ledger.Batch, shape, out string, rebuild bool) (string, error) {
	if shape != ResultShapeDoubleword {
		return out, nil
	}
	path := filepath.Join(stateBatchDir(p.cfg.StateDir, b.ID), "output."+strconv.Itoa(b.Gen)+"."+ResultShapeDoubleword+".jsonl")
	if !rebuild {
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	}
	if err := buildDoubleword(path, out, b.OutLen); err != nil {
		return "", fmt.Errorf("output in %s's shape: %w", ResultShapeDoubleword, err)
	}
	return path, nil
}

// buildDoubleword writes path: the first size bytes of the output file out,
// each line in Doubleword's shape.
func buildDoubleword(path, out string, size int64) error {
	in, err := os.Open(out)
	if err != nil {
		return err
	}
	defer in.Close()
	br := bufio.NewReaderSize(io.NewSectionReader(in, 0, size), 1<<16)
	return writeStateFile(path, func(w *bufio.Writer) error {
		for i := 1; ; i++ {
			raw, err := br.ReadBytes('\n')
			if len(raw) > 0 {
				var l OutputLine
				if err := json.Unmarshal(raw, &l); err != nil || l.Response == nil {
					return fmt.Errorf("output line %d: not a response line", i)
				}
				enc, err := json.Marshal(doublewordLine{ID: l.ID, CustomID: l.CustomID, ResponseBody: l.Response.Body})
				if err != nil {
					return fmt.Errorf("output line %d: %w", i, err)
				}
				w.Write(enc)
				w.WriteByte('\n')
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("read %s: %w", out, err)
			}
		}
	})
}

// writeStateFile makes path durably, whole or not at all: fill writes its
// content to a temporary file that then takes path's place.
func writeStateFile(path string, fill func(w *bufio.Writer) error) error {
	tmp := path + ".tmp"
	f, err := fsx.OpenNoFollow(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<16)
	if err := fill(w); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", filepath.Base(path), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", filepath.Base(path), err)
	}
	return fsx.SyncDir(filepath.Dir(path))
}
