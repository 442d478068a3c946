package daemon_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/openai/openaitest"
	"github.com/batchd/batchd/internal/formatdocs"
	"github.com/batchd/batchd/pipeline"
)

// edgeLLMExamples returns every requests document TensorRT Edge-LLM's
// input JSON description shows, as written: its top-level objects with a
// requests array (the logprobs output snippet is not one).
func edgeLLMExamples(t *testing.T) []string {
	t.Helper()
	var docs []string
	for _, text := range formatdocs.Objects(t, formatdocs.Path(t, formatdocs.EdgeLLM)) {
		var probe struct {
			Requests []json.RawMessage `json:"requests"`
		}
		if json.Unmarshal([]byte(text), &probe) == nil && probe.Requests != nil {
			docs = append(docs, text)
		}
	}
	return docs
}

// exampleRequest is what a test needs of a document's request to say what
// batchd must answer it with.
type exampleRequest struct {
	Messages          exampleMessages    `json:"messages"`
	LoraName          string             `json:"lora_name"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	NumLogprobs       *int               `json:"num_logprobs"`
	MaxGenerateLength *int               `json:"max_generate_length"`
	Stop              json.RawMessage    `json:"stop"`
}

type exampleDoc struct {
	NumLogprobs       int                `json:"num_logprobs"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	MaxGenerateLength *int               `json:"max_generate_length"`
	Requests          []exampleRequest   `json:"requests"`
}

// exampleMessages are an example's chat messages, as far as a test looks.
type exampleMessages []struct {
	Content json.RawMessage `json:"content"`
}

// mediaPart names the request's first content part that is not text.
func (r exampleRequest) mediaPart() string { return r.Messages.mediaPart() }

// mediaPart names the first content part that is not text
// (messages[i].content[j]), or "" when every part is text.
func (ms exampleMessages) mediaPart() string {
	for i, m := range ms {
		var parts []struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(m.Content, &parts) != nil {
			continue
		}
		for j, p := range parts {
			if p.Type != "text" {
				return fmt.Sprintf("messages[%d].content[%d]", i, j)
			}
		}
	}
	return ""
}

func (r exampleRequest) stops(t *testing.T) []string {
	if len(r.Stop) == 0 {
		return nil
	}
	var one string
	if json.Unmarshal(r.Stop, &one) == nil {
		return []string{one}
	}
	var many []string
	if err := json.Unmarshal(r.Stop, &many); err != nil {
		t.Fatalf("stop %s: %v", r.Stop, err)
	}
	return many
}

type exampleUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// checkExampleResult checks the result of request i (0-based) of doc and
// returns what it was: "text", or the error code it was refused with.
func checkExampleResult(t *testing.T, name string, doc exampleDoc, i int, r pipeline.DocResult) string {
	t.Helper()
	req := doc.Requests[i]
	if want := fmt.Sprintf("request-%d", i+1); r.CustomID != want {
		t.Errorf("%s request %d: custom_id %v, want %s", name, i+1, r.CustomID, want)
	}
	if r.Error != nil {
		e, _ := r.Error.(map[string]any)
		code, _ := e["code"].(string)
		msg, _ := e["message"].(string)
		if r.OutputText != nil || r.FinishReason != nil || r.Usage != nil && string(r.Usage) != "null" {
			t.Errorf("%s request %d: a failed request with output: %+v", name, i+1, r)
		}
		if e["status_code"] != float64(400) {
			t.Errorf("%s request %d: error %v, want a 400", name, i+1, r.Error)
		}
		switch {
		case req.mediaPart() != "":
			// A media part: batchd's native engine is text only, and says which part.
			if code != "unsupported_content" || e["param"] != req.mediaPart() || !strings.Contains(msg, req.mediaPart()) {
				t.Errorf("%s request %d: error %v, want unsupported_content naming %s", name, i+1, r.Error, req.mediaPart())
			}
		case req.LoraName != "":
			// No adapter is configured: the code, not the message, is the contract.
			if code != "lora_not_found" || e["param"] != "lora_name" {
				t.Errorf("%s request %d: error %v, want lora_not_found", name, i+1, r.Error)
			}
		default:
			t.Errorf("%s request %d: a text request failed: %v", name, i+1, r.Error)
		}
		return code
	}
	if req.mediaPart() != "" || req.LoraName != "" {
		t.Errorf("%s request %d: ran, want a refusal: %+v", name, i+1, r)
	}
	var u exampleUsage
	if err := json.Unmarshal(r.Usage, &u); err != nil || u.PromptTokens == 0 || u.CompletionTokens == 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("%s request %d: usage %s (%v)", name, i+1, r.Usage, err)
	}
	bias := doc.LogitBias
	if req.LogitBias != nil {
		bias = req.LogitBias
	}
	if favoursPadding(t, bias) {
		// "Prefer token 456": on the demo model 456 is a padding token,
		// which decodes to no text, and +5 over random weights wins every
		// step: the bias is honoured when no text token was ever drawn.
		if r.OutputText == nil || *r.OutputText != "" {
			t.Errorf("%s request %d: logit_bias %v favours a padding token, yet text was drawn: %+v", name, i+1, bias, r)
		}
	} else if r.OutputText == nil || *r.OutputText == "" {
		t.Errorf("%s request %d: empty output: %+v", name, i+1, r)
		return "text"
	}
	limit := 256 // the format's default max_generate_length
	if doc.MaxGenerateLength != nil {
		limit = *doc.MaxGenerateLength
	}
	if req.MaxGenerateLength != nil {
		limit = *req.MaxGenerateLength
	}
	if u.CompletionTokens > limit {
		t.Errorf("%s request %d: %d tokens, max_generate_length %d", name, i+1, u.CompletionTokens, limit)
	}
	reason := ""
	if r.FinishReason != nil {
		reason = *r.FinishReason
	}
	switch reason {
	case "length":
		if u.CompletionTokens != limit {
			t.Errorf("%s request %d: finish_reason length after %d tokens, max_generate_length %d", name, i+1, u.CompletionTokens, limit)
		}
	case "stop":
	case "stop-words":
		if len(req.stops(t)) == 0 {
			t.Errorf("%s request %d: finish_reason stop-words with no stop strings", name, i+1)
		}
	default:
		t.Errorf("%s request %d: finish_reason %q", name, i+1, reason)
	}
	for _, s := range req.stops(t) {
		if strings.Contains(*r.OutputText, s) {
			t.Errorf("%s request %d: output holds the stop string %q: %q", name, i+1, s, *r.OutputText)
		}
	}
	k := doc.NumLogprobs
	if req.NumLogprobs != nil {
		k = *req.NumLogprobs
	}
	if k == 0 && r.Logprobs != nil {
		t.Errorf("%s request %d: logprobs nobody asked for", name, i+1)
	}
	if k > 0 {
		if len(r.Logprobs) != u.CompletionTokens {
			t.Errorf("%s request %d: %d logprobs entries for %d tokens", name, i+1, len(r.Logprobs), u.CompletionTokens)
		}
		for n, top := range r.Logprobs {
			if len(top) != k {
				t.Errorf("%s request %d token %d: %d candidates, num_logprobs %d", name, i+1, n, len(top), k)
			}
			for j, c := range top {
				if c.TokenID == nil || len(c.Bytes) == 0 || c.Logprob > 0 || j > 0 && c.Logprob > top[j-1].Logprob {
					t.Errorf("%s request %d token %d candidate %d: %+v", name, i+1, n, j, c)
				}
			}
		}
	}
	return "text"
}

// Every example of TensorRT Edge-LLM's input JSON description, written to
// the inbox as a file, runs on the native engine end to end (dir watcher,
// pipeline, the demo model, which has a chat template) and gives what the
// format promises, or for LoRA and media parts what batchd promises
// instead: text requests complete, media parts are refused with
// unsupported_content naming the part, a lora_name with no adapter
// configured is refused with lora_not_found. Then the stop-strings
// example with six stop strings (the format has no limit; OpenAI's is 4)
// stops at the one that occurs. A few thousand tokens in all: seconds, a
// minute or more under -race on a loaded machine, hence the long deadlines.
func TestEdgeLLMFormatExamplesRunEndToEnd(t *testing.T) {
	docs := edgeLLMExamples(t)
	// What each example's requests give, in the description's order; the
	// table in docs/formats.md says the same.
	want := [][]string{
		{"lora_not_found"},      // basic structure: lora_name "optional_lora_name"
		{"text"},                // basic text input
		{"text"},                // multi-turn conversation
		{"unsupported_content"}, // multimodal input: an image part
		{"lora_not_found"},      // LoRA adapters: "french" is not configured
		{"text"},                // system prompt KV cache
		{"text"},                // raw format (no chat template)
		{"text"},                // disable speculative decoding
		{"text", "text"},        // logit bias
		{"text"},                // top-N logprobs
		{"text"},                // stop strings
	}
	if len(docs) != len(want) {
		t.Fatalf("found %d requests documents in %s, want %d", len(docs), formatdocs.EdgeLLM, len(want))
	}

	e := newEnv(t, openaitest.Options{})
	cfg := e.config()
	cfg.Engine = "native"
	cfg.Native.Models = []native.ModelConfig{{Path: wideDemoModel(t)}}
	e.open(cfg)
	// The documents sample (temperature 1.0 by the format's default) and
	// name no seed: the batch option seed makes every run the same, so that
	// a non-empty output is this test's fact rather than a likely draw.
	const options = `{"seed":1}`
	names := make([]string, len(docs))
	for i, doc := range docs {
		names[i] = fmt.Sprintf("example-%02d", i+1)
		e.drop(names[i]+".options.json", options)
		e.drop(names[i]+".json", doc)
	}
	var stopDoc exampleDoc
	var stopDocText string
	var stopResult pipeline.DocResult
	for i, name := range names {
		o := e.waitEndedWithin(name, "json", 10*time.Minute)
		var doc exampleDoc
		if err := json.Unmarshal([]byte(docs[i]), &doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rs, raw := readExampleResults(t, e, name)
		if len(rs) != len(doc.Requests) {
			t.Fatalf("%s: %d results for %d requests:\n%s", name, len(rs), len(doc.Requests), raw)
		}
		var got []string
		for j, r := range rs {
			got = append(got, checkExampleResult(t, name, doc, j, r))
		}
		if !slices.Equal(got, want[i]) {
			t.Errorf("%s: requests gave %q, want %q:\n%s", name, got, want[i], raw)
		}
		texts := strings.Count(strings.Join(got, " "), "text")
		if o.Status != pipeline.StatusCompleted || o.RequestCounts != (pipeline.RequestCounts{Total: len(rs), Completed: texts, Failed: len(rs) - texts}) {
			t.Errorf("%s: %s %+v", name, o.Status, o.RequestCounts)
		}
		e.check(name, "json")
		if len(doc.Requests) == 1 && len(doc.Requests[0].stops(t)) > 0 && doc.Requests[0].LoraName == "" {
			stopDoc, stopDocText, stopResult = doc, docs[i], rs[0]
		}
	}
	if t.Failed() {
		return
	}

	// Six stop strings: the example's two, three that never occur, and two
	// whole characters of the example's own output (the same seed gives the
	// same tokens up to there).
	if stopResult.OutputText == nil {
		t.Fatal("no stop-strings example ran")
	}
	out := *stopResult.OutputText
	runes := []rune(out)
	stop := ""
	for k := 2; k+2 <= len(runes) && stop == ""; k++ {
		if s := string(runes[k : k+2]); !strings.ContainsRune(s, '\uFFFD') && strings.TrimSpace(s) == s {
			stop = s
		}
	}
	if stop == "" {
		t.Fatalf("no two whole characters to stop at in the stop-strings example's output %q", out)
	}
	stops := append(stopDoc.Requests[0].stops(t), "never-1", "never-2", "never-3", stop)
	stopsJSON, _ := json.Marshal(stops)
	var raw struct {
		Requests []struct {
			Messages json.RawMessage `json:"messages"`
		} `json:"requests"`
	}
	if err := json.Unmarshal([]byte(stopDocText), &raw); err != nil {
		t.Fatal(err)
	}
	msgs := raw.Requests[0].Messages
	e.drop("six-stops.options.json", options)
	e.drop("six-stops.json", fmt.Sprintf(`{"requests":[{"messages":%s,"stop":%s}]}`, msgs, stopsJSON))
	if o := e.waitEndedWithin("six-stops", "json", 10*time.Minute); o.RequestCounts.Completed != 1 {
		t.Fatalf("six stop strings: %s %+v\n%s", o.Status, o.RequestCounts, strings.Join(e.lines("six-stops.errors.jsonl"), "\n"))
	}
	rs, results := readExampleResults(t, e, "six-stops")
	if len(rs) != 1 || rs[0].OutputText == nil || rs[0].FinishReason == nil {
		t.Fatalf("six stop strings: %s", results)
	}
	if got, want := *rs[0].OutputText, out[:strings.Index(out, stop)]; *rs[0].FinishReason != "stop-words" || got != want {
		t.Fatalf("six stop strings %q: finish_reason %s, output %q, want stop-words and %q", stops, *rs[0].FinishReason, got, want)
	}
}

// demoTextVocab is how many tokens the demo tokenizer learns from its
// corpus; wideDemoModel's ids from here up are padding, with no text.
const demoTextVocab = 364

// favoursPadding says whether bias raises a padding token of wideDemoModel.
func favoursPadding(t *testing.T, bias map[string]float64) bool {
	for id, v := range bias {
		n, err := strconv.Atoi(id)
		if err != nil {
			t.Fatalf("logit_bias id %q: %v", id, err)
		}
		if v > 0 && n >= demoTextVocab {
			return true
		}
	}
	return false
}

// wideDemoModel writes the tiny demo model with its vocabulary padded to 512
// tokens: the logit-bias example names token ids 123 and 456, as a real
// model's vocabulary has them (the trained demo vocabulary stops at 363,
// and an id outside the vocabulary is rightly a 400).
func wideDemoModel(t *testing.T) string {
	t.Helper()
	shape := demomodel.Shapes["tiny"]
	shape.Name, shape.Vocab = "tiny-512", 512
	return writeDemoModel(t, shape)
}

func readExampleResults(t *testing.T, e *env, name string) ([]pipeline.DocResult, []byte) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(e.dirs.Outbox, name+".results.json"))
	if err != nil {
		t.Fatalf("%s.results.json: %v", name, err)
	}
	var rs []pipeline.DocResult
	if err := json.Unmarshal(raw, &rs); err != nil {
		t.Fatalf("%s.results.json is not an array of results: %v\n%s", name, err, raw)
	}
	return rs, raw
}
