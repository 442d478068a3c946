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
	inbox, outbox := daemon.DataDirs(cfg.Data).Inbox, daemon.DataDirs(cfg.Data).Outbox
	if cfg.IsBucket() {
		inbox, outbox = strings.TrimSuffix(cfg.Source, "/")+"/inbox/", strings.TrimSuffix(cfg.Source, "/")+"/outbox/"
	}
	fmt.Fprintf(stderr, "batchd: watching %s; results appear in %s\n", inbox, outbox)
	<-ctx.Done()
	log.Info("shutting down")
	closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Close(closeCtx); err != nil {
		return errorf(stderr, exitFailure, "shutdown: %v", err)
	}
	return exitOK
}
