package native

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/batchd/batchd/engine"
)

// The tests here run requests through the engine and compare with a
// reference computed in the test straight from the model's forward pass:
// every parameter is checked against what it must do, and each test also
// checks the output differs from plain greedy, so an ignored parameter
// fails it.

type genChoice struct {
	Index        int    `json:"index"`
	Text         string `json:"text"`
	Message      struct{ Content string }
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

type genResp struct {
	Choices []genChoice `json:"choices"`
	Usage   struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func gen(t *testing.T, e *Engine, endpoint, body string) genResp {
	t.Helper()
	status, raw := call(t, e, endpoint, body)
	if status != 200 {
		t.Fatalf("status %d: %s\nbody %s", status, raw, body)
	}
	var r genResp
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return r
}

func call(t *testing.T, e *Engine, endpoint, body string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := e.Do(ctx, &engine.Request{CustomID: "s", Endpoint: endpoint, Body: json.RawMessage(body)})
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Body
}

// complete runs a /v1/completions request on prompt ids with extra fields.
func complete(t *testing.T, e *Engine, prompt []int32, maxTokens int, extra string) genResp {
	t.Helper()
	ids, _ := json.Marshal(prompt)
	body := fmt.Sprintf(`{"prompt":%s,"max_tokens":%d`, ids, maxTokens)
	if extra != "" {
		body += "," + extra
	}
	return gen(t, e, engine.EndpointCompletions, body+"}")
}

// ref drives a runner's model directly, one sequence, as the engine does:
// the prompt in one pass, then one token per step.
type ref struct {
	e *Engine
	r *runner
}

func demoRef(t *testing.T) (*Engine, ref, []int32) {
	e := openEngine(t, ModelConfig{Path: demoPath(t)})
	r := e.runners["demo-tiny"]
	return e, ref{e, r}, r.tok.Encode("Once upon a time", false, false)
}

// run generates n tokens from prompt; choose picks each from a copy of the
// raw logits, given the tokens generated so far. It returns the tokens and
// the raw logits rows they were picked from.
func (f ref) run(prompt []int32, n int, choose func(row []float32, out []int32) int32) ([]int32, [][]float32) {
	m := f.r.model
	kv, table := m.scratchKV(len(prompt) + n)
	var s scratch
	b := batch{kv: kv, tokens: prompt, segs: []segment{{blocks: table, n: len(prompt)}}, logitRows: []int{len(prompt) - 1}}
	for i := range prompt {
		b.pos = append(b.pos, int32(i))
	}
	pos := len(prompt)
	var out []int32
	var rows [][]float32
	for range n {
		f.e.compute.Lock()
		logits := m.forward(&b, &s)
		f.e.compute.Unlock()
		row := slices.Clone(logits[:m.cfg.VocabSize])
		rows = append(rows, row)
		next := choose(slices.Clone(row), out)
		out = append(out, next)
		b = batch{kv: kv, tokens: []int32{next}, pos: []int32{int32(pos)}, segs: []segment{{blocks: table, n: 1, start: pos}}, logitRows: []int{0}}
		pos++
	}
	return out, rows
}

func greedyPick(row []float32, _ []int32) int32 { return int32(argmax(row)) }

// text is what the engine writes for ids generated after prompt.
func (f ref) text(prompt, ids []int32, flush bool) string {
	d := f.r.tok.NewDecoder()
	d.Prime(prompt)
	var sb strings.Builder
	for _, id := range ids {
		sb.WriteString(d.Next(id))
	}
	if flush {
		sb.WriteString(d.Flush())
	}
	return sb.String()
}

// penalized is the reference for the penalties, written from their
// definitions (OpenAI's presence and frequency over the generated tokens,
// vLLM's repetition over prompt and generated).
func penalized(prompt []int32, presence, frequency, repetition float64) func([]float32, []int32) int32 {
	return func(row []float32, out []int32) int32 {
		count := map[int32]int{}
		for _, id := range out {
			count[id]++
		}
		if repetition != 1 {
			seen := map[int32]bool{}
			for _, id := range append(slices.Clone(prompt), out...) {
				if !seen[id] {
					seen[id] = true
					if row[id] > 0 {
						row[id] /= float32(repetition)
					} else {
						row[id] *= float32(repetition)
					}
				}
			}
		}
		for id, c := range count {
			row[id] = float32(float64(row[id]) - frequency*float64(c) - presence)
		}
		return int32(argmax(row))
	}
}

func logSoftmax(row []float32) []float64 {
	m := float64(row[argmax(row)])
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - m)
	}
	lse := m + math.Log(s)
	out := make([]float64, len(row))
	for i, v := range row {
		out[i] = float64(v) - lse
	}
	return out
}

func TestSamplingLogitBias(t *testing.T) {
	e, f, prompt := demoRef(t)
	const n = 12
	greedy, _ := f.run(prompt, n, greedyPick)
	g0 := greedy[0]
	// -100 on the greedy token: it never comes, the next best does.
	want, _ := f.run(prompt, n, func(row []float32, _ []int32) int32 {
		row[g0] -= 100
		return int32(argmax(row))
	})
	if want[0] == g0 {
		t.Fatal("reference: banning the greedy token left it first")
	}
	got := complete(t, e, prompt, n, fmt.Sprintf(`"ignore_eos":true,"logit_bias":{"%d":-100}`, g0))
	if c := got.Choices[0]; c.Text != f.text(prompt, want, true) {
		t.Fatalf("logit_bias -100 on %d: got %q, want %q (greedy %q)", g0, c.Text, f.text(prompt, want, true), f.text(prompt, greedy, true))
	}
	// +100 on a token the model ranks last forces it, even when sampling.
	_, rows := f.run(prompt, 1, greedyPick)
	worst := int32(0)
	for i, v := range rows[0] {
		if v < rows[0][worst] && utf8.Valid(f.r.tok.TokenBytes(int32(i))) && len(f.r.tok.TokenBytes(int32(i))) > 0 {
			worst = int32(i)
		}
	}
	forced := slices.Repeat([]int32{worst}, n)
	for _, extra := range []string{``, `,"temperature":1,"seed":3`} {
		got = complete(t, e, prompt, n, fmt.Sprintf(`"ignore_eos":true,"logit_bias":{"%d":100}%s`, worst, extra))
		if c := got.Choices[0]; c.Text != f.text(prompt, forced, true) {
			t.Fatalf("logit_bias +100 on %d%s: got %q, want %q", worst, extra, c.Text, f.text(prompt, forced, true))
		}
	}
}

func TestSamplingTopK1AndMinP1EqualGreedy(t *testing.T) {
	e, f, prompt := demoRef(t)
	const n = 16
	greedy, _ := f.run(prompt, n, greedyPick)
	want := f.text(prompt, greedy, true)
	hot := complete(t, e, prompt, n, `"ignore_eos":true,"temperature":1.5,"seed":9`).Choices[0].Text
	if hot == want {
		t.Fatalf("temperature 1.5 gave the greedy text %q: the test cannot tell top_k from nothing", hot)
	}
	for _, extra := range []string{`"top_k":1`, `"min_p":1`, `"top_k":1,"top_p":0.5`} {
		got := complete(t, e, prompt, n, `"ignore_eos":true,"temperature":1.5,"seed":9,`+extra).Choices[0].Text
		if got != want {
			t.Errorf("%s at temperature 1.5: got %q, want greedy %q", extra, got, want)
		}
	}
}

func TestSamplingSeedReproduces(t *testing.T) {
	e, _, prompt := demoRef(t)
	for _, extra := range []string{`"temperature":0.8,"top_p":0.9`, `"temperature":1.2,"top_k":40`, `"temperature":1,"min_p":0.5`,
		`"temperature":1,"top_k":100,"top_p":0.95,"min_p":0.1,"presence_penalty":0.5,"repetition_penalty":1.1`} {
		text := func(seed int) string {
			return complete(t, e, prompt, 12, fmt.Sprintf(`"ignore_eos":true,"seed":%d,%s`, seed, extra)).Choices[0].Text
		}
		a, b, c := text(42), text(42), text(43)
		if a != b {
			t.Errorf("%s: seed 42 gave %q then %q", extra, a, b)
		}
		if a == c {
			t.Errorf("%s: seeds 42 and 43 both gave %q", extra, a)
		}
	}
}

func TestSamplingPenalties(t *testing.T) {
	e, f, prompt := demoRef(t)
	const n = 16
	greedy, _ := f.run(prompt, n, greedyPick)
	distinct := map[int32]bool{}
	for _, id := range greedy {
		distinct[id] = true
	}
	if len(distinct) > n/2 {
		t.Fatalf("greedy output is not repetitive enough to test penalties: %v", greedy)
	}
	changed := 0
	for _, c := range []struct {
		field                           string
		presence, frequency, repetition float64
	}{
		{`"presence_penalty":2`, 2, 0, 1},
		{`"frequency_penalty":2`, 0, 2, 1},
		{`"frequency_penalty":0.3`, 0, 0.3, 1},
		{`"repetition_penalty":1.5`, 0, 0, 1.5},
		{`"repetition_penalty":2,"presence_penalty":1,"frequency_penalty":-0.5`, 1, -0.5, 2},
	} {
		want, _ := f.run(prompt, n, penalized(prompt, c.presence, c.frequency, c.repetition))
		if !slices.Equal(want, greedy) {
			changed++
		}
		if c.repetition == 1 && want[0] != greedy[0] {
			t.Fatalf("%s: presence/frequency changed the first token: they must only see generated tokens", c.field)
		}
		got := complete(t, e, prompt, n, `"ignore_eos":true,`+c.field).Choices[0].Text
		if w := f.text(prompt, want, true); got != w {
			t.Errorf("%s: got %q, want %q (greedy %q)", c.field, got, w, f.text(prompt, greedy, true))
		}
	}
	// Which penalty moves greedy's tokens depends on the model's weights
	// (BATCHD_TEST_WEIGHTS); most must, or the test proves little.
	if changed < 4 {
		t.Fatalf("only %d of 5 penalties changed greedy's tokens; pick stronger ones", changed)
	}
}

func TestSamplingMinTokens(t *testing.T) {
	e, f, prompt := demoRef(t)
	eos := f.r.tok.EOS()
	// EOS forced by logit_bias ends the completion at once...
	bias := fmt.Sprintf(`"logit_bias":{"%d":100}`, eos)
	got := complete(t, e, prompt, 10, bias)
	if c := got.Choices[0]; c.Text != "" || c.FinishReason != "stop" || got.Usage.CompletionTokens != 0 {
		t.Fatalf("EOS at +100: %+v, %d tokens", c, got.Usage.CompletionTokens)
	}
	// ...unless min_tokens holds it back: then exactly min_tokens tokens, as
	// greedy with EOS masked gives them.
	want, _ := f.run(prompt, 5, func(row []float32, _ []int32) int32 {
		row[eos] = float32(math.Inf(-1))
		return int32(argmax(row))
	})
	got = complete(t, e, prompt, 10, bias+`,"min_tokens":5`)
	if c := got.Choices[0]; c.Text != f.text(prompt, want, false) || c.FinishReason != "stop" || got.Usage.CompletionTokens != 5 {
		t.Fatalf("min_tokens 5: %+v, %d tokens; want %q", c, got.Usage.CompletionTokens, f.text(prompt, want, false))
	}
	// Stop strings wait for min_tokens too, and then only a match ending in
	// new text counts (vLLM's rule): greedy here repeats one token.
	greedy3, _ := f.run(prompt, 3, greedyPick)
	if greedy3[0] != greedy3[1] || greedy3[1] != greedy3[2] {
		t.Fatalf("greedy output %v does not repeat its first token", greedy3)
	}
	piece := string(f.r.tok.TokenBytes(greedy3[0]))
	stop, _ := json.Marshal(piece)
	got = complete(t, e, prompt, 10, fmt.Sprintf(`"ignore_eos":true,"stop":%s`, stop))
	if c := got.Choices[0]; c.Text != "" || c.FinishReason != "stop" || got.Usage.CompletionTokens != 1 {
		t.Fatalf("stop %s: %+v, %d tokens", stop, c, got.Usage.CompletionTokens)
	}
	got = complete(t, e, prompt, 10, fmt.Sprintf(`"ignore_eos":true,"stop":%s,"min_tokens":2`, stop))
	if c := got.Choices[0]; c.Text != piece+piece || c.FinishReason != "stop" || got.Usage.CompletionTokens != 3 {
		t.Fatalf("stop %s after min_tokens 2: %+v, %d tokens; want %q", stop, c, got.Usage.CompletionTokens, piece+piece)
	}
	// The same with a stop token made likely.
	greedy, _ := f.run(prompt, 1, greedyPick)
	stopID := greedy[0]
	got = complete(t, e, prompt, 10, fmt.Sprintf(`"stop_token_ids":[%d]`, stopID))
	if got.Usage.CompletionTokens != 0 || got.Choices[0].FinishReason != "stop" {
		t.Fatalf("stop token first: %+v", got)
	}
	got = complete(t, e, prompt, 10, fmt.Sprintf(`"stop_token_ids":[%d],"logit_bias":{"%d":100},"min_tokens":3,"ignore_eos":true`, stopID, stopID))
	if got.Usage.CompletionTokens != 3 || got.Choices[0].FinishReason != "stop" {
		t.Fatalf("min_tokens 3 with a likely stop token: %+v", got)
	}
}

// variedRef is a deterministic output without repeats to pick stop tokens
// and strings from: greedy with a strong frequency penalty.
func variedRef(t *testing.T, f ref, prompt []int32, n int) ([]int32, string) {
	const field = `"frequency_penalty":2,"ignore_eos":true`
	ids, _ := f.run(prompt, n, penalized(prompt, 0, 2, 1))
	return ids, field
}

func TestSamplingStopTokenIDs(t *testing.T) {
	e, f, prompt := demoRef(t)
	ids, field := variedRef(t, f, prompt, 16)
	j := -1
	for i := 3; i < len(ids); i++ {
		if !slices.Contains(ids[:i], ids[i]) {
			j = i
			break
		}
	}
	if j < 0 {
		t.Fatalf("no new token to stop at in %v", ids)
	}
	// ignore_eos does not turn stop_token_ids off (vLLM).
	got := complete(t, e, prompt, 16, fmt.Sprintf(`%s,"stop_token_ids":[%d, 999999],"logprobs":0`, field, ids[j]))
	c := got.Choices[0]
	if c.FinishReason != "stop" || got.Usage.CompletionTokens != j || c.Text != f.text(prompt, ids[:j], false) {
		t.Fatalf("stop at token %d (%d): %q %s, %d tokens; want %q", j, ids[j], c.Text, c.FinishReason, got.Usage.CompletionTokens, f.text(prompt, ids[:j], false))
	}
	var lp struct{ Tokens []string }
	json.Unmarshal(c.Logprobs, &lp)
	if len(lp.Tokens) != j {
		t.Fatalf("logprobs for %d tokens, want %d: the stop token is not output", len(lp.Tokens), j)
	}
}

func TestSamplingStopStringAcrossTokens(t *testing.T) {
	e, f, prompt := demoRef(t)
	const n = 20
	ids, field := variedRef(t, f, prompt, n)
	full := f.text(prompt, ids, true)
	ascii := func(b []byte) bool {
		for _, c := range b {
			if c < 0x20 || c > 0x7e {
				return false
			}
		}
		return len(b) > 0
	}
	// What the decoder writes for each token.
	d := f.r.tok.NewDecoder()
	d.Prime(prompt)
	outs := make([]string, len(ids))
	for i, id := range ids {
		outs[i] = d.Next(id)
	}
	// A stop string made of the last byte of token j and the first of
	// token j+1, where it first occurs exactly there.
	for j, end := 0, 0; j+1 < len(ids); j++ {
		end += len(outs[j])
		a, b := f.r.tok.TokenBytes(ids[j]), f.r.tok.TokenBytes(ids[j+1])
		if !ascii(a) || !ascii(b) || outs[j] != string(a) || outs[j+1] != string(b) {
			continue
		}
		stop := string(a[len(a)-1:]) + string(b[:1])
		cut := strings.Index(full, stop)
		if cut != end-1 || strings.TrimSpace(stop) != stop {
			continue
		}
		t.Logf("stop %q across tokens %d and %d of %q", stop, j, j+1, outs)
		got := complete(t, e, prompt, n, fmt.Sprintf(`%s,"stop":["zzzz",%q],"logprobs":1`, field, stop))
		c := got.Choices[0]
		if c.Text != full[:cut] || c.FinishReason != "stop" {
			t.Fatalf("stop %q across tokens %d/%d: got %q (%s), want %q", stop, j, j+1, c.Text, c.FinishReason, full[:cut])
		}
		if got.Usage.CompletionTokens != j+2 {
			t.Fatalf("completion_tokens %d, want %d", got.Usage.CompletionTokens, j+2)
		}
		// Logprobs only for the tokens wholly before the cut: token j holds
		// the stop string's first byte, so it is not reported.
		var lp struct {
			Tokens     []string `json:"tokens"`
			TextOffset []int    `json:"text_offset"`
		}
		if err := json.Unmarshal(c.Logprobs, &lp); err != nil {
			t.Fatal(err)
		}
		if len(lp.Tokens) != j {
			t.Fatalf("logprobs for %d tokens, want %d", len(lp.Tokens), j)
		}
		if joined := strings.Join(lp.Tokens, ""); !strings.HasPrefix(c.Text, joined) && utf8.ValidString(joined) {
			t.Fatalf("reported tokens %q are not a prefix of the text %q", joined, c.Text)
		}
		return
	}
	t.Fatalf("no pair of printable tokens to put a stop string across in %q", full)
}

func TestSamplingNChoices(t *testing.T) {
	e, _, prompt := demoRef(t)
	got := complete(t, e, prompt, 12, `"n":3,"temperature":1,"seed":5,"ignore_eos":true`)
	if len(got.Choices) != 3 {
		t.Fatalf("%d choices", len(got.Choices))
	}
	texts := map[string]bool{}
	for i, c := range got.Choices {
		if c.Index != i {
			t.Fatalf("choice %d has index %d", i, c.Index)
		}
		texts[c.Text] = true
	}
	if len(texts) != 3 {
		t.Fatalf("n=3 with a seed gave %d distinct texts: each choice needs its own draws", len(texts))
	}
	again := complete(t, e, prompt, 12, `"n":3,"temperature":1,"seed":5,"ignore_eos":true`)
	one := complete(t, e, prompt, 12, `"temperature":1,"seed":5,"ignore_eos":true`)
	for i := range 3 {
		if again.Choices[i].Text != got.Choices[i].Text {
			t.Fatalf("choice %d not reproduced: %q vs %q", i, again.Choices[i].Text, got.Choices[i].Text)
		}
	}
	if one.Choices[0].Text != got.Choices[0].Text {
		t.Fatalf("choice 0 of n=3 (%q) differs from n=1 with the same seed (%q)", got.Choices[0].Text, one.Choices[0].Text)
	}
}

type legacyLP struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
	TokenIDs      []int32              `json:"token_ids"`
	TopTokens     [][]struct {
		TokenID *int32  `json:"token_id"`
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	} `json:"top_tokens"`
}

// checkLegacy checks a completions choice's logprobs against the raw rows
// the tokens ids came from.
func checkLegacy(t *testing.T, f ref, c genChoice, ids []int32, rows [][]float32, k int, tol float64) legacyLP {
	t.Helper()
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(c.Logprobs, &keys); err != nil {
		t.Fatalf("logprobs %s: %v", c.Logprobs, err)
	}
	for _, key := range []string{"tokens", "token_logprobs", "top_logprobs", "text_offset", "token_ids", "top_tokens"} {
		if _, ok := keys[key]; !ok || len(keys) != 6 {
			t.Fatalf("legacy logprobs keys %v, want tokens, token_logprobs, top_logprobs, text_offset and batchd's token_ids, top_tokens", keys)
		}
	}
	var lp legacyLP
	json.Unmarshal(c.Logprobs, &lp)
	if len(lp.Tokens) != len(ids) || len(lp.TokenLogprobs) != len(ids) || len(lp.TopLogprobs) != len(ids) || len(lp.TextOffset) != len(ids) ||
		len(lp.TokenIDs) != len(ids) || len(lp.TopTokens) != len(ids) {
		t.Fatalf("legacy logprobs lengths %d/%d/%d/%d/%d/%d, want %d", len(lp.Tokens), len(lp.TokenLogprobs), len(lp.TopLogprobs), len(lp.TextOffset),
			len(lp.TokenIDs), len(lp.TopTokens), len(ids))
	}
	for i, id := range ids {
		// batchd's token_ids and top_tokens: ids, exact bytes, the raw
		// logprobs, the k best, best first.
		if lp.TokenIDs[i] != id {
			t.Fatalf("token %d: token_ids says %d, the model chose %d", i, lp.TokenIDs[i], id)
		}
		if len(lp.TopTokens[i]) != k {
			t.Fatalf("token %d: %d top_tokens for logprobs=%d", i, len(lp.TopTokens[i]), k)
		}
		ls := logSoftmax(rows[i])
		for j, a := range lp.TopTokens[i] {
			if a.TokenID == nil {
				t.Fatalf("token %d alternative %d: no token_id", i, j)
			}
			want := f.r.tok.TokenBytes(*a.TokenID)
			got := make([]byte, len(a.Bytes))
			for b, v := range a.Bytes {
				got[b] = byte(v)
			}
			if string(got) != string(want) || math.Abs(a.Logprob-ls[*a.TokenID]) > tol {
				t.Fatalf("token %d alternative %d: %+v, want bytes %v logprob %v", i, j, a, want, ls[*a.TokenID])
			}
			if j > 0 && a.Logprob > lp.TopTokens[i][j-1].Logprob {
				t.Fatalf("token %d: top_tokens not best first: %+v", i, lp.TopTokens[i])
			}
		}
	}
	for i, id := range ids {
		ls := logSoftmax(rows[i])
		if d := math.Abs(lp.TokenLogprobs[i] - ls[id]); d > tol {
			t.Fatalf("token %d (%d): logprob %v, want raw %v (|Δ| %g)", i, id, lp.TokenLogprobs[i], ls[id], d)
		}
		if lp.Tokens[i] != strings.ToValidUTF8(string(f.r.tok.TokenBytes(id)), "\uFFFD") {
			t.Fatalf("token %d: %q, want %q", i, lp.Tokens[i], f.r.tok.TokenBytes(id))
		}
		top := lp.TopLogprobs[i]
		if _, ok := top[lp.Tokens[i]]; !ok {
			t.Fatalf("token %d: top_logprobs %v lack the sampled token %q", i, top, lp.Tokens[i])
		}
		order := make([]int, len(rows[i]))
		for j := range order {
			order[j] = j
		}
		slices.SortStableFunc(order, func(a, b int) int { return -cmpF(ls[a], ls[b]) })
		for _, j := range order[:k] {
			text := strings.ToValidUTF8(string(f.r.tok.TokenBytes(int32(j))), "\uFFFD")
			if v, ok := top[text]; !ok || (math.Abs(v-ls[j]) > tol && v < ls[j]) {
				t.Fatalf("token %d: top_logprobs %v lack %q (%v)", i, top, text, ls[j])
			}
		}
		if len(top) > k+1 {
			t.Fatalf("token %d: %d top_logprobs for logprobs=%d", i, len(top), k)
		}
	}
	return lp
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Logprobs are the model's raw distribution: not the biased, penalized,
// tempered one that was sampled from.
func TestLogprobsAreRaw(t *testing.T) {
	e, f, prompt := demoRef(t)
	const n = 6
	ids, rows := f.run(prompt, n, greedyPick)
	got := complete(t, e, prompt, n, `"ignore_eos":true,"logprobs":3`)
	lp := checkLegacy(t, f, got.Choices[0], ids, rows, 3, 1e-5)
	if lp.TextOffset[0] != 0 || !slices.IsSorted(lp.TextOffset) {
		t.Fatalf("text_offset %v", lp.TextOffset)
	}
	// Forced by logit_bias at temperature 0.5 with penalties: the sampled
	// distribution puts ~1 on the token, the raw one does not.
	_, r0 := f.run(prompt, 1, greedyPick)
	forced := int32(argmax(r0[0]) + 1)
	ids, rows = f.run(prompt, n, func([]float32, []int32) int32 { return forced })
	got = complete(t, e, prompt, n, fmt.Sprintf(`"ignore_eos":true,"logprobs":2,"temperature":0.5,"seed":1,"presence_penalty":1,"logit_bias":{"%d":100}`, forced))
	lp = checkLegacy(t, f, got.Choices[0], ids, rows, 2, 1e-5)
	if lp.TokenLogprobs[0] > -1 {
		t.Fatalf("forced token's logprob %v: that is the processed distribution, not the raw one", lp.TokenLogprobs[0])
	}
	// Echo: offsets count the prompt's characters.
	got = complete(t, e, prompt, 3, `"ignore_eos":true,"logprobs":0,"echo":true`)
	var echo legacyLP
	json.Unmarshal(got.Choices[0].Logprobs, &echo)
	if p := utf8.RuneCountInString(f.r.tok.Decode(prompt)); len(echo.TextOffset) != 3 || echo.TextOffset[0] != p {
		t.Fatalf("echo text_offset %v, want to start at %d", echo.TextOffset, p)
	}
	// Not asked: null.
	got = complete(t, e, prompt, 2, "")
	if string(got.Choices[0].Logprobs) != "null" {
		t.Fatalf("logprobs not asked: %s", got.Choices[0].Logprobs)
	}
}

func TestChatLogprobsShape(t *testing.T) {
	e, _, _ := demoRef(t)
	body := `{"messages":[{"role":"user","content":"Say hello"}],"max_tokens":5,"ignore_eos":true,"logprobs":true,"top_logprobs":%d%s}`
	got := gen(t, e, engine.EndpointChat, fmt.Sprintf(body, 4, ""))
	var lp struct {
		Content []map[string]json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(got.Choices[0].Logprobs, &lp); err != nil || len(lp.Content) != 5 {
		t.Fatalf("chat logprobs %s: %v", got.Choices[0].Logprobs, err)
	}
	var text []byte
	for i, entry := range lp.Content {
		if len(entry) != 5 || entry["token_id"] == nil || entry["token"] == nil || entry["logprob"] == nil || entry["bytes"] == nil || entry["top_logprobs"] == nil {
			t.Fatalf("entry %d: keys %v, want token_id, token, logprob, bytes, top_logprobs", i, entry)
		}
		var tok struct {
			Token   string  `json:"token"`
			Logprob float64 `json:"logprob"`
			Bytes   []int   `json:"bytes"`
			Top     []struct {
				Token   string  `json:"token"`
				Logprob float64 `json:"logprob"`
				Bytes   []int   `json:"bytes"`
			} `json:"top_logprobs"`
		}
		raw, _ := json.Marshal(entry)
		json.Unmarshal(raw, &tok)
		if len(tok.Top) != 4 {
			t.Fatalf("entry %d: %d top_logprobs, want 4", i, len(tok.Top))
		}
		for j := 1; j < len(tok.Top); j++ {
			if tok.Top[j].Logprob > tok.Top[j-1].Logprob {
				t.Fatalf("entry %d: top_logprobs not sorted: %+v", i, tok.Top)
			}
		}
		// Greedy: the chosen token is the argmax, first of the list.
		if tok.Top[0].Token != tok.Token || tok.Top[0].Logprob != tok.Logprob || !slices.Equal(tok.Top[0].Bytes, tok.Bytes) {
			t.Fatalf("entry %d: chosen %q %v not first in %+v", i, tok.Token, tok.Logprob, tok.Top)
		}
		if tok.Logprob > 0 || tok.Logprob < -50 {
			t.Fatalf("entry %d: logprob %v", i, tok.Logprob)
		}
		b := make([]byte, len(tok.Bytes))
		for k, v := range tok.Bytes {
			b[k] = byte(v)
		}
		if strings.ToValidUTF8(string(b), "\uFFFD") != tok.Token {
			t.Fatalf("entry %d: bytes %v do not spell %q", i, tok.Bytes, tok.Token)
		}
		text = append(text, b...)
	}
	if !bytes.Equal(text, []byte(got.Choices[0].Message.Content)) && utf8.Valid(text) {
		t.Fatalf("tokens' bytes %q do not make the content %q", text, got.Choices[0].Message.Content)
	}
	// top_logprobs 0 (or absent): an empty list each.
	got = gen(t, e, engine.EndpointChat, fmt.Sprintf(body, 0, ""))
	if !bytes.Contains(got.Choices[0].Logprobs, []byte(`"top_logprobs":[]`)) {
		t.Fatalf("top_logprobs 0: %s", got.Choices[0].Logprobs)
	}
	got = gen(t, e, engine.EndpointChat, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"logprobs":false}`)
	if string(got.Choices[0].Logprobs) != "null" {
		t.Fatalf("logprobs false: %s", got.Choices[0].Logprobs)
	}
}

// On the real model, logprobs equal log_softmax of the logits the forward
// pass gives, from BOS.
func TestStoriesLogprobsMatchForward(t *testing.T) {
	path := storiesPath(t)
	e := openEngine(t, ModelConfig{Path: path})
	f := ref{e, e.runners["stories260K"]}
	prompt := []int32{1}
	const n = 10
	ids, rows := f.run(prompt, n, greedyPick)
	if want := goldenIDs(t)[:n]; !slices.Equal(ids, want) {
		t.Fatalf("reference greedy %v, golden %v", ids, want)
	}
	got := complete(t, e, prompt, n, `"logprobs":5`)
	lp := checkLegacy(t, f, got.Choices[0], ids, rows, 5, 1e-4)
	for i := range lp.TopLogprobs {
		// Greedy: the chosen token is the argmax, the best of its top five.
		for _, v := range lp.TopLogprobs[i] {
			if v > lp.TokenLogprobs[i] {
				t.Fatalf("token %d: %v beats the greedy token's %v", i, v, lp.TokenLogprobs[i])
			}
		}
	}
	// The text offsets walk the text: each token's text sits at its offset
	// (the first token's leading space is stripped, as decoding does).
	text := []rune(got.Choices[0].Text)
	for i := 1; i < n; i++ {
		tok := []rune(lp.Tokens[i])
		if lp.TextOffset[i]+len(tok) > len(text) || string(text[lp.TextOffset[i]:lp.TextOffset[i]+len(tok)]) != lp.Tokens[i] {
			t.Fatalf("token %d %q not at text_offset %d of %q", i, lp.Tokens[i], lp.TextOffset[i], got.Choices[0].Text)
		}
	}
}

func TestSamplingParamsRejected(t *testing.T) {
	e, _, _ := demoRef(t)
	for _, c := range []struct{ endpoint, body, param string }{
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"logit_bias":{"99999":5}}`, "logit_bias"},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"logit_bias":{"5":101}}`, "logit_bias"},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"logit_bias":{"x":1}}`, "logit_bias"},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"logprobs":6}`, "logprobs"},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"logprobs":true}`, "logprobs"},
		{engine.EndpointChat, `{"messages":[{"role":"user","content":"a"}],"max_tokens":2,"top_logprobs":2}`, "top_logprobs"},
		{engine.EndpointChat, `{"messages":[{"role":"user","content":"a"}],"max_tokens":2,"logprobs":true,"top_logprobs":51}`, "top_logprobs"},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"min_tokens":3}`, "min_tokens"},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"repetition_penalty":0}`, "repetition_penalty"},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"min_p":1.5}`, "min_p"},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"presence_penalty":-3}`, "presence_penalty"},
		{engine.EndpointCompletions, `{"prompt":"a","max_tokens":2,"stop_token_ids":[-1]}`, "stop_token_ids"},
	} {
		status, raw := call(t, e, c.endpoint, c.body)
		if status != 400 || !bytes.Contains(raw, []byte(`"param":"`+c.param+`"`)) {
			t.Errorf("%s: status %d %s, want 400 on %s", c.body, status, raw, c.param)
		}
	}
}
