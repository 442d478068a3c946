package nativebench

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/batchd/batchd/engine/native/weights"
)

// The CPU and the reference device agree on a model's greedy tokens and,
// within float32 rounding, on its logits; the result says so.
func TestParityCPUReference(t *testing.T) {
	path := tinyModel(t)
	res, err := Parity(path, ParityOptions{Devices: [2]string{"cpu", "reference"}, Threads: 1, Prompt: 40, Tokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps != 13 || len(res.Tokens) != 12 {
		t.Errorf("%d rows and %d tokens, want 13 and 12", res.Steps, len(res.Tokens))
	}
	if !res.Equal() || res.MinCosine < 0.99999 || res.MaxRelDiff > 1e-4 {
		t.Errorf("cpu vs reference: %s", res)
	}
	if !strings.HasPrefix(res.Names[0], "cpu ") || res.Names[1] != "reference" {
		t.Errorf("devices %q", res.Names)
	}
	if !strings.Contains(res.String(), "greedy tokens: equal") {
		t.Errorf("report %q", res)
	}
	if _, err := Parity(path, ParityOptions{Devices: [2]string{"cpu", "gpu"}, Prompt: 4}); err == nil || !strings.Contains(err.Error(), `device gpu: native.device`) {
		t.Errorf("an unknown device: %v", err)
	}
}

// The offline batch is the same for the same options, each prompt within
// its bounds, and is written as an OpenAI batch file a peer can run.
func TestOfflineBatch(t *testing.T) {
	o := OfflineOptions{Requests: 50, MinPrompt: 8, MaxPrompt: 20, Output: 7, Seed: 3}
	a, b := OfflineBatch(100, o), OfflineBatch(100, o)
	if len(a) != 50 {
		t.Fatalf("%d requests", len(a))
	}
	lens := map[int]bool{}
	for i := range a {
		if !slices.Equal(a[i].Prompt, b[i].Prompt) || a[i].MaxTokens != 7 {
			t.Fatalf("request %d differs between two draws", i)
		}
		n := len(a[i].Prompt)
		lens[n] = true
		if n < 8 || n > 20 {
			t.Errorf("request %d: %d prompt tokens", i, n)
		}
		for _, tok := range a[i].Prompt {
			if tok < 3 || tok >= 100 {
				t.Errorf("request %d: token %d outside the vocabulary's ordinary ids", i, tok)
			}
		}
	}
	if len(lens) < 5 {
		t.Errorf("prompt lengths %v: not spread", lens)
	}
	o.Seed = 4
	if c := OfflineBatch(100, o); slices.Equal(c[0].Prompt, a[0].Prompt) && slices.Equal(c[1].Prompt, a[1].Prompt) {
		t.Error("another seed gave the same batch")
	}
	var buf bytes.Buffer
	if err := WriteOfflineBatch(&buf, a, "m"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 50 {
		t.Fatalf("%d lines", len(lines))
	}
	var line struct {
		CustomID string `json:"custom_id"`
		URL      string `json:"url"`
		Body     struct {
			Prompt    []int32 `json:"prompt"`
			MaxTokens int     `json:"max_tokens"`
			IgnoreEOS bool    `json:"ignore_eos"`
		} `json:"body"`
	}
	if err := json.Unmarshal([]byte(lines[3]), &line); err != nil {
		t.Fatal(err)
	}
	if line.CustomID != "req-3" || line.URL != "/v1/completions" || !slices.Equal(line.Body.Prompt, a[3].Prompt) || line.Body.MaxTokens != 7 || !line.Body.IgnoreEOS {
		t.Errorf("line 4: %+v", line)
	}
}

// An offline run completes every request and counts their tokens.
func TestBenchOffline(t *testing.T) {
	path := tinyModel(t)
	w, err := weights.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	vocab := w.Config.VocabSize
	w.Close()
	res, err := BenchOffline(path, OfflineOptions{Device: "cpu", Threads: 1, Requests: 12, MinPrompt: 5, MaxPrompt: 30, Output: 6, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, r := range OfflineBatch(vocab, res.Options) {
		want += len(r.Prompt)
	}
	if res.OutputTokens != 72 || res.PromptTokens != want || res.OutputTPS <= 0 || !strings.HasPrefix(res.Device, "cpu ") {
		t.Errorf("result %+v (want 72 output and %d prompt tokens)", res, want)
	}
}
