package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/pipeline/validate"
)

// cmdConvert turns a requests document into OpenAI batch JSONL (the lines
// the daemon reads from it) and OpenAI batch JSONL of chat requests into a
// requests document.
func cmdConvert(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("convert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	outPath := fs.String("o", "", "write here instead of standard output")
	maxLine := fs.Int("max-line-bytes", 32<<20, "longest line or request accepted")
	if err := fs.Parse(reorder(args)); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: batchd convert FILE [-o OUT]   (NAME.json → JSONL, NAME.jsonl → a requests document)")
		return exitUsage
	}
	path := fs.Arg(0)
	_, format, err := inputFormat(path)
	if err != nil {
		return errorf(stderr, exitUsage, "%v", err)
	}
	in, err := os.Open(path)
	if err != nil {
		return errorf(stderr, exitUsage, "%v", err)
	}
	defer in.Close()

	w := bufio.NewWriter(stdout)
	var af *atomicFile
	if *outPath != "" {
		if af, err = createAtomic(*outPath); err != nil {
			return errorf(stderr, exitFailure, "convert: %v", err)
		}
		w = af.w
	}
	if format == filecontract.FormatJSON {
		err = documentToJSONL(w, docReader(in, path, *maxLine), *maxLine)
	} else {
		err = jsonlToDocument(w, in, *maxLine)
	}
	switch {
	case err != nil && af != nil:
		af.abort()
	case af != nil:
		err = af.commit(true)
	default:
		// Flush what was written, but keep the conversion's error.
		if ferr := w.Flush(); err == nil {
			err = ferr
		}
	}
	if err != nil {
		return errorf(stderr, exitFailure, "convert %s: %v", path, err)
	}
	return exitOK
}

// docReader reads the requests document at path from r, opening path again
// for the keys that come after "requests".
func docReader(r io.Reader, path string, maxLine int) *validate.DocReader {
	d := validate.NewDocReader(r, maxLine)
	d.LookAhead(func() (io.ReadCloser, error) { return os.Open(path) })
	return d
}

// documentToJSONL writes the canonical batch line of each request, compacted:
// a pretty-printed document's newlines inside a request would split its line.
func documentToJSONL(w io.Writer, d *validate.DocReader, maxLine int) error {
	var line bytes.Buffer
	for {
		n, raw, tooLong, err := d.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if tooLong {
			return fmt.Errorf("request %d is longer than %d bytes", n, maxLine)
		}
		if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
			return fmt.Errorf("request %d is not a JSON object", n)
		}
		line.Reset()
		if err := json.Compact(&line, raw); err != nil {
			return fmt.Errorf("request %d: %w", n, err)
		}
		line.WriteByte('\n')
		if _, err := w.Write(line.Bytes()); err != nil {
			return err
		}
	}
}

// jsonlToDocument writes a requests document whose requests are the lines'
// chat bodies with their custom_ids. Fields a document would default
// differently from a JSONL line are written out: temperature 0 (greedy, as
// an absent one means in JSONL), top_p 1 and top_k 0 (off). A line that is
// not a chat request, or has no max_tokens (a document would default it to
// 256), is refused by number.
func jsonlToDocument(w io.Writer, r io.Reader, maxLine int) error {
	lr := validate.NewLineReader(r, maxLine)
	if _, err := io.WriteString(w, "{\"requests\": [\n"); err != nil {
		return err
	}
	count := 0
	for {
		n, raw, tooLong, err := lr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if tooLong {
			return fmt.Errorf("line %d is longer than %d bytes", n, maxLine)
		}
		req, err := chatRequest(raw)
		if err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		sep := "  "
		if count > 0 {
			sep = ",\n  "
		}
		count++
		if _, err := io.WriteString(w, sep); err != nil {
			return err
		}
		if _, err := w.Write(req); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, "\n]}\n")
	return err
}

// chatRequest turns one batch line into a document request.
func chatRequest(raw []byte) ([]byte, error) {
	var line struct {
		CustomID json.RawMessage            `json:"custom_id"`
		Method   string                     `json:"method"`
		URL      string                     `json:"url"`
		Body     map[string]json.RawMessage `json:"body"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&line); err != nil {
		return nil, fmt.Errorf("not a batch line: %v", err)
	}
	if line.Method != "POST" || line.URL != "/v1/chat/completions" {
		return nil, fmt.Errorf("a requests document holds chat requests only (POST /v1/chat/completions), got %s %s", line.Method, line.URL)
	}
	if line.Body == nil {
		return nil, errors.New("has no body")
	}
	for _, k := range []string{"custom_id", "method", "url", "body", "num_logprobs", "max_generate_length", "lora_name", "save_system_prompt_kv_cache", "disable_spec_decode"} {
		if _, ok := line.Body[k]; ok {
			return nil, fmt.Errorf("body.%s cannot be written in a requests document, which reads it as its own key", k)
		}
	}
	if !present(line.Body["max_tokens"]) && !present(line.Body["max_completion_tokens"]) {
		return nil, errors.New("has no max_tokens, and a requests document would default it to 256: set body.max_tokens")
	}
	for k, v := range map[string]string{"temperature": "0", "top_p": "1", "top_k": "0"} {
		if !present(line.Body[k]) {
			line.Body[k] = json.RawMessage(v)
		}
	}
	if present(line.CustomID) {
		line.Body["custom_id"] = line.CustomID
	}
	return json.Marshal(line.Body)
}

func present(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) > 0 && string(v) != "null"
}
