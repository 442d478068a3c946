package daemon_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/internal/formatdocs"
	"github.com/batchd/batchd/pipeline"
)

// exampleLine is what a test needs of a format description's batch line to
// say what batchd must answer it with.
type exampleLine struct {
	CustomID string `json:"custom_id"`
	URL      string `json:"url"`
	Body     struct {
		Messages            exampleMessages `json:"messages"`
		MaxCompletionTokens *int            `json:"max_completion_tokens"`
		MaxTokens           *int            `json:"max_tokens"`
	} `json:"body"`
}

// limit is the line's output length: max_completion_tokens over max_tokens
// (BatchGen's order); 0 when it gives none.
func (l exampleLine) limit() int {
	switch {
	case l.Body.MaxCompletionTokens != nil:
		return *l.Body.MaxCompletionTokens
	case l.Body.MaxTokens != nil:
		return *l.Body.MaxTokens
	}
	return 0
}

// mediaPart names the line's first content part that is not text, or "".
func (l exampleLine) mediaPart() string { return l.Body.Messages.mediaPart() }

// answerBody is the part of a chat, completion or embeddings answer this
// test checks.
type answerBody struct {
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Message *struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"message"`
		Text         *string `json:"text"`
		FinishReason string  `json:"finish_reason"`
	} `json:"choices"`
	Data []struct {
		Object    string    `json:"object"`
		Embedding []float64 `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

// Every batch line BatchGen's and Doubleword's format descriptions show runs
// as written through the inbox on the native engine, each example its own
// file (two reuse the id req-1), Doubleword's in Doubleword's result shape;
// each line's outcome is checked against what the line asks.
func TestJSONLFormatExamplesRunEndToEnd(t *testing.T) {
	type example struct {
		name, line, shape string
	}
	var examples []example
	for _, f := range []struct {
		file, prefix, shape string
		n                   int
	}{
		{formatdocs.BatchGen, "batchgen", pipeline.ResultShapeOpenAI, 10},
		{formatdocs.Doubleword, "doubleword", pipeline.ResultShapeDoubleword, 3},
	} {
		lines := formatdocs.BatchLines(t, formatdocs.Path(t, f.file))
		if len(lines) != f.n {
			t.Fatalf("found %d batch lines in %s, want %d", len(lines), f.file, f.n)
		}
		for i, l := range lines {
			examples = append(examples, example{fmt.Sprintf("%s-%02d", f.prefix, i+1), l, f.shape})
		}
	}

	shape := demomodel.Shapes["tiny"]
	e := newEnv(t, openaitest.Options{})
	cfg := e.config()
	cfg.Engine = "native"
	cfg.Native.Models = []native.ModelConfig{{Path: writeDemoModel(t, shape)}}
	e.open(cfg)
	for _, ex := range examples {
		// Sampled lines name no seed: the batch option makes every run the
		// same, so that what is checked is this test's fact.
		e.drop(ex.name+".options.json", fmt.Sprintf(`{"seed":1,"result_shape":%q}`, ex.shape))
		e.drop(ex.name+".jsonl", ex.line+"\n")
	}
	// Lines without temperature decode greedily (BatchGen's default, and
	// batchd's for JSONL), as temperature 0 does: the same prompt gives the
	// same text either way. BatchGen's "short" and "greedy" share one.
	greedy := map[string]string{}
	compared := 0
	for _, ex := range examples {
		o := e.waitEndedWithin(ex.name, "jsonl", 10*time.Minute)
		var l exampleLine
		if err := json.Unmarshal([]byte(ex.line), &l); err != nil {
			t.Fatalf("%s: %v", ex.name, err)
		}
		out, errs := nonEmpty(e.lines(ex.name+".output.jsonl")), nonEmpty(e.lines(ex.name+".errors.jsonl"))
		if part := l.mediaPart(); part != "" {
			// The native engine is text only, and says which part.
			var r struct {
				CustomID string `json:"custom_id"`
				Response struct {
					StatusCode int `json:"status_code"`
					Body       struct {
						Error struct{ Code, Param, Message string } `json:"error"`
					} `json:"body"`
				} `json:"response"`
			}
			if len(out) != 0 || len(errs) != 1 || json.Unmarshal([]byte(errs[0]), &r) != nil {
				t.Errorf("%s: want one error line:\noutput %q\nerrors %q", ex.name, out, errs)
				continue
			}
			if er := r.Response.Body.Error; r.CustomID != l.CustomID || r.Response.StatusCode != 400 || er.Code != "unsupported_content" || er.Param != part || !strings.Contains(er.Message, part) {
				t.Errorf("%s: error line %s, want a 400 unsupported_content naming %s", ex.name, errs[0], part)
			}
			if o.Status != pipeline.StatusCompleted || o.RequestCounts != (pipeline.RequestCounts{Total: 1, Failed: 1}) {
				t.Errorf("%s: %s %+v, want completed with 1 failed", ex.name, o.Status, o.RequestCounts)
			}
			e.check(ex.name, "jsonl")
			continue
		}
		if len(out) != 1 || len(errs) != 0 {
			t.Errorf("%s: want one output line:\noutput %q\nerrors %q", ex.name, out, errs)
			continue
		}
		body := resultBody(t, ex.name, ex.shape, l.CustomID, out[0])
		var a answerBody
		if err := json.Unmarshal(body, &a); err != nil {
			t.Errorf("%s: answer %s: %v", ex.name, body, err)
			continue
		}
		u := a.Usage
		switch l.URL {
		case "/v1/embeddings":
			if a.Object != "list" || len(a.Data) != 1 || a.Data[0].Object != "embedding" || len(a.Data[0].Embedding) != shape.Dim {
				t.Errorf("%s: want a list of one embedding of %d values: %.300s", ex.name, shape.Dim, body)
				continue
			}
			norm := 0.0
			for _, v := range a.Data[0].Embedding {
				norm += v * v
			}
			if norm == 0 || math.IsNaN(norm) || math.IsInf(norm, 0) || u.PromptTokens == 0 || u.TotalTokens != u.PromptTokens || u.CompletionTokens != 0 {
				t.Errorf("%s: embedding of squared norm %v, usage %+v", ex.name, norm, u)
			}
		case "/v1/chat/completions", "/v1/completions":
			var text *string
			switch {
			case len(a.Choices) != 1:
			case l.URL == "/v1/completions" && a.Object == "text_completion":
				text = a.Choices[0].Text
			case l.URL == "/v1/chat/completions" && a.Object == "chat.completion" && a.Choices[0].Message != nil && a.Choices[0].Message.Role == "assistant":
				text = a.Choices[0].Message.Content
			}
			if text == nil {
				t.Errorf("%s: want one %s choice with its text: %s", ex.name, l.URL, body)
				continue
			}
			// "length" at the line's limit, or where the model's context is
			// full (BatchGen's "long" asks 4096 of a 2048-token model).
			limit, fin := l.limit(), a.Choices[0].FinishReason
			full := u.CompletionTokens == limit || u.TotalTokens == shape.Context
			if u.PromptTokens == 0 || u.CompletionTokens == 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens ||
				limit > 0 && u.CompletionTokens > limit || (fin == "length") != full || fin != "length" && fin != "stop" {
				t.Errorf("%s: finish_reason %q, usage %+v, for an output limit of %d", ex.name, fin, u, limit)
			}
			var line struct {
				Body struct {
					Temperature *float64        `json:"temperature"`
					Messages    json.RawMessage `json:"messages"`
					Prompt      json.RawMessage `json:"prompt"`
				} `json:"body"`
			}
			json.Unmarshal([]byte(ex.line), &line)
			b := line.Body
			if b.Temperature == nil || *b.Temperature == 0 {
				key := fmt.Sprintf("%s %s%s %d", l.URL, b.Messages, b.Prompt, limit)
				if prev, ok := greedy[key]; ok {
					compared++
					if prev != *text {
						t.Errorf("%s: greedy text %q differs from %q, the same prompt's at temperature 0 or none", ex.name, *text, prev)
					}
				}
				greedy[key] = *text
			}
		default:
			t.Errorf("%s: an example for %s, which this test does not know", ex.name, l.URL)
		}
		if o.Status != pipeline.StatusCompleted || o.RequestCounts != (pipeline.RequestCounts{Total: 1, Completed: 1}) {
			t.Errorf("%s: %s %+v, want completed with 1 completed", ex.name, o.Status, o.RequestCounts)
		}
		e.check(ex.name, "jsonl")
	}
	if compared == 0 && !t.Failed() {
		t.Error("no two greedy lines shared a prompt: BatchGen's short and greedy examples were expected to")
	}
}

// nonEmpty drops the empty line an empty file reads as.
func nonEmpty(lines []string) []string {
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	return lines
}

// resultBody checks result line of customID in shape and returns its answer.
func resultBody(t *testing.T, name, shape, customID, line string) json.RawMessage {
	t.Helper()
	var r struct {
		CustomID     string          `json:"custom_id"`
		ResponseBody json.RawMessage `json:"response_body"`
		Response     *struct {
			StatusCode int             `json:"status_code"`
			Body       json.RawMessage `json:"body"`
		} `json:"response"`
	}
	if err := json.Unmarshal([]byte(line), &r); err != nil || r.CustomID != customID {
		t.Fatalf("%s: result line %.300s (%v), want custom_id %s", name, line, err, customID)
	}
	switch {
	case shape == pipeline.ResultShapeDoubleword && r.Response == nil && r.ResponseBody != nil:
		return r.ResponseBody
	case shape == pipeline.ResultShapeOpenAI && r.ResponseBody == nil && r.Response != nil && r.Response.StatusCode == 200:
		return r.Response.Body
	}
	t.Fatalf("%s: result line %.300s is not in the %s shape", name, line, shape)
	return nil
}
