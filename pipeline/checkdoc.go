package pipeline

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strings"
)

// Check's part for a requests document's NAME.results.json: it must exist
// exactly when the batch came from a requests document and ran, parse as
// one JSON array, hold one entry per request in request order, and each
// entry must be what the request's result line in the output or errors
// file gives (docResultOf, the function the pipeline builds it with).

// The fields of a results entry Check compares, in report order.
var docFields = [...]string{"custom_id", "output_text", "finish_reason", "usage", "error", "logprobs"}

// docExpect is what request n's results entry must hold, from its result
// line: where that line is, the custom_id as JSON, and a digest of each
// field of docFields.
type docExpect struct {
	isErrors bool
	line     int
	customID string
	sums     [len(docFields)]uint64
}

// expectDoc derives request n's entry from its result line raw.
func expectDoc(n int, raw []byte, isErrors bool, line int) *docExpect {
	r := docResultOf(n, raw)
	cid, _ := json.Marshal(r.CustomID)
	e := &docExpect{isErrors: isErrors, line: line, customID: string(cid)}
	var logprobs any
	if r.Logprobs != nil {
		logprobs = r.Logprobs
	}
	var usage any
	if len(r.Usage) > 0 {
		usage = r.Usage
	}
	for i, v := range []any{r.CustomID, r.OutputText, r.FinishReason, usage, r.Error, logprobs} {
		b, err := json.Marshal(v)
		if err != nil {
			b = nil
		}
		e.sums[i] = jsonDigest(b)
	}
	return e
}

// jsonDigest hashes a JSON value's canonical form (decoded and encoded
// again: object keys sorted, spacing and number spelling normalised); an
// absent value counts as null.
func jsonDigest(raw []byte) uint64 {
	var v any
	if len(raw) > 0 && json.Unmarshal(raw, &v) != nil {
		v = "\x00unparsable:" + string(raw)
	}
	b, _ := json.Marshal(v)
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// checkDocResults checks in.Results against the input's requests (lines of
// them) and the result lines' expectations (expect, by request; a request
// with none has no result line, reported already, and its entry must say
// missing_result).
func checkDocResults(in CheckInput, lines int, expect map[int]*docExpect, rep *CheckReport) error {
	f, err := os.Open(in.Results)
	if errors.Is(err, os.ErrNotExist) {
		rep.addf("%s is missing: a requests document's batch has its results in that file too", in.Results)
		return nil
	}
	if err != nil {
		return fmt.Errorf("open document results: %w", err)
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReaderSize(f, 1<<20))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		rep.addf("%s: not a JSON array of results (%s)", in.Results, tokenFault(tok, err))
		return nil
	}
	entries := 0
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			rep.addf("%s: entry %d does not parse: %v (the file is cut short or not JSON)", in.Results, entries+1, err)
			return nil
		}
		entries++
		if entries > lines {
			continue // counted below
		}
		e := expect[entries]
		if e == nil {
			e = expectDoc(entries, nil, true, 0)
		}
		checkDocEntry(in, entries, raw, e, rep)
	}
	if _, err := dec.Token(); err != nil {
		rep.addf("%s: the array is not closed after entry %d: %v (the file is cut short)", in.Results, entries, err)
		return nil
	}
	if _, err := dec.Token(); err != io.EOF {
		rep.addf("%s: data after the array of results", in.Results)
	}
	switch {
	case entries > lines:
		rep.addf("%s: %d entries, but the input has %d requests: entries %d to %d stand for no request", in.Results, entries, lines, lines+1, entries)
	case entries < lines:
		rep.addf("%s: %d entries, but the input has %d requests: requests %d to %d have no entry", in.Results, entries, lines, entries+1, lines)
	}
	return nil
}

// checkDocEntry checks entry n (raw) against e.
func checkDocEntry(in CheckInput, n int, raw json.RawMessage, e *docExpect, rep *CheckReport) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		rep.addf("%s: entry %d: not an object", in.Results, n)
		return
	}
	where := "no result line"
	if e.line > 0 {
		where = fmt.Sprintf("%s:%d", in.Output, e.line)
		if e.isErrors {
			where = fmt.Sprintf("%s:%d", in.Errors, e.line)
		}
	}
	var unknown []string
	for k := range m {
		known := false
		for _, f := range docFields {
			known = known || k == f
		}
		if !known {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		rep.addf("%s: entry %d: unknown keys %s", in.Results, n, strings.Join(unknown, ", "))
	}
	if jsonDigest(m["custom_id"]) != e.sums[0] {
		rep.addf("%s: entry %d: custom_id %s, but request %d's is %s (%s)", in.Results, n, string(m["custom_id"]), n, e.customID, where)
		return // out of order or another request's: its fields say nothing more
	}
	if failed := jsonDigest(m["error"]) != jsonDigest(nil); failed != e.isErrors {
		got, want := "no error", "a failure"
		if failed {
			got, want = "an error", "a success"
		}
		rep.addf("%s: entry %d (custom_id %s): %s, but its result is %s (%s)", in.Results, n, e.customID, got, want, where)
		return
	}
	var differ []string
	for i := 1; i < len(docFields); i++ {
		if jsonDigest(m[docFields[i]]) != e.sums[i] {
			differ = append(differ, docFields[i])
		}
	}
	if len(differ) > 0 {
		rep.addf("%s: entry %d (custom_id %s): %s not as %s gives", in.Results, n, e.customID, strings.Join(differ, ", "), where)
	}
}

// tokenFault describes what stood where a JSON array should start.
func tokenFault(tok json.Token, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("starts with %v", tok)
}
