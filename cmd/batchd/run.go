package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/batchd/batchd/daemon"
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
	eng := fs.String("engine", "", "engine: openai")
	var urls stringList
	fs.Var(&urls, "openai-url", "base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (repeat or comma-separate for replicas)")
	model := fs.String("openai-model", "", "model name sent to the remote server (overrides body.model)")
	listen := fs.String("listen", "", "HTTP listen address for /healthz and /readyz (\"off\" disables)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	cfg := daemon.DefaultConfig()
	if *configPath != "" {
		var err error
		if cfg, err = daemon.LoadFile(*configPath); err != nil {
			return errorf(stderr, exitUsage, "%v", err)
		}
	}
	if err := daemon.ApplyEnv(&cfg, os.Getenv); err != nil {
		return errorf(stderr, exitUsage, "environment: %v", err)
	}
	if *data != "" {
		cfg.Data = *data
	}
	if *eng != "" {
		cfg.Engine = *eng
	}
	if len(urls) > 0 {
		cfg.OpenAI.URLs = urls
	}
	if *model != "" {
		cfg.OpenAI.Model = *model
	}
	switch *listen {
	case "":
	case "off":
		cfg.Listen = ""
	default:
		cfg.Listen = *listen
	}
	if err := cfg.Validate(); err != nil {
		return errorf(stderr, exitUsage, "config: %v", err)
	}
	log := cfg.NewLogger(os.Stderr)

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := daemon.New(cfg, log)
	if err := d.Open(ctx); err != nil {
		if errors.Is(err, daemon.ErrInUse) {
			return errorf(stderr, exitFailure, "%v", err)
		}
		return errorf(stderr, exitFailure, "start: %v", err)
	}
	fmt.Fprintf(stderr, "batchd: watching %s; results appear in %s\n", daemon.DataDirs(cfg.Data).Inbox, daemon.DataDirs(cfg.Data).Outbox)
	<-ctx.Done()
	log.Info("shutting down")
	closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Close(closeCtx); err != nil {
		return errorf(stderr, exitFailure, "shutdown: %v", err)
	}
	return exitOK
}
