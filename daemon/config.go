package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/batchd/batchd/daemon/webhook"
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native"
	"github.com/batchd/batchd/engine/openai"
	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/store/bucket/s3client"
	"github.com/batchd/batchd/watcher/dir"
)

// Config is batchd's one configuration struct. A YAML file fills it (unknown
// keys rejected, ${ENV} expanded), BATCHD_* environment variables override
// the file, and command-line flags override both.
type Config struct {
	// Data is the data directory: inbox/, outbox/, done/, state/.
	Data string `yaml:"data"`
	// Listen is the HTTP address (host:port) of the API, the status page,
	// metrics and health endpoints; "" or "off" disables HTTP.
	Listen string `yaml:"listen"`
	// Engine names the engine: "native" (in-process, on local model files)
	// or "openai" (a remote OpenAI-compatible server).
	Engine   string         `yaml:"engine"`
	Native   NativeConfig   `yaml:"native"`
	OpenAI   OpenAIConfig   `yaml:"openai"`
	Pipeline PipelineConfig `yaml:"pipeline"`
	// Batch holds batch-level defaults; NAME.options.json overrides them per batch.
	Batch   pipeline.Options `yaml:"batch"`
	Watcher WatcherConfig    `yaml:"watcher"`
	// Source is where inputs come from: "" (or "dir") for DATA/inbox, or
	// s3://BUCKET/PREFIX for a MinIO/S3 bucket (configured by S3).
	Source string    `yaml:"source"`
	S3     S3Config  `yaml:"s3"`
	API    APIConfig `yaml:"api"`
	// Webhooks are POSTed when a batch ends (completed, failed, expired,
	// cancelled), signed, retried, and kept in DATA/state/webhooks until
	// delivered.
	Webhooks WebhooksConfig `yaml:"webhooks"`
	// Retention is how long the ledger keeps a finished batch (its record,
	// the API's view of it, and the pipeline's copies of its results; the
	// outbox files and done/ inputs are yours and stay). 0 keeps them forever.
	Retention time.Duration `yaml:"retention"`
	// Expiry is how long files stay before batchd removes them; a request
	// may give its own (expires_after, output_expires_after).
	Expiry ExpiryConfig `yaml:"expiry"`
	Log    LogConfig    `yaml:"log"`
	// ShutdownGrace is how long SIGTERM waits for the requests in flight
	// to finish (intake stopped) before it stops them at a commit point;
	// 0 stops at once. A second SIGTERM stops at once too.
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// MediaRoot is the directory local files named by image and audio
	// content parts ({"type":"image","image":PATH}) are read from, to be
	// sent inline to the remote engine; anything outside it, a symlink
	// leading out included, is refused. "" (the default) reads no files.
	MediaRoot string `yaml:"media_root"`

	// keyVars holds, for each api.keys entry, the ${VAR} references in
	// the file that expanded to nothing, so that an empty key can name
	// the variable that was not set.
	keyVars []string
}

// ExpiryConfig holds the default expiry of files, OpenAI's expires_after
// and output_expires_after: 0 (the default) keeps them until deleted,
// else 1h to 720h (30 days), as OpenAI allows.
type ExpiryConfig struct {
	// Files is how long an upload (POST /v1/files without expires_after)
	// stays after it was uploaded.
	Files time.Duration `yaml:"files"`
	// Outputs is how long a batch's output and error files (the outbox's
	// NAME.output.jsonl, NAME.errors.jsonl and NAME.results.json, and the
	// API's output_file_id and error_file_id) stay after the batch wrote
	// them, for a dropped batch and an API batch created without
	// output_expires_after.
	Outputs time.Duration `yaml:"outputs"`
}

// WebhooksConfig configures batch-end webhooks (none without URLs).
type WebhooksConfig struct {
	URLs []string `yaml:"urls"`
	// Secret signs each delivery (Standard Webhooks headers, as OpenAI
	// sends them): "whsec_<base64>" or any string.
	Secret string `yaml:"secret"`
}

// APIConfig configures the HTTP API on Listen and who may use it.
type APIConfig struct {
	// Keys are the accepted API keys (Authorization: Bearer KEY). With
	// keys, every route but /healthz and /readyz needs one: the API, the
	// status page, /status.json and /metrics. None leaves all of it open,
	// which only a loopback Listen or Open allows.
	Keys []string `yaml:"keys"`
	// Open serves everything without a key on an address beyond loopback;
	// it must be said explicitly, and contradicts Keys.
	Open bool `yaml:"open"`
	// MetricsPublic opens /metrics alone to anyone (for Prometheus
	// scrapers) while Keys guard the rest.
	MetricsPublic bool `yaml:"metrics_public"`
	// MaxUploadBytes bounds one POST /v1/files (default 512 MiB; 1 byte
	// to 1 TiB).
	MaxUploadBytes int64 `yaml:"max_upload_bytes"`
	// MaxConcurrentUploads bounds the POST /v1/files bodies read at once
	// (default 16; 1 to 4096); one more is answered 429 with Retry-After
	// before anything is written.
	MaxConcurrentUploads int `yaml:"max_concurrent_uploads"`
	// BodyTimeout and BodyMinRate pace every request body (an upload, a
	// batch, an online request, a bucket event): from its first byte, and
	// again each time it has brought BodyMinRate × BodyTimeout bytes (at
	// least one), it has BodyTimeout to bring that many more, or it is
	// answered 408 and an upload's partial file is removed. Defaults 30s
	// (1ms to 1h) and 1024 bytes per second (0 to 1 GiB; 0: any byte
	// restarts the timeout): a body under 1 KiB/s, like one dripping a
	// byte every 2 s, is cut off within 30s; any faster one never is.
	BodyTimeout time.Duration `yaml:"body_timeout"`
	BodyMinRate int64         `yaml:"body_min_rate"`
	// DefaultMaxTokens is the output limit of an online request that sets
	// none (and no batch default does; default 4096; 0 to 2147483647, 0:
	// none, the request generates until its context is full).
	DefaultMaxTokens int `yaml:"default_max_tokens"`
	// OnlinePriority admits online requests to the engine ahead of
	// batch lines (default true; the engine still leaves batches a share
	// of its admissions). false admits them as normal-priority lines.
	OnlinePriority bool `yaml:"online_priority"`
}

// onlineRank is the engine priority of an online request.
func (c APIConfig) onlineRank() engine.Priority {
	if c.OnlinePriority {
		return engine.PriorityOnline
	}
	return engine.PriorityNormal
}

// S3Config configures the bucket source (source: s3://BUCKET/PREFIX).
type S3Config struct {
	Endpoint           string `yaml:"endpoint"`
	Region             string `yaml:"region"`
	TLS                bool   `yaml:"tls"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
	AccessKey          string `yaml:"access_key"`
	SecretKey          string `yaml:"secret_key"`
	SessionToken       string `yaml:"session_token"`
	CredentialsFile    string `yaml:"credentials_file"`
	Profile            string `yaml:"profile"`
	// Owner names this daemon in leases (default: host, pid, random).
	Owner              string        `yaml:"owner"`
	LeaseTTL           time.Duration `yaml:"lease_ttl"`
	ListInterval       time.Duration `yaml:"list_interval"`
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// WebhookToken, when set, is the Authorization header MinIO's webhook
	// notification target must send to POST /v1/bucket-events
	// (MINIO_NOTIFY_WEBHOOK_AUTH_TOKEN_<ID>); docs/bucket.md has the setup.
	WebhookToken string `yaml:"webhook_token"`
}

// IsBucket tells whether the source is a bucket.
func (c Config) IsBucket() bool { return strings.HasPrefix(c.Source, "s3://") }

// OpenAIConfig configures the remote engine.
type OpenAIConfig struct {
	URLs           []string      `yaml:"urls"`
	APIKey         string        `yaml:"api_key"`
	Model          string        `yaml:"model"`
	MaxInFlight    int           `yaml:"max_inflight"`
	MaxRetries     int           `yaml:"max_retries"`
	RetryWaitMin   time.Duration `yaml:"retry_wait_min"`
	RetryWaitMax   time.Duration `yaml:"retry_wait_max"`
	AttemptTimeout time.Duration `yaml:"attempt_timeout"`
	ProbeInterval  time.Duration `yaml:"probe_interval"`
	HangAfter      time.Duration `yaml:"hang_after"`
	// MaxAnswerBytes bounds one answer (default 256 MiB; a bigger one fails
	// its request after max_retries); MaxAnswerBytesInFlight bounds the
	// answer bytes held at once (default 512 MiB).
	MaxAnswerBytes         int64 `yaml:"max_answer_bytes"`
	MaxAnswerBytesInFlight int64 `yaml:"max_answer_bytes_inflight"`
	// Routes send the requests naming a model to servers of their own,
	// each a pool with its own outage detection; a request naming another
	// model goes to URLs, or without URLs is refused with model_not_found.
	Routes []openai.Route `yaml:"routes"`
}

// NativeConfig configures the in-process engine.
type NativeConfig struct {
	// Models are the models served; body.model picks one by name.
	Models         []native.ModelConfig `yaml:"models"`
	Threads        int                  `yaml:"threads"`
	MaxBatchTokens int                  `yaml:"max_batch_tokens"`
	MaxSeqs        int                  `yaml:"max_seqs"`
	// Kernels is the CPU code path: auto (the fastest this CPU runs), or
	// amx, avx512, avx2, generic to force one; BATCHD_KERNELS overrides it.
	Kernels string `yaml:"kernels"`
	// Device is where the models run: auto (GPU 0 when this binary can
	// use one, else the CPU, logging why), cpu (the kernels above), cuda
	// or cuda:N (an NVIDIA GPU; refuses to start without one), or
	// reference (the slow plain-Go reference device, for checking);
	// BATCHD_DEVICE overrides it.
	Device string `yaml:"device"`
	// KVCacheBytes is each model's paged KV cache (0: 25% of memory, at
	// most 4 GiB); DisablePrefixCache turns off reuse of cached prompt blocks.
	KVCacheBytes       int64 `yaml:"kv_cache_bytes"`
	DisablePrefixCache bool  `yaml:"disable_prefix_cache"`
	// KeepWeightsMapped leaves the weights as the file maps them instead
	// of packing the block formats' matrices for the CPU kernels at load:
	// slower, but the weights stay page cache the kernel can evict.
	KeepWeightsMapped bool `yaml:"keep_weights_mapped"`
	// StrictModel makes a request naming an unknown model a model_not_found
	// line instead of running on the only model.
	StrictModel bool `yaml:"strict_model"`
	// AdapterRoot is the directory a request's lora_path (a requests
	// document's available_lora_weights) is loaded from on first use; ""
	// (default): adapters load only from models[].adapters.
	AdapterRoot string `yaml:"adapter_root"`
	// MaxAdapters bounds each model's LoRA adapters, configured and loaded
	// on first use together (default 16).
	MaxAdapters int `yaml:"max_adapters"`
	// Speculative is speculative decoding's default method (off, ngram,
	// draft), draft length k and prompt lookup's n-gram lengths; a
	// request's speculative field overrides the method.
	Speculative native.SpeculativeConfig `yaml:"speculative"`
}

// PipelineConfig tunes how batches run.
type PipelineConfig struct {
	MaxConcurrentBatches int           `yaml:"max_concurrent_batches"`
	MaxLineBytes         int           `yaml:"max_line_bytes"`
	CommitInterval       time.Duration `yaml:"commit_interval"`
	CommitEvery          int           `yaml:"commit_every"`
	// Workers is how many requests the remote engine (engine: openai)
	// runs at once across all batches, one goroutine each. The native
	// engine takes requests without a goroutine each, as many as its own
	// window asks for (its capacity and memory), and ignores it.
	Workers int `yaml:"workers"`
	// QueuePerBatch is how many validated requests of one batch wait in
	// the pipeline for room at the engine.
	QueuePerBatch    int           `yaml:"queue_per_batch"`
	ProgressInterval time.Duration `yaml:"progress_interval"`
	// A write that fails with ENOSPC pauses intake; it resumes once the
	// state dir and the outbox have disk_resume_free_bytes or
	// disk_resume_free_percent of their file system free, checked every
	// disk_check_interval.
	DiskResumeFreeBytes   int64         `yaml:"disk_resume_free_bytes"`
	DiskResumeFreePercent float64       `yaml:"disk_resume_free_percent"`
	DiskCheckInterval     time.Duration `yaml:"disk_check_interval"`
}

// WatcherConfig tunes the inbox watcher.
type WatcherConfig struct {
	Rescan time.Duration `yaml:"rescan"`
	Settle time.Duration `yaml:"settle"`
	// IncompleteAfter: an input unchanged but incomplete this long fails
	// (input_incomplete) and moves to rejected/.
	IncompleteAfter time.Duration `yaml:"incomplete_after"`
	Poll            bool          `yaml:"poll"`
	PollInterval    time.Duration `yaml:"poll_interval"`
}

// LogConfig configures logging.
type LogConfig struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // text or json
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	pc := pipeline.DefaultConfig("")
	return Config{
		Data:   "./data",
		Listen: "127.0.0.1:8080",
		Engine: "native",
		Native: NativeConfig{Kernels: native.DefaultConfig().Kernels,
			MaxBatchTokens: native.DefaultConfig().MaxBatchTokens, MaxSeqs: native.DefaultConfig().MaxSeqs,
			MaxAdapters: native.DefaultConfig().MaxAdapters, Speculative: native.DefaultConfig().Speculative},
		OpenAI: OpenAIConfig{
			URLs:           []string{"http://127.0.0.1:8000/v1"},
			MaxInFlight:    64,
			MaxRetries:     openai.DefaultConfig().MaxRetries,
			RetryWaitMin:   500 * time.Millisecond,
			RetryWaitMax:   30 * time.Second,
			AttemptTimeout: 10 * time.Minute,
			ProbeInterval:  2 * time.Second,
			HangAfter:      openai.DefaultConfig().HangAfter,

			MaxAnswerBytes:         openai.DefaultConfig().MaxAnswerBytes,
			MaxAnswerBytesInFlight: openai.DefaultConfig().MaxAnswerBytesInFlight,
		},
		Pipeline: PipelineConfig{
			MaxConcurrentBatches:  4,
			MaxLineBytes:          pc.MaxLineBytes,
			CommitInterval:        pc.CommitInterval,
			CommitEvery:           pc.CommitEvery,
			Workers:               pc.Workers,
			QueuePerBatch:         pc.QueuePerBatch,
			ProgressInterval:      pc.ProgressInterval,
			DiskResumeFreeBytes:   pc.DiskResumeFreeBytes,
			DiskResumeFreePercent: pc.DiskResumeFreePercent,
			DiskCheckInterval:     pc.DiskCheckInterval,
		},
		Batch:   pipeline.Options{OnInvalid: pipeline.OnInvalidContinue},
		Watcher: WatcherConfig{Rescan: 30 * time.Second, Settle: time.Second, IncompleteAfter: dir.DefaultIncompleteAfter, PollInterval: 2 * time.Second},
		S3: S3Config{LeaseTTL: s3client.DefaultConfig("").LeaseTTL, ListInterval: s3client.DefaultConfig("").ListInterval,
			CheckpointInterval: 5 * time.Second},
		Log: LogConfig{Level: "info", Format: "text"},
		API: APIConfig{MaxUploadBytes: 512 << 20, DefaultMaxTokens: 4096, OnlinePriority: true,
			MaxConcurrentUploads: 16, BodyTimeout: 30 * time.Second, BodyMinRate: 1 << 10},
		Retention: 30 * 24 * time.Hour,

		ShutdownGrace: 30 * time.Second,
	}
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// ExpandEnv replaces each ${NAME} with the value of environment variable NAME
// (empty when unset). A bare $ is left alone.
func ExpandEnv(s string) string {
	return envRef.ReplaceAllStringFunc(s, func(m string) string {
		return os.Getenv(m[2 : len(m)-1])
	})
}

// LoadFile reads a YAML config file over the defaults.
func LoadFile(path string) (Config, error) {
	cfg := DefaultConfig()
	raw, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("read config: %w", err)
	}
	expanded := []byte(ExpandEnv(string(raw)))
	dec := yaml.NewDecoder(bytes.NewReader(expanded))
	dec.KnownFields(true)
	vals := yamlValues(expanded, reflect.TypeFor[Config]())
	// An empty file (io.EOF) means all defaults.
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return cfg, fmt.Errorf("config %s: %w", path, nameKeys(err, vals))
	}
	if err := checkWholeNumbers(vals); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	if keys, vars, ok := fileKeys(string(raw)); ok {
		cfg.API.Keys, cfg.keyVars = keys, vars
	}
	return cfg, nil
}

// unsetMark brackets the name of a variable that expanded to nothing in
// fileKeys' second reading of the file; it is valid inside any YAML scalar
// and cannot occur in a variable name.
const unsetMark = "\u00a7"

var unsetRef = regexp.MustCompile(unsetMark + `([A-Za-z_][A-Za-z0-9_]*)` + unsetMark)

// fileKeys reads api.keys again from raw with every ${VAR} that is unset or
// empty replaced by a marker. Expanded to nothing, `keys: [${VAR}]` is
// `keys: []`, no key at all, where the file meant one: this reading keeps
// that entry (empty), and returns, for each key, the variables ("$VAR")
// that came out empty in it (nil when none did). ok is false when the file
// has no api.keys list this reading can decode.
func fileKeys(raw string) (keys, vars []string, ok bool) {
	marked := envRef.ReplaceAllStringFunc(raw, func(m string) string {
		name := m[2 : len(m)-1]
		if v := os.Getenv(name); v != "" {
			return v
		}
		return unsetMark + name + unsetMark
	})
	var doc struct {
		API struct {
			Keys []string `yaml:"keys"`
		} `yaml:"api"`
	}
	if yaml.Unmarshal([]byte(marked), &doc) != nil || doc.API.Keys == nil {
		return nil, nil, false
	}
	keys = make([]string, len(doc.API.Keys))
	for i, k := range doc.API.Keys {
		var names []string
		for _, m := range unsetRef.FindAllStringSubmatch(k, -1) {
			names = append(names, "$"+m[1])
		}
		if len(names) > 0 {
			if vars == nil {
				vars = make([]string, len(keys))
			}
			vars[i] = strings.Join(names, ", ")
		}
		keys[i] = unsetRef.ReplaceAllString(k, "")
	}
	return keys, vars, true
}

// ApplyEnv overrides cfg with BATCHD_* environment variables.
func ApplyEnv(cfg *Config, getenv func(string) string) error {
	str := func(name string, dst *string) {
		if v := getenv(name); v != "" {
			*dst = v
		}
	}
	num := func(name string, dst *int) error {
		if v := getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%s: %q is not an integer", name, v)
			}
			*dst = n
		}
		return nil
	}
	str("BATCHD_DATA", &cfg.Data)
	str("BATCHD_LISTEN", &cfg.Listen)
	str("BATCHD_MEDIA_ROOT", &cfg.MediaRoot)
	str("BATCHD_ENGINE", &cfg.Engine)
	str("BATCHD_KERNELS", &cfg.Native.Kernels)
	str("BATCHD_DEVICE", &cfg.Native.Device)
	if v := getenv("BATCHD_MODEL"); v != "" {
		cfg.Native.Models = []native.ModelConfig{{Path: v}}
	}
	if v := getenv("BATCHD_OPENAI_URL"); v != "" {
		cfg.OpenAI.URLs = splitList(v)
	}
	str("BATCHD_OPENAI_API_KEY", &cfg.OpenAI.APIKey)
	str("BATCHD_OPENAI_MODEL", &cfg.OpenAI.Model)
	if v := getenv("BATCHD_WEBHOOK_URLS"); v != "" {
		cfg.Webhooks.URLs = splitList(v)
	}
	str("BATCHD_WEBHOOK_SECRET", &cfg.Webhooks.Secret)
	// BATCHD_API_KEY (one key, as the example config and the deploy
	// manifests name it) and BATCHD_API_KEYS (a comma-separated list, for
	// rotation) replace api.keys together.
	if one, list := getenv("BATCHD_API_KEY"), getenv("BATCHD_API_KEYS"); one != "" || list != "" {
		cfg.API.Keys, cfg.keyVars = splitList(list), nil
		if one != "" {
			cfg.API.Keys = append([]string{one}, cfg.API.Keys...)
		}
	}
	if v := getenv("BATCHD_API_OPEN"); v != "" {
		open, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("BATCHD_API_OPEN: %q is not true or false", v)
		}
		cfg.API.Open = open
	}
	str("BATCHD_SOURCE", &cfg.Source)
	str("BATCHD_S3_ENDPOINT", &cfg.S3.Endpoint)
	str("BATCHD_S3_REGION", &cfg.S3.Region)
	str("BATCHD_S3_ACCESS_KEY", &cfg.S3.AccessKey)
	str("BATCHD_S3_SECRET_KEY", &cfg.S3.SecretKey)
	str("BATCHD_S3_OWNER", &cfg.S3.Owner)
	str("BATCHD_LOG_LEVEL", &cfg.Log.Level)
	str("BATCHD_LOG_FORMAT", &cfg.Log.Format)
	if err := num("BATCHD_MAX_CONCURRENT_BATCHES", &cfg.Pipeline.MaxConcurrentBatches); err != nil {
		return err
	}
	if err := num("BATCHD_OPENAI_MAX_INFLIGHT", &cfg.OpenAI.MaxInFlight); err != nil {
		return err
	}
	return nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Validate checks the config, naming the bad field.
func (c Config) Validate() error {
	if c.Data == "" {
		return errors.New("data: required")
	}
	if err := c.validateRanges(); err != nil {
		return err
	}
	if err := c.validateMediaRoot(); err != nil {
		return err
	}
	switch c.Engine {
	case "openai":
		if len(c.OpenAI.URLs) == 0 && len(c.OpenAI.Routes) == 0 {
			return errors.New("openai.urls: at least one base URL (or openai.routes) is required for engine openai")
		}
		if err := c.openaiConfig().Validate(); err != nil {
			return err
		}
	case "native":
		if err := c.nativeConfig().Validate(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("engine: unknown engine %q (known: native, openai)", c.Engine)
	}
	if _, err := parseLevel(c.Log.Level); err != nil {
		return err
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return fmt.Errorf("log.format: must be text or json, got %q", c.Log.Format)
	}
	if err := c.pipelineConfig().Validate(); err != nil {
		return fmt.Errorf("pipeline.%w", err)
	}
	if len(c.Webhooks.URLs) > 0 {
		if err := c.webhookConfig(filepath.Join(c.Data, filecontract.DirState, "webhooks")).Validate(); err != nil {
			return fmt.Errorf("webhooks: %w", err)
		}
	}
	if err := c.validateAccess(); err != nil {
		return err
	}
	switch {
	case c.Source == "" || c.Source == "dir":
	case c.IsBucket():
		if err := c.s3Config().Validate(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("source: %q is neither dir nor s3://BUCKET/PREFIX", c.Source)
	}
	return nil
}

// HTTPOff tells whether the config turns HTTP off (listen "" or "off").
func (c Config) HTTPOff() bool { return c.Listen == "" || c.Listen == "off" }

// validateAccess checks listen and api.keys/api.open: no key may be empty
// (an unset ${VAR} must not open the API), and an address beyond loopback
// needs keys unless api.open says otherwise.
func (c Config) validateAccess() error {
	for i, k := range c.API.Keys {
		if strings.TrimSpace(k) != "" {
			continue
		}
		if i < len(c.keyVars) && c.keyVars[i] != "" {
			return fmt.Errorf("api.keys[%d]: empty (is %s set?)", i, c.keyVars[i])
		}
		return fmt.Errorf("api.keys[%d]: empty; give a key or remove the entry", i)
	}
	if c.API.Open && len(c.API.Keys) > 0 {
		return fmt.Errorf("api.open: true contradicts api.keys (%d keys): keep one of them", len(c.API.Keys))
	}
	if c.HTTPOff() {
		return nil
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen: %q is not host:port (or off): %w", c.Listen, err)
	}
	if len(c.API.Keys) == 0 && !c.API.Open && !isLoopback(c.Listen) {
		return fmt.Errorf("listen: %s is beyond loopback and api.keys is empty, so anyone who reaches it could use the API: "+
			"set api.keys (or BATCHD_API_KEY) to require a key, or set api.open: true (or BATCHD_API_OPEN=true) to serve it without one", c.Listen)
	}
	return nil
}

func (c Config) webhookConfig(spool string) webhook.Config {
	return webhook.Config{URLs: c.Webhooks.URLs, Secret: c.Webhooks.Secret, SpoolDir: spool}
}

func (c Config) s3Config() s3client.Config {
	sc := s3client.DefaultConfig(c.Source)
	x := c.S3
	sc.Endpoint, sc.Region, sc.TLS, sc.InsecureSkipVerify = x.Endpoint, x.Region, x.TLS, x.InsecureSkipVerify
	sc.AccessKey, sc.SecretKey, sc.SessionToken = x.AccessKey, x.SecretKey, x.SessionToken
	sc.CredentialsFile, sc.Profile, sc.Owner = x.CredentialsFile, x.Profile, x.Owner
	sc.LeaseTTL, sc.ListInterval = x.LeaseTTL, x.ListInterval
	return sc
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("log.level: must be debug, info, warn or error, got %q", s)
	}
	return l, nil
}

// NewLogger builds the logger the config asks for.
func (c Config) NewLogger(w *os.File) *slog.Logger {
	return c.NewLoggerLevel(w, new(slog.LevelVar))
}

// NewLoggerLevel is NewLogger with its level in lv, set to the config's
// now; setting lv later changes it (Daemon.SetLogLevel, a reload).
func (c Config) NewLoggerLevel(w *os.File, lv *slog.LevelVar) *slog.Logger {
	lvl, _ := parseLevel(c.Log.Level)
	lv.Set(lvl)
	opts := &slog.HandlerOptions{Level: lv}
	if c.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// validateMediaRoot checks media_root: only the remote engine reads media
// (the native engine is text only), and it must name an existing
// directory by an absolute path.
func (c Config) validateMediaRoot() error {
	if c.MediaRoot == "" {
		return nil
	}
	if c.Engine != "openai" {
		return fmt.Errorf("media_root: the %s engine is text only and reads no media files; unset media_root or use engine: openai", c.Engine)
	}
	if !filepath.IsAbs(c.MediaRoot) {
		return fmt.Errorf("media_root: must be an absolute path, got %q", c.MediaRoot)
	}
	st, err := os.Stat(c.MediaRoot)
	if err != nil {
		return fmt.Errorf("media_root: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("media_root: %s is not a directory", c.MediaRoot)
	}
	return nil
}
