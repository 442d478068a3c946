package archtest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/batchd/batchd/"

// rules lists, for every package of the module (by its path in the module),
// the batchd packages its non-test files may import, and why. Tests may
// import more (stand-ins, real engines for integration tests); the boundary
// is what the code itself depends on.
var rules = []struct {
	pkg, why string
	may      []string
}{
	// The contracts everything shares: they import nothing of batchd.
	{"wire", "the OpenAI wire contract: answer shapes, the error object, body limits", nil},
	{"filecontract", "the file contract: folders, file suffixes, input formats, usable batch names and the codes of refused ones", nil},
	{"kernels", "the numeric layer: matmul, RMSNorm, RoPE, attention, the Device interface and the CPU device", nil},
	{"kernels/refdev", "the reference device: the Device interface in plain Go", []string{"kernels"}},
	{"kernels/devicetest", "the contract suite every kernels.Device passes", []string{"kernels"}},
	{"kernels/cuda", "the CUDA device: kernels.Device over a Driver, the kernels' sources and PTX", []string{"kernels"}},
	{"kernels/cuda/nvml", "GPU discovery through NVML (build tag nvml)", nil},
	{"kernels/cuda/emu", "the host emulation of the CUDA kernels, a cuda.Driver for tests", []string{"kernels", "kernels/cuda"}},
	{"internal/fsx", "atomic file writes and fsyncs, paths a request names under a configured root", nil},
	{"internal/failpoint", "crash points for the durability tests", nil},
	{"internal/syncbuf", "a goroutine-safe buffer for tests' logs", nil},
	{"internal/goroutines", "counts the goroutines running given code, for tests' leak checks", nil},
	{"internal/lazyfs", "a FUSE test filesystem that loses what was not fsynced at a simulated power cut", nil},
	{"internal/miniotest", "a real MinIO server for tests", nil},
	{"internal/sdnotify", "systemd's notification protocol (sd_notify)", nil},
	{"internal/formatdocs", "the published format descriptions' examples, for tests", nil},
	{"internal/archtest", "this test", nil},

	// The engine boundary and its implementations: they never see the
	// pipeline, a source or the daemon.
	{"engine", "the Engine interface", []string{"wire"}},
	{"engine/enginetest", "the contract suite every engine passes", []string{"engine"}},
	{"engine/openai", "the remote engine", []string{"engine", "wire", "internal/fsx"}},
	{"engine/openai/echo", "a stand-in OpenAI-compatible server that echoes (batchd echo-server, bench pipeline)", []string{"wire"}},
	{"engine/openai/openaitest", "the echo server with injected faults, for tests", []string{"engine/openai/echo"}},
	{"engine/native", "the in-process engine", []string{"engine", "wire", "internal/fsx", "kernels", "kernels/refdev",
		"kernels/cuda", "kernels/cuda/emu", "engine/native/chat", "engine/native/gguf", "engine/native/tokenizer", "engine/native/weights"}},
	{"engine/native/chat", "chat templates (Jinja)", nil},
	{"engine/native/gguf", "the GGUF file format", nil},
	{"engine/native/hub", "model downloads from the Hugging Face hub", nil},
	{"engine/native/tokenizer", "tokenizers", nil},
	{"engine/native/weights", "loading weights into kernels' types", []string{"engine/native/gguf", "kernels"}},
	{"engine/native/demomodel", "random-weight demo models in GGUF and as Hugging Face directories, for benchmarks and tests", []string{"engine/native/chat", "engine/native/gguf", "engine/native/weights", "kernels"}},
	// gguf: bench kl counts a file's bits per weight from its tensor table.
	{"engine/native/nativebench", "the native engine's benchmarks (batchd bench engine, bench kl)", []string{"engine", "engine/native",
		"engine/native/demomodel", "engine/native/gguf", "engine/native/weights"}},

	// Sources of batch files.
	{"watcher", "the Event every source delivers, and which inbox entries are inputs or cancels", []string{"filecontract"}},
	{"watcher/dir", "the directory source", []string{"watcher", "filecontract"}},
	{"watcher/s3", "the bucket source: the inbox listing and notifications", []string{"watcher", "filecontract", "store/bucket/s3client"}},

	// The pipeline: validate, ledger, dispatch to an Engine, write. It knows
	// engines only through the engine package.
	{"pipeline/validate", "the per-line rules", []string{"engine", "wire"}},
	{"pipeline/ledger", "the bbolt ledger", []string{"internal/fsx"}},
	{"pipeline", "read → validate → ledger → dispatch → write", []string{"engine", "wire",
		"pipeline/validate", "pipeline/ledger", "internal/fsx", "internal/failpoint"}},

	// Where results go: stores pair a source with the pipeline's outputs.
	{"store", "the stores' overview, no code (the interface is pipeline.Store)", nil},
	{"store/storetest", "the contract suite every store passes", []string{"pipeline"}},
	{"store/folder", "the directory store", []string{"filecontract", "pipeline", "internal/fsx", "internal/failpoint"}},
	{"store/bucket", "the bucket store and its protocol: leases, checkpoints, publication records", []string{"filecontract", "pipeline",
		"store/bucket/s3client", "internal/fsx", "internal/failpoint"}},
	{"store/bucket/s3client", "the bucket client: object keys, retries, conditional writes, resumable downloads, listings", []string{"filecontract"}},
	{"store/bucket/s3client/s3clienttest", "bucket clients of a test MinIO, for tests", []string{"store/bucket/s3client", "internal/miniotest"}},

	// The daemon wires everything; only the CLI imports it.
	{"daemon/ops", "metrics and the status page", []string{"pipeline"}},
	{"daemon/webhook", "batch-end webhooks", []string{"internal/fsx"}},
	{"daemon", "config, lifecycle, HTTP: the wiring", []string{"daemon/ops", "daemon/webhook",
		"engine", "engine/native", "engine/openai", "kernels", "wire", "filecontract",
		"pipeline", "pipeline/ledger", "store/bucket", "store/bucket/s3client", "store/folder",
		"watcher", "watcher/dir", "watcher/s3", "internal/fsx", "internal/sdnotify"}},
	{"cmd/batchd", "the CLI", []string{"daemon", "engine", "engine/native", "engine/native/hub",
		"engine/native/demomodel", "engine/native/nativebench",
		"engine/openai", "engine/openai/echo", "kernels", "kernels/cuda", "engine/native/weights",
		"pipeline", "pipeline/ledger", "pipeline/validate", "store/folder", "filecontract", "internal/fsx"}},

	// Benchmark aids beside the project, never imported by it.
	{"scripts/llamacpp/loragguf", "writes a random LoRA GGUF for llama.cpp's side of the LoRA benchmark", []string{
		"engine/native/demomodel", "engine/native/gguf", "engine/native/weights"}},
}

// TestImportRules checks every package's imports against rules, and that
// rules names every package and only packages that exist.
func TestImportRules(t *testing.T) {
	root := moduleRoot(t)
	imports := moduleImports(t, root)
	listed := map[string]bool{}
	for _, r := range rules {
		if listed[r.pkg] {
			t.Errorf("rules list %s twice", r.pkg)
		}
		listed[r.pkg] = true
		got, ok := imports[r.pkg]
		if !ok {
			t.Errorf("rules list %s, which is not a package of the module: remove its line", r.pkg)
			continue
		}
		for _, imp := range got {
			if !slices.Contains(r.may, imp.pkg) {
				t.Errorf("%s imports %s; %s (%s) may import %s", imp.file, imp.pkg, r.pkg, r.why, allowed(r.may))
			}
		}
	}
	for pkg := range imports {
		if !listed[pkg] {
			t.Errorf("package %s has no import rule: add it to rules in internal/archtest/rules_test.go, with the batchd packages it may import", pkg)
		}
	}
}

func allowed(may []string) string {
	if len(may) == 0 {
		return "nothing of batchd"
	}
	return "only " + strings.Join(may, ", ") + " of batchd"
}

type batchdImport struct {
	file string // relative to the module root
	pkg  string // path in the module
}

// moduleImports maps each package directory of the module (one with non-test
// Go files) to the batchd imports of its non-test files, build tags ignored:
// a file for another platform or a failpoints build is held to the same rules.
func moduleImports(t *testing.T, root string) map[string][]batchdImport {
	t.Helper()
	out := map[string][]batchdImport{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		list := out[pkg]
		if list == nil {
			list = []batchdImport{}
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if strings.HasPrefix(p, module) {
				list = append(list, batchdImport{file: filepath.ToSlash(rel), pkg: strings.TrimPrefix(p, module)})
			}
		}
		out[pkg] = list
		return nil
	})
	if err != nil {
		t.Fatalf("read the module's imports: %v", err)
	}
	if len(out) == 0 {
		t.Fatalf("found no Go package under %s", root)
	}
	return out
}

// moduleRoot is the directory of the module's go.mod, above this test's.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			if !strings.Contains(string(data), "module "+strings.TrimSuffix(module, "/")+"\n") {
				t.Fatalf("%s/go.mod is not batchd's", dir)
			}
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
