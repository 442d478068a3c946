package native

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
)

// submitAll submits every request through Submit at once (the engine's
// deep queue) and waits for every answer.
func submitAll(t *testing.T, e *Engine, prompts [][]int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	type answer struct {
		resp *engine.Response
		err  error
	}
	answers := make(chan answer, len(prompts))
	for i, pr := range prompts {
		body, _ := json.Marshal(map[string]any{"prompt": pr, "max_tokens": 1, "ignore_eos": true, "temperature": 0})
		e.Submit(ctx, &engine.Request{CustomID: fmt.Sprint(i), Endpoint: engine.EndpointCompletions, Body: body},
			func(resp *engine.Response, err error) { answers <- answer{resp, err} })
	}
	for range prompts {
		select {
		case a := <-answers:
			if a.err != nil || a.resp.StatusCode != 200 {
				t.Fatalf("%v %+v", a.err, a.resp)
			}
		case <-ctx.Done():
			t.Fatal("the requests did not all finish")
		}
	}
}

// A deep queue groups shared prefixes across all it holds: 1,000 requests
// over 8 system prompts, submitted shuffled with 512 sequences allowed in
// flight, compute at most 1.05× the prompt tokens of the same requests
// sorted by prompt.
func TestDeepQueueGroupsSharedPrefixes(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 requests")
	}
	const requests, prompts, systemTokens, userTokens = 1000, 8, 3 * kvBlockSize, 6
	var all [][]int32
	for r := range requests {
		pr := idsPrompt(1+r%prompts, systemTokens)
		all = append(all, append(pr, idsPrompt(1000+r, userTokens)...))
	}
	run := func(batch [][]int32) CacheStats {
		e := openEngineWith(t, func(c *Config) { c.MaxSeqs = 512 }, ModelConfig{Path: demoPath(t)})
		if w := e.Window(); w < requests {
			t.Errorf("window %d with max_seqs 512, want room for all %d requests", w, requests)
		}
		submitAll(t, e, batch)
		return e.CacheStats()
	}
	sorted := slices.Clone(all)
	slices.SortStableFunc(sorted, func(a, b []int32) int { return slices.Compare(a[:systemTokens], b[:systemTokens]) })
	shuffled := slices.Clone(all)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	s, u := run(sorted), run(shuffled)
	t.Logf("prompt tokens computed: sorted %d, shuffled %d (cached %d / %d)", s.PrefillTokens, u.PrefillTokens, s.CachedTokens, u.CachedTokens)
	if s.PromptTokens != u.PromptTokens || s.PromptTokens == 0 {
		t.Fatalf("prompt tokens admitted: sorted %d, shuffled %d", s.PromptTokens, u.PromptTokens)
	}
	if float64(u.PrefillTokens) > 1.05*float64(s.PrefillTokens) {
		t.Fatalf("shuffled computed %d prompt tokens, more than 1.05× the %d of sorted", u.PrefillTokens, s.PrefillTokens)
	}
}

// Submit answers a cancelled request with ctx.Err() at once, and the
// engine lets go of it: nothing stays in flight.
func TestSubmitCancelled(t *testing.T) {
	e := openEngine(t, ModelConfig{Path: demoPath(t)})
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	body := `{"prompt":[1,2,3],"max_tokens":100000,"ignore_eos":true}`
	e.Submit(ctx, &engine.Request{CustomID: "c", Endpoint: engine.EndpointCompletions, Body: json.RawMessage(body)},
		func(_ *engine.Response, err error) { errs <- err })
	cancel()
	select {
	case err := <-errs:
		if err != context.Canceled {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("no answer after cancel")
	}
	deadline := time.Now().Add(2 * time.Minute)
	for e.Stats().InFlight != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sequences still in flight after cancel", e.Stats().InFlight)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Submit starts a request (engine.Request.Started) only when it enters a
// step, once, before its answer: with max_seqs 2, no more than 2 of 8
// submitted requests are ever started and unanswered, so the pipeline's
// crash guard counts only those as suspects.
func TestSubmitStartsOnlyWhatRuns(t *testing.T) {
	e := openEngineWith(t, func(c *Config) { c.MaxSeqs = 2 }, ModelConfig{Path: demoPath(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var (
		mu             sync.Mutex
		active, most   int
		started, wrong = map[int]int{}, []string{}
		answers        = make(chan error, 8)
	)
	for i := range 8 {
		body := fmt.Sprintf(`{"prompt":[1,2,%d],"max_tokens":6,"ignore_eos":true,"temperature":0}`, 3+i)
		req := &engine.Request{CustomID: fmt.Sprint(i), Endpoint: engine.EndpointCompletions, Body: json.RawMessage(body)}
		req.Started = func() {
			mu.Lock()
			defer mu.Unlock()
			started[i]++
			active++
			most = max(most, active)
		}
		e.Submit(ctx, req, func(resp *engine.Response, err error) {
			mu.Lock()
			if started[i] != 1 {
				wrong = append(wrong, fmt.Sprintf("request %d answered after %d starts", i, started[i]))
			}
			active--
			mu.Unlock()
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("status %d: %s", resp.StatusCode, resp.Body)
			}
			answers <- err
		})
	}
	for range 8 {
		select {
		case err := <-answers:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("the requests did not all finish")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(wrong) > 0 {
		t.Fatal(wrong)
	}
	if most < 1 || most > 2 {
		t.Fatalf("%d requests were started and unanswered at once, want 1 or 2 (max_seqs 2)", most)
	}
}
