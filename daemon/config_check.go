package daemon

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/batchd/batchd/wire"
)

// Byte sizes for the ranges below.
const (
	kib = int64(1) << 10
	gib = int64(1) << 30
	tib = int64(1) << 40
	pib = int64(1) << 50
)

// intKey is an integer key and its allowed range.
type intKey struct {
	key    string
	v      int64
	lo, hi int64
	unit   string // bytes, bytes per second: also written in binary units
}

func (k intKey) check() error {
	if k.v >= k.lo && k.v <= k.hi {
		return nil
	}
	if k.unit != "" {
		return fmt.Errorf("%s: %d is out of range (%d..%d %s; %s)", k.key, k.v, k.lo, k.hi, k.unit, sizeName(k.hi))
	}
	return fmt.Errorf("%s: %d is out of range (%d..%d)", k.key, k.v, k.lo, k.hi)
}

// durKey is a duration key and its allowed range.
type durKey struct {
	key    string
	v      time.Duration
	lo, hi time.Duration
}

func (k durKey) check() error {
	if k.v >= k.lo && k.v <= k.hi {
		return nil
	}
	return fmt.Errorf("%s: %s is out of range (%s..%s)", k.key, durName(k.v), durName(k.lo), durName(k.hi))
}

// validateRanges checks every number of the config against its range, the
// range each key's comment in config.go (and the README) gives: wide
// enough for any deployment, narrow enough to refuse a slip (a negative
// count, a missing unit, an extra zero) at start rather than at the first
// batch or request.
func (c Config) validateRanges() error {
	ints := []intKey{
		{key: "api.max_upload_bytes", v: c.API.MaxUploadBytes, lo: 1, hi: tib, unit: "bytes"},
		{key: "api.default_max_tokens", v: int64(c.API.DefaultMaxTokens), lo: 0, hi: wire.MaxOutputTokens},
		{key: "api.max_concurrent_uploads", v: int64(c.API.MaxConcurrentUploads), lo: 1, hi: 4096},
		{key: "api.body_min_rate", v: c.API.BodyMinRate, lo: 0, hi: gib, unit: "bytes per second"},
		{key: "openai.max_inflight", v: int64(c.OpenAI.MaxInFlight), lo: 1, hi: 16384},
		{key: "openai.max_retries", v: int64(c.OpenAI.MaxRetries), lo: 0, hi: 1000},
		{key: "openai.max_answer_bytes", v: c.OpenAI.MaxAnswerBytes, lo: kib, hi: 64 * gib, unit: "bytes"},
		{key: "openai.max_answer_bytes_inflight", v: c.OpenAI.MaxAnswerBytesInFlight, lo: kib, hi: tib, unit: "bytes"},
		{key: "native.threads", v: int64(c.Native.Threads), lo: 0, hi: 4096},
		{key: "native.max_batch_tokens", v: int64(c.Native.MaxBatchTokens), lo: 1, hi: 1 << 20},
		{key: "native.max_seqs", v: int64(c.Native.MaxSeqs), lo: 1, hi: 16384},
		{key: "native.kv_cache_bytes", v: c.Native.KVCacheBytes, lo: 0, hi: 16 * tib, unit: "bytes"},
		{key: "native.max_adapters", v: int64(c.Native.MaxAdapters), lo: 1, hi: 1024},
		{key: "pipeline.max_concurrent_batches", v: int64(c.Pipeline.MaxConcurrentBatches), lo: 1, hi: 1024},
		{key: "pipeline.max_line_bytes", v: int64(c.Pipeline.MaxLineBytes), lo: kib, hi: gib, unit: "bytes"},
		{key: "pipeline.commit_every", v: int64(c.Pipeline.CommitEvery), lo: 1, hi: 1 << 20},
		{key: "pipeline.workers", v: int64(c.Pipeline.Workers), lo: 1, hi: 16384},
		{key: "pipeline.queue_per_batch", v: int64(c.Pipeline.QueuePerBatch), lo: 1, hi: 1 << 20},
		{key: "pipeline.disk_resume_free_bytes", v: c.Pipeline.DiskResumeFreeBytes, lo: 0, hi: pib, unit: "bytes"},
		{key: "batch.max_tokens", v: int64(c.Batch.MaxTokens), lo: 0, hi: wire.MaxOutputTokens},
	}
	for _, k := range ints {
		if err := k.check(); err != nil {
			return err
		}
	}
	const day = 24 * time.Hour
	durs := []durKey{
		{"retention", c.Retention, 0, 3650 * day},
		{"shutdown_grace", c.ShutdownGrace, 0, day},
		{"api.body_timeout", c.API.BodyTimeout, time.Millisecond, time.Hour},
		{"openai.retry_wait_min", c.OpenAI.RetryWaitMin, 0, time.Hour},
		{"openai.retry_wait_max", c.OpenAI.RetryWaitMax, time.Millisecond, day},
		{"openai.attempt_timeout", c.OpenAI.AttemptTimeout, time.Millisecond, day},
		{"openai.probe_interval", c.OpenAI.ProbeInterval, time.Millisecond, time.Hour},
		{"openai.hang_after", c.OpenAI.HangAfter, time.Millisecond, day},
		{"pipeline.commit_interval", c.Pipeline.CommitInterval, time.Millisecond, time.Hour},
		{"pipeline.progress_interval", c.Pipeline.ProgressInterval, time.Millisecond, time.Hour},
		{"pipeline.disk_check_interval", c.Pipeline.DiskCheckInterval, time.Millisecond, time.Hour},
		{"watcher.rescan", c.Watcher.Rescan, time.Millisecond, day},
		{"watcher.settle", c.Watcher.Settle, time.Millisecond, time.Hour},
		{"watcher.incomplete_after", c.Watcher.IncompleteAfter, time.Millisecond, 30 * day},
		{"watcher.poll_interval", c.Watcher.PollInterval, 0, time.Hour},
		{"s3.lease_ttl", c.S3.LeaseTTL, time.Second, day},
		{"s3.list_interval", c.S3.ListInterval, time.Millisecond, day},
		{"s3.checkpoint_interval", c.S3.CheckpointInterval, time.Millisecond, day},
	}
	for _, k := range durs {
		if err := k.check(); err != nil {
			return err
		}
	}
	// Expiry is OpenAI's: none, or 1 hour to 30 days.
	for _, k := range []durKey{
		{"expiry.files", c.Expiry.Files, minExpiry, maxExpiry},
		{"expiry.outputs", c.Expiry.Outputs, minExpiry, maxExpiry},
	} {
		if k.v != 0 && k.check() != nil {
			return fmt.Errorf("%s: %s is out of range (0, or %s..%s)", k.key, durName(k.v), durName(k.lo), durName(k.hi))
		}
	}
	// NaN is in no range: the comparison is written to refuse it.
	if p := c.Pipeline.DiskResumeFreePercent; !(p >= 0 && p <= 100) {
		return fmt.Errorf("pipeline.disk_resume_free_percent: %g is out of range (0..100)", p)
	}
	// The sampling defaults follow the rules of the request fields they
	// fill in (temperature 0..2, top_p (0..1], ...).
	if err := c.Batch.ValidateConfig().Validate(); err != nil {
		return fmt.Errorf("batch.%w", err)
	}
	return nil
}

// sizeName writes n bytes in the largest binary unit that divides it.
func sizeName(n int64) string {
	for _, u := range []struct {
		size int64
		name string
	}{{pib, "PiB"}, {tib, "TiB"}, {gib, "GiB"}, {1 << 20, "MiB"}, {kib, "KiB"}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// durName writes d as the config would: 720h, 1m, 1.5s, 0s.
func durName(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// yamlValue is a scalar of a config file: its key, as the errors name it
// (api.keys[0], native.models[1].path), and the Go type it decodes into.
type yamlValue struct {
	key  string
	node *yaml.Node
	typ  reflect.Type
}

// yamlValues lists the scalars of the YAML document raw that decode into
// fields of t; those of unknown keys are left out. nil when raw does not
// parse.
func yamlValues(raw []byte, t reflect.Type) []yamlValue {
	var doc yaml.Node
	if yaml.Unmarshal(raw, &doc) != nil {
		return nil
	}
	var out []yamlValue
	var walk func(n *yaml.Node, t reflect.Type, key string)
	walk = func(n *yaml.Node, t reflect.Type, key string) {
		for n.Kind == yaml.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case n.Kind == yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, t, key)
			}
		case n.Kind == yaml.MappingNode && t.Kind() == reflect.Struct:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if f, ok := yamlField(t, n.Content[i].Value); ok {
					walk(n.Content[i+1], f.Type, joinKey(key, n.Content[i].Value))
				}
			}
		case n.Kind == yaml.MappingNode && t.Kind() == reflect.Map:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], t.Elem(), joinKey(key, n.Content[i].Value))
			}
		case n.Kind == yaml.SequenceNode && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
			for i, c := range n.Content {
				walk(c, t.Elem(), fmt.Sprintf("%s[%d]", key, i))
			}
		case n.Kind == yaml.ScalarNode:
			out = append(out, yamlValue{key, n, t})
		}
	}
	walk(&doc, t, "")
	return out
}

// yamlField finds the field of struct t whose yaml tag is name.
func yamlField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.IsExported() && strings.Split(f.Tag.Get("yaml"), ",")[0] == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func joinKey(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// checkWholeNumbers refuses a fraction given for an integer key, which
// YAML would truncate (max_tokens: 1.5 read as 1). A whole number written
// as a float (1e10) is read as that integer, and its range is checked
// with the others.
func checkWholeNumbers(vals []yamlValue) error {
	for _, v := range vals {
		switch v.typ.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		default:
			continue
		}
		if v.node.ShortTag() != "!!float" {
			continue
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(v.node.Value, "_", ""), 64)
		if err != nil || f != math.Trunc(f) || math.IsInf(f, 0) {
			return fmt.Errorf("line %d: %s: %s is not a whole number", v.node.Line, v.key, v.node.Value)
		}
	}
	return nil
}

var yamlErrorLine = regexp.MustCompile(`^line (\d+): `)

// nameKeys adds the key to each of err's YAML type errors ("line 3:
// cannot unmarshal !!str `many` into int" says which line, not which
// key), where one value of the line is the one refused.
func nameKeys(err error, vals []yamlValue) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	named := make([]string, len(te.Errors))
	for i, msg := range te.Errors {
		named[i] = msg
		m := yamlErrorLine.FindStringSubmatch(msg)
		if m == nil {
			continue
		}
		line, _ := strconv.Atoi(m[1])
		var keys []string
		for _, v := range vals {
			if v.node.Line == line && strings.Contains(msg, "`"+shownValue(v.node.Value)+"`") {
				keys = append(keys, v.key)
			}
		}
		if len(keys) == 1 {
			named[i] = m[0] + keys[0] + ": " + msg[len(m[0]):]
		}
	}
	return &yaml.TypeError{Errors: named}
}

// shownValue is value as a YAML type error quotes it: cut to 7 bytes and
// "..." past 10.
func shownValue(value string) string {
	if len(value) > 10 {
		return value[:7] + "..."
	}
	return value
}
