package pipeline

import (
	"strings"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/pipeline/ledger"
)

// benchAnswer is a typical chat answer as a remote engine sends it.
var benchAnswer = []byte(`{"id":"chatcmpl-0123456789","object":"chat.completion","created":1700000000,"model":"stories260K","choices":[{"index":0,"message":{"role":"assistant","content":"Once upon a time there was a little girl named Lily. She loved to play outside."},"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":18,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":8}}}`)

// BenchmarkEngineResult measures what every answer costs on its way to a
// result line: the checks of the body, its encoding and its usage.
func BenchmarkEngineResult(b *testing.B) {
	r := &run{b: &ledger.Batch{ID: "batch_0123456789abcdef"}}
	resp := &engine.Response{StatusCode: 200, RequestID: "req_0123456789abcdef01234567", Body: benchAnswer}
	b.SetBytes(int64(len(benchAnswer)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if res, ok := r.engineResult(i%1000+1, "request-1", resp, nil); !ok || res.kind != toOutput {
			b.Fatal("not a result line")
		}
	}
}

// AnswerProblem, the check for answers that are not written to a batch,
// refuses what a batch refuses.
func TestAnswerProblem(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   string // "" for none
	}{
		{200, string(benchAnswer), ""},
		{400, `{"error":{"message":"no","type":"invalid_request_error"}}`, ""},
		{200, "{\"a\":\"\xff\"}", "status 200 with a body that is not valid UTF-8 (at byte 6)"},
		{200, `[]`, "is an array, not a JSON object"},
		{400, `{"error":`, "status 400 with a body that is not JSON"},
		{200, `{"a":1} {}`, "is not JSON"},
		{200, `{"usage":{"completion_tokens":-1}}`, "usage.completion_tokens"},
		{400, `{"usage":{"completion_tokens":-1}}`, ""}, // a refusal's usage is not summed
	} {
		got := AnswerProblem(&engine.Response{StatusCode: c.status, Body: []byte(c.body)})
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%d %q: %q, want %q", c.status, c.body, got, c.want)
		}
	}
}

// A Response's usage (/v1/responses) is summed as a chat completion's is,
// on the fast path and on encoding/json's, and refused when a count is not
// a whole number.
func TestUsageOfResponse(t *testing.T) {
	body := `{"object":"response","usage":{"input_tokens":7,"input_tokens_details":{"cached_tokens":4},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":10}}`
	want := lineUsage{in: 7, out: 3, cached: 4}
	if lu, ok := readUsage([]byte(body)); !ok || lu != want {
		t.Errorf("readUsage: %+v %v, want %+v", lu, ok, want)
	}
	if lu, p := decodeUsage([]byte(body)); p != "" || lu != want {
		t.Errorf("decodeUsage: %+v %q, want %+v", lu, p, want)
	}
	bad := strings.Replace(body, `"output_tokens":3`, `"output_tokens":-3`, 1)
	if _, p := usageOf([]byte(bad)); !strings.Contains(p, "output_tokens") {
		t.Errorf("a negative output_tokens: problem %q", p)
	}
}
