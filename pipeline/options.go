package pipeline

import (
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/pipeline/validate"

	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// On-invalid policies.
const (
	OnInvalidContinue = "continue"
	OnInvalidReject   = "reject"
)

// OnMissingMaxTokensReject refuses a line that gives no output length
// (missing_max_tokens); by default such a line generates until the model's
// context is full, as OpenAI's do.
const OnMissingMaxTokensReject = "reject"

// Result shapes: how NAME.output.jsonl's lines are written (result_shape).
const (
	// ResultShapeOpenAI is OpenAI's batch output line: {id, custom_id,
	// response: {status_code, request_id, body}, error} (the default).
	ResultShapeOpenAI = "openai"
	// ResultShapeDoubleword is Doubleword's: {id, custom_id, response_body}.
	ResultShapeDoubleword = "doubleword"
)

// Options are batch-level options: the daemon's config gives defaults, and a
// NAME.options.json file beside an input overrides them field by field.
// Sampling fields serve as defaults under each request's body; per-request
// values win.
type Options struct {
	OnInvalid        string `json:"on_invalid,omitempty" yaml:"on_invalid"`
	CompletionWindow string `json:"completion_window,omitempty" yaml:"completion_window"`
	// OnMissingMaxTokens is "" (generate until the context is full) or
	// "reject".
	OnMissingMaxTokens string            `json:"on_missing_max_tokens,omitempty" yaml:"on_missing_max_tokens"`
	Metadata           map[string]string `json:"metadata,omitempty" yaml:"metadata"`

	MaxTokens int    `json:"max_tokens,omitempty" yaml:"max_tokens"`
	Model     string `json:"model,omitempty" yaml:"model"`
	// ModelOverride replaces every request's model (Model only fills in
	// those that name none).
	ModelOverride     string   `json:"model_override,omitempty" yaml:"model_override"`
	Temperature       *float64 `json:"temperature,omitempty" yaml:"temperature"`
	TopP              *float64 `json:"top_p,omitempty" yaml:"top_p"`
	TopK              *int     `json:"top_k,omitempty" yaml:"top_k"`
	MinP              *float64 `json:"min_p,omitempty" yaml:"min_p"`
	PresencePenalty   *float64 `json:"presence_penalty,omitempty" yaml:"presence_penalty"`
	FrequencyPenalty  *float64 `json:"frequency_penalty,omitempty" yaml:"frequency_penalty"`
	RepetitionPenalty *float64 `json:"repetition_penalty,omitempty" yaml:"repetition_penalty"`
	Seed              *int64   `json:"seed,omitempty" yaml:"seed"`
	Stop              []string `json:"stop,omitempty" yaml:"stop"`
	// Speculative fills in body.speculative (false, true, "ngram" or
	// "draft") on the lines that lack it.
	Speculative SpecOption `json:"speculative,omitempty" yaml:"speculative"`
	// ResultShape is how NAME.output.jsonl's lines are written: "openai"
	// (or "") or "doubleword". It is not part of the batch's identity: the
	// pipeline keeps OpenAI's shape and writes the chosen one when it
	// publishes, so a batch dropped again in another shape reuses its
	// results.
	ResultShape string `json:"result_shape,omitempty" yaml:"result_shape"`
	// Priority orders the admission of the batch's lines to the engine
	// among other batches' (online requests go first): "high", "normal"
	// (the default) or "low". ServiceTier is the same in OpenAI's names:
	// "priority" (high), "default" or "auto" (normal), "flex" (low). Like
	// ResultShape, neither is part of the batch's identity.
	Priority    string `json:"priority,omitempty" yaml:"priority"`
	ServiceTier string `json:"service_tier,omitempty" yaml:"service_tier"`
	// OutputExpiresAfter is OpenAI's output_expires_after for a batch
	// dropped in the inbox or the bucket: its output and error files are
	// removed that long after they were written, instead of after the
	// config's expiry.outputs (an API batch takes it from POST
	// /v1/batches). Not part of the batch's identity.
	OutputExpiresAfter *ExpiresAfter `json:"output_expires_after,omitempty" yaml:"-"`
}

// ExpiresAfter is OpenAI's expiration policy: anchor "created_at", and
// Seconds from 3600 (an hour) to 2592000 (30 days).
type ExpiresAfter struct {
	Anchor  string `json:"anchor"`
	Seconds int64  `json:"seconds"`
}

// Expiry limits, OpenAI's.
const (
	MinExpiry = time.Hour
	MaxExpiry = 30 * 24 * time.Hour
)

// Duration checks the policy and returns how long it keeps a file.
func (e ExpiresAfter) Duration() (time.Duration, error) {
	if e.Anchor != "created_at" {
		return 0, fmt.Errorf("output_expires_after.anchor: must be \"created_at\", got %q", e.Anchor)
	}
	d := time.Duration(e.Seconds) * time.Second
	if e.Seconds < int64(MinExpiry/time.Second) || e.Seconds > int64(MaxExpiry/time.Second) {
		return 0, fmt.Errorf("output_expires_after.seconds: must be between 3600 (1 hour) and 2592000 (30 days), got %d", e.Seconds)
	}
	return d, nil
}

// Merge returns o with every field set in over replacing o's.
func (o Options) Merge(over Options) Options {
	if over.OnInvalid != "" {
		o.OnInvalid = over.OnInvalid
	}
	if over.OnMissingMaxTokens != "" {
		o.OnMissingMaxTokens = over.OnMissingMaxTokens
	}
	if over.CompletionWindow != "" {
		o.CompletionWindow = over.CompletionWindow
	}
	if over.Metadata != nil {
		o.Metadata = over.Metadata
	}
	if over.MaxTokens != 0 {
		o.MaxTokens = over.MaxTokens
	}
	if over.Model != "" {
		o.Model = over.Model
	}
	if over.ModelOverride != "" {
		o.ModelOverride = over.ModelOverride
	}
	setIf(&o.Temperature, over.Temperature)
	setIf(&o.TopP, over.TopP)
	setIf(&o.TopK, over.TopK)
	setIf(&o.MinP, over.MinP)
	setIf(&o.PresencePenalty, over.PresencePenalty)
	setIf(&o.FrequencyPenalty, over.FrequencyPenalty)
	setIf(&o.RepetitionPenalty, over.RepetitionPenalty)
	setIf(&o.Seed, over.Seed)
	if over.Stop != nil {
		o.Stop = over.Stop
	}
	if over.Speculative != "" {
		o.Speculative = over.Speculative
	}
	if over.ResultShape != "" {
		o.ResultShape = over.ResultShape
	}
	if over.Priority != "" || over.ServiceTier != "" {
		o.Priority, o.ServiceTier = over.Priority, over.ServiceTier
	}
	setIf(&o.OutputExpiresAfter, over.OutputExpiresAfter)
	return o
}

func setIf[T any](dst **T, v *T) {
	if v != nil {
		*dst = v
	}
}

// HasSampling reports whether any batch-level sampling default is set.
func (o Options) HasSampling() bool {
	return o.Temperature != nil || o.TopP != nil || o.TopK != nil || o.MinP != nil ||
		o.PresencePenalty != nil || o.FrequencyPenalty != nil || o.RepetitionPenalty != nil ||
		o.Seed != nil || o.Stop != nil || o.Speculative != ""
}

// Window parses CompletionWindow; zero means none.
func (o Options) Window() (time.Duration, error) {
	if o.CompletionWindow == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(o.CompletionWindow)
	if err != nil {
		return 0, fmt.Errorf("completion_window: %q is not a duration like 24h or 90m", o.CompletionWindow)
	}
	if d <= 0 {
		return 0, fmt.Errorf("completion_window: must be positive, got %s", o.CompletionWindow)
	}
	return d, nil
}

// Batch priorities (Options.Priority) and OpenAI's service tiers
// (Options.ServiceTier), by the engine priority each stands for.
var (
	priorities   = map[string]engine.Priority{"high": engine.PriorityHigh, "normal": engine.PriorityNormal, "low": engine.PriorityLow}
	serviceTiers = map[string]engine.Priority{"priority": engine.PriorityHigh, "default": engine.PriorityNormal, "auto": engine.PriorityNormal, "flex": engine.PriorityLow}
)

// Rank is the engine priority of the batch's lines: Priority's, or
// ServiceTier's (both given, they must agree), or, with neither, that of
// a metadata "priority" of high, normal or low (other metadata values are
// the caller's own and mean nothing here); PriorityNormal by default.
func (o Options) Rank() (engine.Priority, error) {
	p, okP := priorities[o.Priority]
	t, okT := serviceTiers[o.ServiceTier]
	switch {
	case o.Priority != "" && !okP:
		return 0, fmt.Errorf("priority: must be \"high\", \"normal\" or \"low\", got %q", o.Priority)
	case o.ServiceTier != "" && !okT:
		return 0, fmt.Errorf("service_tier: must be \"priority\", \"default\", \"auto\" or \"flex\", got %q", o.ServiceTier)
	case okP && okT && p != t:
		return 0, fmt.Errorf("priority %q and service_tier %q disagree: give one of them", o.Priority, o.ServiceTier)
	case okP:
		return p, nil
	case okT:
		return t, nil
	}
	return priorities[o.Metadata["priority"]], nil
}

// ValidateConfig is the validator's configuration for these options: the
// body defaults and the output-length rule.
func (o Options) ValidateConfig() validate.Config {
	return validate.Config{Defaults: o.Defaults(), RejectMissingMaxTokens: o.OnMissingMaxTokens == OnMissingMaxTokensReject}
}

// Defaults returns the body defaults the validator merges into each request.
func (o Options) Defaults() map[string]json.RawMessage {
	m := make(map[string]json.RawMessage)
	put := func(k string, v any) {
		b, _ := json.Marshal(v)
		m[k] = b
	}
	if o.MaxTokens != 0 {
		put("max_tokens", o.MaxTokens)
	}
	if o.Model != "" {
		put("model", o.Model)
	}
	if o.Temperature != nil {
		put("temperature", *o.Temperature)
	}
	if o.TopP != nil {
		put("top_p", *o.TopP)
	}
	if o.TopK != nil {
		put("top_k", *o.TopK)
	}
	if o.MinP != nil {
		put("min_p", *o.MinP)
	}
	if o.PresencePenalty != nil {
		put("presence_penalty", *o.PresencePenalty)
	}
	if o.FrequencyPenalty != nil {
		put("frequency_penalty", *o.FrequencyPenalty)
	}
	if o.RepetitionPenalty != nil {
		put("repetition_penalty", *o.RepetitionPenalty)
	}
	if o.Seed != nil {
		put("seed", *o.Seed)
	}
	if o.Stop != nil {
		put("stop", o.Stop)
	}
	if o.Speculative != "" {
		put("speculative", o.Speculative)
	}
	return m
}

// Overrides returns the body fields the validator sets on every request,
// replacing the request's own: model_override's model.
func (o Options) Overrides() map[string]json.RawMessage {
	if o.ModelOverride == "" {
		return nil
	}
	b, _ := json.Marshal(o.ModelOverride)
	return map[string]json.RawMessage{"model": b}
}

// CheckerConfig is the validator's config for a batch run with o: its
// defaults, its overrides and the output-length rule (ValidateConfig, the
// online endpoints' config, has no overrides).
func (o Options) CheckerConfig() validate.Config {
	c := o.ValidateConfig()
	c.Overrides = o.Overrides()
	return c
}

// Validate checks the fields that are not body defaults (the validator checks
// those with the body rules).
func (o Options) Validate() error {
	switch o.OnInvalid {
	case "", OnInvalidContinue, OnInvalidReject:
	default:
		return fmt.Errorf("on_invalid: must be %q or %q, got %q", OnInvalidContinue, OnInvalidReject, o.OnInvalid)
	}
	switch o.OnMissingMaxTokens {
	case "", OnMissingMaxTokensReject:
	default:
		return fmt.Errorf("on_missing_max_tokens: must be %q (or unset: generate until the context is full), got %q", OnMissingMaxTokensReject, o.OnMissingMaxTokens)
	}
	switch o.ResultShape {
	case "", ResultShapeOpenAI, ResultShapeDoubleword:
	default:
		return fmt.Errorf("result_shape: must be %q or %q, got %q", ResultShapeOpenAI, ResultShapeDoubleword, o.ResultShape)
	}
	if _, err := o.Rank(); err != nil {
		return err
	}
	if e := o.OutputExpiresAfter; e != nil {
		if _, err := e.Duration(); err != nil {
			return err
		}
	}
	if o.MaxTokens < 0 {
		return fmt.Errorf("max_tokens: must be a positive integer, got %d", o.MaxTokens)
	}
	if _, err := o.Window(); err != nil {
		return err
	}
	if len(o.Metadata) > 16 {
		return fmt.Errorf("metadata: at most 16 keys, got %d", len(o.Metadata))
	}
	return nil
}

// ReadOptionsFile reads a NAME.options.json file (a regular file: no
// link is followed). A missing file gives zero Options and no error;
// unknown keys are an error naming them.
func ReadOptionsFile(path string) (Options, []byte, error) {
	raw, err := fsx.ReadRegular(path)
	if errors.Is(err, os.ErrNotExist) {
		return Options{}, nil, nil
	}
	if err != nil {
		return Options{}, nil, fmt.Errorf("read options: %w", err)
	}
	o, err := ParseOptions(raw, path)
	return o, raw, err
}

// ParseOptions decodes the options file named file; unknown keys are an
// error naming them.
func ParseOptions(raw []byte, file string) (Options, error) {
	var o Options
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return o, fmt.Errorf("options file %s: %w", file, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return o, fmt.Errorf("options file %s: trailing data after the object", file)
	}
	return o, nil
}
