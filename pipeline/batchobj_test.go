package pipeline_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/pipeline/ledger"
)

// The batch object tells the window a batch really has: a dropped file
// with no completion_window never expires and says "none" (not OpenAI's
// "24h" with a null expires_at); a window sets expires_at that far from
// the start.
func TestBatchObjectShowsTheWindowItHas(t *testing.T) {
	e := newEnv(t)
	o := e.run(e.drop("nowin", "jsonl", chatLines(2, "n"), ""))
	if o.CompletionWindow != pipeline.NoCompletionWindow || o.ExpiresAt != nil {
		t.Fatalf("no window: completion_window %q expires_at %v; want %q and null", o.CompletionWindow, o.ExpiresAt, pipeline.NoCompletionWindow)
	}
	o = e.run(e.drop("win", "jsonl", chatLines(2, "w"), `{"completion_window":"2h"}`))
	if o.CompletionWindow != "2h" || o.ExpiresAt == nil {
		t.Fatalf("2h window: completion_window %q expires_at %v", o.CompletionWindow, o.ExpiresAt)
	}
	if d := *o.ExpiresAt - o.CreatedAt; d < 7200-60 || d > 7200+60 {
		t.Fatalf("expires_at is %ds after created_at, want about 7200", d)
	}
}

// usage.input_tokens_details.cached_tokens sums the lines'
// usage.prompt_tokens_details.cached_tokens.
func TestBatchObjectSumsCachedTokens(t *testing.T) {
	e := newEnv(t, func(c *pipeline.Config, o *openaitest.Options) {
		o.Fault = func(n int64, r *http.Request, body []byte) openaitest.Fault {
			cached := "100"
			if bytes.Contains(body, []byte("number 1\"")) {
				cached = "23"
			}
			return openaitest.Fault{Status: 200, Body: `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m",` +
				`"choices":[{"index":0,"message":{"role":"assistant","content":"x"},"logprobs":null,"finish_reason":"stop"}],` +
				`"usage":{"prompt_tokens":120,"completion_tokens":1,"total_tokens":121,"prompt_tokens_details":{"cached_tokens":` + cached + `}}}`}
		}
	})
	o := e.run(e.drop("cached", "jsonl", chatLines(3, "c"), ""))
	if o.Status != pipeline.StatusCompleted {
		t.Fatalf("status %s", o.Status)
	}
	if got := o.Usage.InputTokensDetails.CachedTokens; got != 223 {
		t.Fatalf("cached_tokens %d, want 223 (100+23+100)", got)
	}
	if o.Usage.InputTokens != 360 {
		t.Fatalf("input_tokens %d, want 360", o.Usage.InputTokens)
	}
	e.check("cached", "jsonl")
}

// usage has OpenAI's shape: cached_tokens under input_tokens_details
// alone, reasoning_tokens under output_tokens_details alone.
func TestBatchObjectUsageShape(t *testing.T) {
	o := pipeline.NewBatchObject(&ledger.Batch{ID: "batch_x", InputTokens: 5, CachedTokens: 2, OutputTokens: 3}, pipeline.BatchdInfo{})
	raw, err := json.Marshal(o.Usage)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"input_tokens":5,"input_tokens_details":{"cached_tokens":2},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":8}`
	if string(raw) != want {
		t.Fatalf("usage %s\nwant  %s", raw, want)
	}
}
