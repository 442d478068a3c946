package openai

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"
)

// Config configures an Engine. Start from DefaultConfig and set URLs.
type Config struct {
	// URLs are the base URLs of the replicas, as given to the OpenAI SDK
	// (http://host:8000/v1). Requests go to the replica with the fewest
	// attempts in flight.
	URLs []string
	// APIKey, when set, is sent as "Authorization: Bearer KEY". It is never logged.
	APIKey string
	// Model, when set, replaces the "model" field of every request body
	// sent to URLs (not of those a route takes).
	Model string
	// Routes send the requests naming a model (body.model) to servers of
	// their own: each route is a pool of replicas with its own in-flight
	// window (MaxInFlight), retries, probes and outage detection, so an
	// outage of one route holds only the requests it serves. URLs, when
	// given too, take the requests naming any other model; without them,
	// such a request is refused with model_not_found, naming the models
	// the routes serve. Only NewRouter builds an engine with routes.
	Routes []Route
	// MaxInFlight bounds the requests sent at once, across all replicas.
	MaxInFlight int
	// MaxRetries bounds the retries of a request that fails on its own. A
	// request gives up, and becomes an engine_unavailable error line, once
	// more than MaxRetries of its attempts count against it: a 408 or 429,
	// or an answer over MaxAnswerBytes, always does; a 5xx, transport
	// error, timeout or 2xx whose body is not JSON does only when the
	// replica that failed it answered another request since this one's
	// previous attempt (or this is the only request left and one already
	// counted, or the server answered it with a 5xx, a 2xx that is not JSON
	// or an answer it did not finish (cut short, or still arriving when
	// AttemptTimeout ran out) and a health check showed the replica up
	// meanwhile: the body of an earlier request of the same
	// endpoint that succeeded, at most 64 KiB, sent again with the header
	// X-Batchd-Health-Check and its answer discarded; one check at a time
	// per replica, its result shared by every request failing there).
	// Failures while nothing else is answered, checks included, are an
	// outage: they are retried, without limit, until the engine is back.
	// Before anything succeeded on its endpoint there is no body to check
	// with: such requests wait as in an outage (the only request left
	// says so once at WARN).
	MaxRetries int
	// RetryWaitMin and RetryWaitMax bound the backoff between attempts; a
	// server's Retry-After is honoured up to RetryWaitMax.
	RetryWaitMin, RetryWaitMax time.Duration
	// AttemptTimeout bounds one attempt, reading the whole answer included:
	// an answer still arriving (a byte at a time, or without end) when it
	// runs out fails the attempt.
	AttemptTimeout time.Duration
	// MaxAnswerBytes bounds one answer's body (default 256 MiB). A bigger
	// one (refused unread when its Content-Length says so, otherwise cut
	// off at the cap) fails that attempt, and counts against its request
	// (see MaxRetries), never towards an outage: once its retries run out
	// it becomes that request's engine_unavailable error line, naming the
	// cap.
	MaxAnswerBytes int64
	// MaxAnswerBytesInFlight bounds the bytes of answers the engine holds
	// at once, across all requests and health checks (default 512 MiB; at
	// least MaxAnswerBytes). An answer waits for budget before it is read:
	// its Content-Length, or, without one, a share of what the budget
	// leaves beyond MaxAnswerBytes, and MaxAnswerBytes (one such answer at
	// a time) once it outgrows that. An answer's bytes count until Do
	// returns it; joining the pieces of an answer without a Content-Length
	// briefly takes its size again.
	MaxAnswerBytesInFlight int64
	// ProbeInterval is how often a down engine (or replica) is probed.
	ProbeInterval time.Duration
	// DownAfter is the number of consecutive failed attempts (transport
	// errors, timeouts, 5xx) with no answer in between after which the
	// engine counts as down and holds its callers.
	DownAfter int
	// HangAfter is how long attempts may be in flight with no response byte
	// from the engine before it counts as hung: a warning is logged and
	// Stats().Hung is set (so /readyz turns unready) until a response
	// arrives. Nothing is cancelled: AttemptTimeout still bounds an attempt.
	HangAfter time.Duration
	// MediaRoot is the directory local media files named in requests
	// ({"type":"image","image":PATH}, {"type":"audio","audio":PATH}) are
	// read from, to be sent inline; "" reads none (such parts are refused).
	MediaRoot string
	// Logger receives the engine's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Route is one model's servers (see Config.Routes).
type Route struct {
	// Model is the body.model the route serves, sent as given.
	Model string `yaml:"model"`
	// URLs are the base URLs of its replicas (see Config.URLs).
	URLs []string `yaml:"urls"`
	// APIKey, when set, replaces Config.APIKey for this route.
	APIKey string `yaml:"api_key"`
}

// DefaultConfig returns the defaults; URLs must still be set.
func DefaultConfig() Config {
	return Config{
		MaxInFlight:    64,
		MaxRetries:     7,
		RetryWaitMin:   500 * time.Millisecond,
		RetryWaitMax:   30 * time.Second,
		AttemptTimeout: 10 * time.Minute,
		ProbeInterval:  2 * time.Second,
		DownAfter:      8,
		HangAfter:      time.Minute,

		MaxAnswerBytes:         256 << 20,
		MaxAnswerBytesInFlight: 512 << 20,
	}
}

// Validate reports the first invalid field, named as in the config file.
func (c Config) Validate() error {
	if len(c.URLs) == 0 && len(c.Routes) == 0 {
		return errors.New("openai.urls: at least one base URL is required (or openai.routes)")
	}
	for i, raw := range c.URLs {
		if _, err := parseBaseURL(raw); err != nil {
			return fmt.Errorf("openai.urls[%d]: %w", i, err)
		}
	}
	if err := validateRoutes(c.Routes); err != nil {
		return err
	}
	switch {
	case c.MaxInFlight < 1:
		return fmt.Errorf("openai.max_inflight: must be at least 1, got %d", c.MaxInFlight)
	case c.MaxRetries < 0:
		return fmt.Errorf("openai.max_retries: must not be negative, got %d", c.MaxRetries)
	case c.RetryWaitMin < 0:
		return fmt.Errorf("openai.retry_wait_min: must not be negative, got %s", c.RetryWaitMin)
	case c.RetryWaitMax <= 0:
		return fmt.Errorf("openai.retry_wait_max: must be positive, got %s", c.RetryWaitMax)
	case c.RetryWaitMax < c.RetryWaitMin:
		return fmt.Errorf("openai.retry_wait_max: %s is below retry_wait_min %s", c.RetryWaitMax, c.RetryWaitMin)
	case c.AttemptTimeout <= 0:
		return fmt.Errorf("openai.attempt_timeout: must be positive, got %s", c.AttemptTimeout)
	case c.ProbeInterval <= 0:
		return fmt.Errorf("openai.probe_interval: must be positive, got %s", c.ProbeInterval)
	case c.DownAfter < 1:
		return fmt.Errorf("openai.down_after: must be at least 1, got %d", c.DownAfter)
	case c.HangAfter <= 0:
		return fmt.Errorf("openai.hang_after: must be positive, got %s", c.HangAfter)
	case c.MaxAnswerBytes < 1<<10:
		return fmt.Errorf("openai.max_answer_bytes: must be at least 1 KiB, got %d", c.MaxAnswerBytes)
	case c.MaxAnswerBytesInFlight < c.MaxAnswerBytes:
		return fmt.Errorf("openai.max_answer_bytes_inflight: %d is below max_answer_bytes %d", c.MaxAnswerBytesInFlight, c.MaxAnswerBytes)
	}
	return nil
}

// validateRoutes checks that each route names a model no other route
// names and at least one valid base URL.
func validateRoutes(routes []Route) error {
	seen := make(map[string]bool, len(routes))
	for i, r := range routes {
		switch {
		case r.Model == "":
			return fmt.Errorf("openai.routes[%d].model: required", i)
		case seen[r.Model]:
			return fmt.Errorf("openai.routes[%d].model: %q is routed twice", i, r.Model)
		case len(r.URLs) == 0:
			return fmt.Errorf("openai.routes[%d].urls: at least one base URL is required for model %q", i, r.Model)
		}
		seen[r.Model] = true
		for j, raw := range r.URLs {
			if _, err := parseBaseURL(raw); err != nil {
				return fmt.Errorf("openai.routes[%d].urls[%d]: %w", i, j, err)
			}
		}
	}
	return nil
}

// parseBaseURL checks one base URL and returns it without a trailing slash.
func parseBaseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("parse base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("base URL %q: scheme %q is not http or https", u.Redacted(), u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("base URL %q: no host", u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("base URL %q: must not have a query or fragment", u.Redacted())
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// endpointURL joins a base URL and an endpoint the way the OpenAI SDK does:
// a base ending in /v1 already names the API version, so the endpoint's
// /v1 prefix is dropped; any other base gets the full endpoint.
func endpointURL(base, endpoint string) string {
	if strings.HasSuffix(base, "/v1") {
		return base + strings.TrimPrefix(endpoint, "/v1")
	}
	return base + endpoint
}
