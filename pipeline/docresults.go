package pipeline

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/batchd/batchd/pipeline/ledger"
	bolt "go.etcd.io/bbolt"
)

// A requests document's results in its own shape (NAME.results.json): one
// JSON array, an entry per request in the document's order, built from the
// final output and errors files when the batch ends. It is a function of
// those files, so building it again (a crash before it was published, a
// later name that reuses the results) gives the same bytes.

// DocResult is one entry of NAME.results.json.
type DocResult struct {
	// CustomID is the request's custom_id: the one it gave, "request-N"
	// for one without (N its 1-based index, as in the OpenAI-shaped files),
	// or its index N as a number when the request could not be read.
	CustomID any `json:"custom_id"`
	// OutputText, FinishReason and Usage are null for a failed request.
	OutputText *string `json:"output_text"`
	// FinishReason is the first choice's: "stop-words" when a stop string
	// ended it, else the engine's ("stop", "length").
	FinishReason *string         `json:"finish_reason"`
	Usage        json.RawMessage `json:"usage"`
	// Error is null on success; else the engine's error object with its
	// status_code, or batchd's {code, message}.
	Error any `json:"error"`
	// Logprobs, when the request asked for them (chat or completions):
	// per generated token its top alternatives, best first.
	Logprobs [][]DocLogprob `json:"logprobs,omitempty"`
}

// DocLogprob is one alternative of a generated token. TokenID is null when
// the engine gave none (a remote server).
type DocLogprob struct {
	TokenID *int32  `json:"token_id"`
	Token   string  `json:"token"`
	Bytes   []int   `json:"bytes"`
	Logprob float64 `json:"logprob"`
}

// docResultsPath is generation gen of batch id's NAME.results.json.
func docResultsPath(stateDir, id string, gen int) string {
	return filepath.Join(stateBatchDir(stateDir, id), "results."+strconv.Itoa(gen)+".json")
}

// docResults returns the document results of b, building them when
// rebuild is set or they are missing. Only a requests document has them
// ("" otherwise).
func (p *Pipeline) docResults(job Job, b *ledger.Batch, rebuild bool) (string, error) {
	if job.Format != "json" {
		return "", nil
	}
	path := docResultsPath(p.cfg.StateDir, b.ID, b.Gen)
	if !rebuild {
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	}
	out, errs := p.resultPaths(b, b.Gen)
	if err := buildDocResults(path, b, out, errs); err != nil {
		return "", fmt.Errorf("build %s%s: %w", job.Name, ".results.json", err)
	}
	return path, nil
}

// Where a result line is: which file, and its offset there.
const (
	inOutput = 'o'
	inErrors = 'e'
)

var indexBucket = []byte("lines")

// buildDocResults writes the results of batch b, whose committed result
// files are out and errs, to path (atomically, durably). Memory stays
// bounded whatever the batch's size: the lines' offsets, keyed by their
// request id, go to a temporary bbolt file beside path, and each request's
// line is read back from its file in turn.
func buildDocResults(path string, b *ledger.Batch, out, errs string) error {
	idxPath := path + ".index"
	os.Remove(idxPath)
	db, err := bolt.Open(idxPath, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return fmt.Errorf("open index: %w", err)
	}
	defer os.Remove(idxPath)
	defer db.Close()
	outF, err := os.Open(out)
	if err != nil {
		return err
	}
	defer outF.Close()
	errF, err := os.Open(errs)
	if err != nil {
		return err
	}
	defer errF.Close()
	if err := indexLines(db, outF, b.OutLen, inOutput); err != nil {
		return err
	}
	if err := indexLines(db, errF, b.ErrLen, inErrors); err != nil {
		return err
	}

	return writeStateFile(path, func(w *bufio.Writer) error {
		w.WriteString("[")
		err := db.View(func(tx *bolt.Tx) error {
			bk := tx.Bucket(indexBucket)
			for n := 1; n <= b.Total; n++ {
				var where []byte
				if bk != nil {
					where = bk.Get([]byte(requestID(b.ID, n)))
				}
				entry := missingResult(n)
				if len(where) == 9 {
					src, size := outF, b.OutLen
					if where[0] == inErrors {
						src, size = errF, b.ErrLen
					}
					off := int64(binary.BigEndian.Uint64(where[1:]))
					line, err := bufio.NewReader(io.NewSectionReader(src, off, size-off)).ReadBytes('\n')
					if err != nil && err != io.EOF {
						return fmt.Errorf("read result of request %d: %w", n, err)
					}
					entry = docResultOf(n, line)
				}
				enc, err := json.Marshal(entry)
				if err != nil {
					return fmt.Errorf("encode result of request %d: %w", n, err)
				}
				if n > 1 {
					w.WriteString(",")
				}
				w.WriteString("\n")
				w.Write(enc)
			}
			return nil
		})
		if err != nil {
			return err
		}
		w.WriteString("\n]\n")
		return nil
	})
}

// indexLines records where each line of the first size bytes of f is,
// keyed by its id; of lines with the same id the first counts.
func indexLines(db *bolt.DB, f *os.File, size int64, which byte) error {
	const perTx = 20000
	br := bufio.NewReaderSize(io.NewSectionReader(f, 0, size), 1<<16)
	var off int64
	done := false
	for !done {
		err := db.Update(func(tx *bolt.Tx) error {
			bk, err := tx.CreateBucketIfNotExists(indexBucket)
			if err != nil {
				return err
			}
			for range perTx {
				line, err := br.ReadBytes('\n')
				if len(line) > 0 {
					var l struct {
						ID string `json:"id"`
					}
					if json.Unmarshal(line, &l) == nil && l.ID != "" && bk.Get([]byte(l.ID)) == nil {
						v := make([]byte, 9)
						v[0] = which
						binary.BigEndian.PutUint64(v[1:], uint64(off))
						if err := bk.Put([]byte(l.ID), v); err != nil {
							return err
						}
					}
					off += int64(len(line))
				}
				if err == io.EOF {
					done = true
					return nil
				}
				if err != nil {
					return fmt.Errorf("read results: %w", err)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("index results: %w", err)
		}
	}
	return nil
}

// missingResult stands for a request with no result line, which a finished
// batch does not have (the exactly-once invariant); it is reported, not
// hidden.
func missingResult(n int) DocResult {
	return DocResult{CustomID: n, Error: LineError{Code: "missing_result", Message: "batchd found no result for this request in the batch's output or errors file"}}
}

// docResultOf turns request n's result line into its entry.
func docResultOf(n int, line []byte) DocResult {
	var l OutputLine // either shape (result_shape)
	if err := json.Unmarshal(line, &l); err != nil {
		return missingResult(n)
	}
	r := DocResult{CustomID: n}
	if l.CustomID != nil {
		r.CustomID = *l.CustomID
	}
	switch {
	case l.Error != nil:
		r.Error = l.Error
	case l.Response == nil:
		return missingResult(n)
	case l.Response.StatusCode < 200 || l.Response.StatusCode >= 300:
		r.Error = httpError(l.Response.StatusCode, l.Response.Body)
	default:
		answerInto(&r, l.Response.Body)
	}
	return r
}

// httpError is an error answer's error object with its status code.
func httpError(status int, body []byte) map[string]any {
	e := map[string]any{}
	var b struct {
		Error map[string]any `json:"error"`
	}
	if json.Unmarshal(body, &b) == nil && b.Error != nil {
		e = b.Error
	} else {
		e["message"] = string(body)
	}
	e["status_code"] = status
	return e
}

// answerInto fills r from a successful answer: its first choice's text,
// finish reason and logprobs, and its usage.
func answerInto(r *DocResult, body []byte) {
	var a struct {
		Choices []struct {
			Message *struct {
				Content *string `json:"content"`
			} `json:"message"`
			Text         *string         `json:"text"`
			FinishReason *string         `json:"finish_reason"`
			StopReason   any             `json:"stop_reason"`
			Logprobs     json.RawMessage `json:"logprobs"`
		} `json:"choices"`
		Usage json.RawMessage `json:"usage"`
	}
	if json.Unmarshal(body, &a) != nil {
		return
	}
	r.Usage = a.Usage
	if len(a.Choices) == 0 {
		return
	}
	c := a.Choices[0]
	switch {
	case c.Message != nil && c.Message.Content != nil:
		r.OutputText = c.Message.Content
	case c.Text != nil:
		r.OutputText = c.Text
	default:
		empty := ""
		r.OutputText = &empty
	}
	r.FinishReason = c.FinishReason
	if _, isString := c.StopReason.(string); isString && c.FinishReason != nil && *c.FinishReason == "stop" {
		sw := "stop-words"
		r.FinishReason = &sw
	}
	r.Logprobs = docLogprobs(c.Logprobs)
}

// docLogprobs turns a choice's logprobs into the document's: per generated
// token its top alternatives, best first. Chat's top_logprobs carry token
// ids (the native engine's) and bytes; a text completion's carry them in
// batchd's top_tokens (the native engine), else only top_logprobs, keyed by
// text: those have no token_id and their bytes are the text's. Nil when
// there are none (not asked).
func docLogprobs(raw json.RawMessage) [][]DocLogprob {
	var lp struct {
		Content []struct {
			Top []DocLogprob `json:"top_logprobs"`
		} `json:"content"`
		Tokens    []json.RawMessage    `json:"tokens"`
		TopByText []map[string]float64 `json:"top_logprobs"`
		TopTokens [][]DocLogprob       `json:"top_tokens"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &lp) != nil {
		return nil
	}
	var out [][]DocLogprob
	switch {
	case lp.Content != nil:
		out = make([][]DocLogprob, len(lp.Content))
		for i, c := range lp.Content {
			out[i] = c.Top
		}
	case lp.Tokens != nil && len(lp.TopTokens) == len(lp.Tokens):
		out = lp.TopTokens
	case lp.Tokens != nil:
		out = make([][]DocLogprob, len(lp.Tokens))
		for i := range out {
			if i >= len(lp.TopByText) {
				break
			}
			// Keys in order first, so that equal logprobs come out the
			// same way every time the file is built.
			for _, text := range slices.Sorted(maps.Keys(lp.TopByText[i])) {
				out[i] = append(out[i], DocLogprob{Token: text, Logprob: lp.TopByText[i][text]})
			}
		}
	default:
		return nil
	}
	for i, top := range out {
		if top == nil {
			top = []DocLogprob{}
		}
		for j := range top {
			if top[j].Bytes == nil {
				top[j].Bytes = tokenBytesOf(top[j].Token)
			}
		}
		slices.SortStableFunc(top, func(a, b DocLogprob) int {
			switch {
			case a.Logprob > b.Logprob:
				return -1
			case a.Logprob < b.Logprob:
				return 1
			}
			return 0
		})
		out[i] = top
	}
	return out
}

// tokenBytesOf stands in for a server that gives no bytes: the token's
// text as UTF-8.
func tokenBytesOf(token string) []int {
	out := make([]int, len(token))
	for i := range len(token) {
		out[i] = int(token[i])
	}
	return out
}
