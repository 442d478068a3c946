package daemon

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestConfigDiffNamesYAMLKeys(t *testing.T) {
	a := DefaultConfig()
	b := DefaultConfig()
	b.API.Keys = []string{"k"}
	b.Pipeline.Workers = 9
	b.Log.Level = "debug"
	b.Native.Speculative.K = 7
	got := configDiff(a, b)
	want := []string{"native.speculative.k", "pipeline.workers", "api.keys", "log.level"}
	if !slices.Equal(got, want) {
		t.Errorf("configDiff = %v, want %v", got, want)
	}
	if d := configDiff(a, DefaultConfig()); len(d) != 0 {
		t.Errorf("configDiff of equal configs = %v", d)
	}
}

func TestShutdownGraceValidated(t *testing.T) {
	c := DefaultConfig()
	c.Engine = "openai"
	c.ShutdownGrace = -time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "shutdown_grace") {
		t.Errorf("negative shutdown_grace: %v, want an error naming shutdown_grace", err)
	}
	if DefaultConfig().ShutdownGrace != 30*time.Second {
		t.Errorf("default shutdown_grace %v, want 30s", DefaultConfig().ShutdownGrace)
	}
}
