package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/batchd/batchd/daemon"
	"github.com/batchd/batchd/engine/native"
)

type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*s = append(*s, p)
		}
	}
	return nil
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML config file")
	data := fs.String("data", "", "data directory (inbox/, outbox/, done/, state/)")
	eng := fs.String("engine", "", "engine: native (in-process) or openai (a remote server)")
	var models stringList
	fs.Var(&models, "model", "model for the native engine: a .gguf file or a Hugging Face directory (repeatable; implies --engine native)")
	var urls stringList
	fs.Var(&urls, "openai-url", "base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (repeat or comma-separate for replicas; implies --engine openai)")
	model := fs.String("openai-model", "", "model name sent to the remote server (overrides body.model)")
	listen := fs.String("listen", "", "HTTP listen address of the API, status page, metrics and health checks (\"off\" disables)")
	source := fs.String("source", "", "where inputs come from: dir (DATA/inbox, the default) or s3://BUCKET/PREFIX")
	endpoint := fs.String("s3-endpoint", "", "the bucket's server, host:port (with --source s3://...)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	// load builds the config from the file, the environment and the
	// flags, at the start and again at each SIGHUP.
	load := func() (daemon.Config, error) {
		cfg := daemon.DefaultConfig()
		if *configPath != "" {
			var err error
			if cfg, err = daemon.LoadFile(*configPath); err != nil {
				return cfg, err
			}
		}
		if err := daemon.ApplyEnv(&cfg, os.Getenv); err != nil {
			return cfg, fmt.Errorf("environment: %w", err)
		}
		if *data != "" {
			cfg.Data = *data
		}
		if len(models) > 0 {
			cfg.Native.Models = nil
			for _, m := range models {
				cfg.Native.Models = append(cfg.Native.Models, native.ModelConfig{Path: m})
			}
			if *eng == "" {
				cfg.Engine = "native"
			}
		}
		if *eng != "" {
			cfg.Engine = *eng
		}
		if len(urls) > 0 {
			cfg.OpenAI.URLs = urls
			if *eng == "" && len(models) == 0 {
				cfg.Engine = "openai"
			}
		}
		if *model != "" {
			cfg.OpenAI.Model = *model
		}
		if *source != "" {
			cfg.Source = *source
		}
		if *endpoint != "" {
			cfg.S3.Endpoint = *endpoint
		}
		if *listen != "" {
			cfg.Listen = *listen // "off" turns HTTP off, as in the config file
		}
		if err := cfg.Validate(); err != nil {
			return cfg, fmt.Errorf("config: %w", err)
		}
		return cfg, nil
	}
	cfg, err := load()
	if err != nil {
		return errorf(stderr, exitUsage, "%v", err)
	}
	level := new(slog.LevelVar)
	log := cfg.NewLoggerLevel(os.Stderr, level)

	// Taken before Open: SIGHUP would otherwise end the process, and a
	// SIGTERM during Open is seen again once it returns.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	openCtx, stopOpen := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	d := daemon.New(cfg, log)
	d.SetLogLevel(level)
	err = d.Open(openCtx)
	stopOpen()
	if err != nil {
		if errors.Is(err, daemon.ErrInUse) {
			return errorf(stderr, exitFailure, "%v", err)
		}
		return errorf(stderr, exitFailure, "start: %v", err)
	}
	inbox, outbox := daemon.DataDirs(cfg.Data).Inbox, daemon.DataDirs(cfg.Data).Outbox
	if cfg.IsBucket() {
		inbox, outbox = strings.TrimSuffix(cfg.Source, "/")+"/inbox/", strings.TrimSuffix(cfg.Source, "/")+"/outbox/"
	}
	fmt.Fprintf(stderr, "batchd: watching %s; results appear in %s\n", inbox, outbox)
	sig := waitForStop(ctx, sigs, func() { reload(d, load, *configPath, level, log) })
	stopGracefully(d, sig, sigs, log)
	closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Close(closeCtx); err != nil {
		return errorf(stderr, exitFailure, "shutdown: %v", err)
	}
	log.Info("stopped")
	return exitOK
}

// waitForStop returns the signal that stops the daemon (nil when ctx
// ended), calling reload at each SIGHUP until then.
func waitForStop(ctx context.Context, sigs <-chan os.Signal, reload func()) os.Signal {
	for {
		select {
		case <-ctx.Done():
			return nil
		case sig := <-sigs:
			if sig != syscall.SIGHUP {
				return sig
			}
			reload()
		}
	}
}

// reload reads the config again (SIGHUP) and applies to d what changes
// without a restart; an invalid config is refused and the old one stays.
func reload(d *daemon.Daemon, load func() (daemon.Config, error), path string, level *slog.LevelVar, log *slog.Logger) {
	next, err := load()
	if err != nil {
		log.Error("SIGHUP: config refused; the running config stays", "config", path, "error", err)
		return
	}
	rep, err := d.Reload(next)
	if err != nil {
		log.Error("SIGHUP: config refused; the running config stays", "config", path, "error", err)
		return
	}
	// At least Info, so that a level raised by this very reload still
	// lets the operator see what it did.
	log.Log(context.Background(), max(slog.LevelInfo, level.Level()), "SIGHUP: config reloaded", "config", path,
		"reloaded", listOrNone(rep.Applied), "changed_needs_restart", listOrNone(rep.NeedRestart))
}

func listOrNone(keys []string) string {
	if len(keys) == 0 {
		return "none"
	}
	return strings.Join(keys, ",")
}

// stopGracefully stops intake and waits up to shutdown_grace for the
// requests in flight (Daemon.Drain); a second SIGTERM or SIGINT ends the
// wait at once, and a third ends the process (the ledger is consistent at
// every commit; what was not committed runs again on the restart). sig
// nil (the caller's context ended) stops at once.
func stopGracefully(d *daemon.Daemon, sig os.Signal, sigs <-chan os.Signal, log *slog.Logger) {
	grace := d.ShutdownGrace()
	if sig == nil {
		grace = 0
	}
	log.Info("shutting down", "signal", fmt.Sprint(sig), "shutdown_grace", grace)
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var second atomic.Bool
	go func() {
		stops := 0
		for sig := range sigs {
			if sig == syscall.SIGHUP {
				log.Warn("SIGHUP while shutting down: not reloaded")
				continue
			}
			if stops++; stops == 1 {
				second.Store(true)
				log.Warn("second signal: stopping now; the requests in flight are not done and run again on the restart", "signal", sig.String())
				cancel()
				continue
			}
			log.Error("third signal: exiting without closing; the ledger is consistent and the restart resumes", "signal", sig.String())
			os.Exit(exitFailure)
		}
	}()
	rep := d.Drain(ctx)
	args := []any{"batches", rep.Batches, "in_flight", rep.InFlight, "finished", rep.Finished(), "abandoned", rep.Abandoned}
	switch {
	case rep.Done:
		log.Info("requests in flight finished within the grace; batches stopped at a commit point", args...)
	case second.Load():
		log.Warn("stopped at a second signal; the abandoned requests run again on the restart", args...)
	default:
		log.Warn("shutdown_grace over; the abandoned requests run again on the restart", args...)
	}
}
