// Command batchd is a self-hosted batch LLM inference daemon: drop an OpenAI
// batch file in DATA/inbox/, get its results in DATA/outbox/.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and found a problem (invalid lines, a broken invariant)
	exitUsage   = 2 // bad usage or an unreadable input
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands []command

func init() {
	commands = []command{
		{"run", "run the daemon", cmdRun},
		{"validate", "check a batch file offline, one line per problem", cmdValidate},
		{"convert", "turn a requests document into OpenAI batch JSONL, or chat JSONL into a document", cmdConvert},
		{"prepare", "rewrite a batch file: set the model or any body field on every line", cmdPrepare},
		{"stats", "count a batch file's lines, endpoints, models and prompt tokens", cmdStats},
		{"split", "split a batch file into NAME.1.jsonl, NAME.2.jsonl, ... of N lines each", cmdSplit},
		{"submit", "place a batch file in the inbox (and --wait for it)", cmdSubmit},
		{"status", "show every batch, or one", cmdStatus},
		{"check", "verify a finished batch's exactly-once invariant", cmdCheck},
		{"ledger", "check, back up or compact the ledger (ledger check|backup|compact)", cmdLedger},
		{"bench", "measure the pipeline, the engine or a quantization (bench pipeline|engine|kl|gpu)", cmdBench},
		{"demo-model", "write a small random-weight model (GGUF, real tokenizer) to try the native engine", cmdDemoModel},
		{"pull", "download a Hugging Face model repo into the local cache", cmdPull},
		{"echo-server", "serve a stand-in OpenAI-compatible server that echoes (for trying batchd without a model)", cmdEchoServer},
		{"healthcheck", "GET the daemon's /healthz; exit 0 if healthy (the container's HEALTHCHECK)", cmdHealthcheck},
		{"version", "print the version, build, device, CPU kernels and CPU features", cmdVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: batchd COMMAND [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'batchd COMMAND -h' for a command's flags.")
}

func main() {
	os.Exit(mainArgs(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func mainArgs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage(stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "batchd: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

// errorf prints an error for the user and returns code.
func errorf(w io.Writer, code int, format string, args ...any) int {
	fmt.Fprintf(w, "batchd: "+format+"\n", args...)
	return code
}
