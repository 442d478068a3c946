package daemon_test

import (
	"strings"
	"testing"

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
