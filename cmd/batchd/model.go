package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"github.com/batchd/batchd/engine/native/demomodel"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/batchd/batchd/engine/native/hub"
)

func cmdDemoModel(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo-model", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var shapes []string
	for k := range demomodel.Shapes {
		shapes = append(shapes, k)
	}
	sort.Strings(shapes)
	out := fs.String("out", "", "where to write the .gguf, or the directory with --format hf (default: models/demo-SHAPE-TYPE.gguf or models/demo-SHAPE-TYPE-hf under --data)")
	format := fs.String("format", "gguf", "gguf, or hf: a Hugging Face checkpoint directory (config.json, model.safetensors, tokenizer.json) of the same weights, in f32, f16 or bf16")
	data := dataFlag(fs)
	shapeName := fs.String("shape", "tiny", "model shape: "+strings.Join(shapes, ", "))
	typeName := fs.String("type", "f32", "weight type, or llama.cpp mixture: "+strings.Join(demomodel.TypeNames(), ", "))
	seed := fs.Uint64("seed", 1, "seed of the random weights")
	dequantized := fs.Bool("dequantized", false, "store each matrix as F32 holding its --type values decoded: the --type model's weight rounding, for an engine that cannot run the type")
	force := fs.Bool("force", false, "overwrite an existing file")
	layers := fs.Int("layers", 0, "keep only this many of the shape's layers (0: all): a big shape's layer at a size this machine holds")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		return exitUsage
	}
	shape, ok := demomodel.Shapes[*shapeName]
	if !ok {
		return errorf(stderr, exitUsage, "unknown shape %q (known: %s)", *shapeName, strings.Join(shapes, ", "))
	}
	if *layers < 0 || *layers > shape.Layers {
		return errorf(stderr, exitUsage, "--layers %d: want 1 to the shape's %d (0: all)", *layers, shape.Layers)
	}
	if *layers > 0 && *layers != shape.Layers {
		shape.Layers = *layers
		shape.Name += fmt.Sprintf("-%dl", *layers)
	}
	q, err := demomodel.ParseDType(*typeName)
	if err != nil {
		return errorf(stderr, exitUsage, "%v", err)
	}
	q.Dequantized = *dequantized
	switch *format {
	case "gguf":
	case "hf":
		if *dequantized || !slices.Contains(demomodel.HFTypes, q.Base) || q.Name != q.Base.String() {
			return errorf(stderr, exitUsage, "--format hf writes f32, f16 or bf16 weights (gpt-oss's experts MXFP4), not %s", q)
		}
		return demoHF(stdout, stderr, *out, *data, shape, q, *seed, *force)
	default:
		return errorf(stderr, exitUsage, "--format %q: want gguf or hf", *format)
	}
	path := *out
	if path == "" {
		name := fmt.Sprintf("demo-%s-%s", shape.Name, strings.ToLower(*typeName))
		if q.Dequantized {
			name += "-dequantized"
		}
		path = filepath.Join(*data, "models", name+".gguf")
	}
	if _, err := os.Stat(path); err == nil && !*force {
		fmt.Fprintln(stdout, path)
		return exitOK
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return errorf(stderr, exitFailure, "%v", err)
	}
	tmp := path + ".part"
	f, err := os.Create(tmp)
	if err != nil {
		return errorf(stderr, exitFailure, "%v", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = demomodel.WriteQuant(w, shape, q, *seed)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return errorf(stderr, exitFailure, "demo model: %v", err)
	}
	fmt.Fprintf(stderr, "batchd: wrote a demo model, shape %s, %s weights — random weights: its text is noise\n", shape, q)
	fmt.Fprintln(stdout, path)
	return exitOK
}

// demoHF writes the demo model of shape as a Hugging Face directory.
func demoHF(stdout, stderr io.Writer, out, data string, shape demomodel.Shape, q demomodel.Quant, seed uint64, force bool) int {
	dir := out
	if dir == "" {
		dir = filepath.Join(data, "models", fmt.Sprintf("demo-%s-%s-hf", shape.Name, strings.ToLower(q.Name)))
	}
	if _, err := os.Stat(dir); err == nil {
		if !force {
			fmt.Fprintln(stdout, dir)
			return exitOK
		}
		if err := os.RemoveAll(dir); err != nil {
			return errorf(stderr, exitFailure, "%v", err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return errorf(stderr, exitFailure, "%v", err)
	}
	if err := demomodel.WriteHF(dir, shape, q.Base, seed); err != nil {
		return errorf(stderr, exitFailure, "demo model: %v", err)
	}
	fmt.Fprintf(stderr, "batchd: wrote a demo model as a Hugging Face directory, shape %s, %s weights — random weights: its text is noise\n", shape, demomodel.HFQuant(shape, q.Base))
	fmt.Fprintln(stdout, dir)
	return exitOK
}

func cmdPull(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pull", flag.ContinueOnError)
	fs.SetOutput(stderr)
	revision := fs.String("revision", "main", "branch, tag or commit")
	cache := fs.String("cache", "", "cache directory (default $XDG_CACHE_HOME/batchd/models or ~/.cache/batchd/models)")
	endpoint := fs.String("endpoint", "", "Hugging Face endpoint (default https://huggingface.co, or $HF_ENDPOINT)")
	if err := fs.Parse(reorder(args)); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: batchd pull [--revision REV] [--cache DIR] ORG/NAME")
		return exitUsage
	}
	c := &hub.Client{CacheDir: *cache, BaseURL: *endpoint, Token: os.Getenv("HF_TOKEN")}
	if c.BaseURL == "" {
		c.BaseURL = os.Getenv("HF_ENDPOINT")
	}
	last := map[string]int64{}
	c.Progress = func(file string, done, total int64) {
		if total > 0 && (done == total || done-last[file] >= 64<<20) {
			last[file] = done
			fmt.Fprintf(stderr, "%s: %d/%d MB\n", file, done>>20, total>>20)
		}
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := c.Pull(ctx, fs.Arg(0), *revision, nil)
	if err != nil {
		return errorf(stderr, exitFailure, "pull %s: %v", fs.Arg(0), err)
	}
	fmt.Fprintf(stderr, "batchd: %s is in %s; run it with: batchd run --model %s\n", fs.Arg(0), dir, dir)
	fmt.Fprintln(stdout, dir)
	return exitOK
}
