package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
)

// Codes of error lines that are not HTTP-like (response null).
const (
	CodeBatchExpired      = "batch_expired"
	CodeBatchCancelled    = "batch_cancelled"
	CodeEngineUnavailable = "engine_unavailable"
	CodeInvalidResponse   = "invalid_engine_response"
	// CodeEngineCrashed: the request was in flight at two unclean stops of
	// the daemon, the second time alone (inflight.go); it is not run again
	// (POST /v1/batches/{id}/retry runs it once more, alone).
	CodeEngineCrashed = "engine_crashed"
)

// suspectLimit is how many unclean stops with a request in flight fail it.
const suspectLimit = 2

// rerunnable tells which error-line codes a later run of the same content
// retries instead of reusing: they say nothing about the request itself.
func rerunnable(code string) bool {
	switch code {
	case CodeBatchExpired, CodeBatchCancelled, CodeEngineUnavailable, CodeInvalidResponse:
		return true
	}
	return false
}

// OutputLine is one line of NAME.output.jsonl or NAME.errors.jsonl, in
// OpenAI's batch output shape plus, on error lines, the 1-based input line.
type OutputLine struct {
	ID       string        `json:"id"`
	CustomID *string       `json:"custom_id"`
	Response *LineResponse `json:"response"`
	Error    *LineError    `json:"error"`
	Line     int           `json:"line,omitempty"`
}

// LineResponse is an output line's response.
type LineResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

// LineError is an output line's error, for failures that are not HTTP-like.
type LineError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// requestID returns the stable id of a batch's line: the same line of the
// same batch always gets the same id, so a resumed run writes exactly what an
// uninterrupted one would.
func requestID(batchID string, line int) string {
	h := sha256.New()
	h.Write([]byte(batchID))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, int64(line), 10))
	var sum [sha256.Size]byte
	return "batch_req_" + hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// lineKind tells whether a result line goes to the output or the errors file.
type lineKind uint8

const (
	toOutput lineKind = iota
	toErrors
)

// result is one finished line on its way to the writer.
type result struct {
	line  int
	kind  lineKind
	data  []byte // the JSON line without its newline
	usage lineUsage
}

// lineUsage is the token usage a result line's body reports.
type lineUsage struct {
	in, out, cached int64
}

func encodeLine(l *OutputLine) []byte {
	b, err := json.Marshal(l)
	if err != nil {
		// Only a body that is not JSON can fail, and callers check bodies first.
		panic("encode output line: " + err.Error())
	}
	return b
}

func strPtr(s string) *string { return &s }
