package daemon_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/daemon"
)

// Every number of the config has a range, checked at start: a value out of
// it is refused with an error naming the key, the value and the range.
func TestConfigRanges(t *testing.T) {
	for _, tc := range []struct {
		key, want string // the error names key and has want (the range)
		edit      func(*daemon.Config)
	}{
		{"retention", "-1s is out of range (0s..87600h)", func(c *daemon.Config) { c.Retention = -time.Second }},
		{"shutdown_grace", "48h is out of range (0s..24h)", func(c *daemon.Config) { c.ShutdownGrace = 48 * time.Hour }},
		{"api.max_upload_bytes", "0 is out of range (1..1099511627776 bytes; 1 TiB)", func(c *daemon.Config) { c.API.MaxUploadBytes = 0 }},
		{"api.default_max_tokens", "-1 is out of range (0..2147483647)", func(c *daemon.Config) { c.API.DefaultMaxTokens = -1 }},
		{"api.max_concurrent_uploads", "0 is out of range (1..4096)", func(c *daemon.Config) { c.API.MaxConcurrentUploads = 0 }},
		{"api.body_timeout", "0s is out of range (1ms..1h)", func(c *daemon.Config) { c.API.BodyTimeout = 0 }},
		{"api.body_min_rate", "-1 is out of range (0..1073741824 bytes per second; 1 GiB)", func(c *daemon.Config) { c.API.BodyMinRate = -1 }},
		{"openai.max_inflight", "100000 is out of range (1..16384)", func(c *daemon.Config) { c.OpenAI.MaxInFlight = 100000 }},
		{"openai.max_retries", "-1 is out of range (0..1000)", func(c *daemon.Config) { c.OpenAI.MaxRetries = -1 }},
		{"openai.max_answer_bytes", "100 is out of range (1024..68719476736 bytes; 64 GiB)", func(c *daemon.Config) { c.OpenAI.MaxAnswerBytes = 100 }},
		{"openai.max_answer_bytes_inflight", "-1 is out of range (1024..1099511627776 bytes; 1 TiB)", func(c *daemon.Config) { c.OpenAI.MaxAnswerBytesInFlight = -1 }},
		{"openai.retry_wait_min", "2h is out of range (0s..1h)", func(c *daemon.Config) { c.OpenAI.RetryWaitMin = 2 * time.Hour }},
		{"openai.retry_wait_max", "0s is out of range (1ms..24h)", func(c *daemon.Config) { c.OpenAI.RetryWaitMax = 0 }},
		{"openai.attempt_timeout", "-1m is out of range (1ms..24h)", func(c *daemon.Config) { c.OpenAI.AttemptTimeout = -time.Minute }},
		{"openai.probe_interval", "0s is out of range (1ms..1h)", func(c *daemon.Config) { c.OpenAI.ProbeInterval = 0 }},
		{"openai.hang_after", "0s is out of range (1ms..24h)", func(c *daemon.Config) { c.OpenAI.HangAfter = 0 }},
		{"native.threads", "-1 is out of range (0..4096)", func(c *daemon.Config) { c.Native.Threads = -1 }},
		{"native.max_batch_tokens", "0 is out of range (1..1048576)", func(c *daemon.Config) { c.Native.MaxBatchTokens = 0 }},
		{"native.max_seqs", "100000 is out of range (1..16384)", func(c *daemon.Config) { c.Native.MaxSeqs = 100000 }},
		{"native.kv_cache_bytes", "-1 is out of range (0..17592186044416 bytes; 16 TiB)", func(c *daemon.Config) { c.Native.KVCacheBytes = -1 }},
		{"native.max_adapters", "0 is out of range (1..1024)", func(c *daemon.Config) { c.Native.MaxAdapters = 0 }},
		{"pipeline.max_concurrent_batches", "100000 is out of range (1..1024)", func(c *daemon.Config) { c.Pipeline.MaxConcurrentBatches = 100000 }},
		{"pipeline.max_line_bytes", "10 is out of range (1024..1073741824 bytes; 1 GiB)", func(c *daemon.Config) { c.Pipeline.MaxLineBytes = 10 }},
		{"pipeline.commit_every", "0 is out of range (1..1048576)", func(c *daemon.Config) { c.Pipeline.CommitEvery = 0 }},
		{"pipeline.workers", "-1 is out of range (1..16384)", func(c *daemon.Config) { c.Pipeline.Workers = -1 }},
		{"pipeline.queue_per_batch", "0 is out of range (1..1048576)", func(c *daemon.Config) { c.Pipeline.QueuePerBatch = 0 }},
		{"pipeline.disk_resume_free_bytes", "-1 is out of range (0..1125899906842624 bytes; 1 PiB)", func(c *daemon.Config) { c.Pipeline.DiskResumeFreeBytes = -1 }},
		{"pipeline.disk_resume_free_percent", "101 is out of range (0..100)", func(c *daemon.Config) { c.Pipeline.DiskResumeFreePercent = 101 }},
		{"pipeline.commit_interval", "0s is out of range (1ms..1h)", func(c *daemon.Config) { c.Pipeline.CommitInterval = 0 }},
		{"pipeline.progress_interval", "0s is out of range (1ms..1h)", func(c *daemon.Config) { c.Pipeline.ProgressInterval = 0 }},
		{"pipeline.disk_check_interval", "2h is out of range (1ms..1h)", func(c *daemon.Config) { c.Pipeline.DiskCheckInterval = 2 * time.Hour }},
		{"watcher.rescan", "-1s is out of range (1ms..24h)", func(c *daemon.Config) { c.Watcher.Rescan = -time.Second }},
		{"watcher.settle", "0s is out of range (1ms..1h)", func(c *daemon.Config) { c.Watcher.Settle = 0 }},
		{"watcher.incomplete_after", "0s is out of range (1ms..720h)", func(c *daemon.Config) { c.Watcher.IncompleteAfter = 0 }},
		{"watcher.poll_interval", "-1s is out of range (0s..1h)", func(c *daemon.Config) { c.Watcher.PollInterval = -time.Second }},
		{"s3.lease_ttl", "500ms is out of range (1s..24h)", func(c *daemon.Config) { c.S3.LeaseTTL = 500 * time.Millisecond }},
		{"s3.list_interval", "0s is out of range (1ms..24h)", func(c *daemon.Config) { c.S3.ListInterval = 0 }},
		{"s3.checkpoint_interval", "0s is out of range (1ms..24h)", func(c *daemon.Config) { c.S3.CheckpointInterval = 0 }},
		{"batch.max_tokens", "10000000000 is out of range (0..2147483647)", func(c *daemon.Config) { c.Batch.MaxTokens = 1e10 }},
		{"batch.temperature", "between 0 and 2", func(c *daemon.Config) { v := 9.0; c.Batch.Temperature = &v }},
	} {
		t.Run(tc.key, func(t *testing.T) {
			cfg := daemon.DefaultConfig()
			cfg.Engine = "openai"
			tc.edit(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.HasPrefix(err.Error(), tc.key+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %s: ... %s", err, tc.key, tc.want)
			}
		})
	}
	// The ends of each range are in it.
	cfg := daemon.DefaultConfig()
	cfg.Engine = "openai"
	cfg.Pipeline.MaxConcurrentBatches, cfg.API.DefaultMaxTokens, cfg.Batch.MaxTokens = 1024, 0, 2147483647
	cfg.Retention, cfg.ShutdownGrace, cfg.API.BodyMinRate = 0, 0, 0
	if err := cfg.Validate(); err != nil {
		t.Errorf("the ends of the ranges: %v", err)
	}
}

// A number written in a config file is read as the key's type says, and a
// value YAML would silently change is refused by key.
func TestConfigFileNumbers(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want string // in the error of LoadFile, or of Validate if LoadFile accepts it
	}{
		// 1e10 is a whole number: read as 10000000000, then out of range.
		{"batch:\n  max_tokens: 1e10\n", "batch.max_tokens: 10000000000 is out of range (0..2147483647)"},
		{"pipeline:\n  max_concurrent_batches: 100000\n", "pipeline.max_concurrent_batches: 100000 is out of range (1..1024)"},
		{"api:\n  default_max_tokens: -1\n", "api.default_max_tokens: -1 is out of range (0..2147483647)"},
		// YAML would truncate 1.5 to 1.
		{"api:\n  default_max_tokens: 1.5\n", "line 2: api.default_max_tokens: 1.5 is not a whole number"},
		{"native:\n  max_seqs: 2.5e0\n", "line 2: native.max_seqs: 2.5e0 is not a whole number"},
		// Too large for any integer: YAML's own error, with the key.
		{"api:\n  max_upload_bytes: 1e100\n", "line 2: api.max_upload_bytes: cannot unmarshal !!float `1e100` into int64"},
		{"pipeline: {workers: many}\n", "line 1: pipeline.workers: cannot unmarshal !!str `many` into int"},
		// A duration needs its unit.
		{"retention: 3600\n", "line 1: retention: cannot unmarshal !!int `3600` into time.Duration"},
	} {
		t.Run(tc.yaml, func(t *testing.T) {
			// The ranges are checked before the engine's settings (the
			// default engine, native, has no model here).
			cfg, err := daemon.LoadFile(writeConfig(t, tc.yaml))
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}

// The shipped example configs still load and validate with the ranges.
func TestShippedConfigsAreInRange(t *testing.T) {
	t.Setenv("BATCHD_API_KEY", "sk-example")
	cfg, err := daemon.LoadFile("../deploy/config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.ApplyEnv(&cfg, os.Getenv); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("deploy/config.example.yaml: %v", err)
	}
	if cfg.API.MaxConcurrentUploads != 16 || cfg.API.BodyTimeout != 30*time.Second || cfg.API.BodyMinRate != 1024 {
		t.Errorf("example api limits: %+v", cfg.API)
	}
}
