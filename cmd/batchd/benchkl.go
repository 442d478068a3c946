package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/native/nativebench"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// benchKL measures how far quantized models' next-token distributions are
// from a reference's: demo models of one seed in F32 and in each type, or
// model files against a reference file.
func benchKL(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench kl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var shapes []string
	for k := range demomodel.Shapes {
		shapes = append(shapes, k)
	}
	sort.Strings(shapes)
	model := fs.String("model", "", "model files to measure, comma-separated (with --ref); default: demo models of --shape in each of --types")
	ref := fs.String("ref", "", "with --model: the reference model file (e.g. the F16 or BF16 original)")
	data := dataFlag(fs)
	shape := fs.String("shape", "qwen2.5-0.5b", "demo model shape: "+strings.Join(shapes, ", "))
	types := fs.String("types", "q8_0,q6_k,q5_k_m,q4_k_m,q4_0", "demo model weight types and mixtures, comma-separated: "+strings.Join(demomodel.TypeNames(), ", "))
	seed := fs.Uint64("seed", 1, "seed of the demo models' random weights (the same for the F32 reference and each type)")
	dequantized := fs.Bool("dequantized", false, "load each type's weights decoded to F32: their rounding error alone, without the quantized kernels' int8 activations")
	textFile := fs.String("text", "", "file of the text whose every position is compared (default: a built-in passage of a few hundred tokens)")
	tokens := fs.Int("tokens", 0, "use at most this many tokens of the text (0: all)")
	tokensOut := fs.String("tokens-out", "", "write the token ids compared, as a JSON array, to this file (for another engine to run the same sequence: scripts/llamacpp/kl.sh)")
	threads := fs.Int("threads", 0, "kernel threads (0: every core)")
	kernelsName := fs.String("kernels", defaultKernels(), "CPU kernels: auto, amx, avx512, avx2, neon or generic ($BATCHD_KERNELS sets the default)")
	device := fs.String("device", "", "native.device to run on (default: $BATCHD_DEVICE, else auto)")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		return exitUsage
	}
	if (*model == "") != (*ref == "") {
		return errorf(stderr, exitUsage, "bench kl: --model and --ref go together")
	}
	o := nativebench.KLOptions{Device: cmpOr(*device, os.Getenv("BATCHD_DEVICE")), Threads: *threads, Kernels: *kernelsName, MaxTokens: *tokens}
	if *textFile != "" {
		b, err := os.ReadFile(*textFile)
		if err != nil {
			return errorf(stderr, exitUsage, "bench kl: --text: %v", err)
		}
		o.Text = string(b)
	}
	var cases []klCase
	refPath := *ref
	if *model != "" {
		for _, m := range strings.Split(*model, ",") {
			cases = append(cases, klCase{path: m})
		}
	} else {
		var code int
		if cases, refPath, code = demoKLCases(ctx, *data, *shape, *types, *seed, *dequantized, stderr); code != exitOK {
			return code
		}
	}
	refs, err := nativebench.NewKLRef(refPath, o)
	if err != nil {
		return errorf(stderr, exitFailure, "bench kl: %v", err)
	}
	if *tokensOut != "" {
		b, err := json.Marshal(refs.Tokens)
		if err == nil {
			err = os.WriteFile(*tokensOut, append(b, '\n'), 0o644)
		}
		if err != nil {
			return errorf(stderr, exitFailure, "bench kl: --tokens-out: %v", err)
		}
	}
	tab := &nativebench.KLTable{Ref: refPath}
	for _, c := range cases {
		res, err := refs.Compare(c.path)
		if err != nil {
			if errors.Is(err, weights.ErrUnsupported) && c.label != "" && !*dequantized {
				err = fmt.Errorf("%w (--dequantized measures the type's weight rounding through F32)", err)
			}
			return errorf(stderr, exitFailure, "bench kl: %v", err)
		}
		res.Label = c.label
		if c.bpw > 0 {
			res.BitsPerWeight = c.bpw
		}
		tab.Rows = append(tab.Rows, res)
	}
	fmt.Fprint(stdout, tab)
	return exitOK
}

// klCase is one model bench kl measures: its file, its label in the table
// and, for a demo model, the bits per weight of its type (its file may be
// dequantized).
type klCase struct {
	path, label string
	bpw         float64
}

// demoKLCases writes (once, under data) the demo models of shape and seed
// in F32 and in each of types, and returns the cases and the F32 path.
func demoKLCases(ctx context.Context, data, shapeName, types string, seed uint64, dequantized bool, stderr io.Writer) ([]klCase, string, int) {
	shape, ok := demomodel.Shapes[shapeName]
	if !ok {
		return nil, "", errorf(stderr, exitUsage, "bench kl: unknown shape %q", shapeName)
	}
	write := func(typ string, deq bool) (string, int) {
		name := fmt.Sprintf("demo-%s-%s", shape.Name, strings.ToLower(typ))
		if seed != 1 {
			name += fmt.Sprintf("-seed%d", seed)
		}
		args := []string{"--data", data, "--shape", shape.Name, "--type", typ, "--seed", fmt.Sprint(seed)}
		if deq {
			name += "-dequantized"
			args = append(args, "--dequantized")
		}
		args = append(args, "--out", filepath.Join(data, "models", name+".gguf"))
		var out bytes.Buffer
		code := cmdDemoModel(ctx, args, &out, stderr)
		return strings.TrimSpace(out.String()), code
	}
	refPath, code := write("f32", false)
	if code != exitOK {
		return nil, "", code
	}
	var cases []klCase
	for _, typ := range strings.Split(types, ",") {
		typ = strings.TrimSpace(typ)
		q, err := demomodel.ParseDType(typ)
		if err != nil {
			return nil, "", errorf(stderr, exitUsage, "bench kl: --types: %v", err)
		}
		plan, err := demomodel.Plan(shape, q)
		if err != nil {
			return nil, "", errorf(stderr, exitUsage, "bench kl: %s: %v", q, err)
		}
		path, code := write(typ, dequantized && q.Base != kernels.F32)
		if code != exitOK {
			return nil, "", code
		}
		cases = append(cases, klCase{path: path, label: q.String(), bpw: demomodel.BitsPerWeight(plan)})
	}
	return cases, refPath, exitOK
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
