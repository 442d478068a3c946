package dir

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultRescan       = 30 * time.Second
	DefaultSettle       = time.Second
	DefaultPollInterval = 2 * time.Second
	// DefaultIncompleteAfter is how long an input may stay unchanged and
	// incomplete before it is refused.
	DefaultIncompleteAfter = 5 * time.Minute
)

// Config configures a Watcher. Zero durations take their defaults.
type Config struct {
	// Dir is the inbox folder; Open creates it if missing. Only its top level
	// is watched.
	Dir string
	// Rescan is the period of full rescans when fsnotify is in use (default
	// 30s). Rescans reconcile whatever events were lost.
	Rescan time.Duration
	// Settle is how long an input must keep the same size and mtime before it
	// counts as complete (default 1s).
	Settle time.Duration
	// IncompleteAfter is how long an input may stay unchanged but incomplete
	// (a .jsonl without its final newline, a .json not ending in '}')
	// before it is refused with filecontract.CodeIncomplete (default 5m). A
	// producer that writes in place must not pause longer than this.
	IncompleteAfter time.Duration
	// Poll disables fsnotify: the folder is rescanned every PollInterval. Use
	// it on network filesystems, where inotify sees no remote changes.
	Poll bool
	// PollInterval is the rescan period in polling mode, and after a fallback
	// to polling (default 2s).
	PollInterval time.Duration
	// Logger receives the watcher's logs (default slog.Default()).
	Logger *slog.Logger
}

// DefaultConfig returns the defaults for watching dir.
func DefaultConfig(dir string) Config {
	return Config{
		Dir:             dir,
		Rescan:          DefaultRescan,
		Settle:          DefaultSettle,
		IncompleteAfter: DefaultIncompleteAfter,
		PollInterval:    DefaultPollInterval,
	}
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	if c.Rescan == 0 {
		c.Rescan = DefaultRescan
	}
	if c.Settle == 0 {
		c.Settle = DefaultSettle
	}
	if c.IncompleteAfter == 0 {
		c.IncompleteAfter = DefaultIncompleteAfter
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first invalid field. Zero durations are valid (they
// mean the default).
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("dir: must be set")
	case c.Rescan < 0:
		return fmt.Errorf("rescan: must not be negative, got %v", c.Rescan)
	case c.Settle < 0:
		return fmt.Errorf("settle: must not be negative, got %v", c.Settle)
	case c.IncompleteAfter < 0:
		return fmt.Errorf("incomplete_after: must not be negative, got %v", c.IncompleteAfter)
	case c.PollInterval < 0:
		return fmt.Errorf("poll_interval: must not be negative, got %v", c.PollInterval)
	}
	return nil
}
