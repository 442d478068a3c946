package daemon_test

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/openai/openaitest"
)

// Online requests go ahead of batch lines unless api.online_priority is
// false; a batch's priority reads from the config's batch defaults.
func TestConfigOnlinePriorityAndBatchPriority(t *testing.T) {
	cfg, err := daemon.LoadFile(writeConfig(t, "batch:\n  service_tier: flex\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.API.OnlinePriority || cfg.Batch.ServiceTier != "flex" {
		t.Fatalf("online_priority %v, batch service_tier %q; want true (the default) and flex", cfg.API.OnlinePriority, cfg.Batch.ServiceTier)
	}
	cfg, err = daemon.LoadFile(writeConfig(t, "api:\n  online_priority: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.API.OnlinePriority {
		t.Fatal("api.online_priority: false is not read")
	}
}

// POST /v1/batches takes priority and service_tier and refuses an unknown
// one by name.
func TestAPIBatchPriorityRefusedByName(t *testing.T) {
	e := newAPIEnv(t, openaitest.Options{}, nil)
	_, f := e.upload("batch", "p.jsonl", chatBatch(1, "p"))
	for field, bad := range map[string]string{"priority": "urgent", "service_tier": "scale"} {
		var ae apiErr
		st := e.postJSON("/v1/batches", map[string]any{"input_file_id": f["id"], "endpoint": "/v1/chat/completions", field: bad}, &ae)
		if st != 400 || !strings.Contains(ae.Error.Message, field) {
			t.Errorf("%s %q: %d %q, want 400 naming %s", field, bad, st, ae.Error.Message, field)
		}
	}
	var o map[string]any
	if st := e.postJSON("/v1/batches", map[string]any{"input_file_id": f["id"], "endpoint": "/v1/chat/completions", "service_tier": "flex"}, &o); st != 200 {
		t.Fatalf("service_tier flex: %d %v", st, o)
	}
}

// With one batch runner busy, waiting inputs start by their priority (from
// NAME.options.json: priority or service_tier), not in the order dropped.
func TestInboxBatchesStartByPriority(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open)
	var mu sync.Mutex
	var seen []string // the batch tag of each request, in the order they came
	opts := openaitest.Options{Fault: func(n int64, r *http.Request, body []byte) openaitest.Fault {
		if n > 1 {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if m := regexp.MustCompile(`batch (\w+) line`).FindSubmatch(body); m != nil {
			seen = append(seen, string(m[1]))
		}
		return openaitest.Fault{}
	}}
	e := newEnv(t, opts)
	cfg := e.config()
	cfg.Listen = "127.0.0.1:0"
	cfg.Pipeline.MaxConcurrentBatches = 1
	cfg.Pipeline.Workers = 1
	d := e.open(cfg)

	e.drop("first.jsonl", chatBatch(2, "first")) // its second line waits at the gate
	waitFor(t, 30*time.Second, "batch first to run", func() bool {
		o := e.object("first")
		return o != nil && o.Status == "in_progress"
	})
	for _, b := range []struct{ name, options string }{
		{"flex", `{"service_tier":"flex"}`},
		{"plain", ""},
		{"low", `{"priority":"low"}`},
		{"urgent", `{"priority":"high"}`},
		{"tier", `{"service_tier":"priority"}`},
	} {
		if b.options != "" {
			e.drop(b.name+".options.json", b.options)
		}
		e.drop(b.name+".jsonl", chatBatch(1, b.name))
	}
	waitFor(t, 30*time.Second, "five inputs to wait for the runner", func() bool {
		return scrape(t, d.HTTPAddr())[`batchd_inbox_waiting{source="dir"}`] == 5
	})
	open()
	for _, name := range []string{"first", "flex", "plain", "low", "urgent", "tier"} {
		e.waitEnded(name, "jsonl")
	}
	mu.Lock()
	defer mu.Unlock()
	// Within a priority the order is the watcher's delivery order, which
	// this test does not fix: compare each priority's group as a set.
	got := strings.Join(seen, " ")
	groups := [][]string{{"first", "first"}, {"tier", "urgent"}, {"plain"}, {"flex", "low"}}
	rest := seen
	for _, g := range groups {
		if len(rest) < len(g) {
			t.Fatalf("requests reached the engine in batch order %q, want first first, {urgent tier}, plain, {flex low}", got)
		}
		part := slices.Sorted(slices.Values(rest[:len(g)]))
		if !slices.Equal(part, g) {
			t.Fatalf("requests reached the engine in batch order %q, want first first, {urgent tier}, plain, {flex low}", got)
		}
		rest = rest[len(g):]
	}
}
