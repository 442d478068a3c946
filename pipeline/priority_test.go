package pipeline_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/pipeline"
)

func TestOptionsRankNamesPrioritiesAndServiceTiers(t *testing.T) {
	for _, c := range []struct {
		o    pipeline.Options
		want engine.Priority
	}{
		{pipeline.Options{}, engine.PriorityNormal},
		{pipeline.Options{Priority: "high"}, engine.PriorityHigh},
		{pipeline.Options{Priority: "normal"}, engine.PriorityNormal},
		{pipeline.Options{Priority: "low"}, engine.PriorityLow},
		{pipeline.Options{ServiceTier: "priority"}, engine.PriorityHigh},
		{pipeline.Options{ServiceTier: "default"}, engine.PriorityNormal},
		{pipeline.Options{ServiceTier: "auto"}, engine.PriorityNormal},
		{pipeline.Options{ServiceTier: "flex"}, engine.PriorityLow},
		{pipeline.Options{Priority: "low", ServiceTier: "flex"}, engine.PriorityLow},
		{pipeline.Options{Metadata: map[string]string{"priority": "high"}}, engine.PriorityHigh},
		{pipeline.Options{Metadata: map[string]string{"priority": "urgent"}}, engine.PriorityNormal},
		{pipeline.Options{Priority: "low", Metadata: map[string]string{"priority": "high"}}, engine.PriorityLow},
	} {
		got, err := c.o.Rank()
		if err != nil || got != c.want {
			t.Errorf("%+v: %v, %v; want %v", c.o, got, err, c.want)
		}
		if err := c.o.Validate(); err != nil {
			t.Errorf("%+v: %v", c.o, err)
		}
	}
	for _, c := range []struct {
		o    pipeline.Options
		name string
	}{
		{pipeline.Options{Priority: "urgent"}, "priority"},
		{pipeline.Options{Priority: "flex"}, "priority"},
		{pipeline.Options{ServiceTier: "scale"}, "service_tier"},
		{pipeline.Options{ServiceTier: "high"}, "service_tier"},
		{pipeline.Options{Priority: "high", ServiceTier: "flex"}, "disagree"},
	} {
		if err := c.o.Validate(); err == nil || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%+v: %v, want an error naming %s", c.o, err, c.name)
		}
	}
}

// A batch's options override the config's priority, whichever name
// either uses.
func TestOptionsMergeTakesTheBatchPriority(t *testing.T) {
	def := pipeline.Options{Priority: "low"}
	eff := def.Merge(pipeline.Options{ServiceTier: "priority"})
	if p, err := eff.Rank(); err != nil || p != engine.PriorityHigh {
		t.Fatalf("config low, batch service_tier priority: %v, %v; want high", p, err)
	}
}

// priorityEngine records the priority each request reaches the engine with.
type priorityEngine struct {
	mu   sync.Mutex
	seen map[string]engine.Priority
}

func (e *priorityEngine) Open(context.Context) error  { return nil }
func (e *priorityEngine) Close(context.Context) error { return nil }
func (e *priorityEngine) Do(_ context.Context, req *engine.Request) (*engine.Response, error) {
	e.mu.Lock()
	e.seen[req.CustomID] = req.Priority
	e.mu.Unlock()
	return &engine.Response{StatusCode: 200, Body: []byte(`{"object":"chat.completion","choices":[]}`)}, nil
}

// The batch's priority reaches the engine on every line; an unknown one
// fails the batch naming the field, before any line runs.
func TestBatchPriorityReachesTheEngine(t *testing.T) {
	eng := &priorityEngine{seen: map[string]engine.Priority{}}
	e := newEnvOn(t, eng, nil)
	o := e.run(e.drop("flex", "jsonl", chatLines(3, "f"), `{"service_tier":"flex"}`))
	if o.Status != pipeline.StatusCompleted || o.RequestCounts.Completed != 3 {
		t.Fatalf("%s %+v", o.Status, o.RequestCounts)
	}
	eng.mu.Lock()
	if len(eng.seen) != 3 {
		t.Fatalf("engine saw %v, want 3 lines", eng.seen)
	}
	for cid, p := range eng.seen {
		if p != engine.PriorityLow {
			t.Errorf("%s reached the engine with priority %v, want low", cid, p)
		}
	}
	eng.mu.Unlock()
	o = e.run(e.drop("bad", "jsonl", chatLines(1, "b"), `{"priority":"urgent"}`))
	if o.Status != pipeline.StatusFailed || o.Errors == nil || o.Errors.Data[0].Code != "invalid_options" ||
		!strings.Contains(o.Errors.Data[0].Message, "priority") {
		t.Fatalf("%s %+v", o.Status, o.Errors)
	}
}
