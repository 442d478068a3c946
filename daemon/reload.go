package daemon

import (
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"time"
)

// reloadable are the config keys a reload (SIGHUP) applies to the running
// daemon; every other key that changed waits for a restart. api.open and
// shutdown_grace have no state of their own to swap: api.open only allows
// an empty api.keys, and SIGTERM reads shutdown_grace when it comes.
var reloadable = []string{"api.keys", "api.open", "log.level", "webhooks.urls", "shutdown_grace"}

// ReloadReport says what a reload changed.
type ReloadReport struct {
	// Applied are the keys whose new value is in effect.
	Applied []string
	// NeedRestart are the keys that changed but take effect only on the
	// next start; the daemon runs on with their old value.
	NeedRestart []string
}

// SetLogLevel gives the daemon the level of its logger (Config.NewLoggerLevel),
// so that a reload can change it. Call it before Open.
func (d *Daemon) SetLogLevel(lv *slog.LevelVar) { d.level = lv }

// ShutdownGrace is shutdown_grace as the last reload left it.
func (d *Daemon) ShutdownGrace() time.Duration {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	return d.liveConfig().ShutdownGrace
}

// liveConfig is the config in effect: the one Open ran with, and the
// reloadable keys of the reloads since. The caller holds reloadMu.
func (d *Daemon) liveConfig() *Config {
	if d.live == nil {
		c := d.cfg
		d.live = &c
	}
	return d.live
}

// Reload applies next, a config read again (SIGHUP), to the running daemon:
// the keys in reloadable that changed take effect at once, the others that
// changed are reported and wait for a restart. An invalid next is refused
// whole, and nothing changes.
func (d *Daemon) Reload(next Config) (ReloadReport, error) {
	if err := next.Validate(); err != nil {
		return ReloadReport{}, fmt.Errorf("config: %w", err)
	}
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	live := d.liveConfig()
	var rep ReloadReport
	restart := func(key string) { rep.NeedRestart = append(rep.NeedRestart, key) }
	for _, key := range configDiff(*live, next) {
		if !slices.Contains(reloadable, key) {
			restart(key)
			continue
		}
		switch key {
		case "api.keys":
			if d.acc == nil { // HTTP off: no one checks them
				restart(key)
				continue
			}
			d.acc.set(next.API.Keys)
			live.API.Keys, live.keyVars = next.API.Keys, next.keyVars
		case "api.open":
			live.API.Open = next.API.Open
		case "log.level":
			if d.level == nil {
				restart(key)
				continue
			}
			lvl, _ := parseLevel(next.Log.Level)
			d.level.Set(lvl)
			live.Log.Level = next.Log.Level
		case "webhooks.urls":
			// A sender starts with the daemon: adding the first URLs or
			// removing the last needs a restart.
			if d.hooks == nil || len(next.Webhooks.URLs) == 0 {
				restart(key)
				continue
			}
			if err := d.hooks.SetURLs(next.Webhooks.URLs); err != nil {
				return rep, fmt.Errorf("webhooks.urls: %w", err)
			}
			live.Webhooks.URLs = next.Webhooks.URLs
		case "shutdown_grace":
			live.ShutdownGrace = next.ShutdownGrace
		}
		rep.Applied = append(rep.Applied, key)
	}
	return rep, nil
}

// configDiff names, by their YAML keys, the fields of a and b that differ.
// A list or map is one key.
func configDiff(a, b Config) []string {
	var out []string
	diffValue("", reflect.ValueOf(a), reflect.ValueOf(b), &out)
	return out
}

func diffValue(prefix string, a, b reflect.Value, out *[]string) {
	if reflect.DeepEqual(a.Interface(), b.Interface()) {
		return
	}
	before := len(*out)
	defer func() {
		if len(*out) == before && prefix != "" { // a difference in unexported fields
			*out = append(*out, prefix)
		}
	}()
	if a.Kind() != reflect.Struct {
		return
	}
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if prefix != "" {
			name = prefix + "." + name
		}
		diffValue(name, a.Field(i), b.Field(i), out)
	}
}
