package pipeline

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"unicode/utf8"

	"github.com/batchd/batchd/pipeline/validate"
)

// CheckInput names a finished batch's files for Check.
type CheckInput struct {
	Input, Format          string // the input file and its format (jsonl or json)
	Output, Errors, Object string // NAME.output.jsonl, NAME.errors.jsonl, NAME.batch.json
	// Results is NAME.results.json, which must exist exactly when the
	// input is a requests document whose requests ran; empty skips that
	// check.
	Results      string
	MaxLineBytes int
}

// CheckReport is what Check found. OK is true when the exactly-once
// invariant holds.
type CheckReport struct {
	Status         string
	Lines          int // input lines (requests)
	OutputLines    int
	ErrorLines     int
	Problems       []string // every violation, capped
	ProblemsCapped int      // violations beyond the cap
}

// OK reports whether no violation was found.
func (r *CheckReport) OK() bool { return len(r.Problems) == 0 }

const maxReportedProblems = 50

func (r *CheckReport) addf(format string, args ...any) {
	if len(r.Problems) >= maxReportedProblems {
		r.ProblemsCapped++
		return
	}
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Check verifies a finished batch against its input: every input line has
// exactly one result line across output ∪ errors, each result line's
// custom_id is its input line's, every result line is whole JSON in valid
// UTF-8 whose response.body (when it has one) is an object, a success's
// usage is token counts, the batch object's counts agree and its usage is
// not negative, and a requests document's NAME.results.json
// has one entry per request, in order, that agrees with its result line.
// It is the offline oracle for the exactly-once guarantee (like `bbolt
// check` for bbolt).
func Check(in CheckInput) (*CheckReport, error) {
	if in.MaxLineBytes == 0 {
		in.MaxLineBytes = 32 << 20
	}
	rep := &CheckReport{}
	obj, err := ReadBatchObject(in.Object)
	if err != nil {
		return nil, err
	}
	rep.Status = obj.Status
	if !Terminal(obj.Status) {
		rep.addf("batch status is %q: it has not finished", obj.Status)
		return rep, nil
	}

	// Each input line's custom_id ("" when none could be read), and the line
	// of each custom_id that a result line may name without a line number.
	f, err := os.Open(in.Input)
	if err != nil {
		return nil, fmt.Errorf("open input: %w", err)
	}
	defer f.Close()
	var src validate.LineSource = validate.NewLineReader(f, in.MaxLineBytes)
	if in.Format == "json" {
		d := validate.NewDocReader(f, in.MaxLineBytes)
		d.LookAhead(func() (io.ReadCloser, error) { return os.Open(in.Input) })
		src = d
	}
	chk := validate.NewChecker(validate.Config{})
	ids := make(map[int]string)
	lineOf := make(map[string]int)
	for {
		n, raw, tooLong, err := src.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if obj.Status == StatusFailed {
				break
			}
			return nil, fmt.Errorf("read input: %w", err)
		}
		rep.Lines++
		res := check(chk, n, raw, tooLong, in.MaxLineBytes)
		ids[n] = ""
		if res.HasCustomID {
			ids[n] = res.CustomID
		}
		if res.Problem == nil || res.Problem.Kind == validate.KindBadRequest {
			lineOf[res.CustomID] = n
		}
	}

	if obj.Status == StatusFailed && obj.Errors != nil {
		// Rejected before anything ran: there must be no results.
		for _, p := range []string{in.Output, in.Results} {
			if _, err := os.Stat(p); p != "" && err == nil {
				rep.addf("batch failed validation but %s exists", p)
			}
		}
		return rep, nil
	}

	seen := make(map[int]int)
	var expect map[int]*docExpect // the results entries the result lines call for
	if in.Results != "" {
		if in.Format == "json" {
			expect = make(map[int]*docExpect)
		} else if _, err := os.Stat(in.Results); err == nil {
			rep.addf("%s exists, but the input is not a requests document: only a requests document's batch has one", in.Results)
		}
	}
	var err1, err2 error
	rep.OutputLines, err1 = scanResults(in.Output, false, ids, lineOf, seen, expect, rep)
	rep.ErrorLines, err2 = scanResults(in.Errors, true, ids, lineOf, seen, expect, rep)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	if expect != nil {
		if err := checkDocResults(in, rep.Lines, expect, rep); err != nil {
			return nil, err
		}
	}
	var missing, dup []int
	for n := range ids {
		switch seen[n] {
		case 0:
			missing = append(missing, n)
		case 1:
		default:
			dup = append(dup, n)
		}
	}
	sort.Ints(missing)
	sort.Ints(dup)
	for _, n := range missing {
		rep.addf("line %d (custom_id %q): no result line", n, ids[n])
	}
	for _, n := range dup {
		rep.addf("line %d (custom_id %q): %d result lines", n, ids[n], seen[n])
	}
	if u := obj.Usage; u.InputTokens < 0 || u.OutputTokens < 0 || u.TotalTokens < 0 || u.InputTokensDetails.CachedTokens < 0 {
		rep.addf("batch object: negative usage %+v", u)
	}
	c := obj.RequestCounts
	if c.Total != c.Completed+c.Failed {
		rep.addf("batch object: request_counts.total %d != completed %d + failed %d", c.Total, c.Completed, c.Failed)
	}
	if c.Total != rep.Lines {
		rep.addf("batch object: request_counts.total %d, but the input has %d requests", c.Total, rep.Lines)
	}
	if c.Completed != rep.OutputLines {
		rep.addf("batch object: request_counts.completed %d, but the output file has %d lines", c.Completed, rep.OutputLines)
	}
	if c.Failed != rep.ErrorLines {
		rep.addf("batch object: request_counts.failed %d, but the errors file has %d lines", c.Failed, rep.ErrorLines)
	}
	return rep, nil
}

// scanResults reads one result file, counting result lines per input line;
// with expect it records what each request's NAME.results.json entry must
// be (of several result lines, the first, as the pipeline builds it).
func scanResults(path string, isErrors bool, ids map[int]string, lineOf map[string]int, seen map[int]int, expect map[int]*docExpect, rep *CheckReport) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("open results: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	count := 0
	for i := 1; ; i++ {
		raw, err := br.ReadBytes('\n')
		if len(raw) > 0 {
			count++
			if raw[len(raw)-1] != '\n' {
				rep.addf("%s:%d: torn line (no final newline)", path, i)
			}
			var l OutputLine
			if !utf8.Valid(raw) {
				// encoding/json would read it, replacing the bytes.
				rep.addf("%s:%d: not valid UTF-8 (at byte %d)", path, i, invalidUTF8At(raw))
			} else if jerr := json.Unmarshal(raw, &l); jerr != nil {
				rep.addf("%s:%d: not a JSON result line: %v", path, i, jerr)
			} else {
				n := checkResultLine(path, i, &l, isErrors, ids, lineOf, seen, rep)
				if expect != nil && n > 0 && expect[n] == nil {
					expect[n] = expectDoc(n, raw, isErrors, i)
				}
			}
		}
		if err == io.EOF {
			return count, nil
		}
		if err != nil {
			return count, fmt.Errorf("read %s: %w", path, err)
		}
	}
}

// checkResultLine checks result line i of path and returns the input line
// it answers, or 0 when it names none.
func checkResultLine(path string, i int, l *OutputLine, isErrors bool, ids map[int]string, lineOf map[string]int, seen map[int]int, rep *CheckReport) int {
	n := l.Line
	if n == 0 {
		if l.CustomID == nil {
			rep.addf("%s:%d: no custom_id and no line number", path, i)
			return 0
		}
		var ok bool
		if n, ok = lineOf[*l.CustomID]; !ok {
			rep.addf("%s:%d: custom_id %q is not in the input", path, i, *l.CustomID)
			return 0
		}
	}
	want, ok := ids[n]
	if !ok {
		rep.addf("%s:%d: line %d is not an input line", path, i, n)
		return 0
	}
	got := ""
	if l.CustomID != nil {
		got = *l.CustomID
	}
	// A line too long for the daemon's limit has no readable custom_id, even
	// when the checker's limit is larger.
	tooLong := l.Error != nil && l.Error.Code == "line_too_long" && l.CustomID == nil
	if got != want && !tooLong {
		rep.addf("%s:%d: custom_id %q, but input line %d has %q", path, i, got, n, want)
	}
	success := l.Response != nil && l.Response.StatusCode >= 200 && l.Response.StatusCode < 300
	if isErrors == success {
		rep.addf("%s:%d: a %s line in the wrong file", path, i, map[bool]string{true: "success", false: "failure"}[success])
	}
	if l.Response != nil {
		// What the pipeline refuses from an engine (answer.go).
		problem := bodyProblem(l.Response.Body)
		if problem == "" && success {
			_, problem = usageOf(l.Response.Body)
		}
		if problem != "" {
			rep.addf("%s:%d: response.body %s", path, i, problem)
		}
	}
	seen[n]++
	return n
}
