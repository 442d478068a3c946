package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/native/nativebench"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/engine/openai"
	"github.com/batchd/batchd/engine/openai/echo"
	"github.com/batchd/batchd/filecontract"
	"github.com/batchd/batchd/kernels"
	"github.com/batchd/batchd/kernels/cuda"
	"github.com/batchd/batchd/pipeline"
	"github.com/batchd/batchd/store/folder"
)

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "engine" {
		return benchEngine(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "gpu" {
		return benchGPU(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "kl" {
		return benchKL(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "pipeline" {
		fmt.Fprintln(stderr, "usage: batchd bench pipeline [--lines N] [--engine instant|remote] [--workers N]\n       batchd bench engine [--model PATH | --shape SHAPE --type TYPE] [--prompt N] [--steps N] [--seqs 1,8,32] [--kernels auto|amx|avx512|avx2|neon|generic] [--lora-rank R [--rounds N]] [--speculative off,ngram,draft [--spec-k K] [--workload repetitive|openings|random] [--output N] [--rounds N]] [--rows 1,2,5] [--device D] [--parity A,B] [--offline N [--write-batch FILE]] [--online N [--online-prompt N] [--online-output N]]\n       batchd bench kl [--shape SHAPE --types T1,T2 [--dequantized] | --model FILE[,FILE] --ref FILE] [--text FILE] [--tokens N]\n       batchd bench gpu [--gpu N] [--mib N]")
		return exitUsage
	}
	fs := flag.NewFlagSet("bench pipeline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	lines := fs.Int("lines", 200000, "requests in the generated batch file")
	engName := fs.String("engine", "instant", "instant: an in-process engine that answers at once (measures batchd alone); remote: the OpenAI engine against a loopback stand-in server")
	workers := fs.Int("workers", 0, "dispatch workers (default: 64 instant, 128 remote)")
	dir := fs.String("dir", "", "work directory (default: a temporary one, removed after)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run (not of writing the input) to this file (go tool pprof reads it)")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	work := *dir
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "batchd-bench-"); err != nil {
			return errorf(stderr, exitFailure, "%v", err)
		}
		defer os.RemoveAll(work)
	}
	res, err := benchPipeline(ctx, work, *lines, *engName, *workers, *cpuProfile)
	if err != nil {
		return errorf(stderr, exitFailure, "bench: %v", err)
	}
	fmt.Fprintf(stdout, "pipeline bench: %d requests, engine %s, durable group commits\n", *lines, *engName)
	fmt.Fprintf(stdout, "  input:   %.1f MB\n", float64(res.inputBytes)/1e6)
	fmt.Fprintf(stdout, "  elapsed: %s\n", res.elapsed.Round(time.Millisecond))
	fmt.Fprintf(stdout, "  rate:    %.0f requests/s\n", float64(*lines)/res.elapsed.Seconds())
	fmt.Fprintf(stdout, "  cpu:     %s (%.1f µs a request, user and system, every goroutine)\n", res.cpu.Round(time.Millisecond), float64(res.cpu.Microseconds())/float64(*lines))
	fmt.Fprintf(stdout, "  peak RSS: %.0f MB\n", float64(res.peakRSS)/(1<<20))
	return exitOK
}

type benchResult struct {
	elapsed    time.Duration
	cpu        time.Duration // the process's CPU time during the run
	inputBytes int64
	peakRSS    int64
}

func benchPipeline(ctx context.Context, work string, lines int, engName string, workers int, cpuProfile string) (*benchResult, error) {
	inbox, outbox, done := filepath.Join(work, filecontract.DirInbox), filepath.Join(work, filecontract.DirOutbox), filepath.Join(work, filecontract.DirDone)
	for _, d := range []string{inbox, outbox, done} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	input := filepath.Join(inbox, "bench"+filecontract.SuffixJSONL)
	size, err := writeBenchInput(input, lines)
	if err != nil {
		return nil, err
	}
	var eng engine.Engine
	switch engName {
	case "instant":
		eng = instantEngine{}
		if workers == 0 {
			workers = 64
		}
	case "remote":
		srv := echo.NewServer(echo.Options{})
		if err := srv.Start(); err != nil {
			return nil, err
		}
		defer srv.Close()
		oc := openai.DefaultConfig()
		oc.URLs = []string{srv.URL()}
		oc.MaxInFlight = 128
		e, err := openai.New(oc)
		if err != nil {
			return nil, err
		}
		eng = e
		if workers == 0 {
			workers = 128
		}
	default:
		return nil, fmt.Errorf("unknown bench engine %q", engName)
	}
	if err := eng.Open(ctx); err != nil {
		return nil, err
	}
	defer eng.Close(ctx)
	cfg := pipeline.DefaultConfig(filepath.Join(work, filecontract.DirState))
	cfg.Workers = workers
	cfg.QueuePerBatch = 4 * workers
	p := pipeline.New(cfg, eng)
	if err := p.Open(ctx); err != nil {
		return nil, err
	}
	defer p.Close(ctx)
	stopProfile, err := startCPUProfile(cpuProfile)
	if err != nil {
		return nil, err
	}
	start, cpuStart := time.Now(), cpuTime()
	b, err := p.Run(ctx, pipeline.Job{Name: "bench", Format: "jsonl", Store: folder.New("bench", input, outbox, done)})
	el, cpu := time.Since(start), cpuTime()-cpuStart
	stopProfile()
	if err != nil {
		return nil, err
	}
	if b.Completed != lines {
		return nil, fmt.Errorf("only %d of %d requests completed", b.Completed, lines)
	}
	return &benchResult{elapsed: el, cpu: cpu, inputBytes: size, peakRSS: peakRSS()}, nil
}

func writeBenchInput(path string, lines int) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var n int64
	for i := range lines {
		k, _ := fmt.Fprintf(w, `{"custom_id":"request-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"bench","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Write one sentence about the number %d."}],"max_tokens":64,"temperature":0.7}}`+"\n", i, i)
		n += int64(k)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, err
	}
	return n, f.Close()
}

// instantEngine is a benchmark double: it answers every request at once with
// a fixed chat.completion, so a benchmark measures batchd's own overhead.
// It is never used to serve real batches.
type instantEngine struct{}

var instantBody = json.RawMessage(`{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"A fixed answer of a realistic length for a benchmark."},"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":12,"total_tokens":36}}`)

func (instantEngine) Open(context.Context) error  { return nil }
func (instantEngine) Close(context.Context) error { return nil }
func (instantEngine) Do(ctx context.Context, req *engine.Request) (*engine.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &engine.Response{StatusCode: 200, RequestID: "req_bench", Body: instantBody}, nil
}

// startCPUProfile starts a CPU profile written to path (none when path is
// empty); stop ends it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// cpuTime is the CPU time the process has used, user and system: on a
// shared machine it varies less than the wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS reads the process's peak resident set size (Linux).
func peakRSS() int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

func cmdEchoServer(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("echo-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8000", "address to listen on")
	addrFile := fs.String("addr-file", "", "write the address listened on to this file (for --listen 127.0.0.1:0)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	srv := echo.NewServer(echo.Options{Addr: *listen, Now: time.Now})
	if err := srv.Start(); err != nil {
		return errorf(stderr, exitFailure, "%v", err)
	}
	defer srv.Close()
	url := srv.URL()
	if *addrFile != "" {
		host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/v1")
		if err := os.WriteFile(*addrFile, []byte(host), 0o644); err != nil {
			return errorf(stderr, exitFailure, "%v", err)
		}
	}
	fmt.Fprintf(stderr, "batchd echo-server: a stand-in OpenAI-compatible server at %s — its answers echo the prompt; they are not model output\n", url)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return exitOK
}

// defaultKernels is the kernels a command uses unless told: BATCHD_KERNELS,
// else auto.
func defaultKernels() string {
	if v := os.Getenv("BATCHD_KERNELS"); v != "" {
		return v
	}
	return kernels.BackendAuto
}

func benchEngine(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench engine", flag.ContinueOnError)
	fs.SetOutput(stderr)
	model := fs.String("model", "", "model to measure (default: a demo model of --shape and --type, made once under --data)")
	data := dataFlag(fs)
	shape := fs.String("shape", "qwen2.5-0.5b", "demo model shape when --model is not given")
	typ := fs.String("type", "q8_0", "demo model weight type when --model is not given")
	threads := fs.Int("threads", 0, "kernel threads (0: every core)")
	kernelsName := fs.String("kernels", defaultKernels(), "CPU kernels: auto, amx, avx512, avx2, neon or generic ($BATCHD_KERNELS sets the default)")
	prompt := fs.Int("prompt", 256, "prefill length in tokens")
	steps := fs.Int("steps", 32, "decode steps measured")
	seqs := fs.String("seqs", "1,8,32", "sequence counts for aggregate decode")
	prefixReqs := fs.Int("prefix-requests", 0, "instead, run this many requests sharing a system prompt through the engine, with and without prefix caching")
	system := fs.Int("system", 200, "--prefix-requests: shared system prompt tokens")
	user := fs.Int("user", 50, "--prefix-requests: per-request prompt tokens")
	output := fs.Int("output", 0, "--prefix-requests, --speculative: output tokens per request (0: 64 and 128)")
	kvBytes := fs.Int64("kv-cache-bytes", 0, "--prefix-requests: KV cache size in bytes (0: the default)")
	maxSeqs := fs.Int("max-seqs", 0, "--prefix-requests: sequences running at once (0: the default, native.max_seqs)")
	online := fs.Int("online", 0, "instead, run this many online requests one after another while a batch keeps the engine's window full (--prompt-token prompts, --output tokens), with online priority and without, and report their latency")
	onlinePrompt := fs.Int("online-prompt", 32, "--online: online prompt tokens")
	onlineOutput := fs.Int("online-output", 16, "--online: online output tokens")
	loraRank := fs.Int("lora-rank", 0, "instead, measure each figure with no adapter, one random LoRA adapter of this rank on all 7 projections, and two alternating over the sequences")
	rounds := fs.Int("rounds", 3, "--lora-rank, --speculative: rounds of the cases, alternated")
	speculative := fs.String("speculative", "", "instead, run requests through the engine with each of these speculative methods (off, ngram, draft: the model drafting for itself), the first as the baseline, at each of --seqs concurrent sequences")
	specK := fs.Int("spec-k", 4, "--speculative: the most draft tokens verified per step (native.speculative.k)")
	workload := fs.String("workload", nativebench.SpecWorkloadRepetitive, "--speculative: repetitive (greedy, prompts whose continuations repeat), openings (greedy, plain story openings) or random (temperature 1, token prompts)")
	rowsFlag := fs.String("rows", "", "instead, time forward passes of each of --seqs sequences holding --prompt positions with each of these rows per sequence (1: a decode step, 1+k: a step verifying k drafts; logits for every row), --steps passes a run, best of 5")
	device := fs.String("device", "", "native.device to run on: auto, cpu, cuda, cuda:N, reference (default: $BATCHD_DEVICE, else auto)")
	parity := fs.String("parity", "", "instead, compare two devices (e.g. cpu,cuda): the logits of a --prompt-token prompt and --steps greedy tokens chosen by the first; exit 1 when their greedy tokens differ")
	offline := fs.Int("offline", 0, "instead, run an offline batch of this many requests through the whole engine, all submitted at once (prompts of --min-prompt..--prompt random tokens, --output tokens each, greedy, EOS ignored) and report output tok/s")
	minPrompt := fs.Int("min-prompt", 32, "--offline: shortest prompt in tokens")
	seed := fs.Uint64("seed", 1, "--offline: the batch's random seed (the same seed, options and vocabulary give the same batch)")
	writeBatch := fs.String("write-batch", "", "--offline: write the batch as an OpenAI batch JSONL file (what a peer engine runs) and exit")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measurement to this file (go tool pprof reads it)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return errorf(stderr, exitFailure, "bench engine: %v", err)
	}
	defer stopProfile()
	counts, ok := positiveInts(*seqs)
	if !ok {
		return errorf(stderr, exitUsage, "--seqs: %q is not a list of positive integers", *seqs)
	}
	var rowCounts []int
	if *rowsFlag != "" {
		if rowCounts, ok = positiveInts(*rowsFlag); !ok {
			return errorf(stderr, exitUsage, "--rows: %q is not a list of positive integers", *rowsFlag)
		}
		if *speculative != "" || *prefixReqs > 0 || *loraRank > 0 {
			return errorf(stderr, exitUsage, "--rows measures forward passes alone: it does not combine with --speculative, --prefix-requests or --lora-rank")
		}
	}
	if *device == "" {
		*device = os.Getenv("BATCHD_DEVICE")
	}
	path := *model
	if path == "" {
		var out bytes.Buffer
		if code := cmdDemoModel(ctx, []string{"--data", *data, "--shape", *shape, "--type", *typ}, &out, stderr); code != exitOK {
			return code
		}
		path = strings.TrimSpace(out.String())
	}
	if *parity != "" {
		devs := strings.Split(*parity, ",")
		if len(devs) != 2 {
			return errorf(stderr, exitUsage, "--parity: want two devices, e.g. cpu,cuda; got %q", *parity)
		}
		res, err := nativebench.Parity(path, nativebench.ParityOptions{Devices: [2]string{devs[0], devs[1]}, Threads: *threads,
			Kernels: *kernelsName, Prompt: *prompt, Tokens: *steps})
		if err != nil {
			return errorf(stderr, exitFailure, "bench engine: %v", err)
		}
		fmt.Fprint(stdout, res)
		if !res.Equal() {
			return exitFailure
		}
		return exitOK
	}
	if *offline > 0 {
		oo := nativebench.OfflineOptions{Device: *device, Threads: *threads, Kernels: *kernelsName, Requests: *offline,
			MinPrompt: *minPrompt, MaxPrompt: *prompt, Output: cmp.Or(*output, 128), Seed: *seed, MaxSeqs: *maxSeqs, KVCacheBytes: *kvBytes}
		if *writeBatch != "" {
			return writeOfflineBatch(path, *writeBatch, oo, stdout, stderr)
		}
		res, err := nativebench.BenchOffline(path, oo)
		if err != nil {
			return errorf(stderr, exitFailure, "bench engine: %v", err)
		}
		fmt.Fprint(stdout, res)
		return exitOK
	}
	if *online > 0 {
		res, err := nativebench.BenchOnline(path, nativebench.OnlineBenchOptions{Threads: *threads, Kernels: *kernelsName, Requests: *online,
			Prompt: *prompt, Output: cmp.Or(*output, 64), OnlinePrompt: *onlinePrompt, OnlineOutput: *onlineOutput, KVCacheBytes: *kvBytes, MaxSeqs: *maxSeqs})
		if err != nil {
			return errorf(stderr, exitFailure, "bench engine: %v", err)
		}
		fmt.Fprint(stdout, res)
		return exitOK
	}
	if *prefixReqs > 0 {
		res, err := nativebench.BenchPrefix(path, nativebench.PrefixBenchOptions{Threads: *threads, Kernels: *kernelsName, Requests: *prefixReqs,
			SystemTokens: *system, UserTokens: *user, OutputTokens: cmp.Or(*output, 64), KVCacheBytes: *kvBytes, MaxSeqs: *maxSeqs})
		if err != nil {
			return errorf(stderr, exitFailure, "bench engine: %v", err)
		}
		fmt.Fprint(stdout, res)
		return exitOK
	}
	if *speculative != "" {
		res, err := nativebench.BenchSpec(path, nativebench.SpecBenchOptions{Threads: *threads, Kernels: *kernelsName,
			Cases: strings.Split(*speculative, ","), K: *specK, Seqs: counts, Rounds: *rounds, Workload: *workload, OutputTokens: cmp.Or(*output, 128)})
		if err != nil {
			return errorf(stderr, exitFailure, "bench engine: %v", err)
		}
		fmt.Fprint(stdout, res)
		return exitOK
	}
	if rowCounts != nil {
		res, err := nativebench.RowCosts(path, nativebench.RowCostOptions{Threads: *threads, Kernels: *kernelsName, Context: *prompt,
			Seqs: counts, Rows: rowCounts, Passes: *steps})
		if err != nil {
			return errorf(stderr, exitFailure, "bench engine: %v", err)
		}
		fmt.Fprint(stdout, res)
		return exitOK
	}
	bo := nativebench.BenchOptions{Device: *device, Threads: *threads, Kernels: *kernelsName, PromptTokens: *prompt, DecodeSteps: *steps, Seqs: counts}
	if *loraRank > 0 {
		res, err := nativebench.BenchLoRA(path, nativebench.LoRABenchOptions{BenchOptions: bo, Rank: *loraRank, Rounds: *rounds})
		if err != nil {
			return errorf(stderr, exitFailure, "bench engine: %v", err)
		}
		fmt.Fprint(stdout, res)
		return exitOK
	}
	res, err := nativebench.Bench(path, bo)
	if err != nil {
		return errorf(stderr, exitFailure, "bench engine: %v", err)
	}
	fmt.Fprint(stdout, res)
	return exitOK
}

// positiveInts parses a comma-separated list of positive integers.
func positiveInts(list string) ([]int, bool) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, false
		}
		out = append(out, n)
	}
	return out, true
}

// writeOfflineBatch writes the offline batch of o for the model at path to
// file.
func writeOfflineBatch(path, file string, o nativebench.OfflineOptions, stdout, stderr io.Writer) int {
	w, err := weights.Load(path)
	if err != nil {
		return errorf(stderr, exitFailure, "bench engine: %v", err)
	}
	vocab := w.Config.VocabSize
	w.Close()
	f, err := os.Create(file)
	if err != nil {
		return errorf(stderr, exitFailure, "bench engine: --write-batch: %v", err)
	}
	err = nativebench.WriteOfflineBatch(f, nativebench.OfflineBatch(vocab, o), filepath.Base(path))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errorf(stderr, exitFailure, "bench engine: --write-batch %s: %v", file, err)
	}
	fmt.Fprintf(stdout, "wrote %d requests to %s\n", o.Requests, file)
	return exitOK
}

// benchGPU measures an NVIDIA GPU's ceilings: copy bandwidths and GEMM
// throughput, the figures engine numbers are read against.
func benchGPU(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench gpu", flag.ContinueOnError)
	fs.SetOutput(stderr)
	gpu := fs.Int("gpu", 0, "the GPU's ordinal")
	mib := fs.Int64("mib", 1024, "copy buffer size in MiB")
	reps := fs.Int("reps", 5, "repetitions of each measurement (the best is kept)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	drv, err := cuda.OpenDriver(*gpu, cuda.ModulePTX)
	if err != nil {
		return errorf(stderr, exitFailure, "bench gpu: %v", err)
	}
	defer drv.Close()
	c, err := cuda.MeasureCeilings(drv, cuda.CeilingOptions{Bytes: *mib << 20, Reps: *reps})
	if err != nil {
		return errorf(stderr, exitFailure, "bench gpu: %v", err)
	}
	fmt.Fprint(stdout, c)
	return exitOK
}
