package native

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/batchd/batchd/engine/native/demomodel"
	"github.com/batchd/batchd/engine/native/weights"
	"github.com/batchd/batchd/kernels"
)

// familyTol bounds |log p_batchd - log p_llama.cpp| over the whole
// vocabulary after a prompt, in nats: both run the F32 weights in float32,
// but llama.cpp keeps its KV cache in F16 and sums in other orders.
const familyTol = 2e-3

// moeFlipTol bounds the one prompt of a mixture of experts allowed past
// familyTol: where two experts' router logits are nearly tied (4.5e-5
// apart at one token of tiny-gpt-oss's prompt 5), llama.cpp's F16 KV cache
// is enough to choose the other, which moves the distribution by ~1e-2.
const moeFlipTol = 0.1

// TestFamiliesMatchLlamaCpp: every architecture's demo model (random F32
// weights, one file read by both) gives llama.cpp's greedy tokens for the
// first 8 steps on at least 7 of 8 prompts, and its next-token
// distribution after each prompt within familyTol (a mixture of experts:
// all but one prompt, that one within moeFlipTol). llama.cpp is
// node-llama-cpp 3.21.1's prebuilt addon, a test aid: BATCHD_LLAMACPP names
// a directory holding its node_modules (.ci/run installs one on x86-64 and
// sets BATCHD_REQUIRE_LLAMACPP); unset, the test skips.
func TestFamiliesMatchLlamaCpp(t *testing.T) {
	nlc := os.Getenv("BATCHD_LLAMACPP")
	if nlc == "" {
		if os.Getenv("BATCHD_REQUIRE_LLAMACPP") != "" {
			t.Fatal("BATCHD_REQUIRE_LLAMACPP is set but BATCHD_LLAMACPP is not")
		}
		t.Skip("BATCHD_LLAMACPP is unset: set it to a directory where `npm install node-llama-cpp@3.21.1` ran to compare each family with llama.cpp")
	}
	if defaultDevice != DeviceAuto && defaultDevice != DeviceCPU {
		t.Skipf("the families are compared with llama.cpp on the CPU device (this run's is %s, checked against the CPU by its own tests)", defaultDevice)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("BATCHD_LLAMACPP is set but node is not on PATH: %v", err)
	}
	// node resolves the script's imports beside it: run a copy next to a
	// link to the install's node_modules.
	run := t.TempDir()
	script, err := os.ReadFile(filepath.Join("..", "..", "scripts", "llamacpp", "greedy.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "greedy.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(filepath.Join(nlc, "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(abs, filepath.Join(run, "node_modules")); err != nil {
		t.Fatal(err)
	}
	const steps = 8
	for _, name := range []string{"tiny", "tiny-qwen3", "tiny-llama", "tiny-moe", "tiny-mixtral", "tiny-gemma2", "tiny-gemma3", "tiny-llama3", "tiny-gpt-oss", "tiny-phi", "tiny-glm4moe", "tiny-glm4.5", "tiny-qwen2moe"} {
		t.Run(name, func(t *testing.T) {
			shape := demomodel.Shapes[name]
			path := filepath.Join(t.TempDir(), name+".gguf")
			if err := demomodel.WriteFile(path, shape, kernels.F32, 5); err != nil {
				t.Fatal(err)
			}
			w, err := weights.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			m, err := NewModel(w, kernels.NewCPU(1))
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(17, 18))
			prompts := make([][]int32, 8)
			for i := range prompts {
				prompts[i] = make([]int32, 4+3*i)
				for j := range prompts[i] {
					prompts[i][j] = int32(r.IntN(m.cfg.VocabSize))
				}
			}
			pj, _ := json.Marshal(prompts)
			pf := filepath.Join(t.TempDir(), "prompts.json")
			if err := os.WriteFile(pf, pj, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(node, filepath.Join(run, "greedy.mjs"), path, pf, strconv.Itoa(steps))
			cmd.Env = append(os.Environ(), "THREADS=1")
			out, err := cmd.Output()
			if err != nil {
				var stderr string
				if ee, ok := err.(*exec.ExitError); ok {
					stderr = string(ee.Stderr)
				}
				t.Fatalf("llama.cpp: %v\n%s", err, stderr)
			}
			var ref []struct {
				Tokens   []int32            `json:"tokens"`
				Logprobs map[string]float64 `json:"logprobs"`
			}
			if err := json.Unmarshal(out, &ref); err != nil || len(ref) != len(prompts) {
				t.Fatalf("llama.cpp's answer (%v): %.300s", err, out)
			}
			same, flipped := 0, 0
			for i, p := range prompts {
				got := greedy(m, p, steps)
				if slices.Equal(got, ref[i].Tokens) {
					same++
				} else {
					t.Logf("prompt %d: batchd %v, llama.cpp %v", i, got, ref[i].Tokens)
				}
				logits := allLogits(m, p)
				last := logits[(len(p)-1)*m.cfg.VocabSize:]
				lp := logSoftmax64(last)
				if len(ref[i].Logprobs) != len(lp) {
					t.Fatalf("prompt %d: llama.cpp gave %d log-probabilities for a %d-token vocabulary", i, len(ref[i].Logprobs), len(lp))
				}
				worst := 0.0
				for tok, want := range ref[i].Logprobs {
					id, _ := strconv.Atoi(tok)
					worst = max(worst, math.Abs(lp[id]-want))
				}
				if i == 0 {
					t.Logf("prompt 0: log-probabilities within %.2g nats of llama.cpp's", worst)
				}
				switch {
				case worst > familyTol && (m.cfg.Experts == 0 || worst > moeFlipTol):
					t.Errorf("prompt %d: next-token log-probabilities differ from llama.cpp's by up to %.2g nats (tolerance %g)", i, worst, familyTol)
				case worst > familyTol:
					flipped++
					t.Logf("prompt %d: next-token log-probabilities differ from llama.cpp's by up to %.2g nats: a router's near-tie taken the other way", i, worst)
				}
			}
			if flipped > 1 {
				t.Errorf("%d prompts' log-probabilities are beyond %g nats of llama.cpp's; a mixture of experts may have one (a near-tie in routing)", flipped, familyTol)
			}
			t.Logf("greedy tokens equal on %d of 8 prompts", same)
			if same < 7 {
				t.Errorf("greedy tokens equal llama.cpp's on %d of 8 prompts, want at least 7", same)
			}
		})
	}
}

// logSoftmax64 is logits' log-probabilities in float64.
func logSoftmax64(logits []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	out := make([]float64, len(logits))
	for i, v := range logits {
		out[i] = float64(v) - mx - math.Log(sum)
	}
	return out
}
