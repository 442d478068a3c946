package native

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
)

// doResp runs one request and returns the engine's answer whatever its
// status.
func doResp(t *testing.T, e *Engine, endpoint, body string) (*engine.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return e.Do(ctx, &engine.Request{CustomID: "t", Endpoint: endpoint, Body: json.RawMessage(body)})
}

// setFaultHook installs f for the test's duration.
func setFaultHook(t *testing.T, f func([]int32)) {
	faultHook.Store(&f)
	t.Cleanup(func() { faultHook.Store(nil) })
}

// The poison request's prompt: a run of ids nothing else sends or can
// make in one step.
var poison = []int32{211, 7, 199, 5, 233}

func hasPoison(tokens []int32) bool {
	for i := 0; i+len(poison) <= len(tokens); i++ {
		if slices.Equal(tokens[i:i+len(poison)], poison) {
			return true
		}
	}
	return false
}

// A request that makes the model code panic fails alone with a 500
// (engine_error); the requests that shared its forward pass are rerun and
// answer exactly what they answer alone; the engine goes on serving.
func TestPanicFailsOnlyItsRequest(t *testing.T) {
	e := openEngine(t, ModelConfig{Path: demoPath(t)})
	innocent := make([]string, 6)
	for i := range innocent {
		innocent[i] = fmt.Sprintf(`{"prompt":[%d,%d,%d,%d],"max_tokens":16}`, 20+i, 40+i, 60+i, 80+i)
	}
	text := func(body []byte) string {
		var m struct {
			Choices []struct{ Text string } `json:"choices"`
		}
		if err := json.Unmarshal(body, &m); err != nil || len(m.Choices) != 1 {
			t.Fatalf("answer %s: %v", body, err)
		}
		return m.Choices[0].Text
	}
	alone := make([]string, len(innocent))
	for i, p := range innocent {
		resp, err := doResp(t, e, engine.EndpointCompletions, p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("alone %d: %v %+v", i, err, resp)
		}
		alone[i] = text(resp.Body)
	}

	// The first step of the innocents waits until the poison request is
	// queued, so that the next step holds the innocents' decodes and the
	// poison's prompt together.
	started, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	var mixed, panics atomic.Int32
	setFaultHook(t, func(tokens []int32) {
		first.Do(func() {
			close(started)
			<-release
		})
		if hasPoison(tokens) {
			panics.Add(1)
			if len(tokens) > len(poison) {
				mixed.Add(1)
			}
			panic(fmt.Sprintf("row %d of a 512-row matrix", 99999999))
		}
	})
	var wg sync.WaitGroup
	together := make([]*engine.Response, len(innocent))
	errs := make([]error, len(innocent)+1)
	for i, p := range innocent {
		wg.Go(func() { together[i], errs[i] = doResp(t, e, engine.EndpointCompletions, p) })
	}
	select {
	case <-started:
	case <-time.After(2 * time.Minute):
		t.Fatal("no forward pass began within two minutes")
	}
	var bad *engine.Response
	wg.Go(func() {
		raw, _ := json.Marshal(map[string]any{"prompt": poison, "max_tokens": 4})
		bad, errs[len(innocent)] = doResp(t, e, engine.EndpointCompletions, string(raw))
	})
	for deadline := time.Now().Add(2 * time.Minute); e.Stats().InFlight < len(innocent)+1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("the poison request was not queued within two minutes (in flight: %d)", e.Stats().InFlight)
		}
	}
	close(release)
	wg.Wait()

	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if bad.StatusCode != 500 || !bytes.Contains(bad.Body, []byte(`"engine_error"`)) || !bytes.Contains(bad.Body, []byte("row 99999999 of a 512-row matrix")) {
		t.Fatalf("poison request: status %d body %s, want a 500 engine_error naming the panic", bad.StatusCode, bad.Body)
	}
	if mixed.Load() == 0 || panics.Load() < 2 {
		t.Fatalf("the poison panicked %d times, %d of them beside other requests: want a mixed step, then a step alone", panics.Load(), mixed.Load())
	}
	for i, resp := range together {
		if resp.StatusCode != 200 {
			t.Fatalf("innocent %d: status %d %s", i, resp.StatusCode, resp.Body)
		}
		if got := text(resp.Body); got != alone[i] {
			t.Errorf("innocent %d: alone %q, after sharing a step with the poison %q", i, alone[i], got)
		}
	}
	// The engine still serves, batched, as before.
	var wg2 sync.WaitGroup
	for i, p := range innocent {
		wg2.Go(func() {
			resp, err := doResp(t, e, engine.EndpointCompletions, p)
			if err != nil || resp.StatusCode != 200 || text(resp.Body) != alone[i] {
				t.Errorf("after the panic, request %d: %v %+v", i, err, resp)
			}
		})
	}
	wg2.Wait()
	if n := e.Stats().InFlight; n != 0 {
		t.Fatalf("%d sequences still counted in flight", n)
	}
}

// Token ids outside the vocabulary are refused on every endpoint before
// they reach a kernel, and a panic in an embedding fails that request
// alone.
func TestTokenIDsCheckedOnEveryEndpoint(t *testing.T) {
	e := openEngine(t, ModelConfig{Path: demoPath(t)})
	for _, c := range []struct{ endpoint, body, param string }{
		{engine.EndpointEmbeddings, `{"input":[[1,99999999]]}`, "input"},
		{engine.EndpointEmbeddings, `{"input":[1,-1]}`, "input"},
		{engine.EndpointCompletions, `{"prompt":[1,99999999],"max_tokens":2}`, "prompt"},
		{engine.EndpointCompletions, `{"prompt":[[3],[4,-2]],"max_tokens":2}`, "prompt"},
		{engine.EndpointCompletions, `{"prompt":"x","max_tokens":2,"logit_bias":{"99999999":5}}`, "logit_bias"},
	} {
		resp, err := doResp(t, e, c.endpoint, c.body)
		if err != nil || resp.StatusCode != 400 || !bytes.Contains(resp.Body, []byte("outside the vocabulary")) ||
			!bytes.Contains(resp.Body, []byte(`"param":"`+c.param+`"`)) {
			t.Errorf("%s %s: %v %+v, want a 400 naming %s", c.endpoint, c.body, err, resp, c.param)
		}
	}
	setFaultHook(t, func(tokens []int32) {
		if hasPoison(tokens) {
			panic("embedding bug")
		}
	})
	raw, _ := json.Marshal(map[string]any{"input": [][]int32{{1, 2}, poison}})
	resp, err := doResp(t, e, engine.EndpointEmbeddings, string(raw))
	if err != nil || resp.StatusCode != 500 || !bytes.Contains(resp.Body, []byte("engine_error")) || resp.RequestID == "" {
		t.Fatalf("embedding that panics: %v %+v, want a 500 engine_error", err, resp)
	}
	if m := do(t, e, engine.EndpointEmbeddings, `{"input":[[1,2]]}`); len(m["data"].([]any)) != 1 {
		t.Fatalf("after the panic: %v", m)
	}
}

// max_tokens of 2^31-1 costs no memory for output not yet made: a new
// sequence's token buffer has room for at most initialOutputRoom tokens,
// whatever the request, the context or the cache allow (128 choices of a
// request waiting to run once cost 512 KiB each with the default cache),
// and it grows with what the sequence generates.
func TestHugeMaxTokensBoundedBuffer(t *testing.T) {
	const body = `{"prompt":[1,2,3],"max_tokens":2147483647,"n":128}`
	t.Run("default cache", func(t *testing.T) {
		e := openEngine(t, ModelConfig{Path: demoPath(t)})
		r := e.runners[e.order[0]]
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var capMax, seqs, steps atomic.Int64
		setFaultHook(t, func([]int32) {
			for _, s := range r.sched.running {
				capMax.Store(max(capMax.Load(), int64(cap(s.tokens))))
			}
			seqs.Store(max(seqs.Load(), int64(len(r.sched.running))))
			if steps.Add(1) == 3 {
				cancel()
			}
		})
		if _, err := e.Do(ctx, &engine.Request{CustomID: "t", Endpoint: engine.EndpointCompletions, Body: json.RawMessage(body)}); err == nil {
			t.Fatal("the cancelled request answered")
		}
		t.Logf("cache of %d positions, context %d", r.mr.kv.nBlocks*r.mr.kv.bs, r.model.cfg.ContextLength)
		if seqs.Load() != 128 || capMax.Load() == 0 || capMax.Load() > 3+initialOutputRoom {
			t.Fatalf("%d sequences ran, token buffer capacity up to %d: want 128, at most %d", seqs.Load(), capMax.Load(), 3+initialOutputRoom)
		}
	})
	t.Run("grows to the cache", func(t *testing.T) {
		// A small cache: the request runs until it is full, past the
		// buffer's first room. The demo model's shape (BATCHD_TEST_WEIGHTS
		// picks a wider one) sets what a position costs, so the cache is
		// sized to hold about four times that room.
		bytes := int64(1 << 20)
		e := openEngineWith(t, func(c *Config) { c.KVCacheBytes = bytes }, ModelConfig{Path: demoPath(t)})
		r := e.runners[e.order[0]]
		if p := r.mr.kv.nBlocks * r.mr.kv.bs; p < 4*initialOutputRoom {
			bytes = bytes * int64(4*initialOutputRoom) / int64(p)
			e = openEngineWith(t, func(c *Config) { c.KVCacheBytes = bytes }, ModelConfig{Path: demoPath(t)})
			r = e.runners[e.order[0]]
		}
		var capMax atomic.Int64
		setFaultHook(t, func([]int32) {
			for _, s := range r.sched.running {
				capMax.Store(max(capMax.Load(), int64(cap(s.tokens))))
			}
		})
		resp, err := doResp(t, e, engine.EndpointCompletions, `{"prompt":[1,2,3],"max_tokens":2147483647,"ignore_eos":true}`)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %+v", err, resp)
		}
		var m struct {
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		json.Unmarshal(resp.Body, &m)
		positions := r.mr.kv.nBlocks * r.mr.kv.bs
		full := min(positions, r.model.cfg.ContextLength) // what stops it
		t.Logf("cache of %d positions, context %d, %d tokens generated", positions, r.model.cfg.ContextLength, m.Usage.CompletionTokens)
		if full <= 3+initialOutputRoom {
			t.Fatalf("a cache of %d positions and a context of %d leave no room past %d", positions, r.model.cfg.ContextLength, initialOutputRoom)
		}
		if m.Usage.CompletionTokens <= initialOutputRoom || 3+m.Usage.CompletionTokens < full-r.mr.kv.bs {
			t.Fatalf("%d tokens generated in a cache of %d positions: want it filled, past %d", m.Usage.CompletionTokens, positions, initialOutputRoom)
		}
		if limit := int64(2 * positions); capMax.Load() > limit {
			t.Fatalf("token buffer capacity %d, want ≤ %d (twice the cache's positions)", capMax.Load(), limit)
		}
	})
}
